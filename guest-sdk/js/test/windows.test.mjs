// Tests of the `windows` adapter (contract 0.3: many windows per call, no scope), called the
// way the host calls it: flat WIT records, typed arrays for the lists of numbers (as
// componentize-js lifts them), names as indexes into the call's names.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MemoryState } from '../testing.js';
import { Events, exportAggregate, OperatorError, plus, toWit, windowsOf } from '../weir-sdk.js';

/** The count-and-sum of examples/tumbling-count-sum/js, as an operator. */
const countSum = {
  add(state, batch) {
    let sum = state.get('sum', 0n);
    for (const amount of batch.values('amount')) {
      sum = plus(sum, amount);
      if (sum === undefined) throw new OperatorError('event without a numeric `amount` field');
    }
    state.addInt('count', batch.length);
    state.put('sum', sum);
  },
  merge() {},
  finish(state, window) {
    return { count: state.getInt('count') ?? 0n, sum: state.get('sum', 0n), start: window.start };
  },
};

/** The kind of list a field's values cross in, as the host chooses it. */
function kindOf(values) {
  if (values.every((value) => typeof value === 'bigint')) return 'ints';
  if (values.every((value) => typeof value === 'number')) return 'floats';
  return 'values';
}

/**
 * The `window-batches` record of `windows`, each `{ values: {name: value}, fields: {name:
 * [value per event]}, times: [bigint] }`, built the way the host builds it.
 */
function windowBatches(windows) {
  const names = new Set();
  for (const window of windows) {
    for (const name of [...Object.keys(window.values), ...Object.keys(window.fields)]) names.add(name);
  }
  const sorted = [...names].sort();
  const at = (name) => sorted.indexOf(name);
  const record = { names: sorted, counts: [], values: [], fields: [], timestamps: [], kinds: [] };
  const [ints, floats, columns] = [[], [], []];
  for (const window of windows) {
    const values = Object.entries(window.values);
    const fields = Object.entries(window.fields);
    record.counts.push({ values: values.length, fields: fields.length, events: window.times.length });
    for (const [name, value] of values) record.values.push({ name: at(name), value: toWit(value) });
    record.timestamps.push(...window.times);
    for (const [name, column] of fields) {
      record.fields.push(at(name));
      const kind = kindOf(column);
      record.kinds.push(kind);
      if (kind === 'ints') ints.push(...column);
      else if (kind === 'floats') floats.push(...column);
      else columns.push(...column.map(toWit));
    }
  }
  return {
    ...record,
    fields: Uint32Array.from(record.fields),
    timestamps: BigInt64Array.from(record.timestamps),
    ints: BigInt64Array.from(ints),
    floats: Float64Array.from(floats),
    columns,
  };
}

/** The changes of an `added-windows` answer, per window, as `{name: value}` (null: removed). */
function changesByWindow(batches, added) {
  const names = [...batches.names, ...added.newNames];
  let at = 0;
  return Array.from(added.changeCounts, (count) => {
    const changes = added.changes.slice(at, (at += count));
    return Object.fromEntries(changes.map(({ name, value }) => [names[name], value ?? null]));
  });
}

test('a call carrying many windows adds each as add would for it alone', () => {
  const windows = [
    { values: { count: 3n, sum: -7n }, fields: { user: ['u', 'u'], amount: [-3n, 4n] }, times: [-1000n, 5n] },
    { values: {}, fields: { user: ['v'], amount: [1.5] }, times: [9n] },
    { values: {}, fields: { user: ['w', 'w'] }, times: [1n, 2n] },
    { values: { sum: 1n }, fields: { amount: [1n, 2.5] }, times: [3n, 4n] },
    { values: {}, fields: { amount: [1n, true] }, times: [3n, 4n] },
  ];
  const batches = windowBatches(windows);
  const added = windowsOf(exportAggregate(countSum)).addWindows(batches);
  assert.deepEqual(added.outcomes, ['done', 'done', 'failed', 'done', 'failed']);
  assert.ok(added.changeCounts instanceof Uint32Array);
  assert.deepEqual(changesByWindow(batches, added), [
    { count: toWit(5n), sum: toWit(-6n) },
    { count: toWit(1n), sum: toWit(1.5) },
    {},
    { count: toWit(2n), sum: toWit(4.5) },
    {},
  ]);
  assert.deepEqual(added.newNames, []);
});

