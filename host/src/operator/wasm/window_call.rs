//! One window's part of a 0.3 `add-windows` call: its events' times, and each crossing field's
//! values, field after field, in the list they fit (integers, floats, or values of any kind).
//! Used by [`super::aggregate`]; depends on [`super::convert`], `event` (the router's
//! [`Crossing`]s), `field_name`, `prefetch`, `value` and the operator's errors.

use std::rc::Rc;

use super::convert::{
    MAX_BATCH_VALUES, Shape, check_width, crossing_fields, same_names, to_wit, to_wit_columns,
};
use super::*;
use crate::event::{Crossing, CrossingNumber};
use crate::field_name::{FieldName, InternedName};
use bindings_v3::exports::weir::operator0_3_0::windows::{ColumnKind, WindowBatches};

/// The crossing fields of a call's windows and where each sits in their events, worked out
/// again only for a window whose first event has other field names than the previous window's
/// first event (a call's windows nearly always share them), so that a window read straight
/// from its events costs no allocation for them. One per call, and so per projection.
pub(super) struct WindowShapes<'a> {
    first: Option<&'a Event>,
    fields: Rc<[FieldName]>,
    layout: Vec<Option<usize>>,
    /// The field of the last window read from its events' [`Crossing`]s.
    crossed: Option<Rc<[FieldName]>>,
}

impl Default for WindowShapes<'_> {
    fn default() -> Self {
        WindowShapes {
            first: None,
            fields: Rc::from([]),
            layout: Vec::new(),
            crossed: None,
        }
    }
}

impl<'a> WindowShapes<'a> {
    /// The crossing fields of events with `first`'s names, and where each sits in them.
    fn of(
        &mut self,
        first: &'a Event,
        projection: &Projection,
    ) -> (Rc<[FieldName]>, &[Option<usize>]) {
        if !self.first.is_some_and(|seen| same_names(seen, first)) {
            let fields = crossing_fields(&[first], projection);
            self.layout = Shape::default().layout(first, &fields).to_vec();
            self.fields = fields.into();
            self.first = Some(first);
        }
        (Rc::clone(&self.fields), &self.layout)
    }

    /// The fields of a call in which none cross: the empty list (never worked out, as no
    /// window's layout is).
    fn none(&self) -> Rc<[FieldName]> {
        debug_assert!(self.first.is_none());
        Rc::clone(&self.fields)
    }

    /// The one field of a window read from its events' crossings, `field`.
    fn crossed(&mut self, field: InternedName) -> Rc<[FieldName]> {
        match &self.crossed {
            Some(fields) if fields[0].interned() == Some(field) => Rc::clone(fields),
            _ => Rc::clone(self.crossed.insert(Rc::from([FieldName::from(field)]))),
        }
    }
}

/// Asks the CPU to fetch a window's `events` ahead of [`push_window`]: only their `crossings`
/// (which hold their times too), if the first came with one; else as
/// [`convert::warm_window`] does.
pub(super) fn warm(events: &[&Event], crossings: &[&Option<Crossing>], projection: &Projection) {
    match crossings.first().is_some_and(|crossing| crossing.is_some()) {
        true => (crossings.iter()).for_each(|&crossing| crate::prefetch::line(crossing)),
        false => convert::warm_window(events, projection.crosses_no_field()),
    }
}

