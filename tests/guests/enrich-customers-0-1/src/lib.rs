//! Test fixture: the customer enricher of `examples/enrich-customers`, built against contract
//! 0.1 (`wit/operator.wit`) with `wit-bindgen` directly, as components were built before 0.2:
//! one `list<value>` per event, one host call per state read and write.
//!
//! The end-to-end tests (`old_contracts.rs`; rollouts and restarts across contracts) run it beside
//! its twin, which the SDK builds against 0.3, and expect the same output, so the host's 0.1 paths
//! stay tested; the half that works through the scope, the same against 0.1 and 0.2, is
//! `../old-contracts/enrich.rs`. Like the hostile guests it misbehaves on cue: `process` names an
//! origin outside its batch for an event with a `bad` field.

mod bindings {
    #![allow(unsafe_code, missing_docs, clippy::all)]

    wit_bindgen::generate!({
        path: "../../../wit",
        world: "weir:operator/enricher@0.1.0",
    });
}

use bindings::exports::weir::operator::enrich::{Events, Guest, OutputEvents, Scope};
use bindings::weir::operator::types::{Event, OutputEvent, Value};

/// The operator.
pub struct EnrichCustomers;

/// The index of `name` in `fields`, appending it if absent.
fn add_column(fields: &mut Vec<String>, name: &str) -> usize {
    fields
        .iter()
        .position(|field| field == name)
        .unwrap_or_else(|| {
            fields.push(name.to_owned());
            fields.len() - 1
        })
}

include!("../../old-contracts/enrich.rs");

impl Guest for EnrichCustomers {
    fn process(state: &Scope, batch: Events) -> Result<OutputEvents, String> {
        let (name, tier) = customer(state);
        let column = |name: &str| batch.fields.iter().position(|field| field == name);
        let (order_id, bad) = (column("order_id"), column("bad"));
        let outside = batch.rows.len() as u32 + 100;
        let mut fields = batch.fields.clone();
        let (name_column, tier_column) = (
            add_column(&mut fields, "customer_name"),
            add_column(&mut fields, "tier"),
        );
        let present = |event: &Event, column: Option<usize>| {
            column
                .and_then(|column| event.values.get(column))
                .filter(|value| !matches!(value, Value::Null))
                .cloned()
        };
        let mut rows = Vec::new();
        for (origin, event) in (0u32..).zip(&batch.rows) {
            if seen_before(state, present(event, order_id).as_ref()) {
                continue; // a duplicate
            }
            let mut values = event.values.clone();
            for (column, value) in [(name_column, &name), (tier_column, &tier)] {
                if values.len() <= column {
                    values.resize(column + 1, Value::Null); // as the SDK's `set` pads
                }
                values[column] = value.clone();
            }
            rows.push(OutputEvent {
                origin: if present(event, bad).is_some() {
                    outside
                } else {
                    origin
                },
                timestamp: event.timestamp,
                values,
            });
        }
        Ok(OutputEvents { fields, rows })
    }
}

#[allow(unsafe_code)] // for the ABI glue `export!` generates
mod export {
    use super::EnrichCustomers;
    crate::bindings::export!(EnrichCustomers with_types_in crate::bindings);
}
