//! Values and events across the boundary: Weir's typed values to the WIT types and back,
//! and which event fields cross ([`Projection`]).

use super::*;
use crate::field_name::FieldName;
use crate::hashing::{HashMap, HashSet};

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
}

/// Converts a batch to the WIT shape: field names once, then one row of values per event.
///
/// Events of a batch nearly always share their field names in the same order, and interned
/// names compare by address, so each event's layout (where each crossing field sits in it) is
/// worked out again only when its names differ from the previous event's.
pub(super) fn to_wit_events(events: &[&Event], projection: &Projection) -> wit::Events {
    let fields = crossing_fields(events, projection);
    let mut shape = Shape::default();
    let rows = events
        .iter()
        .map(|event| {
            let layout = shape.layout(event, &fields);
            wit::Event {
                timestamp: event.timestamp,
                values: layout
                    .iter()
                    .map(|slot| {
                        slot.map_or(wit::Value::Null, |i| to_wit(event.fields[i].1.clone()))
                    })
                    .collect(),
            }
        })
        .collect();
    wit::Events {
        fields: fields.iter().map(|name| name.to_string()).collect(),
        rows,
    }
}

/// Converts a batch to the shape of contract 0.2: field names once, the timestamps, then one
/// column per field (integers or floats as plain lists when every event has one, otherwise
/// values). The guest gets the same values as from [`to_wit_events`], in one list per field
/// instead of one per event.
pub(super) fn to_wit_columns(events: &[&Event], projection: &Projection) -> wit_columns::Events {
    let fields = crossing_fields(events, projection);
    let mut columns: Vec<Column> = fields.iter().map(|_| Column::default()).collect();
    let mut shape = Shape::default();
    for event in events {
        let layout = shape.layout(event, &fields);
        for (column, slot) in columns.iter_mut().zip(layout) {
            column.push(slot.map_or(&Value::Null, |i| &event.fields[i].1));
        }
    }
    wit_columns::Events {
        fields: fields.iter().map(|name| name.to_string()).collect(),
        timestamps: events.iter().map(|event| event.timestamp).collect(),
        columns: columns.into_iter().map(Column::into_wit).collect(),
    }
}

/// One column being filled: a list of integers or floats while every value so far was one,
/// values from the first that is not.
enum Column {
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Values(Vec<wit::Value>),
}

impl Default for Column {
    fn default() -> Self {
        Column::Ints(Vec::new())
    }
}

impl Column {
    fn push(&mut self, value: &Value) {
        match (&mut *self, value) {
            (Column::Ints(ints), Value::Int(i)) => ints.push(*i),
            (Column::Floats(floats), Value::Float(f)) => floats.push(*f),
            (Column::Ints(ints), Value::Float(f)) if ints.is_empty() => {
                *self = Column::Floats(vec![*f]);
            }
            (Column::Values(values), value) => values.push(to_wit(value.clone())),
            (_, value) => {
                let mut values = std::mem::take(self).into_values();
                values.push(to_wit(value.clone()));
                *self = Column::Values(values);
            }
        }
    }

    fn into_values(self) -> Vec<wit::Value> {
        match self {
            Column::Ints(ints) => ints.into_iter().map(wit::Value::Int).collect(),
            Column::Floats(floats) => floats.into_iter().map(wit::Value::Float).collect(),
            Column::Values(values) => values,
        }
    }

    fn into_wit(self) -> wit_columns::Column {
        match self {
            Column::Ints(ints) => wit_columns::Column::Ints(ints),
            Column::Floats(floats) => wit_columns::Column::Floats(floats),
            Column::Values(values) => wit_columns::Column::Values(values),
        }
    }
}

/// The fields that cross for `events`, in order of first appearance (or the projection's).
fn crossing_fields(events: &[&Event], projection: &Projection) -> Vec<FieldName> {
    let skip: &[FieldName] = match projection {
        Projection::Only(names) => return names.clone(),
        Projection::Except(skip) => skip,
        Projection::All => &[],
    };
    let mut fields: Vec<FieldName> = Vec::new();
    let mut seen: HashSet<&FieldName> = HashSet::default();
    let mut previous: Option<&Event> = None;
    for &event in events {
        if previous.is_some_and(|previous| same_names(previous, event)) {
            continue;
        }
        previous = Some(event);
        for (name, _) in &event.fields {
            if !skip.contains(name) && seen.insert(name) {
                fields.push(name.clone());
            }
        }
    }
    fields
}

/// Whether two events have the same field names in the same order.
fn same_names(a: &Event, b: &Event) -> bool {
    a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|((x, _), (y, _))| x == y)
}

/// The layout of the last event seen: for each crossing field, its index in that event.
#[derive(Default)]
struct Shape<'a> {
    names: Option<&'a Event>,
    layout: Vec<Option<usize>>,
}

/// Past this many fields an event's names are looked up by hashing instead of a scan, so that
/// a line with a hundred thousand fields costs linear time, not quadratic.
const SCAN_LIMIT: usize = 32;

