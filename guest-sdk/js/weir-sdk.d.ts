// TypeScript declarations of weir-sdk.js: write Weir operators in JavaScript or TypeScript.
// check-types.mjs checks that the adapters' types implement the interfaces jco generates from
// the WIT contract wit/v0.3: an aggregate's `aggregate` (0.2's) and `windows`, an enricher's
// `enrich` (0.2's).

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/**
 * A Weir value in JS: `null`, a boolean, a bigint (an `int`: an s64, exact), a number (a
 * `float`), a string (`text`) or a Uint8Array (`bytes`).
 */
export type Value = null | boolean | bigint | number | string | Uint8Array;

/** What may be stored as a value: a {@link Value}, `undefined` (null) or an ArrayBuffer (bytes). */
export type ValueInput = Value | undefined | ArrayBuffer;

/** The name of a value's kind, as the WIT `value` variant names it. */
export type Kind = 'null' | 'boolean' | 'int' | 'float' | 'text' | 'bytes';

/** The smallest `int`: -2^63. */
export const I64_MIN: bigint;
/** The largest `int`: 2^63 - 1. */
export const I64_MAX: bigint;

/**
 * An error whose message becomes the call's error string exactly (the way a Rust operator
 * returns `Err(message)`). Any other thrown value becomes
 * `"<name>: <message> (at <first stack frame>)"`.
 */
export class OperatorError extends Error {
  constructor(message: string);
}

/** Converts a JS value to a WIT value; throws for a bigint outside the s64 range or an object. */
export function toWit(value: ValueInput): WitValue;
/** Converts a WIT value to a JS value (`undefined` to `null`). */
export function fromWit(value: WitValue | undefined): Value;
/** The kind of a value. */
export function kindOf(value: ValueInput): Kind;
/** Whether `value` is a number: an int (bigint) or a float (number). */
export function isNumber(value: unknown): value is bigint | number;
/** The int, if `value` is one (a bigint). */
export function asInt(value: unknown): bigint | undefined;
/** The number as a float (ints converted, maybe rounded), if `value` is a number. */
export function asFloat(value: unknown): number | undefined;
/** Text as it is and ints in decimal (how the host names keys); `undefined` otherwise. */
export function toText(value: unknown): string | undefined;
/**
 * The sum of two numbers: an int if both are ints and the sum fits in an s64, a float
 * otherwise; `undefined` if either is not a number (Rust's `Value::plus`).
 */
export function plus(a: unknown, b: unknown): bigint | number | undefined;
/**
 * `start` plus each of `values` in turn with `plus`; `undefined` as soon as one is not a
 * number; `start` if `values` is empty. The fast way to sum a batch's column in a component.
 */
export function plusAll<T>(start: T, values: ArrayLike<unknown>): T | bigint | number | undefined;

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/**
 * The state of one key (and, for aggregates, one window), kept by the host: named values and
 * named maps of values. In an aggregate's `add` the named values come with the call (their
 * changes go back with its answer); maps and the key are calls to the host.
 */
