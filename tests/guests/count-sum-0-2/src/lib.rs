//! Test fixture: the count-sum aggregate of `examples/tumbling-count-sum`, built against contract
//! 0.2 (`wit/v0.2`) with `wit-bindgen` directly, as components were built before 0.3: a
//! batch crosses field after field, and `add` receives the window's named values and returns
//! its changes.
//!
//! The end-to-end tests (`old_contracts.rs`; rollouts and restarts across contracts) run it beside
//! its twin, which the SDK builds against 0.3, and expect the same output, so the host's 0.2 paths
//! stay tested; the half that works through the scope, the same against 0.1 and 0.2, is
//! `../old-contracts/count_sum.rs`. Like the hostile guests it misbehaves on cue: `add` traps for
//! keys starting with `boom`.

mod bindings {
    #![allow(unsafe_code, missing_docs, clippy::all)]

    wit_bindgen::generate!({
        path: "../../../wit/v0.2",
        world: "weir:operator/aggregator@0.2.0",
        // 0.1's types and state come from a dependency package.
        generate_all,
    });
}

use bindings::exports::weir::operator0_2_0::aggregate::{
    Change, Events, Field, Guest, Scope, Value, Window,
};

/// The operator.
pub struct CountSum;

include!("../../old-contracts/count_sum.rs");

/// The values of field `name` in a batch's events (`None` if the batch lacks it).
fn column<'a>(batch: &'a Events, name: &str) -> Option<&'a [Value]> {
    let field = batch.fields.iter().position(|field| field == name)?;
    let events = batch.timestamps.len();
    batch.values.get(field * events..(field + 1) * events)
}

impl Guest for CountSum {
    fn add(state: &Scope, values: Vec<Field>, batch: Events) -> Result<Vec<Change>, String> {
        let key = state.key();
        assert!(!key.starts_with("boom"), "count-sum-0-2: key {key:?} traps");
        let named = |name: &str| {
            values
                .iter()
                .find(|field| field.name == name)
                .map(|field| field.value.clone())
        };
        let events = batch.timestamps.len();
        let amounts = column(&batch, "amount");
        let mut sum = named("sum").unwrap_or(Value::Int(0));
        for event in 0..events {
            let value = amounts.map(|amounts| &amounts[event]);
            sum = value
                .and_then(|value| plus(&sum, value))
                .ok_or(NOT_NUMERIC)?;
        }
        let count = int(named("count"))
            .unwrap_or(0)
            .saturating_add(events as i64);
        Ok(vec![
            Change {
                name: "count".into(),
                value: Some(Value::Int(count)),
            },
            Change {
                name: "sum".into(),
                value: Some(sum),
            },
        ])
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