impl<'a> Shape<'a> {
    fn layout(&mut self, event: &'a Event, fields: &[FieldName]) -> &[Option<usize>] {
        // No field crosses (`fields = []`): only the timestamps do.
        if fields.is_empty() || self.names.is_some_and(|seen| same_names(seen, event)) {
            return &self.layout;
        }
        self.layout.clear();
        if event.fields.len() <= SCAN_LIMIT {
            let at = |field| event.fields.iter().position(|(name, _)| name == field);
            self.layout.extend(fields.iter().map(at));
        } else {
            // The first of a repeated name, as the scan finds it.
            let mut index: HashMap<&FieldName, usize> = HashMap::default();
            for (i, (name, _)) in event.fields.iter().enumerate() {
                index.entry(name).or_insert(i);
            }
            self.layout
                .extend(fields.iter().map(|f| index.get(f).copied()));
        }
        self.names = Some(event);
        &self.layout
    }
}

pub(super) fn to_wit(value: Value) -> wit::Value {
    match value {
        Value::Null => wit::Value::Null,
        Value::Boolean(b) => wit::Value::Boolean(b),
        Value::Int(i) => wit::Value::Int(i),
        Value::Float(f) => wit::Value::Float(f),
        Value::Text(s) => wit::Value::Text(s),
        Value::Bytes(b) => wit::Value::Bytes(b),
    }
}

pub(super) fn from_wit(value: wit::Value) -> Value {
    match value {
        wit::Value::Null => Value::Null,
        wit::Value::Boolean(b) => Value::Boolean(b),
        wit::Value::Int(i) => Value::Int(i),
        wit::Value::Float(f) => Value::Float(f),
        wit::Value::Text(s) => Value::Text(s),
        wit::Value::Bytes(b) => Value::Bytes(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(fields: Vec<(FieldName, Value)>) -> Event {
        Event {
            line: 1,
            key: "k".into(),
            timestamp: 5,
            fields,
        }
    }

    /// An event with 100,000 fields (a hostile 1 MiB line) crosses in linear time, each value in
    /// its field's column; a narrow event after it gets its own layout.
    /// Columns hold exactly the values rows hold: a column stays a plain list while every value
    /// is an integer (or every value a float), and becomes values at the first other one.
    #[test]
    fn columns_hold_what_rows_hold() {
        let n = FieldName::new("n");
        let x = FieldName::new("x");
        let m = FieldName::new("m");
        let events = [
            event(vec![
                (n.clone(), Value::Int(1)),
                (x.clone(), Value::Float(0.5)),
                (m.clone(), Value::Int(1)),
            ]),
            event(vec![(x.clone(), Value::Float(-0.0)), (n, Value::Int(2))]),
            event(vec![
                (FieldName::new("n"), Value::Int(3)),
                (x, Value::Float(f64::INFINITY)),
                (m, Value::Text("t".into())),
            ]),
        ];
        let batch: Vec<&Event> = events.iter().collect();
        for projection in [Projection::All, Projection::only(&["m", "absent", "n"])] {
            let rows = to_wit_events(&batch, &projection);
            let columns = to_wit_columns(&batch, &projection);
            assert_eq!(columns.fields, rows.fields);
            assert_eq!(columns.timestamps, [5, 5, 5]);
            for (at, column) in columns.columns.iter().enumerate() {
                let values: Vec<wit::Value> = match column {
                    wit_columns::Column::Ints(ints) => {
                        ints.iter().copied().map(wit::Value::Int).collect()
                    }
                    wit_columns::Column::Floats(floats) => {
                        floats.iter().copied().map(wit::Value::Float).collect()
                    }
                    wit_columns::Column::Values(values) => values.clone(),
                };
                let expected: Vec<wit::Value> =
                    rows.rows.iter().map(|row| row.values[at].clone()).collect();
                assert_eq!(format!("{values:?}"), format!("{expected:?}"));
            }
        }
        let all = to_wit_columns(&batch, &Projection::All);
        assert!(matches!(all.columns[0], wit_columns::Column::Ints(_)));
        assert!(matches!(all.columns[1], wit_columns::Column::Floats(_)));
        assert!(matches!(all.columns[2], wit_columns::Column::Values(_)));
        let none = to_wit_columns(&batch, &Projection::only::<&str>(&[]));
        assert!(none.columns.is_empty() && none.timestamps.len() == 3);
    }

    #[test]
    fn a_very_wide_event_crosses_whole_and_in_order() {
        let wide = event(
            (0..100_000)
                .map(|i| (FieldName::new(&format!("w{i}")), Value::Int(i)))
                .collect(),
        );
        let narrow = event(vec![
            (FieldName::new("w7"), Value::Int(-7)),
            (FieldName::new("w7"), Value::Int(-8)),
        ]);
        let batch = to_wit_events(&[&wide, &narrow], &Projection::All);
        assert_eq!(batch.fields.len(), 100_000);
        assert_eq!(batch.fields[99_999], "w99999");
        let values = |row: &wit::Event, at: usize| match row.values[at] {
            wit::Value::Int(i) => Some(i),
            _ => None,
        };
        assert_eq!(values(&batch.rows[0], 12_345), Some(12_345));
        assert_eq!(
            values(&batch.rows[1], 7),
            Some(-7),
            "a repeated name's first value"
        );
        assert_eq!(values(&batch.rows[1], 8), None);
        let only = to_wit_events(&[&wide], &Projection::only(&["w3", "nope"]));
        assert_eq!(values(&only.rows[0], 0), Some(3));
        assert_eq!(values(&only.rows[0], 1), None);
        let none = to_wit_events(&[&wide], &Projection::only::<&str>(&[]));
        assert!(none.fields.is_empty() && none.rows[0].values.is_empty());
    }
}
