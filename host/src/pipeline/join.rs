//! Window joins: putting each event on the left or right side of a [`JoinSpec`], keyed by its
//! side's key field and marked with the field [`SIDE_FIELD`], before it is routed; the
//! aggregate then sees both sides of a key and window together. An event on neither side, or
//! without its side's key, is a dead letter with the reason.
//!
//! Depends on `event`, `field_name`, `spec` and `value` only.

use crate::event::{DeadCause, DeadLetter, Event};
use crate::field_name::FieldName;
use crate::spec::{JoinSpec, SIDE_FIELD};
use crate::value::Value;

/// The field names a join adds, shared by all events.
pub(super) struct Joiner {
    spec: JoinSpec,
    side: FieldName,
}

impl Joiner {
    pub(super) fn new(spec: JoinSpec) -> Joiner {
        Joiner {
            spec,
            side: SIDE_FIELD.into(),
        }
    }

    /// Puts `event` on its side: keys it by the side's key field and adds the side field.
    pub(super) fn place(&self, mut event: Event) -> Result<Event, DeadLetter> {
        let field = |name: &str| {
            event
                .fields
                .iter()
                .find(|(field, _)| &**field == name)
                .map(|(_, value)| value)
        };
        let (side, key_field) = match field(&self.spec.field) {
            Some(Value::Text(value)) if *value == self.spec.left.value => {
                ("left", &self.spec.left.key)
            }
            Some(Value::Text(value)) if *value == self.spec.right.value => {
                ("right", &self.spec.right.key)
            }
            None => {
                return Err(self.dead(
                    &event,
                    format!(
                        "on neither side of the join: it has no field `{}`",
                        self.spec.field
                    ),
                ));
            }
            _ => {
                return Err(self.dead(
                    &event,
                    format!(
                        "on neither side of the join: `{}` is neither {:?} nor {:?}",
                        self.spec.field, self.spec.left.value, self.spec.right.value
                    ),
                ));
            }
        };
        let Some(key) = field(key_field).and_then(Value::as_key) else {
            return Err(self.dead(
                &event,
                format!("the {side} side's key field `{key_field}` is not text or an integer"),
            ));
        };
        event.key = key;
        event.fields.retain(|(name, _)| **name != *SIDE_FIELD);
        event
            .fields
            .push((self.side.clone(), Value::Text(side.into())));
        Ok(event)
    }

    fn dead(&self, event: &Event, reason: String) -> DeadLetter {
        DeadLetter {
            line: event.line,
            raw: event.to_json().to_string(),
            reason,
            cause: DeadCause::Join,
        }
    }
}
