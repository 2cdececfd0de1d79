// Joins orders with their customer's reference data and drops duplicate orders. The
// JavaScript twin of examples/enrich-customers/src/lib.rs, with the same state and outputs.
//
// Build (from the workspace root, with a toolchain directory set up by `npm ci`):
//   node guest-sdk/js/build.mjs --toolchain <dir> --wit wit/v0.3 --world enricher \
//     --source examples/enrich-customers/js/app.js \
//     --out target/weir-components/enrich-customers-js.wasm
//   target/debug/weir run examples/enrich-customers/js/pipeline.toml
//
// The pipeline is keyed by `customer_id`, and the host loads each customer's row of
// customers.jsonl into that key's map `reference`. Every order comes out with two more fields:
// `customer_name` (the reference `name`, or "unknown") and `tier` (the reference `tier`, or
// "none"). An order whose `order_id` this customer has already had (remembered in the map
// `seen_orders`) is dropped.

import { exportEnrich, toText } from 'weir-sdk';

/** The customer enricher. @type {import('weir-sdk').Enrich} */
export const enrichCustomers = {
  /** Adds the customer's name and tier to each new order; drops repeated orders. */
  process(state, batch) {
    const name = state.mapGet('reference', 'name', 'unknown');
    const tier = state.mapGet('reference', 'tier', 'none');
    const orderId = batch.column('order_id');
    const output = batch.intoOutput();
    const nameColumn = output.addColumn('customer_name');
    const tierColumn = output.addColumn('tier');
    return output.retain((event) => {
      const id = orderId < 0 ? undefined : toText(event.get(orderId));
      if (id !== undefined) {
        if (state.mapGet('seen_orders', id) !== undefined) return false; // a duplicate
        state.mapPut('seen_orders', id, true);
      }
      event.set(nameColumn, name);
      event.set(tierColumn, tier);
      return true;
    });
  },
};

export const enrich = exportEnrich(enrichCustomers);
