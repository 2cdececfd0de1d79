//! A batch field by field: [`Columns`], what [`Aggregate::add_columns`](crate::Aggregate)
//! sees, with each numeric field as one slice and the rows built only if the operator asks
//! for them. Also the call-wide lists a window's columns are cut from ([`Lists`]) and the rows
//! reused from window to window ([`Rows`]). Depends on the generated types only.

use std::cell::{Cell, Ref, RefCell};

use crate::bindings::aggregator::exports::weir::operator0_3_0::windows::ColumnKind;
use crate::{Event, Events, Value};

/// One field's values in one batch, as the host sent them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Column<'a> {
    /// Every value is an integer (a crafted call may send fewer than the batch has events).
    Ints(&'a [i64]),
    /// Every value is a float (as above).
    Floats(&'a [f64]),
    /// Values of any kind: `len` of them at `start` in the call's list of values, which
    /// [`Rows`] holds and moves into the rows when they are built.
    Values { start: usize, len: usize },
    /// The call sent no kind for the field: null in every event.
    Missing,
}

/// The lists a call's windows take their columns from, in turn: each field of each window
/// takes its next kind, and as many values as the window has events from that kind's list
/// (fewer once the list runs out).
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

    /// The next field's column, of a batch of `events` events.
    pub(crate) fn next_column(&mut self, events: usize) -> Column<'a> {
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

/// Calls `f` with the one batch a call's `lists` hold (its list of values being `values`):
/// field `i` is named `names[i]` and takes its values from the lists as [`Lists`] gives them.
pub(crate) fn with_one_batch<R>(
    names: &[String],
    timestamps: &[i64],
    mut lists: Lists<'_>,
    values: Vec<Value>,
    f: impl FnOnce(&Columns<'_>) -> R,
) -> R {
    let fields: Vec<u32> = (0..names.len() as u32).collect();
    let columns: Vec<Column> = (fields.iter())
        .map(|_| lists.next_column(timestamps.len()))
        .collect();
    let rows = RefCell::new(Rows::new(values));
    f(&Columns::new(names, &fields, timestamps, &columns, &rows))
}

/// The first `n` items of `items` (fewer if it is shorter), which then holds the rest.
pub(crate) fn take<'a, T>(items: &mut &'a [T], n: usize) -> &'a [T] {
    let (first, rest) = items.split_at(n.min(items.len()));
    *items = rest;
    first
}

/// The rows of one batch after another, kept between a call's windows: the operator only
/// borrows a window's [`Events`], so the next window refills the same rows and a call
/// allocates per event only while its windows grow. Holds the call's list of values, which
/// the rows take their values of kind `values` from.
pub(crate) struct Rows {
    batch: Events,
    spare: Vec<Event>,
    values: Vec<Value>,
}

impl Rows {
    /// Rows for a call whose list of values is `values`.
    pub(crate) fn new(values: Vec<Value>) -> Self {
        let batch = Events {
            fields: Vec::new(),
            rows: Vec::new(),
        };
        Rows {
            batch,
            spare: Vec::new(),
            values,
        }
    }

    /// The batch `columns` describes as rows: its field names, one timestamp per event, and
    /// its values field after field (a value missing is null).
    #[inline]
    fn fill<'a>(
        &mut self,
        fields: impl ExactSizeIterator<Item = &'a str> + Clone,
        timestamps: &[i64],
        columns: &[Column<'_>],
    ) {
        let Rows {
            batch,
            spare,
            values,
        } = self;
        if !batch.fields.iter().map(String::as_str).eq(fields.clone()) {
            batch.fields.clear();
            batch.fields.extend(fields.map(str::to_owned));
        }
        let width = batch.fields.len();
        if batch.rows.len() > timestamps.len() {
            spare.extend(batch.rows.drain(timestamps.len()..));
        }
        while batch.rows.len() < timestamps.len() {
            batch.rows.push(spare.pop().unwrap_or_else(|| Event {
                timestamp: 0,
                values: Vec::with_capacity(width),
            }));
        }
        for (row, &timestamp) in batch.rows.iter_mut().zip(timestamps) {
            row.timestamp = timestamp;
            row.values.clear();
        }
        for column in columns {
            fill(&mut batch.rows, *column, values);
        }
    }
}

