// Tests of the adapters exportAggregate and exportEnrich, called the way the host calls them:
// with a WIT scope (MemoryScope) and WIT records, errors thrown with a `payload`. The `windows`
// adapter (contract 0.3) has its own tests in windows.test.mjs.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { hostAdd, MemoryState } from '../testing.js';
import {
  errorMessage,
  Events,
  exportAggregate,
  exportEnrich,
  OperatorError,
  OutputEvents,
} from '../weir-sdk.js';

const WINDOW = { start: 0n, end: 60_000n };

/** An aggregate counting events into `count`. */
const count = {
  add(state, batch) {
    state.addInt('count', batch.length);
  },
  merge(target, source) {
    target.addInt('count', source.getInt('count') ?? 0n);
  },
  finish(state, window) {
    return { count: state.getInt('count') ?? 0n, span: window.durationMs() };
  },
};

/** The error string a call threw, the way componentize-js reads it. */
function payloadOf(call) {
  try {
    call();
  } catch (error) {
    assert.ok(Object.hasOwn(error, 'payload'), 'the error carries a payload');
    return error.payload;
  }
  assert.fail('the call did not throw');
}

test('an aggregate adapter adds, merges and finishes', () => {
  const aggregate = exportAggregate(count);
  const [target, source] = [new MemoryState('k'), new MemoryState('k')];
  hostAdd(aggregate, target, new Events(['a']).withRow(1n, [1n]).withRow(2n, [2n]));
  hostAdd(aggregate, source, new Events(['a']).withRow(3n, [3n]));
  aggregate.merge(target.scope, source.scope);
  assert.deepEqual(aggregate.finish(target.scope, WINDOW), [
    { name: 'count', value: { tag: 'int', val: 3n } },
    { name: 'span', value: { tag: 'int', val: 60_000n } },
  ]);
  assert.equal(aggregate.migrate(target.scope, '0.9.0'), undefined); // the default does nothing
});

test('finish may return a Map or pairs, in order', () => {
  const fields = (output) =>
    exportAggregate({ ...count, finish: () => output }).finish(new MemoryState('k').scope, WINDOW);
  const expected = [
    { name: 'b', value: { tag: 'float', val: 1 } },
    { name: 'a', value: { tag: 'null' } },
  ];
  assert.deepEqual(fields({ b: 1, a: null }), expected);
  assert.deepEqual(fields(new Map([['b', 1], ['a', null]])), expected);
  assert.deepEqual(fields([['b', 1], ['a', undefined]]), expected);
  assert.deepEqual(fields(new Set([new Set(['b', 1]), ['a', null]])), expected, 'iterable pairs');
  assert.match(payloadOf(() => fields([null])), /^TypeError: /);
  assert.match(payloadOf(() => fields(undefined)), /^TypeError: finish must return an object or a Map/);
  assert.match(payloadOf(() => fields({ x: {} })), /^TypeError: cannot store an object/);
});

test('add reads the named values sent and returns the changes; maps go to the scope', () => {
  const aggregate = exportAggregate({
    ...count,
    add(state, batch) {
      state.put('last', batch.values('a').at(-1));
      state.remove('gone');
      state.put('seen', state.get('seen', 0n) + 1n);
      state.mapPut('users', state.key(), true);
    },
  });
  const memory = new MemoryState('k');
  const values = [
    { name: 'gone', value: { tag: 'int', val: 1n } },
    { name: 'seen', value: { tag: 'int', val: 41n } },
  ];
  const batch = new Events(['a']).withRow(1n, ['x']).withRow(-5n, ['y']).toColumns();
  assert.deepEqual(batch, {
    fields: ['a'],
    timestamps: [1n, -5n],
    values: [{ tag: 'text', val: 'x' }, { tag: 'text', val: 'y' }],
  });
  assert.deepEqual(aggregate.add(memory.scope, values, batch), [
    { name: 'last', value: { tag: 'text', val: 'y' } },
    { name: 'gone', value: undefined },
    { name: 'seen', value: { tag: 'int', val: 42n } },
  ]);
  assert.equal(memory.get('seen'), undefined, 'named values are changed by the host, not the call');
  assert.equal(memory.mapGet('users', 'k'), true, 'maps are written through the scope');
});

test('add reads a batch whose value lists are short as nulls', () => {
  const seen = [];
  const aggregate = exportAggregate({ ...count, add: (state, batch) => seen.push(batch.values('b')) });
  const batch = { fields: ['a', 'b'], timestamps: [1n, 2n], values: [{ tag: 'int', val: 1n }] };
  aggregate.add(new MemoryState('k').scope, [], batch);
  assert.deepEqual(seen, [[null, null]]);
});

test('bytes read from or written to the named values are the operator\'s own copy', () => {
  const aggregate = exportAggregate({
    ...count,
    add(state) {
      const read = state.get('blob');
      read[0] = 9;
      const written = Uint8Array.of(1, 2);
      state.put('copy', written);
      written[0] = 7;
      state.put('again', state.get('blob'));
    },
  });
  const values = [{ name: 'blob', value: { tag: 'bytes', val: Uint8Array.of(5) } }];
  assert.deepEqual(aggregate.add(new MemoryState('k').scope, values, new Events([]).toColumns()), [
    { name: 'copy', value: { tag: 'bytes', val: Uint8Array.of(1, 2) } },
    { name: 'again', value: { tag: 'bytes', val: Uint8Array.of(5) } },
  ]);
  assert.deepEqual(values[0].value.val, Uint8Array.of(5));
});

