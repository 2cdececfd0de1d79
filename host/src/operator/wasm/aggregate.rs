//! [`WasmAggregate`]: the `aggregate` interface of a component (either version of the
//! contract), as an [`AggregateOperator`].

use super::*;

/// A per-shard instance of an aggregate component.
pub struct WasmAggregate {
    pub(super) guest: Guest,
    pub(super) projection: Projection,
}

impl std::fmt::Debug for WasmAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmAggregate")
            .field("path", &self.guest.operator.path)
            .finish()
    }
}

/// Evaluates `$call` with `$exports` bound to the instance's `aggregate` exports, whichever
/// version of the contract they are: every function but `add` has the same signature in both.
macro_rules! with_aggregate {
    ($bindings:expr, |$exports:ident| $call:expr) => {
        match $bindings {
            Bindings::Aggregate(b) => {
                let $exports = b.weir_operator_aggregate();
                $call
            }
            Bindings::AggregateV2(b) => {
                let $exports = b.weir_operator0_2_0_aggregate();
                $call
            }
            Bindings::Enrich(_) | Bindings::EnrichV2(_) => {
                unreachable!("checked at load: the component is an aggregator")
            }
        }
    };
}

impl WasmAggregate {
    /// `add` of a 0.1 component: the batch as rows; state values through the scope's imports.
    fn add_rows(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let batch = to_wit_events(events, &self.projection)?;
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                let Bindings::Aggregate(b) = b else {
                    unreachable!("add_rows is only called for a 0.1 aggregator")
                };
                b.weir_operator_aggregate().call_add(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    &batch,
                )
            })
    }

    /// `add` of a 0.2 component: the batch as columns and the scope's named values with the
    /// call; the changes it returns go through the scope like writes made through its imports,
    /// so they too are kept only if the call succeeds (and the state quota admits them).
    fn add_columns(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let batch = to_wit_columns(events, &self.projection)?;
        let values: Vec<wit::Field> = (scope.state.values.iter())
            .map(|(name, value)| wit::Field {
                name: name.clone(),
                value: to_wit(value.clone()),
            })
            .collect();
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                let Bindings::AggregateV2(b) = b else {
                    unreachable!("add_columns is only called for a 0.2 aggregator")
                };
                let added = b.weir_operator0_2_0_aggregate().call_add(
                    &mut *store,
                    Resource::new_borrow(scopes[0].rep()),
                    &values,
                    &batch,
                )?;
                let changes = match added {
                    Ok(changes) => changes,
                    Err(message) => return Ok(Err(message)),
                };
                let slot = store.data_mut().table.get_mut(&scopes[0])?;
                for change in changes {
                    match change.value {
                        Some(value) => slot.put(change.name, from_wit(value)),
                        None => slot.remove(change.name),
                    }
                }
                Ok(Ok(()))
            })
    }
}

impl AggregateOperator for WasmAggregate {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        match self.guest.bindings {
            Bindings::AggregateV2(_) => self.add_columns(scope, events),
            _ => self.add_rows(scope, events),
        }
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        self.guest
            .call(&mut [target, source], Writes::Keep, |store, b, scopes| {
                with_aggregate!(b, |exports| exports.call_merge(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    Resource::new_borrow(scopes[1].rep()),
                ))
            })
    }

    fn migrate(&mut self, scope: &mut Scope, from_version: &str) -> Result<()> {
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                with_aggregate!(b, |exports| exports.call_migrate(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    from_version,
                ))
            })
    }

    fn finish(&mut self, scope: &mut Scope, window: Window) -> Result<Fields> {
        let window = wit::Window {
            start: window.start,
            end: window.end,
        };
        let fields = self
            .guest
            .call(&mut [scope], Writes::Discard, |store, b, scopes| {
                with_aggregate!(b, |exports| exports.call_finish(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    window
                ))
            })?;
        let fields: Fields = fields
            .into_iter()
            .map(|f| (f.name, from_wit(f.value)))
            .collect();
        check_output(
            fields
                .iter()
                .map(|(name, value)| name.len() + value_size(value))
                .sum(),
            &self.guest.limits,
        )?;
        Ok(fields)
    }
}
