//! [`WasmAggregate`]: the `aggregate` interface of a component, as an [`AggregateOperator`].

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

pub(super) fn aggregate_of(
    bindings: &Bindings,
) -> &bindings::exports::weir::operator::aggregate::Guest {
    match bindings {
        Bindings::Aggregate(b) => b.weir_operator_aggregate(),
        Bindings::Enrich(_) => unreachable!("checked at load: the component is an aggregator"),
    }
}

impl AggregateOperator for WasmAggregate {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let batch = to_wit_events(events, &self.projection);
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                aggregate_of(b).call_add(store, Resource::new_borrow(scopes[0].rep()), &batch)
            })
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        self.guest
            .call(&mut [target, source], Writes::Keep, |store, b, scopes| {
                aggregate_of(b).call_merge(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    Resource::new_borrow(scopes[1].rep()),
                )
            })
    }

    fn migrate(&mut self, scope: &mut Scope, from_version: &str) -> Result<()> {
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                aggregate_of(b).call_migrate(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    from_version,
                )
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
                aggregate_of(b).call_finish(store, Resource::new_borrow(scopes[0].rep()), window)
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
