// Tests of the value conversions and helpers of weir-sdk.js (mirrors guest-sdk/src/value.rs).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  asFloat,
  asInt,
  fromWit,
  I64_MAX,
  I64_MIN,
  isNumber,
  kindOf,
  plus,
  plusAll,
  toText,
  toWit,
} from '../weir-sdk.js';

test('JS values map to WIT values and back', () => {
  const bytes = new Uint8Array([1, 2, 3]);
  const cases = [
    [null, { tag: 'null' }],
    [true, { tag: 'boolean', val: true }],
    [5n, { tag: 'int', val: 5n }],
    [5, { tag: 'float', val: 5 }],
    [-0.5, { tag: 'float', val: -0.5 }],
    ['hi', { tag: 'text', val: 'hi' }],
    [bytes, { tag: 'bytes', val: bytes }],
  ];
  for (const [value, wit] of cases) {
    assert.deepEqual(toWit(value), wit);
    assert.deepEqual(fromWit(wit), value);
  }
  assert.deepEqual(toWit(undefined), { tag: 'null' });
  assert.deepEqual(toWit(new Uint8Array([7]).buffer), { tag: 'bytes', val: new Uint8Array([7]) });
  assert.equal(fromWit(undefined), null);
});

test('ints must fit in 64 bits, and other values are refused', () => {
  assert.deepEqual(toWit(I64_MAX), { tag: 'int', val: 9223372036854775807n });
  assert.deepEqual(toWit(I64_MIN), { tag: 'int', val: -9223372036854775808n });
  assert.throws(() => toWit(I64_MAX + 1n), {
    name: 'RangeError',
    message: 'the int 9223372036854775808 is outside the range of a 64-bit signed integer (int)',
  });
  assert.throws(() => toWit(I64_MIN - 1n), RangeError);
  for (const bad of [{}, [1], new Date(0), Symbol('s'), () => 1, new Int32Array(1)]) {
    assert.throws(() => toWit(bad), TypeError);
  }
});

test('kinds and typed reads', () => {
  assert.deepEqual(
    [null, false, 1n, 1.5, 't', new Uint8Array()].map(kindOf),
    ['null', 'boolean', 'int', 'float', 'text', 'bytes'],
  );
  assert.equal(isNumber(1n) && isNumber(1.5), true);
  assert.equal(isNumber('1'), false);
  assert.equal(asInt(3n), 3n);
  assert.equal(asInt(3), undefined);
  assert.equal(asFloat(3n), 3);
  assert.equal(asFloat(1.5), 1.5);
  assert.equal(asFloat('1.5'), undefined);
  assert.equal(asFloat(2n ** 53n + 1n), 2 ** 53); // rounded, like Rust's `as f64`
});

test('toText names ints and text only', () => {
  assert.equal(toText(42n), '42');
  assert.equal(toText('42'), '42');
  assert.equal(toText(4.2), undefined);
  assert.equal(toText(null), undefined);
});

test('plusAll is a loop of plus over the values', () => {
  assert.equal(plusAll(1n, [2n, 3n]), 6n);
  assert.equal(plusAll(1n, BigInt64Array.of(2n, -3n)), 0n);
  assert.equal(plusAll(I64_MAX, [1n, -1n]), 2 ** 63, 'an overflow turns the sum into a float');
  assert.equal(plusAll(0n, [1n, 0.5]), 1.5);
  assert.equal(plusAll(0n, [1n, null, 2n]), undefined);
  assert.equal(plusAll('x', [1n]), undefined);
  assert.equal(plusAll('x', []), 'x', 'start itself when there is nothing to add');
  assert.equal(plusAll(0n, new Set([1n, 2n])), 3n, 'any iterable');
  assert.equal(plusAll(0n, (function* () { yield 4n; yield 0.5; })()), 4.5);
  assert.equal(plusAll(5n, [3n, 0.25, 7n, -2n, 0.5]), 13.75);
});

test('plus keeps ints exact until a float arrives or the sum overflows', () => {
  assert.equal(plus(2n, 3n), 5n);
  assert.equal(plus(2n, 0.5), 2.5);
  assert.equal(plus(0.5, 2n), 2.5);
  assert.equal(plus(2n, '3'), undefined);
  assert.equal(plus(null, 1n), undefined);
  assert.equal(plus(I64_MAX, 0n), I64_MAX);
  const overflow = plus(I64_MAX, 1n);
  assert.equal(typeof overflow, 'number');
  assert.equal(overflow, 9223372036854775808);
  assert.equal(plus(I64_MIN, -1n), -9223372036854775808);
  assert.equal(plus(I64_MAX, I64_MAX), 2 ** 64); // both rounded to 2^63 first, as in Rust
});
