//! The lists a call sends and how each batch's share of them becomes its [`Columns`]: the
//! windows of an `add-windows` call cut one after another from lists sorted by kind
//! ([`Lists`]), and the one batch of a 0.2 `add` call, whose values come field after field in
//! one list ([`with_one_batch`]). Depends on `column_view`; the crate root and `testing` use
//! it.

use std::cell::RefCell;

use crate::Value;
use crate::bindings::aggregator::exports::weir::operator0_3_0::windows::ColumnKind;
use crate::column_view::{Column, Columns, Rows};

/// The first `n` items of `items` (fewer if it is shorter), which then holds the rest.
pub(crate) fn take<'a, T>(items: &mut &'a [T], n: usize) -> &'a [T] {
    let (first, rest) = items.split_at(n.min(items.len()));
    *items = rest;
    first
}

/// The lists an `add-windows` call's windows take their columns from, in turn: each field of
/// each window takes its next kind, and as many values as the window has events from that
/// kind's list (fewer once the list runs out).
pub(crate) struct Lists<'a> {
    kinds: std::slice::Iter<'a, ColumnKind>,
    ints: &'a [i64],
    floats: &'a [f64],
    values_taken: usize,
    values_len: usize,
}

impl<'a> Lists<'a> {
    /// The lists of a call, whose list of values holds `values_len` values.
    pub(crate) fn new(
        kinds: &'a [ColumnKind],
        ints: &'a [i64],
        floats: &'a [f64],
        values_len: usize,
    ) -> Self {
        Lists {
            kinds: kinds.iter(),
            ints,
            floats,
            values_taken: 0,
            values_len,
        }
    }

    /// The next batch's columns, `fields` of them for `events` events, in `columns` (emptied
    /// first).
    pub(crate) fn next_batch(
        &mut self,
        fields: usize,
        events: usize,
        columns: &mut Vec<Column<'a>>,
    ) {
        columns.clear();
        columns.extend((0..fields).map(|_| self.next_column(events)));
    }

    /// The next field's column, of a batch of `events` events.
    fn next_column(&mut self, events: usize) -> Column<'a> {
        match self.kinds.next() {
            Some(ColumnKind::Ints) => Column::Ints(take(&mut self.ints, events)),
            Some(ColumnKind::Floats) => Column::Floats(take(&mut self.floats, events)),
            Some(ColumnKind::Values) => {
                let start = self.values_taken;
                let len = events.min(self.values_len - start);
                self.values_taken += len;
                Column::Values { start, len }
            }
            None => Column::Missing,
        }
    }
}

/// Where one field of a batch sent field after field has its values.
enum Place {
    /// At this index of the batch's integers.
    Ints(usize),
    /// At this index of the batch's floats.
    Floats(usize),
    /// Where they are in the list sent.
    Values { start: usize, len: usize },
}

