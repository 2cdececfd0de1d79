//! Test fixture: an aggregate that also imports `test:bad/secrets`, which Weir does not provide.
//!
//! It exports `weir:operator/aggregate@0.1.0` like any aggregate (built with `wit-bindgen`
//! directly, not the SDK, to add the import), so only the unsatisfiable import should make the
//! host reject it, when it links the component.

mod bindings {
    #![allow(unsafe_code, missing_docs, clippy::all)]

    wit_bindgen::generate!({
        path: "../../../wit",
        inline: "
            package test:bad@0.1.0;

            interface secrets {
                get-secret: func() -> string;
            }

            world bad-import {
                include weir:operator/aggregator@0.1.0;
                import secrets;
            }
        ",
        world: "test:bad/bad-import",
        // The `weir:operator` interfaces come from another package than the world.
        generate_all,
    });
}

use bindings::exports::weir::operator::aggregate::{Events, Field, Guest, Scope, Window};
use bindings::test::bad::secrets::get_secret;
use bindings::weir::operator::types::Value;

/// Counts events, and stores a secret it asks the (absent) `secrets` interface for.
pub struct BadImport;

impl Guest for BadImport {
    fn add(state: &Scope, batch: Events) -> Result<(), String> {
        state.put("secret", &Value::Text(get_secret()));
        let count = match state.get("count") {
            Some(Value::Int(count)) => count,
            _ => 0,
        };
        state.put("count", &Value::Int(count + batch.rows.len() as i64));
        Ok(())
    }

    fn merge(_target: &Scope, _source: &Scope) -> Result<(), String> {
        Ok(())
    }

    fn finish(state: &Scope, _window: Window) -> Result<Vec<Field>, String> {
        let count = state.get("count").unwrap_or(Value::Int(0));
        Ok(vec![Field {
            name: "count".into(),
            value: count,
        }])
    }

    fn migrate(_state: &Scope, _from_version: String) -> Result<(), String> {
        Ok(())
    }
}

#[allow(unsafe_code)] // for the ABI glue `export!` generates
mod export {
    use super::BadImport;
    crate::bindings::export!(BadImport with_types_in crate::bindings);
}
