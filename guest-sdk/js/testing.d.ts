// TypeScript declarations of testing.js (weir-sdk/testing): run operators without a host.

import { AggregateExport, Events, Scope, State, WitField, WitValue } from './weir-sdk.js';

/** An in-memory stand-in for the host's `scope` resource: WIT values in and out. */
export class MemoryScope implements Scope {
  constructor(key?: string);
  key(): string;
  get(name: string): WitValue | undefined;
  put(name: string, value: WitValue): void;
  remove(name: string): void;
  mapGet(name: string, entry: string): WitValue | undefined;
  mapPut(name: string, entry: string, value: WitValue): void;
  mapRemove(name: string, entry: string): void;
  mapLen(name: string): bigint;
  mapEntries(name: string): string[];
  /** The named values as the host sends them with a call. */
  namedValues(): WitField[];
}

/**
 * An in-memory stand-in for the state the host keeps for one key (and window). Its own
 * methods (those of State) inspect or prepare the contents; `state()` is what an operator gets.
 */
export class MemoryState extends State {
  constructor(key?: string);
  /** The State to hand to an operator. */
  state(): State;
  /** The WIT-level scope, to call an adapter the way the host does. */
  get scope(): MemoryScope;
}

/**
 * Calls an aggregate adapter's `add` the way the host does and applies the changes it returns
 * to `memory`; throws what the adapter throws (an error with the call's error string as `payload`).
 */
export function hostAdd(adapter: AggregateExport, memory: MemoryState, batch: Events): void;