/// Adds one window's events to `call`: their times to `call.timestamps` and each crossing
/// field's values to the list they fit. Returns the window's field names (shared with the
/// call's other windows of the same names, on the usual path), which the caller indexes once
/// it has every name of the call. Refused like [`to_wit_columns`], with nothing added, if the
/// window is too wide. `shapes` is the call's, kept from window to window.
///
/// A window is also refused, with nothing added, if it would take a call that already holds
/// values past [`MAX_BATCH_VALUES`] in all ([`push_within`]): each window is within that bound
/// alone, but a call of several wide windows was not, and ran its guest out of memory.
///
/// When every event came with a crossing of one field and kind (`crossings`, one per event, or
/// none), the values are the crossings' ([`push_crossed`]), and no event's fields are read.
/// Otherwise, when every event has the first one's field names (nearly always), the values are
/// read straight from the events while the window's events are in the cache: in one pass if the
/// window has at most [`NUMERIC_FIELDS`] crossing fields, each in every event and all integers
/// or all floats ([`push_numeric`]), else a field at a time; otherwise they go through
/// [`to_wit_columns`]'s list of values. The call is the same.
pub(super) fn push_window<'a>(
    call: &mut WindowBatches,
    events: &[&'a Event],
    crossings: &[&Option<Crossing>],
    projection: &Projection,
    shapes: &mut WindowShapes<'a>,
) -> Result<Rc<[FieldName]>> {
    let budget = MAX_BATCH_VALUES;
    push_within(budget, call, events, crossings, projection, shapes)
}

/// [`push_window`] with a `budget` of values for the whole call: a window that would take a
/// call already holding values past it is taken out again and refused (a call's first window
/// is bounded by [`check_width`] alone). A call of 4,096 events whose windows each had a few
/// hundred fields (a new field name on every line) held 2.3 million values, and the guest
/// trapped at its 64 MiB, which made the instance give up calls carrying many windows for
/// good; a refused window goes through `add` alone instead.
fn push_within<'a>(
    budget: usize,
    call: &mut WindowBatches,
    events: &[&'a Event],
    crossings: &[&Option<Crossing>],
    projection: &Projection,
    shapes: &mut WindowShapes<'a>,
) -> Result<Rc<[FieldName]>> {
    let (marks, held) = (Marks::of(call), values_in(call));
    let fields = push_any(call, events, crossings, projection, shapes)?;
    let total = values_in(call);
    if held > 0 && total > budget {
        marks.restore(call);
        return Err(OperatorError::Refused(HostRefusal::WindowTooLarge {
            events: events.len(),
            total,
            budget,
        }));
    }
    Ok(fields)
}

/// The values a call's lists hold: integers, floats and values of any kind.
fn values_in(call: &WindowBatches) -> usize {
    call.ints.len() + call.floats.len() + call.columns.len()
}

/// [`push_window`] without the call's budget.
fn push_any<'a>(
    call: &mut WindowBatches,
    events: &[&'a Event],
    crossings: &[&Option<Crossing>],
    projection: &Projection,
    shapes: &mut WindowShapes<'a>,
) -> Result<Rc<[FieldName]>> {
    if projection.crosses_no_field() {
        // Nothing to read but the times: not even the field names, to see they agree.
        call.timestamps
            .extend(events.iter().map(|event| event.timestamp));
        return Ok(shapes.none());
    }
    let Some(&first) = events.first() else {
        return push_through_values(call, events, projection);
    };
    // No `warm` here: the caller fetched this window's events ahead (`warm`).
    if let Some(fields) = push_crossed(call, events, crossings, projection, shapes) {
        return Ok(fields);
    }
    let (fields, layout) = shapes.of(first, projection);
    check_width(fields.len(), events.len())?;
    if push_numeric(call, events, layout) {
        return Ok(fields);
    }
    if !events.iter().all(|&event| same_names(first, event)) {
        return push_through_values(call, events, projection);
    }
    call.timestamps
        .extend(events.iter().map(|event| event.timestamp));
    for &slot in layout {
        push_straight(call, events, slot);
    }
    Ok(fields)
}

