// weir-sdk/testing: run operators in Node without a host, for unit tests (`node --test`).
//
//   import { MemoryState } from 'weir-sdk/testing';
//   const memory = new MemoryState('user-1');
//   countSum.add(memory.state(), new Events(['amount']).withRow(1000n, [3n]));
//   assert.equal(memory.getInt('count'), 1n);
//
// Mirrors guest-sdk/src/testing.rs. `MemoryScope` behaves like the host's scope resource
// (WIT values, u64 map lengths), so adapters can be called directly as the host would.

import { State } from './weir-sdk.js';

/** Compares two strings by their UTF-8 bytes (code points), as the host's ordered maps do. */
function byCodePoints(a, b) {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const diff = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (diff !== 0) return diff;
  }
  return x.length - y.length;
}

/** A copy of a WIT value, so that stored bytes cannot change behind the state's back. */
function copy(value) {
  return value.tag === 'bytes' ? { tag: 'bytes', val: value.val.slice() } : { ...value };
}

/** An in-memory stand-in for the host's `scope` resource: WIT values in, WIT values out. */
export class MemoryScope {
  #key;
  /** @type {Map<string, object>} */
  #values = new Map();
  /** @type {Map<string, Map<string, object>>} */
  #maps = new Map();

  /** @param {string} key the key this scope belongs to */
  constructor(key = '') {
    this.#key = String(key);
  }

  key() {
    return this.#key;
  }

  get(name) {
    const value = this.#values.get(name);
    return value === undefined ? undefined : copy(value);
  }

  put(name, value) {
    this.#values.set(name, copy(value));
  }

  remove(name) {
    this.#values.delete(name);
  }

  mapGet(map, entry) {
    const value = this.#maps.get(map)?.get(entry);
    return value === undefined ? undefined : copy(value);
  }

  mapPut(map, entry, value) {
    if (!this.#maps.has(map)) this.#maps.set(map, new Map());
    this.#maps.get(map).set(entry, copy(value));
  }

  mapRemove(map, entry) {
    const entries = this.#maps.get(map);
    if (entries === undefined) return;
    entries.delete(entry);
    if (entries.size === 0) this.#maps.delete(map);
  }

  /** @returns {bigint} like the host's `u64` */
  mapLen(map) {
    return BigInt(this.#maps.get(map)?.size ?? 0);
  }

  mapEntries(map) {
    return [...(this.#maps.get(map)?.keys() ?? [])].sort(byCodePoints);
  }

  /** The named values as the host sends them with a call: WIT fields, by name. */
  namedValues() {
    return [...this.#values.keys()].sort(byCodePoints).map((name) => ({ name, value: this.get(name) }));
  }
}

/**
 * An in-memory stand-in for the state the host keeps for one key (and window). `state()`
 * hands out the `State` to pass to an operator; the other methods (those of `State`)
 * inspect or prepare the contents directly.
 */
export class MemoryState extends State {
  #scope;

  /** @param {string} key the key this state belongs to */
  constructor(key = '') {
    const scope = new MemoryScope(key);
    super(scope);
    this.#scope = scope;
  }

  /** The `State` to hand to an operator. */
  state() {
    return new State(this.#scope);
  }

  /** The WIT-level scope, to call an adapter (`exportAggregate(...)`) the way the host does. */
  get scope() {
    return this.#scope;
  }
}

/**
 * Calls the `add` of an aggregate adapter (`exportAggregate(...)`) the way the host does: the
 * state's named values and the batch's columns go in, and the changes the call returns are
 * applied to `memory`. Throws what the adapter throws: an error whose `payload` is the call's
 * error string, as the host reads it. Unlike the host, it keeps map writes a failed call made.
 * @param {import('./weir-sdk').AggregateExport} adapter
 * @param {MemoryState} memory
 * @param {import('./weir-sdk').Events} batch
 */
export function hostAdd(adapter, memory, batch) {
  const scope = memory.scope;
  for (const { name, value } of adapter.add(scope, scope.namedValues(), batch.toColumns())) {
    if (value === undefined) scope.remove(name);
    else scope.put(name, value);
  }
}
