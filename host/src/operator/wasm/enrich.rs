//! [`WasmEnrich`]: the `enrich` interface of a component (either version of the contract), as
//! an [`EnrichOperator`]. Depends on `event`, `field_name` and `value`.

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

/// A batch in the shape the component's version of the contract takes.
enum Batch {
    Rows(wit::Events),
    Columns(wit_columns::Events),
}

impl EnrichOperator for WasmEnrich {
    fn process(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        let batch = match self.guest.bindings {
            Bindings::EnrichV2(_) => Batch::Columns(to_wit_columns(events, &self.projection)?),
            _ => Batch::Rows(to_wit_events(events, &self.projection)?),
        };
        let max_output_bytes = self.guest.limits.max_output_bytes;
        let output = self
            .guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                let scope = Resource::new_borrow(scopes[0].rep());
                let output = match (b, &batch) {
                    (Bindings::Enrich(e), Batch::Rows(rows)) => {
                        e.weir_operator_enrich().call_process(store, scope, rows)?
                    }
                    (Bindings::EnrichV2(e), Batch::Columns(columns)) => e
                        .weir_operator0_2_0_enrich()
                        .call_process(store, scope, columns)?,
                    _ => unreachable!("checked at load: the component is an enricher"),
                };
                // Checked before the call ends, so that a refused output also drops the call's
                // state writes: the host then retries the events one by one, and writes kept
                // from the refused call would be applied twice.
                Ok(match output {
                    Ok(output) => check_enriched(&output, events.len(), max_output_bytes)
                        .map(|()| output)
                        .map_err(Declined::Host),
                    Err(message) => Err(Declined::Guest(message)),
                })
            })?;
        let names: Vec<FieldName> = (output.fields.iter()).map(|n| self.names.get(n)).collect();
        let enriched = (output.rows.into_iter())
            .map(|row| Enriched {
                origin: row.origin as usize,
                timestamp: row.timestamp,
                fields: (names.iter().cloned())
                    .zip(row.values.into_iter().map(from_wit))
                    .filter(|(_, v)| *v != Value::Null)
                    .collect(),
            })
            .collect();
        Ok(enriched)
    }
}

/// Whether an enrichment call's output is one the host takes: within the output limit, each
/// event naming an input event and holding one value per field.
fn check_enriched(
    output: &wit::OutputEvents,
    inputs: usize,
    max_output_bytes: usize,
) -> std::result::Result<(), HostRefusal> {
    let size = (output.rows.iter())
        .flat_map(|row| row.values.iter())
        .map(|value| match value {
            wit::Value::Text(s) => s.len(),
            wit::Value::Bytes(b) => b.len(),
            _ => 8,
        })
        .sum::<usize>()
        + output.fields.iter().map(String::len).sum::<usize>();
    output_within(size, max_output_bytes)?;
    for row in &output.rows {
        if row.origin as usize >= inputs {
            return Err(HostRefusal::UnknownOrigin {
                origin: row.origin,
                inputs,
            });
        }
        if row.values.len() != output.fields.len() {
            return Err(HostRefusal::ValuesPerFields {
                values: row.values.len(),
                fields: output.fields.len(),
            });
        }
    }
    Ok(())
}
