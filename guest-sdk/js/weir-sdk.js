// weir-sdk: write Weir stream operators (aggregates and enrichers) in JavaScript.
//
// An operator is an ES module exporting the adapter of its WIT interface, named after it:
//
//   import { exportAggregate } from 'weir-sdk';
//   export const aggregate = exportAggregate({ add(state, batch) {...}, merge(target, source) {...},
//                                              finish(state, window) {...} });
//
// Build it with build.mjs (componentize-js). Values cross the SDK as plain JS values: null,
// boolean, number (a float), bigint (an int: s64 stays exact and distinct from floats), string
// and Uint8Array (bytes). The WIT-level shapes ({tag, val} variants, records) stay inside the
// adapters and the thin views below. Mirrors the Rust SDK in guest-sdk/src.

/** The smallest `int`: -2^63. */
export const I64_MIN = -(2n ** 63n);
/** The largest `int`: 2^63 - 1. */
export const I64_MAX = 2n ** 63n - 1n;
const U32_MAX = 2 ** 32 - 1;
const NULL = Object.freeze({ tag: 'null' });
/** Passed to the event constructors to wrap a WIT record instead of building one. */
const WRAP = Symbol('wrap');

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/**
 * An error whose message becomes the call's error string exactly, without the error's name
 * or position (the way a Rust operator returns `Err(message)`). Any other thrown value
 * becomes `"<name>: <message> (at <first stack frame>)"`.
 */
export class OperatorError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'OperatorError';
  }
}

/**
 * Checks that `value` is a bigint within the range of a WIT `s64`.
 * @param {bigint} value
 * @param {string} what what the value is, for the error message
 * @returns {bigint}
 */
function checkI64(value, what) {
  if (value < I64_MIN || value > I64_MAX) {
    throw new RangeError(`${what} ${value} is outside the range of a 64-bit signed integer (int)`);
  }
  return value;
}

/**
 * A bigint from a bigint or an integral number, checked to fit in an `s64`.
 * @param {bigint | number} value
 * @param {string} what what the value is, for the error message
 * @returns {bigint}
 */
function toI64(value, what) {
  if (typeof value === 'bigint') return checkI64(value, what);
  if (Number.isSafeInteger(value)) return BigInt(value);
  throw new TypeError(`${what} must be a bigint (or a safe integer number), not ${describe(value)}`);
}

/** A short description of a value's type, for error messages. */
function describe(value) {
  if (value === null) return 'null';
  if (typeof value === 'number') return `the number ${value}`;
  if (typeof value !== 'object') return `a ${typeof value}`;
  return `an object (${value.constructor?.name ?? 'no prototype'})`;
}

/**
 * Converts a JS value to a WIT `value`: null (or undefined) → null, boolean → boolean,
 * bigint → int (must fit in an s64), number → float, string → text, Uint8Array → bytes.
 * @param {import('./weir-sdk').Value | undefined} value
 * @returns {import('./weir-sdk').WitValue}
 */
export function toWit(value) {
  switch (typeof value) {
    case 'bigint':
      return { tag: 'int', val: checkI64(value, 'the int') };
    case 'number':
      return { tag: 'float', val: value };
    case 'string':
      return { tag: 'text', val: value };
    case 'boolean':
      return { tag: 'boolean', val: value };
    case 'undefined':
      return NULL;
  }
  if (value === null) return NULL;
  if (value instanceof Uint8Array) return { tag: 'bytes', val: value };
  if (value instanceof ArrayBuffer) return { tag: 'bytes', val: new Uint8Array(value) };
  throw new TypeError(
    `cannot store ${describe(value)} as a Weir value: use null, a boolean, a number (float), ` +
      'a bigint (int), a string or a Uint8Array (bytes)',
  );
}

/**
 * Converts a WIT `value` to a JS value (see {@link toWit}). Every case but `null` carries its
 * JS value in `val` already (int as bigint, bytes as Uint8Array), so this is one comparison.
 * @param {import('./weir-sdk').WitValue | undefined} value
 * @returns {import('./weir-sdk').Value}
 */
export function fromWit(value) {
  return value === undefined || value.tag === 'null' ? null : value.val;
}

/**
 * The kind of a value, as the WIT `value` variant names it.
 * @param {import('./weir-sdk').Value} value
 * @returns {'null' | 'boolean' | 'int' | 'float' | 'text' | 'bytes'}
 */
export function kindOf(value) {
  return toWit(value).tag;
}

/**
 * Whether `value` is a number: an int (bigint) or a float (number).
 * @param {unknown} value
 */
export function isNumber(value) {
  return typeof value === 'bigint' || typeof value === 'number';
}

/**
 * The int, if `value` is one (a bigint); `undefined` otherwise.
 * @param {unknown} value
 * @returns {bigint | undefined}
 */
export function asInt(value) {
  return typeof value === 'bigint' ? value : undefined;
}

/**
 * The number as a float, if `value` is a float or an int (converted, so ints beyond ±2^53
 * may be rounded); `undefined` otherwise.
 * @param {unknown} value
 * @returns {number | undefined}
 */