export class State {
  /** The state behind a WIT scope (the host's, or a MemoryState's). */
  constructor(scope: Scope);
  /** The key this state belongs to. */
  key(): string;
  /** The value named `name`; `undefined` (or `fallback`) if there is none. */
  get(name: string): Value | undefined;
  get<T>(name: string, fallback: T): Value | T;
  /** The int named `name`; `undefined` if there is none or it is not an int. */
  getInt(name: string): bigint | undefined;
  /** The number named `name` as a float; `undefined` if there is none or it is not a number. */
  getFloat(name: string): number | undefined;
  /** The text named `name`; `undefined` if there is none or it is not text. */
  getText(name: string): string | undefined;
  /** Sets the value named `name`. */
  put(name: string, value: ValueInput): void;
  /** Adds `delta` to the int named `name` (0 if none), saturating; returns the new value. */
  addInt(name: string, delta: bigint | number): bigint;
  /** Removes the value named `name`, if any. */
  remove(name: string): void;
  /** The value of entry `entry` of the map named `map`; `undefined` (or `fallback`) if none. */
  mapGet(map: string, entry: string): Value | undefined;
  mapGet<T>(map: string, entry: string, fallback: T): Value | T;
  /** Sets entry `entry` of the map named `map`. */
  mapPut(map: string, entry: string, value: ValueInput): void;
  /** Removes entry `entry` of the map named `map`, if any. */
  mapRemove(map: string, entry: string): void;
  /** How many entries the map named `map` holds. */
  mapLen(map: string): number;
  /** The entry names of the map named `map`, in ascending order. */
  mapEntries(map: string): string[];
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

/** One event of a batch: a view of its WIT record (`set` changes the batch's event). */
export class Event {
  /** An event at `timestamp` (ms since the epoch) with values in the batch's field order. */
  constructor(timestamp: bigint | number, values?: ValueInput[]);
  /** The event behind a WIT record, without copying. */
  static fromWit(wit: WitEvent): Event;
  /** Event time in ms since the Unix epoch. */
  get timestamp(): bigint;
  set timestamp(timestamp: bigint | number);
  /** The values, in the batch's field order (a copy). */
  get values(): Value[];
  /** The value at index `column`; `null` if it is null or missing. */
  get(column: number): Value;
  /** Sets the value at index `column`, padding with nulls. */
  set(column: number, value: ValueInput): void;
  /** The WIT record. */
  toWit(): WitEvent;
}

/** A batch of events of one key, in arrival order, with the field names once per batch. */
export class Events implements Iterable<Event> {
  /** An empty batch with the given field names. */
  constructor(fields?: Iterable<string>);
  /** A batch held as columns (each field's values, in the order of `times`), without copying. */
  static fromColumns(fields: string[], times: ArrayLike<bigint>, columns: ArrayLike<Value>[]): Events;
  /** Adds an event (values in field order) and returns the batch. */
  withRow(timestamp: bigint | number, values: ValueInput[]): this;
  /** The field names. */
  get fields(): string[];
  /** How many events the batch holds. */
  get length(): number;
  /** The events, as views. */
  get rows(): Event[];
  /** The event at index `index`. */
  row(index: number): Event;
  [Symbol.iterator](): Iterator<Event>;
  /** The index of the field `name`, -1 if there is none. */
  column(name: string): number;
  /** The index of the field `name`, adding it if the batch lacks it. */
  addColumn(name: string): number;
  /** The field `name` of every event, in order; `null` where null or missing. The fast path. */
  values(name: string): Value[];
  /** The event times, in order. */
  timestamps(): bigint[];
  /** The events as an enricher's output, each with its row index as its origin. */
  intoOutput(): OutputEvents;
  /** The WIT record of contract 0.2, values field after field (an operator's batch). */
  toColumns(): WitColumns;
}

/** One event produced by an enricher. */
export class OutputEvent {
  /** An event from input row `origin`, at `timestamp`, with values in the output's field order. */
  constructor(origin: number, timestamp: bigint | number, values?: ValueInput[]);
  /** The event behind a WIT record, without copying. */
  static fromWit(wit: WitOutputEvent): OutputEvent;
  /** Index, in the input batch's rows, of the event this one came from (a u32). */
  get origin(): number;
  set origin(origin: number);
  /** Event time in ms since the Unix epoch. */
  get timestamp(): bigint;
  set timestamp(timestamp: bigint | number);
  /** The values, in the output's field order (a copy). */
  get values(): Value[];
  /** The value at index `column`; `null` if it is null or missing. */
  get(column: number): Value;
  /** Sets the value at index `column`, padding with nulls. */
  set(column: number, value: ValueInput): void;
  /** The WIT record. */
  toWit(): WitOutputEvent;
}

/** The events produced by one enrichment call; `rows` is a plain, mutable array. */
export class OutputEvents {
  constructor(fields?: Iterable<string>);
  /** The events. */
  rows: OutputEvent[];
  /** The field names. */
  get fields(): string[];
  /** How many events the output holds. */
  get length(): number;
  /** The index of the field `name`, -1 if there is none. */
  column(name: string): number;
  /** The index of the field `name`, adding it if the output lacks it. */
  addColumn(name: string): number;
  /** The field `name` of every event, in order; `null` where null or missing. */
  values(name: string): Value[];
  /** Appends an event; returns the output. */
  push(event: OutputEvent): this;
  /** Keeps the events for which `keep` is truthy; returns the output. */
  retain(keep: (event: OutputEvent, index: number) => unknown): this;
  /** The WIT record. */
  toWit(): WitOutputEvents;
}

// ---------------------------------------------------------------------------------------------
// Windows and outputs
// ---------------------------------------------------------------------------------------------

/** A half-open event-time window `[start, end)`, in ms since the epoch. */
export class Window {
  constructor(start: bigint | number, end: bigint | number);
  readonly start: bigint;
  readonly end: bigint;
  /** The window's length in milliseconds. */
  durationMs(): bigint;
  /** Whether `timestamp` lies in the window. */
  contains(timestamp: bigint | number): boolean;
}

/**
 * An aggregate's output record: a plain object (fields in insertion order; JS puts
 * integer-like names first), a Map, or an iterable of `[name, value]` pairs.
 */
export type Output =
  | { readonly [name: string]: ValueInput }
  | ReadonlyMap<string, ValueInput>
  | Iterable<readonly [string, ValueInput]>;

/** The WIT fields of an output record. */
export function toFields(output: Output): WitField[];

/** The error string of a thrown value (see {@link OperatorError}). */
export function errorMessage(error: unknown): string;

// ---------------------------------------------------------------------------------------------
// Operators and adapters
// ---------------------------------------------------------------------------------------------

/** A mergeable windowed aggregation. Every call sees the state of one key and window. */
export interface Aggregate {
  /**
   * Adds a batch of events to the window's state; throw to refuse it (the host retries its
   * events one at a time).
   */
  add(state: State, batch: Events): void;
  /** Folds the partial state `source` into `target`; leave `source` unchanged. */
  merge(target: State, source: State): void;
  /** The window's output record; must not change the state. */
  finish(state: State, window: Window): Output;
  /** Converts state written by operator version `fromVersion`; absent means no change. */
  migrate?(state: State, fromVersion: string): void;
}

/** A per-key event transformer. The key's reference data is in the state's map `reference`. */
export interface Enrich {
  /**
   * The output events of a batch (start from `batch.intoOutput()`); throw to refuse it (the
   * host retries its events one at a time).
   */
  process(state: State, batch: Events): OutputEvents | Events;
}

/** The `aggregate` interface (0.2's) of the `aggregator` world, as componentize-js calls it. */
export interface AggregateExport {
  add: (state: Scope, values: WitField[], batch: WitColumns) => WitChange[];
  merge: (target: Scope, source: Scope) => void;
  finish: (state: Scope, window: WitWindow) => WitField[];
  migrate: (state: Scope, fromVersion: string) => void;
}

/** The `windows` interface (0.3's) of the `aggregator` world, as componentize-js calls it. */
export interface WindowsExport {
  addWindows: (windows: WitWindowBatches) => WitAddedWindows;
  finishWindows: (windows: WitWindowStates) => WitFinishedWindows;
}

/** The `enrich` interface of the `enricher` world, as componentize-js calls it. */
export interface EnrichExport {
  process: (state: Scope, batch: WitColumns) => WitOutputEvents;
}

/** The `aggregate` interface of an aggregate operator: `export const aggregate = exportAggregate(...)`. */
export function exportAggregate(operator: Aggregate): AggregateExport;

/** The `windows` export of an aggregate adapter (build.mjs exports it beside `aggregate`). */
export function windowsOf(aggregate: AggregateExport): WindowsExport;

/** The `enrich` interface of an enrichment operator: `export const enrich = exportEnrich(...)`. */
export function exportEnrich(operator: Enrich): EnrichExport;

// ---------------------------------------------------------------------------------------------
// WIT shapes (wit/v0.3 and the packages it uses, as componentize-js represents them)
// ---------------------------------------------------------------------------------------------

/** The WIT `value` variant. */
export type WitValue =
  | { tag: 'null' }
  | { tag: 'boolean'; val: boolean }
  | { tag: 'int'; val: bigint }
  | { tag: 'float'; val: number }
  | { tag: 'text'; val: string }
  | { tag: 'bytes'; val: Uint8Array };

/** The WIT `field` record. */
export interface WitField {
  name: string;
  value: WitValue;
}

/** The WIT `event` record. */
export interface WitEvent {
  timestamp: bigint;
  values: WitValue[];
}

/** The WIT `events` record of contract 0.2: the values field after field. */
export interface WitColumns {
  fields: string[];
  timestamps: ArrayLike<bigint>;
  values: WitValue[];
}

/** The WIT `change` record of contract 0.2 (`value` undefined: removed). */
export interface WitChange {
  name: string;
  value?: WitValue;
}

/** A WIT `named` record of contract 0.3: a name index and a value. */
export interface WitNamed {
  name: number;
  value: WitValue;
}

/** The WIT `window-batches` record of contract 0.3. */
export interface WitWindowBatches {
  names: string[];
  counts: { values: number; fields: number; events: number }[];
  values: WitNamed[];
  fields: ArrayLike<number>;
  timestamps: ArrayLike<bigint>;
  kinds: ('ints' | 'floats' | 'values')[];
  ints: ArrayLike<bigint>;
  floats: ArrayLike<number>;
  columns: WitValue[];
}

/** What a call of contract 0.3 did with one window. */
export type WitOutcome = 'done' | 'failed' | 'needs-scope';

/** The WIT `added-windows` record of contract 0.3. */
export interface WitAddedWindows {
  outcomes: WitOutcome[];
  changeCounts: Uint32Array;
  changes: { name: number; value?: WitValue }[];
  newNames: string[];
}

/** The WIT `window-states` record of contract 0.3. */
export interface WitWindowStates {
  names: string[];
  valueCounts: ArrayLike<number>;
  values: WitNamed[];
  windows: WitWindow[];
}

/** The WIT `finished-windows` record of contract 0.3. */
export interface WitFinishedWindows {
  outcomes: WitOutcome[];
  fieldCounts: Uint32Array;
  fields: WitNamed[];
  newNames: string[];
}

/** The WIT `output-event` record. */
export interface WitOutputEvent {
  origin: number;
  timestamp: bigint;
  values: WitValue[];
}

/** The WIT `output-events` record. */
export interface WitOutputEvents {
  fields: string[];
  rows: WitOutputEvent[];
}

/** The WIT `window` record. */
export interface WitWindow {
  start: bigint;
  end: bigint;
}

/** The WIT `scope` resource of the `state` interface. */
export interface Scope {
  key(): string;
  get(name: string): WitValue | undefined;
  put(name: string, value: WitValue): void;
  remove(name: string): void;
  mapGet(name: string, entry: string): WitValue | undefined;
  mapPut(name: string, entry: string, value: WitValue): void;
  mapRemove(name: string, entry: string): void;
  mapLen(name: string): bigint;
  mapEntries(name: string): string[];
}
