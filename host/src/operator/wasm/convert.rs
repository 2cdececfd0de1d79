//! Values and events across the boundary: Weir's typed values to the WIT types and back,
//! which of an event's fields cross (as its [`Projection`] says) and where each sits in an
//! event ([`Shape`]), and fetching events ahead of reading them ([`warm`]). Used by the calls
//! of [`super::aggregate`], [`super::enrich`] and [`super::window_call`] (which builds
//! `add-windows` calls from these) and by the state imports ([`super::scope_host`]).
//!
//! Depends on `event`, `field_name`, `hashing`, `prefetch` and `value`.

use super::*;
use crate::field_name::FieldName;
use crate::hashing::{HashMap, HashSet};

/// Converts a batch to the WIT shape: field names once, then one row of values per event.
///
/// Events of a batch nearly always share their field names in the same order, and interned
/// names compare by address, so each event's layout (where each crossing field sits in it) is
/// worked out again only when its names differ from the previous event's.
pub(super) fn to_wit_events(events: &[&Event], projection: &Projection) -> Result<wit::Events> {
    let fields = crossing_fields(events, projection);
    check_width(fields.len(), events.len())?;
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
    Ok(wit::Events {
        fields: fields.iter().map(|name| name.to_string()).collect(),
        rows,
    })
}

/// The most values one call's batch may hold (events x crossing fields, nulls included). Every
/// event crosses with a value, or a null, for every field of the batch, so events that each
/// bring their own thousands of names (1 MiB lines hold about 100,000) would otherwise make a
/// batch quadratic in its input: a hundred such lines, gigabytes. A wider batch is refused
/// before anything is built, and the host retries its events one call each, as after any
/// refused batch, so the results are the same. (A million values lower to 16 MiB of the guest's
/// memory, which the guest copies again; 4,096 events of 256 fields fit.)
pub(super) const MAX_BATCH_VALUES: usize = 1 << 20;

/// Refuses a batch of `events` events and `fields` crossing fields if it holds more than
/// [`MAX_BATCH_VALUES`] values (a single event always crosses).
pub(super) fn check_width(fields: usize, events: usize) -> Result<()> {
    match fields.checked_mul(events) {
        Some(values) if values <= MAX_BATCH_VALUES || events <= 1 => Ok(()),
        _ => Err(OperatorError::Refused(HostRefusal::BatchTooWide {
            events,
            fields,
            max: MAX_BATCH_VALUES,
        })),
    }
}

/// Converts a batch to the shape of contract 0.2: field names once, the timestamps, then every
/// field's values, field after field, in one list. The guest gets the same values as from
/// [`to_wit_events`] in one list per batch instead of one per event.
pub(super) fn to_wit_columns(
    events: &[&Event],
    projection: &Projection,
) -> Result<wit_columns::Events> {
    let fields = crossing_fields(events, projection);
    check_width(fields.len(), events.len())?;
    let mut values = vec![wit::Value::Null; fields.len() * events.len()];
    let mut shape = Shape::default();
    for (e, event) in events.iter().enumerate() {
        warm(events, e);
        let layout = shape.layout(event, &fields);
        for (f, slot) in layout.iter().enumerate() {
            if let Some(i) = slot {
                values[f * events.len() + e] = to_wit(event.fields[*i].1.clone());
            }
        }
    }
    Ok(wit_columns::Events {
        fields: fields.iter().map(|name| name.to_string()).collect(),
        timestamps: events.iter().map(|event| event.timestamp).collect(),
        values,
    })
}