test('a state name must be a string', () => {
  const aggregate = exportAggregate({ ...count, add: (state) => state.put(7, 1n) });
  assert.match(payloadOf(() => hostAdd(aggregate, new MemoryState('k'), new Events([]))), /^TypeError: a name is a string, not the number 7/);
});

test('migrate runs when the operator has one', () => {
  const seen = [];
  const aggregate = exportAggregate({ ...count, migrate: (state, from) => seen.push([state.key(), from]) });
  aggregate.migrate(new MemoryState('k').scope, '1.0.0');
  assert.deepEqual(seen, [['k', '1.0.0']]);
});

test('thrown values become the error string', () => {
  const failing = (error) =>
    exportAggregate({
      ...count,
      add() {
        throw error;
      },
    });
  const add = (error) => payloadOf(() => hostAdd(failing(error), new MemoryState('k'), new Events([])));
  assert.equal(add(new OperatorError('event without a numeric `amount` field')), 'event without a numeric `amount` field');
  assert.equal(add('plain message'), 'plain message');
  assert.match(add(new Error('boom')), /^Error: boom \(at .+:\d+:\d+\)+$/);
  assert.match(add(new RangeError('far')), /^RangeError: far \(at /);
  assert.equal(add(42), 'Error: 42');
  const stackless = new TypeError('no stack');
  stackless.stack = undefined;
  assert.equal(add(stackless), 'TypeError: no stack');
});

test('errorMessage reads SpiderMonkey stacks too', () => {
  const error = new Error('boom from js');
  error.stack = 'add@app.js:12:11\nguard@app.js:3:5\n';
  assert.equal(errorMessage(error), 'Error: boom from js (at add@app.js:12:11)');
});

test('an operator must have its functions', () => {
  assert.throws(() => exportAggregate({ add() {}, merge() {} }), /no function `finish`/);
  assert.throws(() => exportEnrich({}), /no function `process`/);
  assert.throws(() => exportAggregate(undefined), TypeError);
});

test('an enrich adapter returns WIT output events', () => {
  const enrich = exportEnrich({
    process(state, batch) {
      const output = batch.intoOutput();
      const key = output.addColumn('key');
      for (const event of output.rows) event.set(key, state.key());
      return output;
    },
  });
  const batch = new Events(['a']).withRow(1n, [1n]).toColumns();
  assert.deepEqual(enrich.process(new MemoryState('k').scope, batch), {
    fields: ['a', 'key'],
    rows: [{ origin: 0, timestamp: 1n, values: [{ tag: 'int', val: 1n }, { tag: 'text', val: 'k' }] }],
  });
});

test('an enricher reads its batch field after field as rows, short lists as nulls', () => {
  const seen = [];
  const enrich = exportEnrich({
    process(state, batch) {
      for (const event of batch) seen.push([event.timestamp, event.get(0), event.get(1)]);
      return batch;
    },
  });
  const scope = new MemoryState('k').scope;
  const batch = new Events(['a', 'b'])
    .withRow(1n, [1n, 'x'])
    .withRow(2n, [2.5, null])
    .withRow(3n, [null, 'z'])
    .toColumns();
  const output = enrich.process(scope, batch);
  assert.deepEqual(seen, [[1n, 1n, 'x'], [2n, 2.5, null], [3n, null, 'z']]);
  assert.deepEqual(output.rows.map((row) => [row.origin, row.timestamp, row.values]), [
    [0, 1n, [{ tag: 'int', val: 1n }, { tag: 'text', val: 'x' }]],
    [1, 2n, [{ tag: 'float', val: 2.5 }, { tag: 'null' }]],
    [2, 3n, [{ tag: 'null' }, { tag: 'text', val: 'z' }]],
  ]);
  // A crafted batch whose values stop short: the missing ones are nulls, nothing is invented.
  seen.length = 0;
  const short = { fields: ['a', 'b'], timestamps: [1n, 2n], values: [{ tag: 'int', val: 7n }] };
  const written = enrich.process(scope, short);
  assert.deepEqual(seen, [[1n, 7n, null], [2n, null, null]]);
  assert.deepEqual(written.rows.map((row) => row.values), [
    [{ tag: 'int', val: 7n }, { tag: 'null' }],
    [{ tag: 'null' }, { tag: 'null' }],
  ]);
});

test('an enricher may return its batch, or must return output events', () => {
  const returning = (value) => exportEnrich({ process: (state, batch) => value ?? batch });
  const scope = new MemoryState('k').scope;
  const batch = new Events(['a']).withRow(1n, [true]).toColumns();
  assert.deepEqual(returning().process(scope, batch).rows[0].values, [{ tag: 'boolean', val: true }]);
  assert.deepEqual(returning(new OutputEvents([])).process(scope, batch), { fields: [], rows: [] });
  assert.match(payloadOf(() => returning([]).process(scope, batch)), /^TypeError: process must return OutputEvents/);
});