/// Adds to each of `rows` its value of `column`, null past the column's end. A column of
/// kind `values` moves its values out of `values`.
#[inline]
fn fill(rows: &mut [Event], column: Column<'_>, values: &mut [Value]) {
    match column {
        Column::Ints(ints) => push_each(rows, ints.iter().map(|&n| Value::Int(n))),
        Column::Floats(floats) => push_each(rows, floats.iter().map(|&x| Value::Float(x))),
        Column::Values { start, len } => {
            let taken = values[start..start + len].iter_mut();
            push_each(
                rows,
                taken.map(|value| std::mem::replace(value, Value::Null)),
            );
        }
        Column::Missing => push_each(rows, std::iter::empty()),
    }
}

/// Adds to each of `rows` the next of `values`, or null once `values` is done.
fn push_each(rows: &mut [Event], mut values: impl Iterator<Item = Value>) {
    for row in rows {
        row.values.push(values.next().unwrap_or(Value::Null));
    }
}

/// A batch of events of one key (and, for an aggregate, one window), field by field, as the
/// host sent it. A field whose values are all integers, or all floats, reads as one slice
/// ([`ints`](Columns::ints), [`floats`](Columns::floats)), which is the fastest way for an
/// operator to fold a numeric field; [`events`](Columns::events) gives the same batch as rows,
/// built on first use.
///
/// ```
/// use weir_sdk::testing::with_columns;
/// use weir_sdk::{Events, Value};
///
/// let batch = Events::new(["amount", "note"])
///     .with_row(1_000, [Value::Int(3), Value::from("a")])
///     .with_row(2_000, [Value::Int(4), Value::Null]);
/// with_columns(&batch, |columns| {
///     assert_eq!(columns.ints("amount"), Some(&[3, 4][..]));
///     assert_eq!(columns.floats("amount"), None);
///     assert_eq!(columns.ints("note"), None);
///     assert_eq!(columns.timestamps(), [1_000, 2_000]);
///     assert_eq!(columns.events().rows, batch.rows);
/// });
/// ```
pub struct Columns<'a> {
    names: &'a [String],
    fields: &'a [u32],
    timestamps: &'a [i64],
    columns: &'a [Column<'a>],
    rows: &'a RefCell<Rows>,
    built: Cell<bool>,
}

impl<'a> Columns<'a> {
    /// The batch whose fields are `names[i]` for each `i` of `fields` (the empty name past
    /// `names`), with one column per field (a field without one is null).
    pub(crate) fn new(
        names: &'a [String],
        fields: &'a [u32],
        timestamps: &'a [i64],
        columns: &'a [Column<'a>],
        rows: &'a RefCell<Rows>,
    ) -> Self {
        Columns {
            names,
            fields,
            timestamps,
            columns,
            rows,
            built: Cell::new(false),
        }
    }

    /// How many events the batch holds.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// Whether the batch holds no events.
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Each event's timestamp (ms since the epoch), in order.
    pub fn timestamps(&self) -> &'a [i64] {
        self.timestamps
    }

    /// The batch's field names, in order.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = &'a str> + Clone + 'a {
        let names = self.names;
        (self.fields.iter()).map(move |&i| names.get(i as usize).map_or("", String::as_str))
    }

    /// Every event's value of the field `name`, if each one is an integer; `None` otherwise
    /// (also when the batch has no such field: read [`events`](Columns::events) then).
    pub fn ints(&self, name: &str) -> Option<&'a [i64]> {
        match self.column(name)? {
            Column::Ints(ints) if ints.len() == self.len() => Some(ints),
            _ => None,
        }
    }

    /// Every event's value of the field `name`, if each one is a float; `None` otherwise.
    pub fn floats(&self, name: &str) -> Option<&'a [f64]> {
        match self.column(name)? {
            Column::Floats(floats) if floats.len() == self.len() => Some(floats),
            _ => None,
        }
    }

    /// The same batch as rows, as [`Aggregate::add`](crate::Aggregate::add) sees it, built
    /// the first time it is asked for.
    pub fn events(&self) -> Ref<'a, Events> {
        if !self.built.replace(true) {
            let mut rows = self.rows.borrow_mut();
            rows.fill(self.fields(), self.timestamps, self.columns);
        }
        Ref::map(self.rows.borrow(), |rows| &rows.batch)
    }

    /// The column of the first field named `name`.
    fn column(&self, name: &str) -> Option<Column<'a>> {
        let at = self.fields().position(|field| field == name)?;
        Some(self.columns.get(at).copied().unwrap_or(Column::Missing))
    }
}

