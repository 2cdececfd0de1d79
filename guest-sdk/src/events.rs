//! Accessors and builders for [`Events`], [`Event`], [`OutputEvents`], [`OutputEvent`] and
//! [`Window`], and the rows of a batch a 0.2 host sent field after field (an enricher's).

use crate::bindings::aggregator::weir::operator0_2_0::columns;
use crate::column_view::push_each;
use crate::{Event, Events, OutputEvent, OutputEvents, Value, Window};

/// The batch a 0.2 host sent field after field, as the rows operators see. Values missing from
/// a short list are null; extra ones are ignored.
pub(crate) fn from_columns(batch: columns::Events) -> Events {
    let columns::Events {
        fields,
        timestamps,
        values,
    } = batch;
    let width = fields.len();
    let mut rows: Vec<Event> = (timestamps.into_iter())
        .map(|timestamp| Event {
            timestamp,
            values: Vec::with_capacity(width),
        })
        .collect();
    let mut values = values.into_iter();
    for _ in 0..width {
        push_each(&mut rows, values.by_ref());
    }
    Events { fields, rows }
}

/// The index of `name` in `fields`.
fn column(fields: &[String], name: &str) -> Option<usize> {
    fields.iter().position(|field| field == name)
}

/// The index of `name` in `fields`, appending it if absent.
fn add_column(fields: &mut Vec<String>, name: &str) -> usize {
    column(fields, name).unwrap_or_else(|| {
        fields.push(name.to_owned());
        fields.len() - 1
    })
}

/// The value at `column` of `values`, `None` if null or missing.
#[inline]
fn get(values: &[Value], column: usize) -> Option<&Value> {
    values.get(column).filter(|value| !value.is_null())
}

/// Sets the value at `column` of `values`, padding with nulls.
fn set(values: &mut Vec<Value>, column: usize, value: Value) {
    if values.len() <= column {
        values.resize(column + 1, Value::Null);
    }
    values[column] = value;
}

