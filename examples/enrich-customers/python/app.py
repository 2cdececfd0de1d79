"""Joins orders with their customer's reference data and drops duplicate orders. The Python
twin of `examples/enrich-customers/src/lib.rs`, with the same results.

Build the component and run the sample pipeline from the workspace root (``weir build
examples/enrich-customers/python`` runs the same componentize-py command)::

    componentize-py -d wit/v0.3 -w enricher componentize -p guest-sdk/python \
        -p examples/enrich-customers/python app \
        -o target/weir-components/enrich-customers-python.wasm
    target/debug/weir run examples/enrich-customers/python/pipeline.toml

The pipeline is keyed by `customer_id`, and the host loads each customer's row of
`customers.jsonl` into that key's map `reference`. Every order comes out with two more fields:
`customer_name` (the reference `name`, or ``"unknown"``) and `tier` (the reference `tier`, or
``"none"``). An order whose `order_id` this customer has already had (remembered in the map
`seen_orders`) is dropped.
"""

import weir_sdk
from weir_sdk import Events, OutputEvents, State, to_text


class EnrichCustomers(weir_sdk.Enrich):
    """The customer enricher."""

    def process(self, state: State, batch: Events) -> OutputEvents:
        name = state.map_get("reference", "name", "unknown")
        tier = state.map_get("reference", "tier", "none")
        order_id = batch.column("order_id")
        output = batch.into_output()
        name_column = output.add_column("customer_name")
        tier_column = output.add_column("tier")

        def keep(event: weir_sdk.OutputEvent) -> bool:
            order = to_text(event.get(order_id))
            if order is not None:
                if state.map_get("seen_orders", order) is not None:
                    return False  # a duplicate
                state.map_put("seen_orders", order, True)
            event.set(name_column, name)
            event.set(tier_column, tier)
            return True

        output.retain(keep)
        return output


Enrich = weir_sdk.export_enrich(EnrichCustomers)