#[cfg(test)]
mod tests {
    use super::{Column, ColumnKind, Columns, Lists, Rows};
    use crate::Value;
    use std::cell::RefCell;

    /// Windows cut from one call's lists and refilling the same rows read as each window's
    /// own batch: grown, shrunk, with other fields, short of values, and past the kinds.
    #[test]
    fn windows_cut_from_a_calls_lists_read_as_their_own_rows() {
        let names: Vec<String> = ["n", "t", "x"].map(String::from).to_vec();
        let (ints, floats) = (ColumnKind::Ints, ColumnKind::Floats);
        let kinds = [ints, floats, ColumnKind::Values, ints, ColumnKind::Values];
        let text = Value::Text("t".into());
        let values = vec![text.clone(), Value::Null, Value::Int(9)];
        let mut lists = Lists::new(&kinds, &[1, 2, 3], &[0.5, 1.5], values.len());
        let rows = RefCell::new(Rows::new(values));
        // (fields, timestamps, the rows' values)
        let windows: [(&[u32], &[i64], Vec<Vec<Value>>); 4] = [
            (
                &[0, 1],
                &[10, 20],
                vec![
                    vec![Value::Int(1), Value::Float(0.5)],
                    vec![Value::Int(2), Value::Float(1.5)],
                ],
            ),
            (
                &[2, 0],
                &[30, 40, 50],
                vec![
                    vec![text, Value::Int(3)],
                    vec![Value::Null, Value::Null],
                    vec![Value::Int(9), Value::Null],
                ],
            ),
            (&[7], &[60], vec![vec![Value::Null]]),
            (&[], &[70, 80], vec![vec![], vec![]]),
        ];
        for (fields, timestamps, expected) in windows {
            let columns: Vec<Column> = (fields.iter())
                .map(|_| lists.next_column(timestamps.len()))
                .collect();
            let batch = Columns::new(&names, fields, timestamps, &columns, &rows);
            let events = batch.events();
            let names: Vec<&str> = batch.fields().collect();
            assert_eq!(events.fields, names);
            let got: Vec<_> = (events.rows.iter())
                .map(|row| (row.timestamp, row.values.clone()))
                .collect();
            let want: Vec<_> = timestamps.iter().copied().zip(expected).collect();
            assert_eq!(got, want);
        }
    }

    /// A numeric column reads as a slice only when it is whole; text, mixed kinds, a short
    /// list and an absent field read as `None`, and the rows still hold every value.
    #[test]
    fn only_a_whole_numeric_column_reads_as_a_slice() {
        let names: Vec<String> = ["i", "f", "v", "short"].map(String::from).to_vec();
        let columns = [
            Column::Ints(&[1, 2]),
            Column::Floats(&[0.5, 1.5]),
            Column::Values { start: 0, len: 2 },
            Column::Ints(&[7]),
        ];
        let rows = RefCell::new(Rows::new(vec![Value::Int(1), Value::Float(2.0)]));
        let batch = Columns::new(&names, &[0, 1, 2, 3], &[1, 2], &columns, &rows);
        assert_eq!(batch.ints("i"), Some(&[1, 2][..]));
        assert_eq!(batch.floats("f"), Some(&[0.5, 1.5][..]));
        assert_eq!((batch.floats("i"), batch.ints("f")), (None, None));
        assert_eq!((batch.ints("v"), batch.floats("v")), (None, None));
        assert_eq!((batch.ints("short"), batch.ints("gone")), (None, None));
        let events = batch.events();
        assert_eq!(events.rows[1].values[2], Value::Float(2.0));
        assert_eq!(events.rows[1].values[3], Value::Null);
        drop(events);
        // Asked for again, the rows are not rebuilt (the values were moved into them).
        assert_eq!(batch.events().rows[0].values[2], Value::Int(1));
    }
}
