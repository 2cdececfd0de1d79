//! Which event fields an operator instance is passed ([`Projection`]), and the one crossing
//! field a call may read beside an event (see [`Projection::sole_crossing`]). Every field
//! costs a conversion per event where an operator runs behind a boundary (a Wasm component),
//! so aggregates by default skip the key and timestamp fields. Native operators are passed
//! whole events and ignore it.
//!
//! Depends on `event` and `field_name`.

use crate::event::{Crossing, CrossingNumber, Event};
use crate::field_name::FieldName;

/// Which event fields cross the boundary. Every field costs a conversion per event (and a guest
/// allocation for text), so aggregates by default skip the key and timestamp fields, which the
/// guest has as `scope.key()` and `event.timestamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// Every field of the events.
    All,
    /// Every field but these.
    Except(Vec<FieldName>),
    /// Only these fields, in this order (`null` where an event lacks one).
    Only(Vec<FieldName>),
}

impl Projection {
    /// Only the fields `names`, in this order.
    pub fn only<S: AsRef<str>>(names: &[S]) -> Projection {
        Projection::Only(names.iter().map(|n| FieldName::new(n.as_ref())).collect())
    }

    /// Every field but `names`.
    pub fn except<S: AsRef<str>>(names: &[S]) -> Projection {
        Projection::Except(names.iter().map(|n| FieldName::new(n.as_ref())).collect())
    }

    /// Whether no field crosses (`fields = []`): only the events' times do.
    pub(crate) fn crosses_no_field(&self) -> bool {
        matches!(self, Projection::Only(names) if names.is_empty())
    }

    /// Whether a crossing taken through it may be of the field `name`: `Only` names just it,
    /// or `Except` and `All` do not leave it out (then an event whose one field is another has
    /// a crossing of that one).
    pub fn may_cross(&self, name: &str) -> bool {
        match self {
            Projection::Only(names) => names.len() == 1 && names[0] == *name,
            Projection::Except(skip) => !skip.iter().any(|skipped| *skipped == *name),
            Projection::All => true,
        }
    }

    /// `event`'s time and only crossing field, if it has exactly one, its name is interned and
    /// it holds a number: the one field named by `Only` (its first occurrence, as a call reads
    /// it), or the one field `Except` or `All` leaves (not two of one name). The router takes
    /// this while the event is in its cache; see [`Crossing`].
    #[inline]
    pub fn sole_crossing(&self, event: &Event) -> Option<Crossing> {
        let (field, value) = match self {
            Projection::Only(names) => {
                let [name] = names.as_slice() else {
                    return None;
                };
                event.fields.iter().find(|(field, _)| field == name)?
            }
            Projection::Except(skip) => only_one(
                event
                    .fields
                    .iter()
                    .filter(|(field, _)| !skip.contains(field)),
            )?,
            Projection::All => only_one(event.fields.iter())?,
        };
        Some(Crossing {
            timestamp: event.timestamp,
            field: field.interned()?,
            number: CrossingNumber::of(value)?,
        })
    }
}

/// The only item of `items`, if it has exactly one.
fn only_one<T>(mut items: impl Iterator<Item = T>) -> Option<T> {
    let first = items.next()?;
    items.next().is_none().then_some(first)
}
