// Type-checked by check-types.mjs (never run): the SDK's adapters implement the interfaces that
// jco generates from the contracts they build against ('weir:operator/aggregate@0.2.0' and
// 'weir:operator/windows@0.3.0' and 'weir:operator/enrich@0.2.0' of wit/v0.3),
// and typed operators compile against weir-sdk.d.ts.

import type * as AggregateWit from 'weir:operator/aggregate@0.2.0';
import type * as EnrichWit from 'weir:operator/enrich@0.2.0';
import type * as WindowsWit from 'weir:operator/windows@0.3.0';

import {
  type AggregateExport,
  type WindowsExport,
  windowsOf,
  type EnrichExport,
  Events,
  exportAggregate,
  exportEnrich,
  OperatorError,
  type Output,
  plus,
  State,
  Window,
} from 'weir-sdk';
import { MemoryState } from 'weir-sdk/testing';

/** The functions of the generated `aggregate` interface. */
type AggregateInterface = Pick<typeof AggregateWit, 'add' | 'merge' | 'finish' | 'migrate'>;
/** The functions of the generated `windows` interface. */
type WindowsInterface = Pick<typeof WindowsWit, 'addWindows' | 'finishWindows'>;
/** The functions of the generated `enrich` interface. */
type EnrichInterface = Pick<typeof EnrichWit, 'process'>;

/** An aggregate adapter is the `aggregate` export componentize-js expects. */
export function aggregateConforms(adapter: AggregateExport): AggregateInterface {
  return adapter;
}

/** A windows adapter is the `windows` export componentize-js expects. */
export function windowsConform(adapter: WindowsExport): WindowsInterface {
  return adapter;
}

/** An enrich adapter is the `enrich` export componentize-js expects. */
export function enrichConforms(adapter: EnrichExport): EnrichInterface {
  return adapter;
}

/** A typed aggregate, exported the way an app.js does. */
export const aggregate: AggregateInterface = exportAggregate({
  add(state: State, batch: Events): void {
    let sum = state.get('sum', 0n);
    for (const amount of batch.values('amount')) {
      sum = plus(sum, amount) ?? null;
      if (sum === null) throw new OperatorError('event without a numeric `amount` field');
    }
    state.addInt('count', batch.length);
    state.put('sum', sum);
  },
  merge(target: State, source: State): void {
    target.addInt('count', source.getInt('count') ?? 0n);
  },
  finish(state: State, window: Window): Output {
    return new Map([
      ['count', state.getInt('count') ?? 0n],
      ['span', window.durationMs()],
    ]);
  },
});

/** The `windows` export build.mjs adds beside it. */
export const windows: WindowsInterface = windowsOf(exportAggregate({
  add: () => {},
  merge: () => {},
  finish: () => ({}),
}));

/** A typed enricher. */
export const enrich: EnrichInterface = exportEnrich({
  process(state, batch) {
    const output = batch.intoOutput();
    const key = output.addColumn('key');
    return output.retain((event) => {
      event.set(key, state.key());
      return event.timestamp >= 0n;
    });
  },
});

/** The testing helper hands out a State. */
export const tested: bigint | undefined = new MemoryState('k').state().getInt('count');
