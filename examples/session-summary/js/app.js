// Summarises each session of a key: its event count, first and last event time. The
// JavaScript twin of examples/session-summary/src/lib.rs, with the same state and outputs.
//
// Build (from the workspace root, with a toolchain directory set up by `npm ci`):
//   node guest-sdk/js/build.mjs --toolchain <dir> --wit wit/v0.3 --world aggregator \
//     --source examples/session-summary/js/app.js \
//     --out target/weir-components/session-summary-js.wasm
//   target/debug/weir run examples/session-summary/js/pipeline.toml
//
// Each session's output has `events`, `first` and `last` (event times, ms since the epoch) and
// `duration_ms` (`last - first`), all ints. When sessions merge, their summaries combine.

import { exportAggregate } from 'weir-sdk';

/**
 * The smallest of the bigints `times`, ignoring `undefined`; `undefined` if there is none.
 * @param {(bigint | undefined)[]} times
 */
function min(times) {
  /** @type {bigint | undefined} */
  let least;
  for (let i = 0; i < times.length; i++) {
    const time = times[i];
    if (time !== undefined && (least === undefined || time < least)) least = time;
  }
  return least;
}

/**
 * The largest of the bigints `times`, ignoring `undefined`; `undefined` if there is none.
 * @param {(bigint | undefined)[]} times
 */
function max(times) {
  /** @type {bigint | undefined} */
  let most;
  for (let i = 0; i < times.length; i++) {
    const time = times[i];
    if (time !== undefined && (most === undefined || time > most)) most = time;
  }
  return most;
}

/**
 * Adds `events` events spanning `first..=last` to the summary in `state`.
 * @param {import('weir-sdk').State} state
 * @param {bigint | number} events
 * @param {bigint | undefined} first
 * @param {bigint | undefined} last
 */
function combine(state, events, first, last) {
  state.addInt('events', events);
  const earliest = min([first, state.getInt('first')]);
  if (earliest !== undefined) state.put('first', earliest);
  const latest = max([last, state.getInt('last')]);
  if (latest !== undefined) state.put('last', latest);
}

/** The session-summary aggregate. @type {import('weir-sdk').Aggregate} */
export const sessionSummary = {
  /** Adds the batch's event count and time span to the summary. */
  add(state, batch) {
    const times = batch.timestamps();
    combine(state, batch.length, min(times), max(times));
  },

  /** Adds the summary of `source` to that of `target`. */
  merge(target, source) {
    const events = source.getInt('events') ?? 0n;
    combine(target, events, source.getInt('first'), source.getInt('last'));
  },

  /** The session's `events`, `first`, `last` and `duration_ms`. */
  finish(state, window) {
    const first = state.getInt('first') ?? window.start;
    const last = state.getInt('last') ?? first;
    return { events: state.getInt('events') ?? 0n, first, last, duration_ms: last - first };
  },
};

export const aggregate = exportAggregate(sessionSummary);