/// Adds a window whose events all came with a [`Crossing`] of one field and one kind of
/// number (the router's copy of each event's time and only crossing field), as
/// [`push_numeric`] would: the times and the numbers from the crossings, the events unread.
/// Returns the window's one field, or `None` with nothing added if an event came without a
/// crossing, or with another field or kind of number, or the window is too wide
/// ([`check_width`]: the path after this refuses it).
fn push_crossed(
    call: &mut WindowBatches,
    events: &[&Event],
    crossings: &[&Option<Crossing>],
    projection: &Projection,
    shapes: &mut WindowShapes<'_>,
) -> Option<Rc<[FieldName]>> {
    let first = crossings.first()?.as_ref()?;
    if crossings.len() != events.len() || check_width(1, events.len()).is_err() {
        return None;
    }
    let marks = Marks::of(call);
    let kind = match first.number {
        CrossingNumber::Int(_) => ColumnKind::Ints,
        CrossingNumber::Float(_) => {
            call.floats.reserve(events.len());
            ColumnKind::Floats
        }
    };
    for (&event, &crossing) in events.iter().zip(crossings) {
        debug_assert!(crossing.is_none_or(|c| projection.sole_crossing(event) == Some(c)));
        let Some(crossing) = crossing.filter(|c| c.field == first.field) else {
            marks.restore(call);
            return None;
        };
        match (kind, crossing.number) {
            (ColumnKind::Ints, CrossingNumber::Int(i)) => call.ints.push(i),
            (ColumnKind::Floats, CrossingNumber::Float(f)) => call.floats.push(f),
            _ => {
                marks.restore(call);
                return None;
            }
        }
        call.timestamps.push(crossing.timestamp);
    }
    call.kinds.push(kind);
    Some(shapes.crossed(first.field))
}

/// How long a call's lists were before a window was pushed into them, to take the window out
/// again if it cannot be read the way it was begun, or does not fit the call.
struct Marks {
    timestamps: usize,
    kinds: usize,
    ints: usize,
    floats: usize,
    columns: usize,
}

impl Marks {
    fn of(call: &WindowBatches) -> Marks {
        Marks {
            timestamps: call.timestamps.len(),
            kinds: call.kinds.len(),
            ints: call.ints.len(),
            floats: call.floats.len(),
            columns: call.columns.len(),
        }
    }

    fn restore(self, call: &mut WindowBatches) {
        call.timestamps.truncate(self.timestamps);
        call.kinds.truncate(self.kinds);
        call.ints.truncate(self.ints);
        call.floats.truncate(self.floats);
        call.columns.truncate(self.columns);
    }
}

/// The most crossing fields [`push_numeric`] reads in one pass (a wider window goes a field
/// at a time).
const NUMERIC_FIELDS: usize = 8;

/// Adds a window in one pass over its events if it has events, every one has the first one's
/// field names, and each of its at most [`NUMERIC_FIELDS`] crossing fields holds integers in
/// every event or floats in every event, as nearly always: each event's time and values go
/// straight to their places in the call's lists, field after field. `layout` is where each
/// crossing field sits in the first event (so in all of them, when their names agree). Returns
/// false, with nothing added, otherwise (a field absent, or not a number, or of mixed kinds;
/// other names; more fields). The lists are as [`push_straight`] makes them. Reading the
/// events once instead of once per field and once per check, with [`WindowShapes`], took the
/// Wasm shard's time per event down by 1-2 % (four and three alternated sets); most of what is
/// left of this work is the first read of each event's fields, a wait on memory.
fn push_numeric(call: &mut WindowBatches, events: &[&Event], layout: &[Option<usize>]) -> bool {
    let Some(&first) = events.first() else {
        return false;
    };
    if layout.len() > NUMERIC_FIELDS {
        return false;
    }
    let count = events.len();
    // Each field's index in an event, its list, and where its values start in that list.
    let mut columns = [(0, ColumnKind::Ints, 0); NUMERIC_FIELDS];
    let (mut ints, mut floats) = (call.ints.len(), call.floats.len());
    for (column, slot) in columns.iter_mut().zip(layout) {
        let Some(i) = *slot else { return false };
        let (kind, end) = match first.fields[i].1 {
            Value::Int(_) => (ColumnKind::Ints, &mut ints),
            Value::Float(_) => (ColumnKind::Floats, &mut floats),
            _ => return false,
        };
        *column = (i, kind, *end);
        *end += count;
    }
    let columns = &columns[..layout.len()];
    let marks = Marks::of(call);
    call.ints.resize(ints, 0);
    call.floats.resize(floats, 0.0);
    call.timestamps.reserve(count);
    for (e, event) in events.iter().enumerate() {
        let read = same_names(first, event)
            && (columns.iter()).all(|&(i, kind, at)| match (kind, &event.fields[i].1) {
                (ColumnKind::Ints, Value::Int(value)) => {
                    call.ints[at + e] = *value;
                    true
                }
                (ColumnKind::Floats, Value::Float(value)) => {
                    call.floats[at + e] = *value;
                    true
                }
                _ => false,
            });
        if !read {
            marks.restore(call);
            return false;
        }
        call.timestamps.push(event.timestamp);
    }
    call.kinds.extend(columns.iter().map(|&(_, kind, _)| kind));
    true
}

