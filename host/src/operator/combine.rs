//! Local pre-aggregation and global combine, with the user's own aggregate on both sides:
//! [`Partial`] runs an aggregate in the shards but finishes a window with its state (encoded,
//! in the field [`PARTIAL_FIELD`]) instead of a result; [`Combine`] runs the same aggregate in
//! the collector, where each "event" is such a partial, folded in with the operator's `merge`,
//! and finishes the window as usual.
//!
//! Depends on the operator traits, the state codec, `event`, `time` and `value`.

use std::sync::Arc;

use super::{AggregateOperator, OperatorError, Result, Scope};
use crate::event::Event;
use crate::state::{ScopeState, decode_scope, encode_scope};
use crate::time::Window;
use crate::value::{Fields, Value};

/// The field a partial's state travels in.
pub const PARTIAL_FIELD: &str = "partial";

/// An aggregate that ends a window with its partial state.
pub struct Partial(pub Box<dyn AggregateOperator>);

impl AggregateOperator for Partial {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        self.0.add(scope, events)
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        self.0.merge(target, source)
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        let mut state = scope.state.clone();
        state.shadow = None;
        Ok(vec![(
            PARTIAL_FIELD.to_owned(),
            Value::Bytes(encode_scope(&state)),
        )])
    }

    fn migrate(&mut self, scope: &mut Scope, from_version: &str) -> Result<()> {
        self.0.migrate(scope, from_version)
    }

    fn version_for(&self, key: &str) -> Option<Arc<str>> {
        self.0.version_for(key)
    }
}

/// An aggregate whose events are partials, merged in arrival order.
pub struct Combine(pub Box<dyn AggregateOperator>);

impl AggregateOperator for Combine {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        for event in events {
            let state = partial_of(event)?;
            let mut source = Scope {
                key: scope.key.clone(),
                state,
            };
            self.0.merge(scope, &mut source)?;
        }
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        self.0.merge(target, source)
    }

    fn finish(&mut self, scope: &mut Scope, window: Window) -> Result<Fields> {
        self.0.finish(scope, window)
    }
}

fn partial_of(event: &Event) -> Result<ScopeState> {
    match event
        .fields
        .iter()
        .find(|(name, _)| &**name == PARTIAL_FIELD)
    {
        Some((_, Value::Bytes(bytes))) => decode_scope(bytes)
            .map_err(|e| OperatorError::Host(format!("a partial state is unreadable: {e}"))),
        _ => Err(OperatorError::Host("a partial without its state".into())),
    }
}
