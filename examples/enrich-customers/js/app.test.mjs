// Unit tests of app.js without a host (`node --test examples/enrich-customers/js/`),
// mirroring the tests of examples/enrich-customers/src/lib.rs.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import '../../../guest-sdk/js/register.mjs';

const { Events } = await import('weir-sdk');
const { MemoryState } = await import('weir-sdk/testing');
const { enrichCustomers } = await import('./app.js');

/** Orders of customer c1 with the given ids, at times 1, 2, ... */
function orders(ids) {
  return ids.reduce(
    (events, id, index) => events.withRow(BigInt(index + 1), ['c1', id]),
    new Events(['customer_id', 'order_id']),
  );
}

test('adds reference fields and drops duplicate orders', () => {
  const memory = new MemoryState('c1');
  memory.mapPut('reference', 'name', 'Ada');
  memory.mapPut('reference', 'tier', 'gold');
  let output = enrichCustomers.process(memory.state(), orders(['o1', 'o2', 'o1']));
  assert.deepEqual(output.fields, ['customer_id', 'order_id', 'customer_name', 'tier']);
  assert.deepEqual(output.rows.map((row) => row.origin), [0, 1]);
  assert.deepEqual(output.rows[1].values, ['c1', 'o2', 'Ada', 'gold']);

  // A later batch of the same customer repeats o2: dropped as well.
  output = enrichCustomers.process(memory.state(), orders(['o2', 'o3']));
  assert.equal(output.length, 1);
  assert.equal(output.rows[0].origin, 1);
});

test('unknown customers get defaults and events without order_id pass', () => {
  const memory = new MemoryState('c9');
  const batch = new Events(['customer_id']).withRow(1n, ['c9']).withRow(2n, ['c9']);
  const output = enrichCustomers.process(memory.state(), batch);
  assert.equal(output.length, 2);
  assert.deepEqual(output.rows[0].values, ['c9', 'unknown', 'none']);
});

test('int order ids are remembered by their decimal text', () => {
  const memory = new MemoryState('c1');
  const output = enrichCustomers.process(memory.state(), orders([7n, '7', 7.5, 7.5]));
  assert.deepEqual(output.rows.map((row) => row.origin), [0, 2, 3]);
  assert.deepEqual(memory.mapEntries('seen_orders'), ['7']);
});
