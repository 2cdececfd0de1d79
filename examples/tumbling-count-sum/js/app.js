// Counts events and sums their `amount` per key and tumbling window: the JavaScript twin of
// examples/tumbling-count-sum/src/lib.rs, with the same state, outputs and errors.
//
// Build (from the workspace root, with a toolchain directory set up by `npm ci`):
//   node guest-sdk/js/build.mjs --toolchain <dir> --wit wit/v0.3 --world aggregator \
//     --source examples/tumbling-count-sum/js/app.js \
//     --out target/weir-components/tumbling-count-sum-js.wasm
//   target/debug/weir run examples/tumbling-count-sum/js/pipeline.toml
//
// Each window's output has `count` (an int) and `sum`: an int while every `amount` was an int,
// a float once any was a float (or once an int sum overflowed). An event lacking a numeric
// `amount` goes to the dead-letter output (its batch is refused, and the host retries the
// events one at a time).

import { exportAggregate, OperatorError, plus, plusAll } from 'weir-sdk';

/** The error of a batch with an event lacking a numeric `amount`. */
export const NOT_NUMERIC = 'event without a numeric `amount` field';

/** The count-and-sum aggregate. @type {import('weir-sdk').Aggregate} */
export const countSum = {
  /** Adds the batch's events to the count and their amounts to the sum. */
  add(state, batch) {
    const sum = plusAll(state.get('sum', 0n), batch.values('amount')); // one loop over the batch
    if (sum === undefined) throw new OperatorError(NOT_NUMERIC);
    state.addInt('count', batch.length);
    state.put('sum', sum);
  },

  /** Adds the count and sum of `source` to those of `target`. */
  merge(target, source) {
    const count = source.getInt('count');
    const sum = source.get('sum');
    if (count === undefined || sum === undefined) return; // an empty source
    const total = plus(target.get('sum', 0n), sum);
    if (total === undefined) throw new OperatorError('state `sum` is not a number');
    target.put('sum', total);
    target.addInt('count', count);
  },

  /** The window's `count` and `sum`. */
  finish(state) {
    return { count: state.getInt('count') ?? 0n, sum: state.get('sum', 0n) };
  },
};

export const aggregate = exportAggregate(countSum);
