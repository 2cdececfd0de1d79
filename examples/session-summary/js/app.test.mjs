// Unit tests of app.js without a host (`node --test examples/session-summary/js/`),
// mirroring the tests of examples/session-summary/src/lib.rs.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import '../../../guest-sdk/js/register.mjs';

const { Events, Window } = await import('weir-sdk');
const { MemoryState } = await import('weir-sdk/testing');
const { sessionSummary } = await import('./app.js');

/** A batch of page views at the given times. */
function batch(times) {
  return times.reduce((events, time) => events.withRow(time, ['/']), new Events(['page']));
}

test('summarises out-of-order events', () => {
  const memory = new MemoryState('v1');
  sessionSummary.add(memory.state(), batch([5_000n, 2_000n, 9_000n]));
  sessionSummary.add(memory.state(), batch([1_000n]));
  const output = sessionSummary.finish(memory.state(), new Window(1_000n, 39_000n));
  assert.deepEqual(output, { events: 4n, first: 1_000n, last: 9_000n, duration_ms: 8_000n });
});

test('merging sessions sums counts and widens the span', () => {
  const [target, source, empty] = [new MemoryState('v1'), new MemoryState('v1'), new MemoryState('v1')];
  sessionSummary.add(target.state(), batch([50_000n, 60_000n]));
  sessionSummary.add(source.state(), batch([20_000n, 30_000n]));
  sessionSummary.merge(target.state(), source.state());
  sessionSummary.merge(target.state(), empty.state());
  const output = sessionSummary.finish(target.state(), new Window(20_000n, 90_000n));
  assert.deepEqual(output, { events: 4n, first: 20_000n, last: 60_000n, duration_ms: 40_000n });
});

test('an empty state summarises as the window start', () => {
  const output = sessionSummary.finish(new MemoryState('v1').state(), new Window(7_000n, 9_000n));
  assert.deepEqual(output, { events: 0n, first: 7_000n, last: 7_000n, duration_ms: 0n });
});