/// The fields that cross for `events`, in order of first appearance (or the projection's).
pub(super) fn crossing_fields(events: &[&Event], projection: &Projection) -> Vec<FieldName> {
    let skip: &[FieldName] = match projection {
        Projection::Only(names) => return names.clone(),
        Projection::Except(skip) => skip,
        Projection::All => &[],
    };
    let mut fields: Vec<FieldName> = Vec::new();
    let mut seen: HashSet<&FieldName> = HashSet::default();
    let mut previous: Option<&Event> = None;
    for (i, &event) in events.iter().enumerate() {
        warm(events, i);
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

/// How many events ahead of the one being read [`warm`] asks the CPU to fetch.
const WARM_AHEAD: usize = 16;

/// The most bytes of an event's fields [`warm`] and [`warm_window`] fetch ahead: twelve fields
/// of 40 bytes, eight cache lines' worth (nine when they do not start at a line's start).
const WARM_BYTES: usize = 512;

/// Asks the CPU to fetch the event `WARM_AHEAD` places after `events[i]`, and the fields of the
/// one half as far ahead (by then its own fetch has arrived), every cache line of them up to
/// [`WARM_BYTES`]: a field's name and value are 40 bytes, so three fields span two or three
/// lines, and fetching only the first left the reads of the others waiting (the count-sum's
/// shard thread took 5-10 % longer, when a field was 56 bytes). A window's events are
/// scattered over the batches it spans and were made on the router's core, so reading them in
/// turn waits on memory for every one; fetched ahead, the waits overlap.
pub(super) fn warm(events: &[&Event], i: usize) {
    if let Some(&far) = events.get(i + WARM_AHEAD) {
        fetch_event(far);
    }
    if let Some(&near) = events.get(i + WARM_AHEAD / 2) {
        fetch_fields(near);
    }
}

/// Asks the CPU to fetch one window's `events`: every header (which holds the time and the
/// fields' address), then, unless `headers_only`, every event's fields as [`warm`] does.
/// Reading a header for its fields' address is a load, so this waits, but for the window's
/// events at once. Called for the next window before one is read: fetching every event of a
/// call before reading any (a call's events are a few megabytes) let the first fetched leave
/// the cache before they were read.
pub(super) fn warm_window(events: &[&Event], headers_only: bool) {
    events.iter().for_each(|event| fetch_event(event));
    if !headers_only {
        events.iter().for_each(|event| fetch_fields(event));
    }
}

/// Asks the CPU to fetch `event`'s header (its fields' address, its time): both its first and
/// its last byte's lines, as a header (64 bytes) in a list of them mostly straddles two.
fn fetch_event(event: &Event) {
    let start = std::ptr::from_ref(event).cast::<u8>();
    crate::prefetch::line(start);
    crate::prefetch::line(start.wrapping_add(std::mem::size_of::<Event>() - 1));
}

/// Asks the CPU to fetch every cache line of `event`'s fields, up to [`WARM_BYTES`].
fn fetch_fields(event: &Event) {
    let bytes = std::mem::size_of_val(event.fields.as_slice()).min(WARM_BYTES);
    crate::prefetch::lines(event.fields.as_ptr().cast(), bytes);
}

/// Whether two events have the same field names in the same order.
pub(super) fn same_names(a: &Event, b: &Event) -> bool {
    a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|((x, _), (y, _))| x == y)
}

/// The layout of the last event seen: for each crossing field, its index in that event.
#[derive(Default)]
pub(super) struct Shape<'a> {
    names: Option<&'a Event>,
    layout: Vec<Option<usize>>,
}

/// Past this many fields an event's names are looked up by hashing instead of a scan, so that
/// a line with a hundred thousand fields costs linear time, not quadratic.
const SCAN_LIMIT: usize = 32;

impl<'a> Shape<'a> {
    pub(super) fn layout(&mut self, event: &'a Event, fields: &[FieldName]) -> &[Option<usize>] {
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
        Value::Text(s) => wit::Value::Text(s.into_string()),
        Value::Bytes(b) => wit::Value::Bytes(b),
    }
}

