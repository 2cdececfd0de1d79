//! Test fixture: the customer enricher of `examples/enrich-customers`, built against contract
//! 0.2 (`wit/v0.2`) with `wit-bindgen` directly, as components were built before 0.3: a
//! batch crosses field after field.
//!
//! The end-to-end tests (`old_contracts.rs`; rollouts and restarts across contracts) run it beside
//! its twin, which the SDK builds against 0.3, and expect the same output, so the host's 0.2 paths
//! stay tested; the half that works through the scope, the same against 0.1 and 0.2, is
//! `../old-contracts/enrich.rs`. Like the hostile guests it misbehaves on cue: `process` names an
//! origin outside its batch for an event with a `bad` field.

mod bindings {
    #![allow(unsafe_code, missing_docs, clippy::all)]

    wit_bindgen::generate!({
        path: "../../../wit/v0.2",
        world: "weir:operator/enricher@0.2.0",
        // 0.1's types and state come from a dependency package.
        generate_all,
    });
}

use bindings::exports::weir::operator0_2_0::enrich::{Events, Guest, OutputEvents, Scope};
use bindings::weir::operator0_1_0::types::{OutputEvent, Value};

/// The operator.
pub struct EnrichCustomers;

/// The values of field `name` in a batch's events (`None` if the batch lacks it).
fn column<'a>(batch: &'a Events, name: &str) -> Option<&'a [Value]> {
    let field = batch.fields.iter().position(|field| field == name)?;
    let events = batch.timestamps.len();
    batch.values.get(field * events..(field + 1) * events)
}

/// Event `event`'s value in `column`, unless it is null or the batch lacks the field.
fn present(column: Option<&[Value]>, event: usize) -> Option<&Value> {
    column
        .map(|values| &values[event])
        .filter(|value| !matches!(value, Value::Null))
}

include!("../../old-contracts/enrich.rs");

impl Guest for EnrichCustomers {
    fn process(state: &Scope, batch: Events) -> Result<OutputEvents, String> {
        let (name, tier) = customer(state);
        let (order_ids, bad) = (column(&batch, "order_id"), column(&batch, "bad"));
        let events = batch.timestamps.len();
        let outside = events as u32 + 100;
        let mut rows = Vec::new();
        for (event, &timestamp) in batch.timestamps.iter().enumerate() {
            if seen_before(state, present(order_ids, event)) {
                continue; // a duplicate
            }
            let mut values: Vec<Value> = (0..batch.fields.len())
                .map(|field| batch.values[field * events + event].clone())
                .collect();
            for (field, value) in [("customer_name", &name), ("tier", &tier)] {
                match batch.fields.iter().position(|f| f == field) {
                    Some(column) => values[column] = value.clone(),
                    None => values.push(value.clone()),
                }
            }
            rows.push(OutputEvent {
                origin: if present(bad, event).is_some() {
                    outside
                } else {
                    event as u32
                },
                timestamp,
                values,
            });
        }
        let mut fields = batch.fields;
        for field in ["customer_name", "tier"] {
            if !fields.iter().any(|f| f == field) {
                fields.push(field.into());
            }
        }
        Ok(OutputEvents { fields, rows })
    }
}

#[allow(unsafe_code)] // for the ABI glue `export!` generates
mod export {
    use super::EnrichCustomers;
    crate::bindings::export!(EnrichCustomers with_types_in crate::bindings);
}
