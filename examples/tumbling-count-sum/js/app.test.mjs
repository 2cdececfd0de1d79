// Unit tests of app.js without a host (`node --test examples/tumbling-count-sum/js/`),
// mirroring the tests of examples/tumbling-count-sum/src/lib.rs.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import '../../../guest-sdk/js/register.mjs';

const { Events, Window } = await import('weir-sdk');
const { hostAdd, MemoryState } = await import('weir-sdk/testing');
const { aggregate, countSum, NOT_NUMERIC } = await import('./app.js');

const WINDOW = new Window(0n, 60_000n);

/** A batch of events of user u1 with the given amounts. */
function batch(amounts) {
  return amounts.reduce((events, amount) => events.withRow(1_000n, ['u1', amount]), new Events(['user', 'amount']));
}

test('the sum stays an int until a float arrives', () => {
  const memory = new MemoryState('u1');
  countSum.add(memory.state(), batch([2n, 3n]));
  assert.deepEqual(countSum.finish(memory.state(), WINDOW), { count: 2n, sum: 5n });

  countSum.add(memory.state(), batch([0.5]));
  assert.deepEqual(countSum.finish(memory.state(), WINDOW), { count: 3n, sum: 5.5 });
});

test('an int sum that overflows becomes a float', () => {
  const memory = new MemoryState('u1');
  countSum.add(memory.state(), batch([2n ** 63n - 1n, 1n]));
  assert.deepEqual(countSum.finish(memory.state(), WINDOW), { count: 2n, sum: 2 ** 63 });
});

test('a batch with a bad amount is rejected whole', () => {
  const memory = new MemoryState('u1');
  for (const bad of [null, '12']) {
    assert.throws(() => countSum.add(memory.state(), batch([1n, bad])), { message: NOT_NUMERIC });
  }
  const noAmount = new Events(['user']).withRow(1_000n, ['u1']);
  assert.throws(() => countSum.add(memory.state(), noAmount));
  assert.equal(memory.get('count'), undefined);
  assert.equal(memory.get('sum'), undefined);
});

test('the component reports the bare message, as the Rust operator does', () => {
  const memory = new MemoryState('u1');
  assert.throws(() => hostAdd(aggregate, memory, batch([true])), { payload: NOT_NUMERIC });
});

test('merge adds counts and sums', () => {
  const [target, source, empty] = [new MemoryState('u1'), new MemoryState('u1'), new MemoryState('u1')];
  countSum.add(target.state(), batch([1n, 2n]));
  countSum.add(source.state(), batch([1.5]));
  countSum.merge(target.state(), source.state());
  countSum.merge(target.state(), empty.state());
  assert.deepEqual(countSum.finish(target.state(), WINDOW), { count: 3n, sum: 4.5 });

  countSum.merge(empty.state(), source.state());
  assert.equal(empty.get('sum'), 1.5);
  assert.equal(empty.get('count'), 1n);
});

test('the output keeps the Rust field order and kinds', () => {
  const memory = new MemoryState('u1');
  hostAdd(aggregate, memory, batch([4n]));
  assert.deepEqual(aggregate.finish(memory.scope, { start: 0n, end: 60_000n }), [
    { name: 'count', value: { tag: 'int', val: 1n } },
    { name: 'sum', value: { tag: 'int', val: 4n } },
  ]);
});
