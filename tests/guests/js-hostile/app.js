// Test fixture: a JavaScript aggregate whose `add` misbehaves on demand, by the `action` field
// of the batch's events: "raise" throws `new Error("boom from js")`, "spin" loops forever,
// "hog" allocates 1 MiB ArrayBuffers without bound; any other action (or none) counts the
// events into `count`, which `finish` returns.
//
// Build (from the workspace root) and run its small pipeline:
//   node guest-sdk/js/build.mjs --toolchain <dir> --wit wit/v0.3 --world aggregator \
//     --source tests/guests/js-hostile/app.js --out target/weir-components/js-hostile.wasm
//   target/debug/weir run --fresh tests/guests/js-hostile/pipeline.toml

import { exportAggregate } from 'weir-sdk';

/** Loops forever; only the host's call timeout ends it. */
function spin() {
  for (;;) {
    // Nothing: burn the call's time.
  }
}

/** Keeps 1 MiB ArrayBuffers until the memory runs out. */
function hog() {
  const hoard = [];
  for (;;) hoard.push(new ArrayBuffer(1 << 20));
}

/** The hostile aggregate. @type {import('weir-sdk').Aggregate} */
export const hostile = {
  /** Misbehaves as the events' `action` says, or counts them. */
  add(state, batch) {
    for (const action of batch.values('action')) {
      if (action === 'raise') throw new Error('boom from js');
      if (action === 'spin') spin();
      if (action === 'hog') hog();
    }
    state.addInt('count', batch.length);
  },

  /** Adds the count of `source` to that of `target`. */
  merge(target, source) {
    target.addInt('count', source.getInt('count') ?? 0n);
  },

  /** The window's `count`. */
  finish(state) {
    return { count: state.getInt('count') ?? 0n };
  },
};

export const aggregate = exportAggregate(hostile);
