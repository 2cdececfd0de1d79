//! [`WasmEnrich`]: the `enrich` interface of a component (either version of the contract), as
//! an [`EnrichOperator`].

use super::*;
use crate::field_name::{FieldName, NameCache};

/// A per-shard instance of an enrichment component.
pub struct WasmEnrich {
    pub(super) guest: Guest,
    pub(super) projection: Projection,
    /// The output events' field names, made once each.
    pub(super) names: NameCache,
}

impl std::fmt::Debug for WasmEnrich {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEnrich")
            .field("path", &self.guest.operator.path)
            .finish()
    }
}

impl EnrichOperator for WasmEnrich {
    fn process(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        // The batch in the shape the component's version of the contract takes.
        let (rows, columns) = match self.guest.bindings {
            Bindings::EnrichV2(_) => (None, Some(to_wit_columns(events, &self.projection)?)),
            _ => (Some(to_wit_events(events, &self.projection)?), None),
        };
        let output = self
            .guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                let scope = Resource::new_borrow(scopes[0].rep());
                match (b, &rows, &columns) {
                    (Bindings::Enrich(e), Some(rows), _) => {
                        e.weir_operator_enrich().call_process(store, scope, rows)
                    }
                    (Bindings::EnrichV2(e), _, Some(columns)) => e
                        .weir_operator0_2_0_enrich()
                        .call_process(store, scope, columns),
                    _ => unreachable!("checked at load: the component is an enricher"),
                }
            })?;
        let size = output
            .rows
            .iter()
            .flat_map(|row| row.values.iter())
            .map(|value| match value {
                wit::Value::Text(s) => s.len(),
                wit::Value::Bytes(b) => b.len(),
                _ => 8,
            })
            .sum::<usize>()
            + output.fields.iter().map(String::len).sum::<usize>();
        check_output(size, &self.guest.limits)?;
        let names: Vec<FieldName> = (output.fields.iter()).map(|n| self.names.get(n)).collect();
        output
            .rows
            .into_iter()
            .map(|row| {
                let origin = row.origin as usize;
                if origin >= events.len() {
                    return Err(OperatorError::Rejected(format!(
                        "output event names origin {origin}, but the batch had {} events",
                        events.len()
                    )));
                }
                if row.values.len() != names.len() {
                    return Err(OperatorError::Rejected(format!(
                        "output event has {} values for {} fields",
                        row.values.len(),
                        names.len()
                    )));
                }
                let fields = names
                    .iter()
                    .cloned()
                    .zip(row.values.into_iter().map(from_wit))
                    .filter(|(_, v)| *v != Value::Null)
                    .collect();
                Ok(Enriched {
                    origin,
                    timestamp: row.timestamp,
                    fields,
                })
            })
            .collect()
    }
}