pub(super) fn from_wit(value: wit::Value) -> Value {
    match value {
        wit::Value::Null => Value::Null,
        wit::Value::Boolean(b) => Value::Boolean(b),
        wit::Value::Int(i) => Value::Int(i),
        wit::Value::Float(f) => Value::Float(f),
        wit::Value::Text(s) => Value::Text(s.into()),
        wit::Value::Bytes(b) => Value::Bytes(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CrossingNumber;

    /// Text crosses into a guest and back the same, whether it was inline or on the heap.
    #[test]
    fn text_crosses_both_ways_inline_or_on_the_heap() {
        for text in ["", "ann", "a text longer than twenty-four bytes"] {
            let value = Value::Text(text.into());
            assert!(matches!(to_wit(value.clone()), wit::Value::Text(ref t) if t == text));
            assert_eq!(from_wit(to_wit(value.clone())), value);
        }
    }

    fn event(fields: Vec<(FieldName, Value)>) -> Event {
        Event {
            line: 1,
            key: "k".into(),
            timestamp: 5,
            fields,
        }
    }

    /// The router takes an event's only crossing field when it holds a number: the one field
    /// `Only` names (its first occurrence), or the one field `Except` or `All` leaves; none
    /// for any other number of fields, a repeated name, or a value that is not a number.
    #[test]
    fn an_events_sole_crossing_is_its_only_crossing_numeric_field() {
        let [k, t, n, x] = ["k", "t", "n", "x"].map(FieldName::new);
        let sole = |projection: &Projection, fields: Vec<(&FieldName, Value)>| {
            let fields = fields.into_iter().map(|(f, v)| (f.clone(), v)).collect();
            let taken = projection.sole_crossing(&event(fields))?;
            assert_eq!(taken.timestamp, 5, "the event's time");
            Some((taken.field.as_str().to_owned(), taken.number))
        };
        let n_of = |number| Some(("n".to_owned(), number));
        let except = Projection::except(&["k", "t"]);
        let typical = || {
            vec![
                (&k, Value::Text("a".into())),
                (&t, Value::Int(9)),
                (&n, Value::Int(4)),
            ]
        };
        assert_eq!(sole(&except, typical()), n_of(CrossingNumber::Int(4)));
        assert_eq!(
            sole(&Projection::only(&["n"]), typical()),
            n_of(CrossingNumber::Int(4))
        );
        assert_eq!(sole(&Projection::only(&["t", "n"]), typical()), None);
        assert_eq!(sole(&Projection::only::<&str>(&[]), typical()), None);
        assert_eq!(sole(&Projection::All, typical()), None);
        let float = vec![(&n, Value::Float(-0.5))];
        assert_eq!(
            sole(&Projection::All, float.clone()),
            n_of(CrossingNumber::Float(-0.5))
        );
        assert_eq!(sole(&except, float), n_of(CrossingNumber::Float(-0.5)));
        for not_a_number in [Value::Null, Value::Boolean(true), Value::Text("4".into())] {
            assert_eq!(sole(&except, vec![(&n, not_a_number)]), None);
        }
        let twice = || {
            vec![
                (&n, Value::Int(1)),
                (&k, Value::Int(0)),
                (&n, Value::Int(2)),
            ]
        };
        assert_eq!(sole(&except, twice()), None, "one name twice");
        assert_eq!(
            sole(&Projection::only(&["n"]), twice()),
            n_of(CrossingNumber::Int(1))
        );
        let two = vec![(&n, Value::Int(1)), (&x, Value::Int(2))];
        assert_eq!(sole(&except, two), None);
        assert_eq!(sole(&except, vec![(&k, Value::Int(1))]), None, "none left");
        assert_eq!(sole(&Projection::only(&["x"]), typical()), None, "absent");
        let long = FieldName::new(&"n".repeat(crate::field_name::MAX_INTERNED_LEN + 1));
        assert_eq!(
            sole(&Projection::All, vec![(&long, Value::Int(1))]),
            None,
            "not interned"
        );
    }

    /// The column-major list holds exactly the values rows hold, nulls where an event lacks a
    /// field, with or without a projection.
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
        let mut events = events;
        for (i, event) in events.iter_mut().enumerate() {
            event.timestamp = 10 - i as i64;
        }
        let batch: Vec<&Event> = events.iter().collect();
        for projection in [Projection::All, Projection::only(&["m", "absent", "n"])] {
            let rows = to_wit_events(&batch, &projection).unwrap();
            let columns = to_wit_columns(&batch, &projection).unwrap();
            assert_eq!(columns.fields, rows.fields);
            assert_eq!(columns.timestamps, [10, 9, 8], "in arrival order");
            let row_times: Vec<i64> = rows.rows.iter().map(|row| row.timestamp).collect();
            assert_eq!(columns.timestamps, row_times);
            assert_eq!(columns.values.len(), rows.fields.len() * 3);
            for (f, column) in columns.values.chunks(3).enumerate() {
                let expected: Vec<wit::Value> =
                    rows.rows.iter().map(|row| row.values[f].clone()).collect();
                assert_eq!(format!("{column:?}"), format!("{expected:?}"));
            }
        }
        let none = to_wit_columns(&batch, &Projection::only::<&str>(&[])).unwrap();
        assert!(none.values.is_empty() && none.timestamps.len() == 3);
    }

    /// Eleven events of 100,000 names each, all different (eleven hostile 1 MiB lines): as one
    /// batch they would carry 12 million values. Refused before anything is built, in
    /// both shapes; each event alone still crosses, and a projection keeps the batch narrow.
    #[test]
    fn a_batch_of_wide_events_with_different_names_is_refused_not_built() {
        let events: Vec<Event> = (0..11)
            .map(|e| {
                event(
                    (0..100_000)
                        .map(|i| (FieldName::new(&format!("e{e}f{i}")), Value::Int(i)))
                        .collect(),
                )
            })
            .collect();
        let batch: Vec<&Event> = events.iter().collect();
        let started = std::time::Instant::now();
        for refused in [
            to_wit_events(&batch, &Projection::All).err(),
            to_wit_columns(&batch, &Projection::All).err(),
        ] {
            assert!(
                matches!(
                    &refused,
                    Some(OperatorError::Refused(HostRefusal::BatchTooWide { .. }))
                ),
                "{refused:?}"
            );
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert!(to_wit_columns(&batch[..1], &Projection::All).is_ok());
        let narrow = to_wit_columns(&batch, &Projection::only(&["e0f1"])).unwrap();
        assert_eq!(narrow.values.len(), 11);
    }

    /// An event with 100,000 fields (a hostile 1 MiB line) crosses in linear time, each value in
    /// its field's column; a narrow event after it gets its own layout.
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
        let batch = to_wit_events(&[&wide, &narrow], &Projection::All).unwrap();
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
        let only = to_wit_events(&[&wide], &Projection::only(&["w3", "nope"])).unwrap();
        assert_eq!(values(&only.rows[0], 0), Some(3));
        assert_eq!(values(&only.rows[0], 1), None);
        let none = to_wit_events(&[&wide], &Projection::only::<&str>(&[])).unwrap();
        assert!(none.fields.is_empty() && none.rows[0].values.is_empty());
    }
}
