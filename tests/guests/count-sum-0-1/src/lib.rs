//! Test fixture: the count-sum aggregate of `examples/tumbling-count-sum`, built against contract
//! 0.1 (`wit/operator.wit`) with `wit-bindgen` directly, as components were built before 0.2:
//! one `list<value>` per event, one host call per state read and write.
//!
//! The end-to-end tests (`old_contracts.rs`; rollouts and restarts across contracts) run it beside
//! its twin, which the SDK builds against 0.3, and expect the same output, so the host's 0.1 paths
//! stay tested; the half that works through the scope, the same against 0.1 and 0.2, is
//! `../old-contracts/count_sum.rs`. Like the hostile guests it misbehaves on cue: `add` traps for
//! keys starting with `boom`.

mod bindings {
    #![allow(unsafe_code, missing_docs, clippy::all)]

    wit_bindgen::generate!({
        path: "../../../wit",
        world: "weir:operator/aggregator@0.1.0",
    });
}

use bindings::exports::weir::operator::aggregate::{Events, Field, Guest, Scope, Window};
use bindings::weir::operator::types::Value;

/// The operator.
pub struct CountSum;

include!("../../old-contracts/count_sum.rs");

impl Guest for CountSum {
    fn add(state: &Scope, batch: Events) -> Result<(), String> {
        let key = state.key();
        assert!(!key.starts_with("boom"), "count-sum-0-1: key {key:?} traps");
        let amount = batch.fields.iter().position(|field| field == "amount");
        let mut sum = state.get("sum").unwrap_or(Value::Int(0));
        for event in &batch.rows {
            let value = amount.and_then(|column| event.values.get(column));
            sum = value
                .and_then(|value| plus(&sum, value))
                .ok_or(NOT_NUMERIC)?;
        }
        let count = int(state.get("count")).unwrap_or(0);
        state.put(
            "count",
            &Value::Int(count.saturating_add(batch.rows.len() as i64)),
        );
        state.put("sum", &sum);
        Ok(())
    }

    fn merge(target: &Scope, source: &Scope) -> Result<(), String> {
        merge_scopes(target, source)
    }

    fn finish(state: &Scope, _window: Window) -> Result<Vec<Field>, String> {
        Ok(output(state))
    }

    fn migrate(_state: &Scope, _from_version: String) -> Result<(), String> {
        Ok(())
    }
}

#[allow(unsafe_code)] // for the ABI glue `export!` generates
mod export {
    use super::CountSum;
    crate::bindings::export!(CountSum with_types_in crate::bindings);
}