/// [`push_window`] for events of any field names: through one list of all the window's
/// values (nulls where an event lacks a field).
fn push_through_values(
    call: &mut WindowBatches,
    events: &[&Event],
    projection: &Projection,
) -> Result<Rc<[FieldName]>> {
    let batch = to_wit_columns(events, projection)?;
    let count = batch.timestamps.len();
    call.timestamps.extend(batch.timestamps);
    push_columns(call, batch.values, batch.fields.len(), count);
    Ok(batch
        .fields
        .iter()
        .map(|name| FieldName::new(name))
        .collect())
}

/// Adds one field's values to `call`, read from each of `events` at `slot` (null where it is
/// none: a projection's field the events lack).
fn push_straight(call: &mut WindowBatches, events: &[&Event], slot: Option<usize>) {
    let values = || (events.iter()).map(move |event| slot.map(|i| &event.fields[i].1));
    let kind = if values().all(|value| matches!(value, Some(Value::Int(_)))) {
        ColumnKind::Ints
    } else if values().all(|value| matches!(value, Some(Value::Float(_)))) {
        ColumnKind::Floats
    } else {
        ColumnKind::Values
    };
    call.kinds.push(kind);
    match kind {
        ColumnKind::Ints => call.ints.extend(values().filter_map(|value| match value {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        })),
        ColumnKind::Floats => call.floats.extend(values().filter_map(|value| match value {
            Some(Value::Float(f)) => Some(*f),
            _ => None,
        })),
        ColumnKind::Values => call
            .columns
            .extend(values().map(|value| value.map_or(wit::Value::Null, |v| to_wit(v.clone())))),
    }
}

/// Adds one window's values, `fields` fields of `events` values each, field after field, to
/// `call`: a field whose values are all integers to `ints`, all floats to `floats`, any other
/// to `columns`.
fn push_columns(call: &mut WindowBatches, values: Vec<wit::Value>, fields: usize, events: usize) {
    let mut values = values.into_iter();
    for _ in 0..fields {
        let next = values.as_slice();
        let kind = column_kind(next.get(..events).unwrap_or(next));
        call.kinds.push(kind);
        let field = values.by_ref().take(events);
        match kind {
            ColumnKind::Ints => call.ints.extend(field.filter_map(|value| match value {
                wit::Value::Int(i) => Some(i),
                _ => None,
            })),
            ColumnKind::Floats => call.floats.extend(field.filter_map(|value| match value {
                wit::Value::Float(f) => Some(f),
                _ => None,
            })),
            ColumnKind::Values => call.columns.extend(field),
        }
    }
}

