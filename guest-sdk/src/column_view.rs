//! A batch field by field: [`Columns`], what
//! [`Aggregate::add_columns`](crate::Aggregate::add_columns) sees, with each numeric field as
//! one slice and the rows built only if the operator asks for them ([`Rows`], reused from
//! batch to batch). Depends on the generated types only; `call_lists` cuts a call's lists
//! into [`Column`]s, the crate root makes each window's `Columns` from them, and `events`
//! fills an enricher's rows with [`push_each`].

use std::cell::{OnceCell, Ref, RefCell};

use crate::{Event, Events, Value};

/// The name at index `i` of a call's `names`, empty past them (the host sends only indexes it
/// has).
pub(crate) fn name_str(names: &[String], i: u32) -> &str {
    names.get(i as usize).map_or("", String::as_str)
}

/// One field's values in one batch, as the host sent them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Column<'a> {
    /// Every value is an integer (fewer than the batch has events if a crafted call's list ran
    /// out: the missing ones are null).
    Ints(&'a [i64]),
    /// Every value is a float (as above).
    Floats(&'a [f64]),
    /// Values of any kind: `len` of them at `start` in the call's list of values, which
    /// [`Rows`] holds and moves into the rows when they are built (a range past the list's end
    /// reads as nulls).
    Values { start: usize, len: usize },
    /// The call sent no kind for the field: null in every event.
    Missing,
}

/// The rows of one batch after another, kept between a call's windows: the operator only
/// borrows a window's [`Events`], so the next window refills the same rows and a call
/// allocates per event only while its windows grow. Holds the call's list of values, which
/// the rows take their values of kind `values` from.
#[derive(Debug)]
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
        // One column per field: a field without one is null, a column without a field unused.
        for field in 0..width {
            let column = columns.get(field).copied().unwrap_or(Column::Missing);
            push_column(&mut batch.rows, column, values);
        }
    }
}

/// Adds to each of `rows` its value of `column`, null past the column's end. A column of
/// kind `values` moves its values out of `values`.
#[inline]
fn push_column(rows: &mut [Event], column: Column<'_>, values: &mut [Value]) {
    match column {
        Column::Ints(ints) => push_each(rows, ints.iter().map(|&n| Value::Int(n))),
        Column::Floats(floats) => push_each(rows, floats.iter().map(|&x| Value::Float(x))),
        Column::Values { start, len } => {
            let end = start.saturating_add(len).min(values.len());
            let taken = values[start.min(end)..end].iter_mut();
            push_each(
                rows,
                taken.map(|value| std::mem::replace(value, Value::Null)),
            );
        }
        Column::Missing => push_each(rows, std::iter::empty()),
    }
}

/// Adds to each of `rows` the next of `values`, or null once `values` is done.
pub(crate) fn push_each(rows: &mut [Event], mut values: impl Iterator<Item = Value>) {
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
#[derive(Debug)]
pub struct Columns<'a> {
    names: &'a [String],
    fields: &'a [u32],
    timestamps: &'a [i64],
    columns: &'a [Column<'a>],
    rows: &'a RefCell<Rows>,
    /// The rows, once built: held until the batch is dropped, so nothing the operator does
    /// keeps them borrowed into the next batch.
    built: OnceCell<Ref<'a, Rows>>,
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
            built: OnceCell::new(),
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
        self.fields.iter().map(move |&i| name_str(names, i))
    }

    /// Every event's value of the field `name`, if each one is an integer; `None` otherwise
    /// (some other value, or no such field: read [`events`](Columns::events) then).
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
    pub fn events(&self) -> &Events {
        let rows = self.built.get_or_init(|| {
            let fields = self.fields();
            (self.rows.borrow_mut()).fill(fields, self.timestamps, self.columns);
            self.rows.borrow()
        });
        &rows.batch
    }

    /// The column of the first field named `name`.
    fn column(&self, name: &str) -> Option<Column<'a>> {
        let at = self.fields().position(|field| field == name)?;
        Some(self.columns.get(at).copied().unwrap_or(Column::Missing))
    }
}

#[cfg(test)]
mod tests {
    use super::{Column, Columns, Rows};
    use crate::Value;
    use std::cell::RefCell;

    /// A numeric column reads as a slice only when it is whole; text, mixed kinds, a short
    /// list and an absent field read as `None`. The rows still hold every value: null past a
    /// numeric list's end, past the list of values (a range partly past it keeps what is in
    /// it), and for a field without a column.
    #[test]
    fn only_a_whole_numeric_column_reads_as_a_slice() {
        let names: Vec<String> =
            (["i", "f", "v", "short", "past", "none"].map(String::from)).to_vec();
        let columns = [
            Column::Ints(&[1, 2]),
            Column::Floats(&[0.5, 1.5]),
            Column::Values { start: 0, len: 2 },
            Column::Ints(&[7]),
            Column::Values { start: 2, len: 5 },
        ];
        let text = Value::Text("p".into());
        let values = vec![Value::Int(1), Value::Float(2.0), text.clone()];
        let rows = RefCell::new(Rows::new(values));
        let batch = Columns::new(&names, &[0, 1, 2, 3, 4, 5], &[1, 2], &columns, &rows);
        assert_eq!(batch.ints("i"), Some(&[1, 2][..]));
        assert_eq!(batch.floats("f"), Some(&[0.5, 1.5][..]));
        assert_eq!((batch.floats("i"), batch.ints("f")), (None, None));
        assert_eq!((batch.ints("v"), batch.floats("v")), (None, None));
        assert_eq!((batch.ints("short"), batch.ints("gone")), (None, None));
        assert_eq!(batch.ints("none"), None);
        let events = batch.events();
        let (i, f, null) = (Value::Int, Value::Float, Value::Null);
        let first = [i(1), f(0.5), i(1), i(7), text, null.clone()];
        assert_eq!(events.rows[0].values, first);
        let second = [i(2), f(1.5), f(2.0), null.clone(), null.clone(), null];
        assert_eq!(events.rows[1].values, second);
        // Asked for again, the rows are not rebuilt (the values were moved into them).
        assert_eq!(batch.events().rows[0].values[2], Value::Int(1));
    }
}