/// Calls `f` with the batch of fields `names` at `timestamps` whose `values` come field after
/// field (a short list leaves nulls, a long one is cut). A field whose values are all
/// integers, or all floats, is given as one slice, as an `add-windows` call sends it, so that
/// [`Aggregate::add_columns`](crate::Aggregate::add_columns) sees a batch the same way on
/// either call.
pub(crate) fn with_one_batch<R>(
    names: &[String],
    timestamps: &[i64],
    values: Vec<Value>,
    f: impl FnOnce(&Columns<'_>) -> R,
) -> R {
    let events = timestamps.len();
    let (mut ints, mut floats) = (Vec::new(), Vec::new());
    let places: Vec<Place> = (0..names.len())
        .map(|field| {
            let start = field.saturating_mul(events).min(values.len());
            let own = &values[start..start.saturating_add(events).min(values.len())];
            let whole = own.len() == events;
            if whole && own.iter().all(|value| matches!(value, Value::Int(_))) {
                let at = ints.len();
                ints.extend(own.iter().filter_map(Value::as_int));
                Place::Ints(at)
            } else if whole && own.iter().all(|value| matches!(value, Value::Float(_))) {
                let at = floats.len();
                floats.extend(own.iter().filter_map(Value::as_float));
                Place::Floats(at)
            } else {
                Place::Values {
                    start,
                    len: own.len(),
                }
            }
        })
        .collect();
    let columns: Vec<Column> = (places.iter())
        .map(|place| match *place {
            Place::Ints(at) => Column::Ints(&ints[at..at + events]),
            Place::Floats(at) => Column::Floats(&floats[at..at + events]),
            Place::Values { start, len } => Column::Values { start, len },
        })
        .collect();
    let fields: Vec<u32> = (0..names.len() as u32).collect();
    let rows = RefCell::new(Rows::new(values));
    f(&Columns::new(names, &fields, timestamps, &columns, &rows))
}

#[cfg(test)]
mod tests {
    use super::{ColumnKind, Columns, Lists, Rows, with_one_batch};
    use crate::Value;
    use crate::bindings::aggregator::weir::operator0_2_0::columns;
    use crate::events::from_columns;
    use std::cell::RefCell;

    /// Windows cut from one call's lists and refilling the same rows read as each window's
    /// own batch: grown, shrunk, with other fields, short of values, a name past the call's,
    /// past the kinds, and after a window that never asked for its rows.
    #[test]
    fn windows_cut_from_a_calls_lists_read_as_their_own_rows() {
        let names: Vec<String> = ["n", "t", "x"].map(String::from).to_vec();
        let (ints, floats, any) = (ColumnKind::Ints, ColumnKind::Floats, ColumnKind::Values);
        let kinds = [ints, floats, any, ints, any, any];
        let text = Value::Text("t".into());
        let values = vec![text.clone(), Value::Null, Value::Int(9), Value::Int(5)];
        let mut lists = Lists::new(&kinds, &[1, 2, 3], &[0.5, 1.5], values.len());
        let rows = RefCell::new(Rows::new(values));
        // Fields, timestamps, whether the operator asks for the rows, and the rows' values.
        type Window<'a> = (&'a [u32], &'a [i64], bool, Vec<Vec<Value>>);
        let null = Value::Null;
        let windows: [Window; 6] = [
            (
                &[0, 1],
                &[10, 20],
                true,
                vec![
                    vec![Value::Int(1), Value::Float(0.5)],
                    vec![Value::Int(2), Value::Float(1.5)],
                ],
            ),
            (
                &[2, 0],
                &[30, 40, 50],
                true,
                vec![
                    vec![text, Value::Int(3)],
                    vec![null.clone(), null.clone()],
                    vec![Value::Int(9), null.clone()],
                ],
            ),
            (&[1], &[55], false, vec![]),
            (&[7], &[60], true, vec![vec![null.clone()]]),
            (&[0, 1], &[65], true, vec![vec![null.clone(), null]]),
            (&[], &[70, 80], true, vec![vec![], vec![]]),
        ];
        let mut columns = Vec::new();
        for (fields, timestamps, asks, expected) in windows {
            lists.next_batch(fields.len(), timestamps.len(), &mut columns);
            let batch = Columns::new(&names, fields, timestamps, &columns, &rows);
            if !asks {
                continue; // its value (5) is skipped, not read by the next window
            }
            let events = batch.events();
            let window_names: Vec<&str> = batch.fields().collect();
            assert_eq!(events.fields, window_names);
            let got: Vec<_> = (events.rows.iter())
                .map(|row| (row.timestamp, row.values.clone()))
                .collect();
            let want: Vec<_> = timestamps.iter().copied().zip(expected).collect();
            assert_eq!(got, want);
        }
    }

    /// One batch sent field after field reads as the rows 0.2 sent, whatever its lists;
    /// whole numeric fields read as slices (an empty field as integers, as the host sends it).
    #[test]
    fn one_batch_reads_as_its_rows_with_whole_numeric_fields_as_slices() {
        let text = || Value::Text("a".into());
        // Each field's slices: integers, floats.
        type Slices<'a> = (Option<&'a [i64]>, Option<&'a [f64]>);
        // Fields, timestamps, the values field after field, and each field's slices.
        type Case<'a> = (&'a [&'a str], &'a [i64], Vec<Value>, &'a [Slices<'a>]);
        let none: Slices = (None, None);
        let cases: [Case; 6] = [
            (
                &["n", "x"],
                &[1, 2],
                vec![1.into(), 2.into(), 0.5.into(), 1.5.into()],
                &[(Some(&[1, 2]), None), (None, Some(&[0.5, 1.5]))],
            ),
            (
                &["n", "v"],
                &[1, 2],
                vec![1.into(), 0.5.into(), text(), Value::Null],
                &[none, none],
            ),
            (
                &["n", "short"],
                &[1, 2],
                vec![1.into(), 2.into(), 3.into()],
                &[(Some(&[1, 2]), None), none],
            ),
            (
                &["long"],
                &[1],
                vec![7.into(), 8.into()],
                &[(Some(&[7]), None)],
            ),
            (&["none"], &[], vec![], &[(Some(&[]), None)]),
            (&[], &[1, 2], vec![1.into()], &[]),
        ];
        for (fields, timestamps, values, slices) in cases {
            let names: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            let expected = from_columns(columns::Events {
                fields: names.clone(),
                timestamps: timestamps.to_vec(),
                values: values.clone(),
            });
            with_one_batch(&names, timestamps, values, |batch| {
                assert_eq!(batch.events(), &expected);
                assert_eq!(fields.len(), slices.len());
                for (field, &(ints, floats)) in fields.iter().zip(slices) {
                    assert_eq!(batch.ints(field), ints, "{field}");
                    assert_eq!(batch.floats(field), floats, "{field}");
                }
            });
        }
    }
}
