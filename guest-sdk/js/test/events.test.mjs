// Tests of Events, Event, OutputEvents, OutputEvent and Window (mirrors guest-sdk/src/events.rs).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Event, Events, OutputEvent, OutputEvents, Window, exportEnrich } from '../weir-sdk.js';
import { MemoryState } from '../testing.js';

test('columns, values and padding', () => {
  const batch = new Events(['a', 'b']).withRow(1n, [1n, null]).withRow(2n, [2n]);
  assert.equal(batch.length, 2);
  assert.equal(batch.column('b'), 1);
  assert.equal(batch.column('c'), -1);
  assert.deepEqual(batch.values('b'), [null, null]);
  assert.deepEqual(batch.values('zzz'), [null, null]);
  const c = batch.addColumn('c');
  assert.deepEqual([c, batch.addColumn('a')], [2, 0]);
  batch.rows[1].set(c, 'x');
  assert.deepEqual(batch.rows[1].values, [2n, null, 'x']);
  assert.equal(batch.rows[1].get(c), 'x');
  assert.equal(batch.rows[1].get(1), null);
  assert.deepEqual(batch.values('c'), [null, 'x']);
  assert.throws(() => batch.rows[0].set(-1, 1n), RangeError);
});

test('values and timestamps read the batch as the host sent it', () => {
  // An enricher's batch as the host sends it: the values field after field, the last short.
  // The operator returns no events: returning the batch would turn it into rows (for the
  // output) before the assertions, which would then read the rows, not the columns.
  let batch;
  const process = (state, events) => {
    batch = events;
    return new OutputEvents([]);
  };
  exportEnrich({ process }).process(new MemoryState('u1').scope, {
    fields: ['user', 'amount'],
    timestamps: [5n, -7n, 9n],
    values: [
      ...[1, 2, 3].map(() => ({ tag: 'text', val: 'u1' })),
      { tag: 'int', val: 3n },
      { tag: 'float', val: 0.5 },
    ],
  });
  assert.deepEqual(batch.fields, ['user', 'amount']);
  assert.deepEqual(batch.values('amount'), [3n, 0.5, null]);
  assert.deepEqual(batch.timestamps(), [5n, -7n, 9n]);
  assert.deepEqual([...batch].map((event) => event.timestamp), [5n, -7n, 9n]);
  assert.equal(batch.row(1).get(1), 0.5);
});

test('events built in tests take numbers or bigints as timestamps', () => {
  const event = new Event(1_000, ['a']);
  assert.equal(event.timestamp, 1000n);
  assert.throws(() => new Event(1.5, []), TypeError);
  assert.throws(() => new Event(2n ** 63n, []), RangeError);
});

test('output events keep their origin', () => {
  const output = new Events(['a']).withRow(5n, [1n]).withRow(6n, [2n]).intoOutput();
  output.push(new OutputEvent(1, 7n, [3n]));
  assert.deepEqual(
    output.rows.map((event) => [event.origin, event.timestamp]),
    [[0, 5n], [1, 6n], [1, 7n]],
  );
  assert.deepEqual(output.values('a'), [1n, 2n, 3n]);
  assert.equal(output.length, 3);
});

test('the output is independent of the batch it came from', () => {
  const batch = new Events(['a']).withRow(1n, [1n]);
  const output = batch.intoOutput();
  output.rows[0].set(0, 'changed');
  assert.deepEqual(batch.values('a'), [1n]);
  assert.deepEqual(output.values('a'), ['changed']);
});

test('retain filters the rows and toWit gives the WIT record', () => {
  const output = new Events(['a']).withRow(1n, [1n]).withRow(2n, [2n]).intoOutput();
  const b = output.addColumn('b');
  output.retain((event) => event.get(0) > 1n).rows[0].set(b, true);
  assert.deepEqual(output.toWit(), {
    fields: ['a', 'b'],
    rows: [{ origin: 1, timestamp: 2n, values: [{ tag: 'int', val: 2n }, { tag: 'boolean', val: true }] }],
  });
  assert.deepEqual(new OutputEvents(['x']).toWit(), { fields: ['x'], rows: [] });
});

test('output events check their origin and timestamp', () => {
  assert.throws(() => new OutputEvent(-1, 0n), RangeError);
  assert.throws(() => new OutputEvent(2 ** 32, 0n), RangeError);
  assert.throws(() => new OutputEvent(0.5, 0n), RangeError);
  const event = new OutputEvent(0, 0n, []);
  event.timestamp = 42;
  assert.equal(event.timestamp, 42n);
  event.set(2, 'z');
  assert.deepEqual(event.values, [null, null, 'z']);
});

test('windows are half-open and exact', () => {
  const window = new Window(1_000n, 61_000n);
  assert.equal(window.durationMs(), 60_000n);
  assert.equal(window.contains(1_000n), true);
  assert.equal(window.contains(60_999), true);
  assert.equal(window.contains(61_000n), false);
  assert.equal(new Window(-(2n ** 63n), 2n ** 63n - 1n).durationMs(), 2n ** 63n - 1n);
});

test('a batch held as columns reads like one held as rows', () => {
  const times = BigInt64Array.of(-2n, 3n);
  const amounts = BigInt64Array.of(5n, -6n);
  const columns = Events.fromColumns(['amount', 'user'], times, [amounts, ['a']]);
  assert.equal(columns.length, 2);
  assert.deepEqual(columns.values('amount'), [5n, -6n]);
  assert.ok(Array.isArray(columns.values('amount')), 'a plain array, not the typed one');
  assert.deepEqual(columns.values('user'), ['a', null], 'a short column reads as nulls');
  assert.deepEqual(columns.values('none'), [null, null]);
  assert.deepEqual(columns.timestamps(), [-2n, 3n]);
  columns.values('amount')[0] = 99n;
  assert.deepEqual(columns.values('amount'), [5n, -6n], 'values() is a copy');

  const output = columns.intoOutput();
  assert.deepEqual(output.rows.map((row) => [row.origin, row.timestamp, row.values]), [
    [0, -2n, [5n, 'a']],
    [1, 3n, [-6n, null]],
  ]);
  columns.withRow(4n, [1.5, 'b']);
  assert.deepEqual(columns.values('amount'), [5n, -6n, 1.5]);
  assert.deepEqual(columns.toColumns().timestamps, [-2n, 3n, 4n]);
  assert.deepEqual(amounts, BigInt64Array.of(5n, -6n), 'the host lists are not written');
});