test('names the call lacks come back as new names, each once', () => {
  const operator = {
    ...countSum,
    add(state, batch) {
      state.put('first', batch.timestamps()[0]);
      state.put('amount', null);
    },
  };
  const batches = windowBatches([
    { values: {}, fields: { amount: [1n] }, times: [7n] },
    { values: {}, fields: { amount: [2n] }, times: [8n] },
  ]);
  const added = windowsOf(exportAggregate(operator)).addWindows(batches);
  assert.deepEqual(added.newNames, ['first']);
  assert.deepEqual(added.changes, [
    { name: 1, value: toWit(7n) },
    { name: 0, value: toWit(null) },
    { name: 1, value: toWit(8n) },
    { name: 0, value: toWit(null) },
  ]);
});

test('a window that asks for a map or its key needs the scope, and changes nothing', () => {
  const asks = (use) => ({
    ...countSum,
    add(state, batch) {
      if (batch.values('amount')[0] === 2n) use(state);
      state.addInt('count', 1);
    },
  });
  const uses = [
    (state) => state.key(),
    (state) => state.mapGet('m', 'e'),
    (state) => state.mapPut('m', 'e', 1n),
    (state) => state.mapRemove('m', 'e'),
    (state) => state.mapLen('m'),
    (state) => state.mapEntries('m'),
  ];
  const batches = windowBatches([1n, 2n, 3n].map((amount) => ({ values: {}, fields: { amount: [amount] }, times: [0n] })));
  for (const use of uses) {
    const added = windowsOf(exportAggregate(asks(use))).addWindows(batches);
    assert.deepEqual(added.outcomes, ['done', 'needs-scope', 'done'], String(use));
    assert.deepEqual(Array.from(added.changeCounts), [1, 0, 1]);
  }
  const throwing = asks((state) => {
    state.key();
    throw new Error('after the key');
  });
  assert.deepEqual(windowsOf(exportAggregate(throwing)).addWindows(batches).outcomes, ['done', 'needs-scope', 'done']);
});

test('values missing from short lists are nulls', () => {
  const seen = [];
  const operator = { ...countSum, add: (state, batch) => seen.push([batch.values('a'), batch.values('b')]) };
  const batches = {
    names: ['a', 'b'],
    counts: [{ values: 0, fields: 2, events: 2 }],
    values: [],
    fields: Uint32Array.of(0, 1),
    timestamps: BigInt64Array.of(1n, 2n),
    kinds: ['values'],
    ints: BigInt64Array.of(),
    floats: Float64Array.of(),
    columns: [toWit('x')],
  };
  assert.deepEqual(windowsOf(exportAggregate(operator)).addWindows(batches).outcomes, ['done']);
  assert.deepEqual(seen, [[['x', null], [null, null]]]);
});

test('a crafted call reads only what its lists hold, and answers every window', () => {
  const seen = [];
  const operator = {
    ...countSum,
    add(state, batch) {
      seen.push([batch.fields, batch.fields.map((field) => batch.values(field)), batch.timestamps()]);
      state.put('n', BigInt(batch.length));
    },
  };
  const crafted = {
    names: ['a'],
    // Counts far beyond the lists, a name index past the names, a kind that is none.
    counts: [
      { values: 5, fields: 3, events: 4_000_000_000 },
      { values: 0, fields: 1, events: 1 },
    ],
    values: [{ name: 99, value: toWit(1n) }],
    fields: Uint32Array.of(0, 7),
    timestamps: BigInt64Array.of(1n),
    kinds: ['bogus'],
    ints: BigInt64Array.of(),
    floats: Float64Array.of(),
    columns: [],
  };
  const added = windowsOf(exportAggregate(operator)).addWindows(crafted);
  assert.deepEqual(added.outcomes, ['done', 'done']);
  // The first window holds the one event and the two field names there are (the second
  // past the names: ''), their values null; the second window finds the lists used up.
  assert.deepEqual(seen, [
    [['a', ''], [[null], [null]], [1n]],
    [[], [], []],
  ]);
  assert.deepEqual(changesByWindow(crafted, added), [{ n: toWit(1n) }, { n: toWit(0n) }]);
});

test('a window held as columns reads, and changes, as rows too', () => {
  let rows;
  const operator = {
    ...countSum,
    add(state, batch) {
      const amount = batch.column('amount');
      const doubled = batch.addColumn('doubled');
      for (const event of batch) event.set(doubled, event.get(amount) * 2n);
      rows = batch.rows.map((event) => [event.timestamp, ...event.values]);
      state.put('doubled', batch.values('doubled').reduce((a, b) => a + b));
    },
  };
  const batches = windowBatches([{ values: {}, fields: { amount: [2n, -3n] }, times: [-1n, 1n] }]);
  const added = windowsOf(exportAggregate(operator)).addWindows(batches);
  assert.deepEqual(rows, [
    [-1n, 2n, 4n],
    [1n, -3n, -6n],
  ]);
  assert.deepEqual(changesByWindow(batches, added), [{ doubled: toWit(-2n) }]);
});

