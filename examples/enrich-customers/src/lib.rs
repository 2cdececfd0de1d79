//! Joins orders with their customer's reference data and drops duplicate orders.
//!
//! Build the component and run the sample pipeline from the workspace root:
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 -p weir-example-enrich-customers
//! target/debug/weir run examples/enrich-customers/pipeline.toml
//! ```
//!
//! The component is `target/wasm32-wasip2/release/weir_example_enrich_customers.wasm`. The
//! pipeline is keyed by `customer_id`, and the host loads each customer's row of
//! `customers.jsonl` into that key's map `reference`. Every order comes out with two more
//! fields: `customer_name` (the reference `name`, or `"unknown"`) and `tier` (the reference
//! `tier`, or `"none"`). An order whose `order_id` this customer has already had (remembered in
//! the map `seen_orders`) is dropped.

use weir_sdk::{Enrich, Events, OutputEvents, State, Value};

/// The customer enricher.
pub struct EnrichCustomers;

impl Enrich for EnrichCustomers {
    fn process(state: &State, batch: Events) -> Result<OutputEvents, String> {
        let name = state
            .map_get("reference", "name")
            .unwrap_or_else(|| "unknown".into());
        let tier = state
            .map_get("reference", "tier")
            .unwrap_or_else(|| "none".into());
        let order_id = batch.column("order_id");
        let mut output = batch.into_output();
        let (name_column, tier_column) = (
            output.add_column("customer_name"),
            output.add_column("tier"),
        );
        output.rows.retain_mut(|event| {
            let id = order_id
                .and_then(|column| event.get(column))
                .and_then(Value::to_text);
            if let Some(id) = id {
                if state.map_get("seen_orders", &id).is_some() {
                    return false; // a duplicate
                }
                state.map_put("seen_orders", &id, true);
            }
            event.set(name_column, name.clone());
            event.set(tier_column, tier.clone());
            true
        });
        Ok(output)
    }
}

weir_sdk::export_enrich!(EnrichCustomers);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    fn orders(ids: &[&str]) -> Events {
        ids.iter().zip(1..).fold(
            Events::new(["customer_id", "order_id"]),
            |batch, (id, time)| batch.with_row(time, ["c1", id]),
        )
    }

    #[test]
    fn adds_reference_fields_and_drops_duplicate_orders() {
        let memory = MemoryState::new("c1");
        memory.map_put("reference", "name", "Ada");
        memory.map_put("reference", "tier", "gold");
        let output =
            EnrichCustomers::process(&memory.state(), orders(&["o1", "o2", "o1"])).unwrap();
        assert_eq!(
            output.fields,
            ["customer_id", "order_id", "customer_name", "tier"]
        );
        assert_eq!(
            output.rows.iter().map(|row| row.origin).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(
            output.rows[1].values,
            ["c1", "o2", "Ada", "gold"].map(Value::from)
        );

        // A later batch of the same customer repeats o2: dropped as well.
        let output = EnrichCustomers::process(&memory.state(), orders(&["o2", "o3"])).unwrap();
        assert_eq!(output.rows.len(), 1);
        assert_eq!(output.rows[0].origin, 1);
    }

    #[test]
    fn unknown_customers_get_defaults_and_events_without_order_id_pass() {
        let memory = MemoryState::new("c9");
        let batch = Events::new(["customer_id"])
            .with_row(1, ["c9"])
            .with_row(2, ["c9"]);
        let output = EnrichCustomers::process(&memory.state(), batch).unwrap();
        assert_eq!(output.rows.len(), 2);
        assert_eq!(
            output.rows[0].values,
            ["c9", "unknown", "none"].map(Value::from)
        );
    }
}