impl Events {
    /// An empty batch with the given field names.
    pub fn new<S: Into<String>>(fields: impl IntoIterator<Item = S>) -> Self {
        Self {
            fields: fields.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// The batch with one more event at `timestamp` (ms since the epoch), whose values are in
    /// the order of [`fields`](Events::fields). Handy in tests.
    pub fn with_row<V: Into<Value>>(
        mut self,
        timestamp: i64,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.rows.push(Event::new(timestamp, values));
        self
    }

    /// How many events the batch holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch holds no events.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The index of the field `name` in [`fields`](Events::fields), for [`Event::get`].
    pub fn column(&self, name: &str) -> Option<usize> {
        column(&self.fields, name)
    }

    /// The index of the field `name`, adding it (null in every event) if the batch lacks it.
    pub fn add_column(&mut self, name: &str) -> usize {
        add_column(&mut self.fields, name)
    }

    /// The value of the field `name` in each event, in order: `None` where it is null or
    /// missing (and for every event if the batch has no such field).
    #[inline]
    pub fn values<'a>(&'a self, name: &str) -> impl Iterator<Item = Option<&'a Value>> + 'a {
        let column = self.column(name);
        self.rows
            .iter()
            .map(move |event| column.and_then(|column| event.get(column)))
    }

    /// The same events as an enricher's output, each with its row index as its
    /// [`origin`](OutputEvent::origin): the start of a one-for-one transformation.
    ///
    /// ```
    /// use weir_sdk::{Events, Value};
    ///
    /// let batch = Events::new(["id"]).with_row(1_000, ["a"]).with_row(2_000, ["b"]);
    /// let mut output = batch.into_output();
    /// output.rows.retain(|event| event.timestamp > 1_000);
    /// assert_eq!(output.rows[0].origin, 1);
    /// assert_eq!(output.rows[0].get(0), Some(&Value::from("b")));
    /// ```
    pub fn into_output(self) -> OutputEvents {
        OutputEvents {
            fields: self.fields,
            rows: (0..)
                .zip(self.rows)
                .map(|(origin, event)| OutputEvent::from_event(origin, event))
                .collect(),
        }
    }
}

impl From<Events> for OutputEvents {
    fn from(events: Events) -> Self {
        events.into_output()
    }
}

impl Event {
    /// An event at `timestamp` (ms since the epoch) with values in the order of its batch's
    /// fields.
    pub fn new<V: Into<Value>>(timestamp: i64, values: impl IntoIterator<Item = V>) -> Self {
        Self {
            timestamp,
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// The value at index `column` (see [`Events::column`]); `None` if it is null or missing.
    #[inline]
    pub fn get(&self, column: usize) -> Option<&Value> {
        get(&self.values, column)
    }

    /// Sets the value at index `column` (see [`Events::add_column`]), padding with nulls.
    pub fn set(&mut self, column: usize, value: impl Into<Value>) {
        set(&mut self.values, column, value.into());
    }
}

impl OutputEvents {
    /// An empty output with the given field names.
    pub fn new<S: Into<String>>(fields: impl IntoIterator<Item = S>) -> Self {
        Self {
            fields: fields.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// How many events the output holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the output holds no events.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The index of the field `name` in [`fields`](OutputEvents::fields).
    pub fn column(&self, name: &str) -> Option<usize> {
        column(&self.fields, name)
    }

    /// The index of the field `name`, adding it (null in every event) if the output lacks it.
    pub fn add_column(&mut self, name: &str) -> usize {
        add_column(&mut self.fields, name)
    }

    /// The value of the field `name` in each event, in order: `None` where it is null or
    /// missing (and for every event if there is no such field).
    pub fn values<'a>(&'a self, name: &str) -> impl Iterator<Item = Option<&'a Value>> + 'a {
        let column = self.column(name);
        self.rows
            .iter()
            .map(move |event| column.and_then(|column| event.get(column)))
    }

    /// Appends an event.
    pub fn push(&mut self, event: OutputEvent) {
        self.rows.push(event);
    }
}

impl OutputEvent {
    /// An event that came from input row `origin`, at `timestamp` (ms since the epoch), with
    /// values in the order of its output's fields.
    pub fn new<V: Into<Value>>(
        origin: u32,
        timestamp: i64,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Self {
            origin,
            timestamp,
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// The input event `event`, from input row `origin`, unchanged.
    pub fn from_event(origin: u32, event: Event) -> Self {
        Self {
            origin,
            timestamp: event.timestamp,
            values: event.values,
        }
    }

    /// The value at index `column` (see [`OutputEvents::column`]); `None` if it is null or
    /// missing.
    pub fn get(&self, column: usize) -> Option<&Value> {
        get(&self.values, column)
    }

    /// Sets the value at index `column` (see [`OutputEvents::add_column`]), padding with nulls.
    pub fn set(&mut self, column: usize, value: impl Into<Value>) {
        set(&mut self.values, column, value.into());
    }
}

impl Window {
    /// The window's length in milliseconds.
    pub fn duration_ms(&self) -> i64 {
        self.end.saturating_sub(self.start)
    }

    /// Whether `timestamp` lies in the window `[start, end)`.
    pub fn contains(&self, timestamp: i64) -> bool {
        (self.start..self.end).contains(&timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::{columns, from_columns};
    use crate::{Events, OutputEvent, Value};

    /// Field-after-field values become the rows 0.1 sent; a short list leaves nulls, a long one
    /// is cut to the batch.
    #[test]
    fn columns_become_rows() {
        let batch = columns::Events {
            fields: ["n", "v"].map(String::from).to_vec(),
            timestamps: vec![10, 20],
            values: vec![
                Value::Int(1),
                Value::Int(2),
                Value::Text("a".into()),
                Value::Float(f64::NAN),
            ],
        };
        let events = from_columns(batch);
        assert_eq!(events.fields, ["n", "v"]);
        assert_eq!(events.rows[1].timestamp, 20);
        assert_eq!(
            events.rows[0].values,
            [Value::Int(1), Value::Text("a".into())]
        );
        assert!(matches!(events.rows[1].values[1], Value::Float(x) if x.is_nan()));
        let short = from_columns(columns::Events {
            fields: ["a", "b"].map(String::from).to_vec(),
            timestamps: vec![1, 2],
            values: vec![Value::Int(7); 3],
        });
        assert_eq!(short.rows[1].values, [Value::Int(7), Value::Null]);
        let long = from_columns(columns::Events {
            fields: vec!["a".into()],
            timestamps: vec![1],
            values: vec![Value::Int(7); 5],
        });
        assert_eq!(long.rows[0].values, [Value::Int(7)]);
        let empty = from_columns(columns::Events {
            fields: vec![],
            timestamps: vec![1, 2, 3],
            values: vec![],
        });
        assert_eq!(empty.len(), 3);
        assert!(empty.rows[2].values.is_empty());
    }

    #[test]
    fn columns_values_and_padding() {
        let mut batch = Events::new(["a", "b"])
            .with_row(1, [Value::Int(1), Value::Null])
            .with_row(2, [Value::Int(2)]);
        assert_eq!(batch.column("b"), Some(1));
        assert_eq!(batch.column("c"), None);
        let values: Vec<_> = batch.values("b").collect();
        assert_eq!(values, [None, None]);
        assert_eq!(batch.values("zzz").count(), 2);
        let c = batch.add_column("c");
        assert_eq!((c, batch.add_column("a")), (2, 0));
        batch.rows[1].set(c, "x");
        assert_eq!(
            batch.rows[1].values,
            [Value::Int(2), Value::Null, "x".into()]
        );
        assert_eq!(batch.rows[1].get(c), Some(&Value::from("x")));
        assert_eq!(batch.rows[1].get(1), None);
    }

    #[test]
    fn output_events_keep_their_origin() {
        let mut output = Events::new(["a"])
            .with_row(5, [1])
            .with_row(6, [2])
            .into_output();
        output.push(OutputEvent::new(1, 7, [3]));
        let origins: Vec<_> = output
            .rows
            .iter()
            .map(|e| (e.origin, e.timestamp))
            .collect();
        assert_eq!(origins, [(0, 5), (1, 6), (1, 7)]);
        let values: Vec<_> = output
            .values("a")
            .map(|v| v.and_then(Value::as_int))
            .collect();
        assert_eq!(values, [Some(1), Some(2), Some(3)]);
    }
}