test('finish-windows produces each window output, or fails it alone', () => {
  const operator = {
    ...countSum,
    finish(state, window) {
      if (state.getInt('count') === 13n) throw new Error('unlucky');
      return countSum.finish(state, window);
    },
  };
  const states = {
    names: ['count', 'sum'],
    valueCounts: Uint32Array.of(2, 1, 0),
    values: [
      { name: 0, value: toWit(2n) },
      { name: 1, value: toWit(-2.5) },
      { name: 0, value: toWit(13n) },
    ],
    windows: [
      { start: -60_000n, end: 0n },
      { start: 0n, end: 10n },
      { start: 10n, end: 20n },
    ],
  };
  const finished = windowsOf(exportAggregate(operator)).finishWindows(states);
  assert.deepEqual(finished.outcomes, ['done', 'failed', 'done']);
  assert.deepEqual(Array.from(finished.fieldCounts), [3, 0, 3]);
  assert.deepEqual(finished.newNames, ['start']);
  assert.deepEqual(finished.fields, [
    { name: 0, value: toWit(2n) },
    { name: 1, value: toWit(-2.5) },
    { name: 2, value: toWit(-60_000n) },
    { name: 0, value: toWit(0n) },
    { name: 1, value: toWit(0n) },
    { name: 2, value: toWit(10n) },
  ]);
  const bad = exportAggregate({ ...countSum, finish: () => ({ x: {} }) });
  assert.deepEqual(windowsOf(bad).finishWindows(states).outcomes, ['failed', 'failed', 'failed']);
  const keyed = exportAggregate({ ...countSum, finish: (state) => ({ key: state.key() }) });
  assert.deepEqual(windowsOf(keyed).finishWindows(states).outcomes, ['needs-scope', 'needs-scope', 'needs-scope']);
});

test('windows come only from an aggregate adapter', () => {
  assert.throws(() => windowsOf({ add() {}, merge() {}, finish() {}, migrate() {} }), /not made by exportAggregate/);
  assert.throws(() => windowsOf(undefined), /not made by exportAggregate/);
});

/** A small deterministic random source (xorshift), so a failure can be replayed. */
function random(seed) {
  let x = seed;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

test('many random windows: one call gives what add gives window by window', () => {
  const amounts = [() => 1n, () => -(2n ** 62n), () => 2n ** 62n, () => 0.25, () => null, () => 'x'];
  for (let seed = 1; seed <= 50; seed++) {
    const next = random(seed);
    const windows = Array.from({ length: 1 + next(8) }, () => {
      const events = next(5);
      const kind = next(amounts.length);
      const amount = () => amounts[next(3) === 0 ? next(amounts.length) : kind]();
      const values = next(2) === 0 ? {} : { count: BigInt(next(9)), sum: next(2) === 0 ? 1n : 0.5 };
      return {
        values,
        fields: { amount: Array.from({ length: events }, amount) },
        times: Array.from({ length: events }, () => BigInt(next(1000) - 500)),
      };
    });
    const batches = windowBatches(windows);
    const added = windowsOf(exportAggregate(countSum)).addWindows(batches);
    const byWindow = changesByWindow(batches, added);
    windows.forEach((window, index) => {
      // The reference: the operator itself, on a batch of rows and a state in memory.
      const memory = new MemoryState('k');
      for (const [name, value] of Object.entries(window.values)) memory.put(name, value);
      const rows = window.times.map((time, i) => [time, [window.fields.amount[i]]]);
      const events = rows.reduce((batch, [time, values]) => batch.withRow(time, values), new Events(['amount']));
      let expected = 'done';
      try {
        countSum.add(memory.state(), events);
      } catch {
        expected = 'failed';
      }
      const where = `seed ${seed}, window ${index}`;
      assert.equal(added.outcomes[index], expected, where);
      if (expected === 'done') {
        const state = new Map(Object.entries(window.values).map(([name, value]) => [name, toWit(value)]));
        for (const [name, value] of Object.entries(byWindow[index])) {
          if (value === null) state.delete(name);
          else state.set(name, value);
        }
        const reference = new Map(memory.scope.namedValues().map(({ name, value }) => [name, value]));
        assert.deepEqual(state, reference, where);
      } else {
        assert.deepEqual(byWindow[index], {}, where);
      }
    });
  }
});