/// The list that a field with `values` crosses in.
fn column_kind(values: &[wit::Value]) -> ColumnKind {
    if values.iter().all(|v| matches!(v, wit::Value::Int(_))) {
        ColumnKind::Ints
    } else if values.iter().all(|v| matches!(v, wit::Value::Float(_))) {
        ColumnKind::Floats
    } else {
        ColumnKind::Values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(timestamp: i64, fields: Vec<(FieldName, Value)>) -> Event {
        Event {
            line: 1,
            key: "k".into(),
            timestamp,
            fields,
        }
    }

    /// An event of one field, `name`.
    fn only(timestamp: i64, name: &FieldName, value: Value) -> Event {
        event(timestamp, vec![(name.clone(), value)])
    }

    /// A window whose events all came with crossings of one field and kind is read from them:
    /// its field is the crossings', and no event's names are looked at. Without its
    /// crossings, the same window is read from its events, into the same lists.
    #[test]
    fn a_window_with_crossings_is_read_from_them() {
        let c = FieldName::new("c");
        let events = [only(1, &c, Value::Int(5)), only(2, &c, Value::Int(6))];
        let events: Vec<&Event> = events.iter().collect();
        let projection = Projection::except(&["k"]);
        let taken: Vec<_> = events.iter().map(|e| projection.sole_crossing(e)).collect();
        assert!(taken.iter().all(Option::is_some));
        let taken: Vec<_> = taken.iter().collect();
        let (mut call, mut shapes) = (empty_call(), WindowShapes::default());
        let names = push_window(&mut call, &events, &taken, &projection, &mut shapes).unwrap();
        assert_eq!(*names, [c]);
        assert!(shapes.first.is_none(), "an event's names were read");
        assert_eq!((&call.ints, &call.timestamps), (&vec![5, 6], &vec![1, 2]));
        let mut read = empty_call();
        let (mut shapes, none) = (WindowShapes::default(), vec![&None; 2]);
        push_window(&mut read, &events, &none, &projection, &mut shapes).unwrap();
        assert!(shapes.first.is_some() && shapes.crossed.is_none());
        assert_eq!(format!("{read:?}"), format!("{call:?}"));
    }

    fn empty_call() -> WindowBatches {
        WindowBatches {
            names: vec![],
            counts: vec![],
            values: vec![],
            fields: vec![],
            timestamps: vec![],
            kinds: vec![],
            ints: vec![],
            floats: vec![],
            columns: vec![],
        }
    }

    /// Each field crosses in the list its values fit: integers, floats, or values for any
    /// mix; a field of no events still has its kind.
    #[test]
    fn each_field_crosses_in_the_list_its_values_fit() {
        use ColumnKind::{Floats, Ints, Values};
        use wit::Value::{Float, Int, Null, Text};
        let mut call = empty_call();
        let text = Text("a".into());
        let window = vec![Int(1), Int(2), Float(0.5), Float(1.0), Int(3), Float(2.0)];
        push_columns(&mut call, window, 3, 2);
        push_columns(&mut call, vec![Null, text.clone()], 1, 2);
        push_columns(&mut call, vec![], 2, 0);
        assert_eq!(call.kinds, [Ints, Floats, Values, Values, Ints, Ints]);
        assert_eq!(call.ints, [1, 2]);
        assert_eq!(call.floats, [0.5, 1.0]);
        let columns: Vec<_> = call.columns.into_iter().map(super::from_wit).collect();
        let expected = [Int(3), Float(2.0), Null, text].map(super::from_wit);
        assert_eq!(columns, expected);
    }

    /// A window whose events share their names is read straight from them (not through a
    /// list of values), each field into the list its values fit, after the windows before it.
    #[test]
    fn a_uniform_window_crosses_straight_into_typed_lists() {
        let (x, y, z) = (
            FieldName::new("x"),
            FieldName::new("y"),
            FieldName::new("z"),
        );
        let row = |timestamp: i64, xv: i64, yv: f64, zv: Value| {
            let fields = vec![(x.clone(), Value::Int(xv)), (y.clone(), Value::Float(yv))];
            event(
                timestamp,
                fields.into_iter().chain([(z.clone(), zv)]).collect(),
            )
        };
        let events = [
            row(4, 1, 0.5, Value::Int(7)),
            row(2, 2, 1.5, Value::Text("t".into())),
        ];
        let events: Vec<&Event> = events.iter().collect();
        let mut call = empty_call();
        call.timestamps.push(99);
        call.ints.push(-1);
        let mut shapes = WindowShapes::default();
        let names = push_window(&mut call, &events, &[], &Projection::All, &mut shapes).unwrap();
        assert_eq!(*names, [x, y, z]);
        assert_eq!(call.timestamps, [99, 4, 2]);
        use ColumnKind::{Floats, Ints, Values};
        assert_eq!(call.kinds, [Ints, Floats, Values]);
        assert_eq!(call.ints, [-1, 1, 2]);
        assert_eq!(call.floats, [0.5, 1.5]);
        let columns: Vec<_> = call.columns.into_iter().map(super::from_wit).collect();
        assert_eq!(columns, [Value::Int(7), Value::Text("t".into())]);
    }

    /// A window of integer and float fields is read in one pass; a window with a field of
    /// another kind, or of mixed kinds, or events of other names, is not, and nothing of it is
    /// left in the call.
    #[test]
    fn a_numeric_window_is_read_in_one_pass_or_not_at_all() {
        let (x, y) = (FieldName::new("x"), FieldName::new("y"));
        let row = |timestamp: i64, xv: Value, yv: Value| {
            event(timestamp, vec![(x.clone(), xv), (y.clone(), yv)])
        };
        let numeric = [
            row(1, Value::Int(1), Value::Float(0.5)),
            row(2, Value::Int(2), Value::Float(1.5)),
        ];
        let mut call = empty_call();
        call.ints.push(-1);
        let events: Vec<&Event> = numeric.iter().collect();
        assert!(push_numeric(&mut call, &events, &[Some(0), Some(1)]));
        assert!(push_numeric(
            &mut call,
            &events,
            &[Some(1), Some(0), Some(0)]
        ));
        use ColumnKind::{Floats, Ints};
        assert_eq!(call.kinds, [Ints, Floats, Floats, Ints, Ints]);
        assert_eq!(call.ints, [-1, 1, 2, 1, 2, 1, 2]);
        assert_eq!(call.floats, [0.5, 1.5, 0.5, 1.5]);
        assert_eq!(call.timestamps, [1, 2, 1, 2]);
        let before = format!("{call:?}");
        let other_names = event(
            3,
            vec![(y.clone(), Value::Int(3)), (x.clone(), Value::Int(4))],
        );
        let refused = [
            vec![row(3, Value::Int(3), Value::Text("t".into()))],
            vec![
                row(3, Value::Int(3), Value::Float(1.0)),
                row(4, Value::Int(4), Value::Int(5)),
            ],
            vec![row(3, Value::Int(3), Value::Float(1.0)), other_names],
        ];
        for window in &refused {
            let events: Vec<&Event> = window.iter().collect();
            assert!(!push_numeric(&mut call, &events, &[Some(0), Some(1)]));
        }
        assert!(
            !push_numeric(&mut call, &events, &[Some(0), None]),
            "a field absent"
        );
        assert!(
            !push_numeric(&mut call, &events, &[Some(0); NUMERIC_FIELDS + 1]),
            "too many"
        );
        assert!(!push_numeric(&mut call, &[], &[Some(0)]), "no events");
        assert_eq!(format!("{call:?}"), before, "nothing added");
    }

    /// Windows whose events share their names (read straight from the events), windows whose
    /// events do not (read through a list of values) and windows read from the crossings the
    /// router took of their events cross the same, one after another into one call: the same
    /// fields, times, kinds and values as the list of values gives, with every projection. A
    /// window too wide is refused with nothing added.
    #[test]
    fn windows_cross_the_same_read_straight_from_their_events() {
        let (a, b, c) = (
            FieldName::new("a"),
            FieldName::new("b"),
            FieldName::new("c"),
        );
        let row = |timestamp: i64, a_value: Value, b_value: Value| {
            event(
                timestamp,
                vec![
                    (a.clone(), a_value),
                    (b.clone(), b_value),
                    (a.clone(), Value::Int(99)),
                ],
            )
        };
        // Past `SCAN_LIMIT` fields, an event's names are looked up by hashing.
        let wide = |timestamp: i64| {
            let fields = (0..40).map(|i| (FieldName::new(&format!("f{i}")), Value::Int(i)));
            event(
                timestamp,
                fields.chain([(a.clone(), Value::Float(0.5))]).collect(),
            )
        };
        let windows: Vec<Vec<Event>> = vec![
            vec![
                row(7, Value::Int(1), Value::Float(0.5)),
                row(3, Value::Int(2), Value::Float(1.5)),
            ],
            vec![
                row(11, Value::Int(1), Value::Int(2)),
                row(-4, Value::Float(2.5), Value::Null),
            ],
            vec![row(5, Value::Text("t".into()), Value::Boolean(true))],
            vec![
                row(1, Value::Int(1), Value::Int(2)),
                event(2, vec![(c.clone(), Value::Int(3))]),
            ],
            vec![event(8, vec![]), event(9, vec![])],
            vec![],
            vec![wide(12), wide(13)],
            // Read in one pass until its last event, which is not a number where it should be.
            vec![
                row(20, Value::Float(1.0), Value::Int(1)),
                row(21, Value::Float(2.0), Value::Int(2)),
                row(22, Value::Float(3.0), Value::Float(3.0)),
            ],
            vec![row(23, Value::Int(4), Value::Float(4.5))],
            // Numbers only, but more fields than one pass reads.
            (24..26)
                .map(|timestamp| {
                    let fields = (0..=NUMERIC_FIELDS as i64)
                        .map(|i| (FieldName::new(&format!("n{i}")), Value::Int(i + timestamp)));
                    event(timestamp, fields.collect())
                })
                .collect(),
            // One field each: read from the crossings if they are of one field and kind.
            vec![only(30, &c, Value::Int(1)), only(31, &c, Value::Int(-2))],
            vec![
                only(32, &c, Value::Float(0.5)),
                only(33, &c, Value::Float(-0.0)),
            ],
            vec![only(34, &c, Value::Int(1)), only(35, &c, Value::Float(1.5))],
            vec![only(36, &c, Value::Float(2.5)), only(37, &c, Value::Int(2))],
            vec![only(38, &c, Value::Int(1)), only(39, &a, Value::Int(2))],
            vec![only(40, &c, Value::Int(1)), only(41, &c, Value::Null)],
            vec![
                only(42, &c, Value::Text("t".into())),
                only(43, &c, Value::Int(3)),
            ],
            // Numbers at their edges cross unchanged.
            vec![
                only(44, &c, Value::Int(i64::MIN)),
                only(45, &c, Value::Int(i64::MAX)),
            ],
            vec![
                only(46, &c, Value::Float(f64::MAX)),
                only(47, &c, Value::Float(f64::NAN)),
                only(48, &c, Value::Float(f64::NEG_INFINITY)),
                only(49, &c, Value::Float(f64::MIN_POSITIVE)),
            ],
        ];
        let projections = [
            Projection::All,
            Projection::except(&["b"]),
            Projection::only(&["c", "a", "absent", "f39"]),
            Projection::only(&["c"]),
            Projection::only::<&str>(&[]),
        ];
        for projection in &projections {
            let (mut call, mut crossed, mut expected) = (empty_call(), empty_call(), empty_call());
            let (mut shapes, mut crossed_shapes) =
                (WindowShapes::default(), WindowShapes::default());
            for events in &windows {
                let events: Vec<&Event> = events.iter().collect();
                let names = push_window(&mut call, &events, &[], projection, &mut shapes).unwrap();
                call.names.extend(names.iter().map(FieldName::to_string));
                let taken: Vec<_> = events.iter().map(|e| projection.sole_crossing(e)).collect();
                let taken: Vec<_> = taken.iter().collect();
                let names = push_window(
                    &mut crossed,
                    &events,
                    &taken,
                    projection,
                    &mut crossed_shapes,
                );
                crossed
                    .names
                    .extend(names.unwrap().iter().map(FieldName::to_string));
                let names = push_through_values(&mut expected, &events, projection).unwrap();
                expected
                    .names
                    .extend(names.iter().map(FieldName::to_string));
            }
            let expected = format!("{expected:?}");
            assert_eq!(format!("{call:?}"), expected, "{projection:?}");
            assert_eq!(format!("{crossed:?}"), expected, "{projection:?}");
            let times = [7, 3, 11, -4, 5, 1, 2, 8, 9, 12, 13, 20, 21, 22, 23, 24, 25];
            assert!(call.timestamps.starts_with(&times));
            assert_eq!(call.timestamps[times.len()..], (30..50).collect::<Vec<_>>());
            // The windows of one field were read from their crossings where any could be.
            let one_field = !matches!(projection, Projection::Only(names) if names.len() != 1);
            assert_eq!(
                crossed_shapes.crossed.is_some(),
                one_field,
                "{projection:?}"
            );
        }
        let wide: Vec<Event> = (0..2)
            .map(|e| {
                let fields =
                    (0..1 << 11).map(|i| (FieldName::new(&format!("w{i}")), Value::Int(i)));
                event(e, fields.collect())
            })
            .collect();
        let wide: Vec<&Event> = wide.iter().cycle().take(1 << 10).collect();
        let mut call = empty_call();
        let mut shapes = WindowShapes::default();
        assert!(push_window(&mut call, &wide, &[], &Projection::All, &mut shapes).is_err());
        // Narrow at first, too wide in all: refused as well, though its first event is narrow.
        let narrow = event(0, vec![(a.clone(), Value::Int(1))]);
        let widening: Vec<&Event> = [&narrow]
            .into_iter()
            .chain(wide[1..].iter().copied())
            .collect();
        let crossings = vec![&None; widening.len()];
        let all = &Projection::All;
        assert!(push_window(&mut call, &widening, &crossings, all, &mut shapes).is_err());
        assert_eq!(
            format!("{call:?}"),
            format!("{:?}", empty_call()),
            "nothing added"
        );
    }

    /// A call's windows share one budget of values: a window that would take a call past it is
    /// taken out again whole, whatever lists it was read into (integers, values of any kind,
    /// crossings), and a later one that fits still goes in; a call's first window goes in
    /// whatever its size (each window is bounded alone by `check_width`).
    #[test]
    fn a_window_that_would_take_its_call_past_its_budget_is_refused_whole() {
        let (a, b) = (FieldName::new("a"), FieldName::new("b"));
        let ints: Vec<Event> = (0..4).map(|t| only(t, &a, Value::Int(t))).collect();
        let mixed: Vec<Event> = (0..3)
            .map(|t| {
                event(
                    t,
                    vec![
                        (a.clone(), Value::Int(t)),
                        (b.clone(), Value::Text("x".into())),
                    ],
                )
            })
            .collect();
        let one = [only(9, &a, Value::Int(9))];
        let [ints, mixed, one]: [Vec<&Event>; 3] =
            [&ints[..], &mixed[..], &one[..]].map(|events| events.iter().collect());
        let projection = Projection::All;
        let crossings: Vec<_> = ints.iter().map(|e| projection.sole_crossing(e)).collect();
        let crossings: Vec<_> = crossings.iter().collect();
        // Each push with shapes of its own (a call's are kept from window to window).
        fn push(
            call: &mut WindowBatches,
            events: &[&Event],
            crossings: &[&Option<Crossing>],
            budget: usize,
        ) -> Result<Rc<[FieldName]>> {
            let (projection, shapes) = (&Projection::All, &mut WindowShapes::default());
            push_within(budget, call, events, crossings, projection, shapes)
        }
        let mut call = empty_call();
        // The first window goes in over the budget; the call then holds 4 values.
        assert!(push(&mut call, &ints, &crossings, 3).is_ok());
        let before = format!("{call:?}");
        // 6 values more (3 integers and 3 texts) would make 10.
        assert!(push(&mut call, &mixed, &[], 9).is_err());
        assert_eq!(format!("{call:?}"), before, "nothing of it left");
        // Read from its crossings, 4 more would make 8.
        assert!(push(&mut call, &ints, &crossings, 7).is_err());
        assert_eq!(format!("{call:?}"), before, "nothing of it left");
        // One more value makes 5: within.
        assert!(push(&mut call, &one, &[], 5).is_ok());
        assert_eq!(call.ints, [0, 1, 2, 3, 9]);
        assert_eq!(call.timestamps, [0, 1, 2, 3, 9]);
        assert!(push(&mut call, &mixed, &[], 11).is_ok());
        assert_eq!(values_in(&call), 11);
    }
}