export function asFloat(value) {
  if (typeof value === 'number') return value;
  return typeof value === 'bigint' ? Number(value) : undefined;
}

/**
 * The value as text, for use as a name (of a map entry, say) the way the host names keys:
 * text as it is, ints in decimal; `undefined` for every other kind of value.
 * @param {unknown} value
 * @returns {string | undefined}
 */
export function toText(value) {
  if (typeof value === 'string') return value;
  return typeof value === 'bigint' ? value.toString() : undefined;
}

/**
 * The sum of two numbers: an int if both are ints and the sum fits in an s64, a float
 * otherwise; `undefined` if either is not a number (Rust's `Value::plus`).
 * @param {unknown} a
 * @param {unknown} b
 * @returns {bigint | number | undefined}
 */
export function plus(a, b) {
  if (typeof a === 'bigint' && typeof b === 'bigint') {
    const sum = a + b;
    if (sum >= I64_MIN && sum <= I64_MAX) return sum;
  }
  const x = asFloat(a);
  const y = asFloat(b);
  return x === undefined || y === undefined ? undefined : x + y;
}

/**
 * `start` plus each of `values` in turn with {@link plus}: what a loop of `plus` gives,
 * `undefined` as soon as a value (or `start`) is not a number; `start` if `values` is empty
 * (Python's `plus_all`). An indexed loop: in a component, JavaScript runs in SpiderMonkey's
 * interpreter, where `for...of` over an array costs about a microsecond per value.
 * @param {unknown} start
 * @param {ArrayLike<unknown>} values
 * @returns {unknown}
 */
