// Tests of State through MemoryState (mirrors guest-sdk/src/state.rs and testing.rs).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MemoryScope, MemoryState } from '../testing.js';
import { I64_MAX, I64_MIN, State } from '../weir-sdk.js';

test('typed reads only match their kind', () => {
  const memory = new MemoryState('k');
  const state = memory.state();
  state.put('n', 3n);
  state.put('x', 1.5);
  state.put('t', 'hi');
  assert.equal(state.key(), 'k');
  assert.equal(state.getInt('n'), 3n);
  assert.equal(state.getFloat('n'), 3);
  assert.equal(state.getInt('x'), undefined);
  assert.equal(state.getFloat('x'), 1.5);
  assert.equal(state.getText('t'), 'hi');
  assert.equal(state.getText('n'), undefined);
  assert.equal(state.get('missing'), undefined);
  state.remove('n');
  assert.equal(state.get('n'), undefined);
});

test('get tells a stored null from a missing value', () => {
  const state = new MemoryState('k');
  state.put('nothing', null);
  assert.equal(state.get('nothing'), null);
  assert.equal(state.get('nothing', 0n), null);
  assert.equal(state.get('missing', 0n), 0n);
  state.mapPut('m', 'nothing', null);
  assert.equal(state.mapGet('m', 'nothing', 'x'), null);
  assert.equal(state.mapGet('m', 'missing', 'x'), 'x');
});

test('addInt starts from zero and saturates', () => {
  const state = new MemoryState('k').state();
  assert.equal(state.addInt('count', 2n), 2n);
  assert.equal(state.addInt('count', 3), 5n);
  state.put('big', I64_MAX);
  assert.equal(state.addInt('big', 1n), I64_MAX);
  state.put('small', I64_MIN);
  assert.equal(state.addInt('small', -1n), I64_MIN);
  state.put('text', 'x');
  assert.equal(state.addInt('text', 1n), 1n);
  assert.throws(() => state.addInt('count', 1.5), TypeError);
  assert.throws(() => state.addInt('count', 2n ** 64n), RangeError);
});

test('maps hold sorted entries', () => {
  const memory = new MemoryState('k');
  const state = memory.state();
  state.mapPut('m', 'b', 2n);
  state.mapPut('m', 'a', null);
  state.mapPut('other', 'z', true);
  assert.equal(state.mapLen('m'), 2);
  assert.deepEqual(state.mapEntries('m'), ['a', 'b']);
  assert.equal(state.mapGet('m', 'b'), 2n);
  state.mapRemove('m', 'a');
  assert.deepEqual(memory.mapEntries('m'), ['b']);
  assert.equal(state.mapLen('none'), 0);
  assert.deepEqual(state.mapEntries('none'), []);
});

test('map entries sort by code point, as the host orders them', () => {
  const state = new MemoryState('k');
  for (const entry of ['\u{1F600}', '\uFFFD', 'b', 'B', 'é']) state.mapPut('m', entry, true);
  assert.deepEqual(state.mapEntries('m'), ['B', 'b', 'é', '\uFFFD', '\u{1F600}']);
});

test('the memory scope speaks WIT, like the host', () => {
  const scope = new MemoryScope('k');
  const state = new State(scope);
  const bytes = new Uint8Array([1, 2]);
  state.put('b', bytes);
  bytes[0] = 9; // the stored copy does not change
  assert.deepEqual(scope.get('b'), { tag: 'bytes', val: new Uint8Array([1, 2]) });
  state.mapPut('m', 'e', 1.5);
  assert.equal(scope.mapLen('m'), 1n);
  assert.deepEqual(scope.mapGet('m', 'e'), { tag: 'float', val: 1.5 });
  assert.equal(scope.get('none'), undefined);
});