export function plusAll(start, values) {
  if (typeof values?.length !== 'number') values = Array.from(values); // a Set, a generator
  let total = start;
  for (let i = 0; i < values.length; i++) {
    total = plus(total, values[i]);
    if (total === undefined) return undefined;
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/**
 * The state of one key (and, for aggregates, one window), kept by the host. It holds named
 * values and named maps from entry names to values; reads see earlier writes of the same call
 * at once. In an aggregate's `add` the named values come with the call and their changes go
 * back with its answer; the rest (maps, the key, and everything in `merge`, `finish` and
 * `migrate` outside calls carrying many windows) is a call to the host. Tests make one with
 * `MemoryState`.
 */
export class State {
  #scope;

  /** @param {import('./weir-sdk').Scope} scope the host's scope, or a MemoryState's */
  constructor(scope) {
    this.#scope = scope;
  }

  /** The key this state belongs to, as text. */
  key() {
    return this.#scope.key();
  }

  /**
   * The value named `name`; `fallback` (default `undefined`) if there is none. A stored null
   * is returned as `null`.
   */
  get(name, fallback = undefined) {
    const value = this.#scope.get(name);
    return value === undefined ? fallback : fromWit(value);
  }

  /** The int named `name`; `undefined` if there is none or it is not an int. */
  getInt(name) {
    const value = this.#scope.get(name);
    return value !== undefined && value.tag === 'int' ? value.val : undefined;
  }

  /**
   * The number named `name`, an int converted to a float; `undefined` if there is none or it
   * is not a number.
   */
  getFloat(name) {
    const value = this.#scope.get(name);
    if (value === undefined) return undefined;
    if (value.tag === 'float') return value.val;
    return value.tag === 'int' ? Number(value.val) : undefined;
  }

  /** The text named `name`; `undefined` if there is none or it is not text. */
  getText(name) {
    const value = this.#scope.get(name);
    return value !== undefined && value.tag === 'text' ? value.val : undefined;
  }

  /** Sets the value named `name` (see {@link toWit} for the accepted values). */
  put(name, value) {
    this.#scope.put(name, toWit(value));
  }

  /**
   * Adds `delta` to the int named `name` (0 if there is none, or it is not an int) and
   * returns the new value. The addition saturates at the bounds of an s64.
   * @param {string} name
   * @param {bigint | number} delta a bigint, or a safe integer number
   * @returns {bigint}
   */
  addInt(name, delta) {
    let sum = (this.getInt(name) ?? 0n) + toI64(delta, 'addInt delta');
    sum = sum > I64_MAX ? I64_MAX : sum < I64_MIN ? I64_MIN : sum;
    this.#scope.put(name, { tag: 'int', val: sum });
    return sum;
  }

  /** Removes the value named `name`, if any. */
  remove(name) {
    this.#scope.remove(name);
  }

  /** The value of entry `entry` of the map named `map`; `fallback` if there is none. */
  mapGet(map, entry, fallback = undefined) {
    const value = this.#scope.mapGet(map, entry);
    return value === undefined ? fallback : fromWit(value);
  }

  /** Sets entry `entry` of the map named `map`, creating the map if needed. */
  mapPut(map, entry, value) {
    this.#scope.mapPut(map, entry, toWit(value));
  }

  /** Removes entry `entry` of the map named `map`, if any. */
  mapRemove(map, entry) {
    this.#scope.mapRemove(map, entry);
  }

  /** How many entries the map named `map` holds (0 if there is no such map), as a number. */
  mapLen(map) {
    return Number(this.#scope.mapLen(map));
  }

  /** The entry names of the map named `map`, in ascending order. */
  mapEntries(map) {
    return this.#scope.mapEntries(map);
  }
}

/**
 * A scope over the named values the host sends with a call (contract 0.2's `add`, 0.3's calls
 * carrying many windows): reads and writes stay in the guest, and the names written go back
 * as the call's changes. Maps and the key are the host scope's; a call without one (0.3's)
 * that asks for them is marked as needing it and answered empty, and the host then makes the
 * call again with the scope. Behaves as the host's scope does otherwise (WIT values).
 */
class NamedValues {
  /** @type {Map<string, import('./weir-sdk').WitValue>} */
  #values;
  /** @type {import('./weir-sdk').Scope | undefined} */
  #scope;
  /** The names written (put or removed), in the order first written. @type {string[]} */
  #changed = [];
  /** The same names, to look them up. @type {Set<string>} */
  #written = new Set();
  /** Whether the call asked for a map or the key without a scope to answer. */
  needsScope = false;

  /**
   * @param {Map<string, import('./weir-sdk').WitValue>} values the named values, by name
   * @param {import('./weir-sdk').Scope | undefined} scope the host's, if the call has one
   */
  constructor(values, scope) {
    this.#values = values;
    this.#scope = scope;
  }

  /** The host scope; `undefined` (and the call marked as needing one) if there is none. */
  #host() {
    if (this.#scope === undefined) this.needsScope = true;
    return this.#scope;
  }

  key() {
    return this.#host()?.key() ?? '';
  }

  get(name) {
    return copied(this.#values.get(name));
  }

  put(name, value) {
    this.#values.set(checkName(name), copied(value));
    this.#changedNow(name);
  }

  remove(name) {
    this.#values.delete(checkName(name));
    this.#changedNow(name);
  }

  /** Notes that `name` was written. */
  #changedNow(name) {
    if (!this.#written.has(name)) {
      this.#written.add(name);
      this.#changed.push(name);
    }
  }

  mapGet(map, entry) {
    return this.#host()?.mapGet(map, entry);
  }

  mapPut(map, entry, value) {
    this.#host()?.mapPut(map, entry, value);
  }

  mapRemove(map, entry) {
    this.#host()?.mapRemove(map, entry);
  }

  mapLen(map) {
    return this.#host()?.mapLen(map) ?? 0n;
  }

  mapEntries(map) {
    return this.#host()?.mapEntries(map) ?? [];
  }

  /**
   * The names written, each with its value (`undefined` if removed), in the order first written.
   * @returns {{name: string, value: import('./weir-sdk').WitValue | undefined}[]}
   */
  changes() {
    return this.#changed.map((name) => ({ name, value: this.#values.get(name) }));
  }

  /**
   * Appends the changes to `changes` as a call carrying many windows answers them: each
   * name as its index in `names`.
   * @param {{name: number, value: import('./weir-sdk').WitValue | undefined}[]} changes
   * @param {Names} names
   */
  changesInto(changes, names) {
    const changed = this.#changed;
    for (let i = 0; i < changed.length; i++) {
      changes.push({ name: names.index(changed[i]), value: this.#values.get(changed[i]) });
    }
  }
}

/**
 * `value` itself, or a copy if it holds bytes: as with the host's scope, bytes read or written
 * are the caller's own, and changing them changes no state.
 * @param {import('./weir-sdk').WitValue | undefined} value
 */
function copied(value) {
  return value?.tag === 'bytes' ? { tag: 'bytes', val: value.val.slice() } : value;
}

/** `name`, which must be a string (a state value's or an output field's name). */
function checkName(name) {
  if (typeof name !== 'string') throw new TypeError(`a name is a string, not ${describe(name)}`);
  return name;
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

/**
 * Sets `values[column]` (a list of WIT values), padding with nulls.
 * @param {import('./weir-sdk').WitValue[]} values
 */
function setColumn(values, column, value) {
  if (!Number.isInteger(column) || column < 0) {
    throw new RangeError(`no column ${column}: look columns up with column() or addColumn()`);
  }
  while (values.length < column) values.push(NULL);
  values[column] = toWit(value);
}

/** The index of `name` in `fields`, appending it if absent. */
function addColumn(fields, name) {
  const column = fields.indexOf(name);
  return column >= 0 ? column : fields.push(name) - 1;
}

/** The JS value of field `column` in each of `rows` (WIT events), `null` where missing. */
function columnValues(rows, column) {
  const values = new Array(rows.length);
  if (column < 0) return values.fill(null);
  for (let i = 0; i < rows.length; i++) {
    const value = rows[i].values[column];
    values[i] = value === undefined || value.tag === 'null' ? null : value.val;
  }
  return values;
}

/**
 * A copy of `column` (JS values, or a typed array of numbers) as an array of `length` values,
 * `null` past its end (and for every event if there is no column).
 * @param {ArrayLike<import('./weir-sdk').Value> | undefined} column
 * @param {number} length
 * @returns {import('./weir-sdk').Value[]}
 */
function copyColumn(column, length) {
  // An indexed loop: in SpiderMonkey without a JIT (as in a component), `Array.from` runs the
  // iterator protocol per value in interpreted self-hosted code, several times slower.
  const values = new Array(length);
  const present = column === undefined ? 0 : Math.min(column.length, length);
  for (let i = 0; i < present; i++) values[i] = column[i];
  for (let i = present; i < length; i++) values[i] = null;
  return values;
}

/**
 * Part of a list of WIT values the host sent: one field's values in one batch, made JS values
 * only if the operator reads them (the values of a field it never reads cost nothing more).
 */
class WitColumn {
  #list;
  #start;
  #length;
  /** @type {import('./weir-sdk').Value[] | undefined} */
  #values;

  /**
   * @param {import('./weir-sdk').WitValue[]} list
   * @param {number} start
   * @param {number} length
   */
  constructor(list, start, length) {
    this.#list = list;
    this.#start = start;
    this.#length = length;
  }

  /** The JS values (fewer than `length` past the list's end). */
  values() {
    return (this.#values ??= liftValues(this.#list, this.#start, this.#length));
  }
}

/**
 * A field's values in a batch held as columns.
 * @typedef {ArrayLike<import('./weir-sdk').Value> | WitColumn} Column
 */

/** The JS values of a column. @param {Column | undefined} column */
function jsValues(column) {
  return column instanceof WitColumn ? column.values() : column;
}

/**
 * The WIT event records of a batch held as columns.
 * @param {ArrayLike<bigint>} times
 * @param {Column[]} columns
 */
function recordsOf(times, columns) {
  const values = columns.map(jsValues);
  const records = new Array(times.length);
  for (let i = 0; i < times.length; i++) {
    records[i] = { timestamp: times[i], values: values.map((column) => toWit(column[i])) };
  }
  return records;
}

/**
 * One event of a batch: a view of the WIT record, so `set` changes the batch's event.
 */
export class Event {
  /** @type {import('./weir-sdk').WitEvent} */
  #wit;

  /**
   * An event at `timestamp` (ms since the epoch) with values in the order of its batch's
   * fields. Handy in tests.
   * @param {bigint | number} timestamp
   * @param {import('./weir-sdk').Value[]} values
   */
  constructor(timestamp, values = []) {
    if (timestamp === WRAP) {
      this.#wit = values;
      return;
    }
    this.#wit = { timestamp: toI64(timestamp, 'the timestamp'), values: values.map(toWit) };
  }

  /** The event behind a WIT record, without copying. @internal */
  static fromWit(wit) {
    return new Event(WRAP, wit);
  }

  /** Event time in milliseconds since the Unix epoch. @type {bigint} */
  get timestamp() {
    return this.#wit.timestamp;
  }

  set timestamp(timestamp) {
    this.#wit.timestamp = toI64(timestamp, 'the timestamp');
  }

  /** The values, in the order of the batch's fields (a copy: change them with `set`). */
  get values() {
    return this.#wit.values.map(fromWit);
  }

  /** The value at index `column` (see `Events.column`); `null` if it is null or missing. */
  get(column) {
    return fromWit(this.#wit.values[column]);
  }

  /** Sets the value at index `column` (see `Events.addColumn`), padding with nulls. */
  set(column, value) {
    setColumn(this.#wit.values, column, value);
  }

  /** The WIT record. @internal */
  toWit() {
    return this.#wit;
  }
}

/**
 * A batch of events of one key, in arrival order, with the field names once per batch.
 * Read a field of every event with `values(name)`; it is the fast path.
 */
export class Events {
  /** @type {string[]} */
  #fields;
  /**
   * The events as WIT records; `undefined` while the batch is held as columns (a batch from
   * the host is, until its rows are asked for).
   * @type {import('./weir-sdk').WitEvent[] | undefined}
   */
  #wit;
  /** The event times, while the batch is held as columns. @type {ArrayLike<bigint>} */
  #times;
  /**
   * Each field's values, while the batch is held as columns.
   * @type {Column[]}
   */
  #columns;
  /** @type {Event[] | undefined} */
  #rows;

  /**
   * An empty batch with the given field names (add events with `withRow`).
   * @param {Iterable<string>} fields
   */
  constructor(fields = []) {
    this.#fields = [...fields];
    this.#wit = [];
  }

  /**
   * A batch held as columns, without copying: `columns[f]` holds the values (JS values, a
   * typed array of numbers, or WIT values read on first use) of `fields[f]`, in the order of
   * `times`; a column may be short. Its rows are built only if asked for. @internal
   * @param {string[]} fields
   * @param {ArrayLike<bigint>} times
   * @param {Column[]} columns
   */
  static fromColumns(fields, times, columns) {
    const events = new Events();
    events.#fields = fields;
    events.#wit = undefined;
    events.#times = times;
    events.#columns = columns;
    return events;
  }

  /** The events as WIT records, built from the columns on first use. */
  #records() {
    if (this.#wit === undefined) {
      this.#wit = recordsOf(this.#times, this.#columns);
      this.#times = undefined;
      this.#columns = undefined;
    }
    return this.#wit;
  }

  /**
   * The batch with one more event at `timestamp` (ms since the epoch), whose values are in the
   * order of `fields`. Returns the batch, for chaining. Handy in tests.
   */
  withRow(timestamp, values) {
    const event = new Event(timestamp, values);
    this.#records().push(event.toWit());
    this.#rows?.push(event);
    return this;
  }

  /** The field names. @type {string[]} */
  get fields() {
    return this.#fields;
  }

  /** How many events the batch holds. */
  get length() {
    return this.#wit === undefined ? this.#times.length : this.#wit.length;
  }

  /** The events, as views (built on first use). @type {Event[]} */
  get rows() {
    return (this.#rows ??= this.#records().map(Event.fromWit));
  }

  /** The event at index `index`. */
  row(index) {
    return this.rows[index];
  }

  /** Iterates over the events. */
  [Symbol.iterator]() {
    return this.rows[Symbol.iterator]();
  }

  /** The index of the field `name` in `fields`, -1 if there is none (like `indexOf`). */
  column(name) {
    return this.#fields.indexOf(name);
  }

  /** The index of the field `name`, adding it (null in every event) if the batch lacks it. */
  addColumn(name) {
    return addColumn(this.#fields, name);
  }

  /**
   * The value of the field `name` in each event, in order, as a new array: `null` where it is
   * null or missing (and for every event if the batch has no such field).
   */
  values(name) {
    const column = this.column(name);
    if (this.#wit !== undefined) return columnValues(this.#wit, column);
    return copyColumn(jsValues(this.#columns[column]), this.#times.length);
  }

  /** The event times (ms since the epoch, bigints), in order. */
  timestamps() {
    if (this.#wit === undefined) return copyColumn(this.#times, this.#times.length);
    const times = new Array(this.#wit.length);
    for (let i = 0; i < times.length; i++) times[i] = this.#wit[i].timestamp;
    return times;
  }

  /**
   * The same events as an enricher's output, each with its row index as its origin: the start
   * of a one-for-one transformation. The batch keeps its own copy of the values.
   */
  intoOutput() {
    const output = new OutputEvents(this.#fields);
    output.rows = this.#records().map((event, origin) =>
      OutputEvent.fromWit({ origin, timestamp: event.timestamp, values: event.values.slice() }),
    );
    return output;
  }

  /**
   * The WIT `events` record of contract 0.2 (an operator's batch, in tests): the values
   * field after field, each field's for every event.
   */
  toColumns() {
    const rows = this.#records();
    const values = [];
    for (let column = 0; column < this.#fields.length; column++) {
      for (const row of rows) values.push(row.values[column] ?? NULL);
    }
    return { fields: this.#fields, timestamps: rows.map((row) => row.timestamp), values };
  }
}

/** One event produced by an enricher: a view of the WIT `output-event` record. */
export class OutputEvent {
  /** @type {import('./weir-sdk').WitOutputEvent} */
  #wit;

  /**
   * An event that came from input row `origin`, at `timestamp` (ms since the epoch), with
   * values in the order of its output's fields.
   * @param {number} origin
   * @param {bigint | number} timestamp
   * @param {import('./weir-sdk').Value[]} values
   */
  constructor(origin, timestamp, values = []) {
    if (origin === WRAP) {
      this.#wit = timestamp;
      return;
    }
    this.#wit = { origin: 0, timestamp: 0n, values: values.map(toWit) };
    this.origin = origin;
    this.timestamp = timestamp;
  }

  /** The event behind a WIT record, without copying. @internal */
  static fromWit(wit) {
    return new OutputEvent(WRAP, wit);
  }

  /** Index, in the input batch's rows, of the event this one came from. @type {number} */
  get origin() {
    return this.#wit.origin;
  }

  set origin(origin) {
    if (!Number.isInteger(origin) || origin < 0 || origin > U32_MAX) {
      throw new RangeError(`origin must be an input row index (a u32), not ${describe(origin)}`);
    }
    this.#wit.origin = origin;
  }

  /** Event time in milliseconds since the Unix epoch. @type {bigint} */
  get timestamp() {
    return this.#wit.timestamp;
  }

  set timestamp(timestamp) {
    this.#wit.timestamp = toI64(timestamp, 'the timestamp');
  }

  /** The values, in the order of the output's fields (a copy: change them with `set`). */
  get values() {
    return this.#wit.values.map(fromWit);
  }

  /** The value at index `column` (see `OutputEvents.column`); `null` if null or missing. */
  get(column) {
    return fromWit(this.#wit.values[column]);
  }

  /** Sets the value at index `column` (see `OutputEvents.addColumn`), padding with nulls. */
  set(column, value) {
    setColumn(this.#wit.values, column, value);
  }

  /** The WIT record. @internal */
  toWit() {
    return this.#wit;
  }
}

/**
 * The events produced by one enrichment call. `rows` is a plain array of `OutputEvent`s:
 * filter it, reorder it or push to it freely.
 */
export class OutputEvents {
  /** @type {string[]} */
  #fields;

  /** @param {Iterable<string>} fields the field names */
  constructor(fields = []) {
    this.#fields = [...fields];
    /** The events. @type {OutputEvent[]} */
    this.rows = [];
  }

  /** The field names. @type {string[]} */
  get fields() {
    return this.#fields;
  }

  /** How many events the output holds. */
  get length() {
    return this.rows.length;
  }

  /** The index of the field `name` in `fields`, -1 if there is none. */
  column(name) {
    return this.#fields.indexOf(name);
  }

  /** The index of the field `name`, adding it (null in every event) if the output lacks it. */
  addColumn(name) {
    return addColumn(this.#fields, name);
  }

  /** The value of the field `name` in each event, in order, `null` where null or missing. */
  values(name) {
    return columnValues(
      this.rows.map((row) => row.toWit()),
      this.column(name),
    );
  }

  /** Appends an event; returns the output, for chaining. */
  push(event) {
    this.rows.push(event);
    return this;
  }

  /** Keeps only the events for which `keep(event, index)` is truthy; returns the output. */
  retain(keep) {
    this.rows = this.rows.filter(keep);
    return this;
  }

  /** The WIT `output-events` record. */
  toWit() {
    return { fields: this.#fields, rows: this.rows.map((row) => row.toWit()) };
  }
}

// ---------------------------------------------------------------------------------------------
// Windows and outputs
// ---------------------------------------------------------------------------------------------

/** A half-open event-time window `[start, end)`, in ms since the epoch, as bigints. */
export class Window {
  /**
   * @param {bigint | number} start
   * @param {bigint | number} end
   */
  constructor(start, end) {
    /** @readonly @type {bigint} */
    this.start = toI64(start, 'the window start');
    /** @readonly @type {bigint} */
    this.end = toI64(end, 'the window end');
  }

  /** The window's length in milliseconds (saturating at the bounds of an s64). */
  durationMs() {
    const duration = this.end - this.start;
    return duration > I64_MAX ? I64_MAX : duration < I64_MIN ? I64_MIN : duration;
  }

  /** Whether `timestamp` (a bigint or a number) lies in the window. */
  contains(timestamp) {
    return this.start <= timestamp && timestamp < this.end;
  }
}

/**
 * The WIT fields of an aggregate's output: a plain object (fields in insertion order, but
 * note that JS puts integer-like names first), a Map, or an iterable of `[name, value]`.
 * @returns {import('./weir-sdk').WitField[]}
 */
export function toFields(output) {
  if (output === null || typeof output !== 'object') {
    throw new TypeError(`finish must return an object or a Map of fields, not ${describe(output)}`);
  }
  let entries;
  if (Array.isArray(output)) entries = output;
  else if (Symbol.iterator in output) entries = [...output];
  else entries = Object.entries(output);
  const fields = new Array(entries.length);
  for (let i = 0; i < entries.length; i++) {
    const entry = Array.isArray(entries[i]) ? entries[i] : [...entries[i]];
    const name = entry[0];
    if (typeof name !== 'string') throw new TypeError(`field name ${describe(name)} is not a string`);
    fields[i] = { name, value: toWit(entry[1]) };
  }
  return fields;
}

// ---------------------------------------------------------------------------------------------
// Adapters
// ---------------------------------------------------------------------------------------------

/**
 * What componentize-js turns into the `err` case of a `result<_, string>`: a thrown value
 * with an own `payload` property.
 */
class CallFailed extends Error {
  /** @param {string} payload */
  constructor(payload) {
    super(payload);
    this.name = 'CallFailed';
    this.payload = payload;
  }
}

/** The first stack frame of `stack` (V8's `    at f (file:1:2)` or SpiderMonkey's `f@file:1:2`). */
function firstFrame(stack, head) {
  const lines = String(stack).split('\n').map((line) => line.trim());
  const v8 = lines.find((line) => line.startsWith('at '));
  if (v8 !== undefined) return v8.slice(3);
  return lines.find((line) => line !== '' && !line.startsWith(head));
}

/**
 * The error string of a thrown value: a string or an `OperatorError`'s message as it is,
 * otherwise `"<name>: <message>"` and ` (at <first stack frame>)` when there is a stack.
 * @param {unknown} error
 * @returns {string}
 */
export function errorMessage(error) {
  try {
    if (typeof error === 'string') return error;
    if (error instanceof OperatorError) return error.message;
    if (!(error instanceof Error)) return `Error: ${String(error)}`;
    const head = `${error.name}: ${error.message}`;
    const frame = error.stack ? firstFrame(error.stack, head) : undefined;
    return frame ? `${head} (at ${frame})` : head;
  } catch {
    return 'Error: an exception that cannot be described';
  }
}

/** Runs `call`, turning whatever it throws into the call's error string. */
function guard(call) {
  try {
    return call();
  } catch (error) {
    throw new CallFailed(errorMessage(error));
  }
}

/** Throws unless `operator` has the functions `names`. */
function requireFunctions(operator, names, what) {
  for (const name of names) {
    if (typeof operator?.[name] !== 'function') {
      throw new TypeError(`${what}: the operator has no function \`${name}\``);
    }
  }
}

/** Where an aggregate adapter keeps its `windows` export (see {@link windowsOf}). */
const WINDOWS = Symbol.for('weir-sdk windows export');

/**
 * The `aggregate` interface of an aggregate operator (contract 0.3's, which is 0.2's): export
 * it as `aggregate`. build.mjs exports its {@link windowsOf} beside it.
 *
 * `operator.add(state, batch)` folds a batch into the window's state (throw to refuse the
 * batch: nothing the call wrote is kept, and the host retries its events one at a time),
 * `merge(target, source)` folds the partial state `source` into `target`,
 * `finish(state, window)` returns the window's output (an object or a Map), and the optional
 * `migrate(state, fromVersion)` converts state written by another version.
 * @param {import('./weir-sdk').Aggregate} operator
 * @returns {import('./weir-sdk').AggregateExport}
 */
export function exportAggregate(operator) {
  requireFunctions(operator, ['add', 'merge', 'finish'], 'exportAggregate');
  const adapter = {
    add(scope, values, batch) {
      return guard(() => {
        const named = new Map(values.map((field) => [field.name, field.value]));
        const state = new NamedValues(named, scope);
        operator.add(new State(state), hostBatch(batch));
        return state.changes();
      });
    },
    merge(target, source) {
      guard(() => operator.merge(new State(target), new State(source)));
    },
    finish(scope, window) {
      // componentize-js 0.23.0 lifts an s64 passed as a flat parameter (the window's bounds)
      // as an unsigned BigInt, so a window before 1970 arrives as start + 2^64: the 64 bits
      // are right, their reading is not (the twin of the lowering bug build.mjs patches).
      const start = BigInt.asIntN(64, window.start);
      const end = BigInt.asIntN(64, window.end);
      return guard(() => toFields(operator.finish(new State(scope), new Window(start, end))));
    },
    migrate(scope, fromVersion) {
      if (typeof operator.migrate !== 'function') return;
      guard(() => operator.migrate(new State(scope), fromVersion));
    },
  };
  Object.defineProperty(adapter, WINDOWS, { value: exportWindows(operator) });
  return adapter;
}

/**
 * The `windows` export (contract 0.3) that goes with an aggregate adapter: the component's
 * entry, which build.mjs generates, exports `windows = windowsOf(aggregate)`.
 * @param {import('./weir-sdk').AggregateExport} aggregate
 * @returns {import('./weir-sdk').WindowsExport}
 */
export function windowsOf(aggregate) {
  const windows = aggregate?.[WINDOWS];
  if (windows === undefined) {
    throw new TypeError(
      'the module\'s `aggregate` export was not made by exportAggregate: write ' +
        '`export const aggregate = exportAggregate(operator)`',
    );
  }
  return windows;
}

/**
 * A batch of contract 0.2 (its values field after field, WIT values) as `Events` over
 * columns, each made JS values when first read; values missing from a short list are null.
 * @param {import('./weir-sdk').WitColumns} batch
 */
function hostBatch(batch) {
  const events = batch.timestamps.length;
  const columns = batch.fields.map((_, f) => new WitColumn(batch.values, f * events, events));
  return Events.fromColumns(batch.fields, batch.timestamps, columns);
}

/** The JS values of `length` WIT values of `list` from `start` (fewer past its end). */
function liftValues(list, start, length) {
  const end = Math.min(list.length, start + length);
  const values = new Array(Math.max(0, end - start));
  for (let i = 0; i < values.length; i++) values[i] = fromWit(list[start + i]);
  return values;
}

/** `length` items of `list` from `start`: a view of a typed array, a copy of an array. */
function part(list, start, length) {
  const end = start + length;
  return ArrayBuffer.isView(list) ? list.subarray(start, end) : list.slice(start, end);
}

/** A call's names by index, and the names its answer adds (its `new-names`). */
class Names {
  /** @type {string[]} */
  #names;
  /** @type {Map<string, number> | undefined} */
  #index;
  /** The names added, after the call's. @type {string[]} */
  added = [];

  /** @param {string[]} names */
  constructor(names) {
    this.#names = names;
  }

  /** The name at `index` of the call's names ('' past them). */
  at(index) {
    return index < this.#names.length ? this.#names[index] : '';
  }

  /** The index of `name`: in the call's names, or past them in the added ones. */
  index(name) {
    this.#index ??= new Map(this.#names.map((known, at) => [known, at]));
    let at = this.#index.get(name);
    if (at === undefined) {
      at = this.#names.length + this.added.length;
      this.#index.set(name, at);
      this.added.push(name);
    }
    return at;
  }
}

/** The values of a call's windows, each field's read from the list its kind names. */
class Columns {
  /** @type {import('./weir-sdk').WitWindowBatches} */
  #batches;
  /** How far each list is read: kinds, ints, floats, columns. */
  #at = [0, 0, 0, 0];

  /** @param {import('./weir-sdk').WitWindowBatches} batches */
  constructor(batches) {
    this.#batches = batches;
  }

  /** The next window's columns: `fields` of (up to) `events` values each. */
  window(fields, events) {
    const batches = this.#batches;
    const at = this.#at;
    const columns = new Array(fields);
    for (let field = 0; field < fields; field++) {
      const kind = batches.kinds[at[0]++];
      if (kind === 'ints') {
        columns[field] = part(batches.ints, at[1], events);
        at[1] += events;
      } else if (kind === 'floats') {
        columns[field] = part(batches.floats, at[2], events);
        at[2] += events;
      } else if (kind === 'values') {
        columns[field] = new WitColumn(batches.columns, at[3], events);
        at[3] += events;
      } else {
        columns[field] = [];
      }
    }
    return columns;
  }
}

/**
 * Runs one window's part of a call carrying many: its outcome ('done'; 'failed' if it threw;
 * 'needs-scope' if it asked for a map or the key) and what it returned.
 * @param {NamedValues} state
 * @param {() => unknown} call
 * @returns {['done' | 'failed' | 'needs-scope', unknown]}
 */
function outcomeOf(state, call) {
  let result;
  try {
    result = call();
  } catch {
    return [state.needsScope ? 'needs-scope' : 'failed', undefined];
  }
  return [state.needsScope ? 'needs-scope' : 'done', result];
}

/** A window's named values (`count` of `list` from `start`), without a scope. */
function namedValues(names, list, start, count) {
  const values = new Map();
  for (let i = start; i < start + count && i < list.length; i++) {
    values.set(names.at(list[i].name), list[i].value);
  }
  return new NamedValues(values, undefined);
}

/**
 * The `windows` interface (contract 0.3: many windows per call, each without its scope),
 * calling `operator`. A window whose call throws answers 'failed' and one that asks for a map
 * or the key 'needs-scope': the host then calls `aggregate` for that window alone, which gives
 * the error or has the scope.
 * @param {import('./weir-sdk').Aggregate} operator
 * @returns {import('./weir-sdk').WindowsExport}
 */
function exportWindows(operator) {
  return {
    addWindows(batches) {
      const names = new Names(batches.names);
      const columns = new Columns(batches);
      const [outcomes, changeCounts, changes] = [[], [], []];
      let [atValues, atFields, atTimes] = [0, 0, 0];
      // Indexed loops throughout: see plusAll.
      for (let w = 0; w < batches.counts.length; w++) {
        const count = batches.counts[w];
        const state = namedValues(names, batches.values, atValues, count.values);
        // As many fields as the call's list holds (as the Rust SDK reads it), not a count.
        const ids = part(batches.fields, atFields, count.fields);
        const fields = new Array(ids.length);
        for (let field = 0; field < fields.length; field++) fields[field] = names.at(ids[field]);
        const times = part(batches.timestamps, atTimes, count.events);
        atValues += count.values;
        atFields += count.fields;
        atTimes += count.events;
        const batch = Events.fromColumns(fields, times, columns.window(fields.length, times.length));
        const outcome = outcomeOf(state, () => operator.add(new State(state), batch))[0];
        const before = changes.length;
        if (outcome === 'done') state.changesInto(changes, names);
        outcomes.push(outcome);
        changeCounts.push(changes.length - before);
      }
      const counts = Uint32Array.from(changeCounts);
      return { outcomes, changeCounts: counts, changes, newNames: names.added };
    },
    finishWindows(states) {
      const names = new Names(states.names);
      const [outcomes, fieldCounts, fields] = [[], [], []];
      const windows = Math.min(states.valueCounts.length, states.windows.length);
      let at = 0;
      for (let w = 0; w < windows; w++) {
        const state = namedValues(names, states.values, at, states.valueCounts[w]);
        at += states.valueCounts[w];
        // Bounds in a list are lifted signed (unlike `finish`'s flat parameter): checked.
        const window = new Window(states.windows[w].start, states.windows[w].end);
        const finish = () => toFields(operator.finish(new State(state), window));
        const done = outcomeOf(state, finish);
        const outcome = done[0];
        const output = done[1];
        const before = fields.length;
        if (outcome === 'done') {
          for (let i = 0; i < output.length; i++) {
            fields.push({ name: names.index(output[i].name), value: output[i].value });
          }
        }
        outcomes.push(outcome);
        fieldCounts.push(fields.length - before);
      }
      const counts = Uint32Array.from(fieldCounts);
      return { outcomes, fieldCounts: counts, fields, newNames: names.added };
    },
  };
}

/** The WIT output of an enricher's `process`: `OutputEvents`, or `Events` kept one for one. */
function toWitOutput(output) {
  if (output instanceof OutputEvents) return output.toWit();
  if (output instanceof Events) return output.intoOutput().toWit();
  throw new TypeError(`process must return OutputEvents (or Events), not ${describe(output)}`);
}

/**
 * The `enrich` interface of an enrichment operator: export it as `enrich`.
 *
 * `operator.process(state, batch)` returns the batch's output events (start from
 * `batch.intoOutput()`); throw to refuse the batch: the host retries its events one at a time,
 * and the events refused alone go to the dead letters.
 * @param {import('./weir-sdk').Enrich} operator
 * @returns {import('./weir-sdk').EnrichExport}
 */
export function exportEnrich(operator) {
  requireFunctions(operator, ['process'], 'exportEnrich');
  return {
    process(scope, batch) {
      return guard(() => toWitOutput(operator.process(new State(scope), hostBatch(batch))));
    },
  };
}
