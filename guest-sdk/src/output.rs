//! [`Output`]: the record an aggregate produces for a window.

use crate::{Field, Value};

/// The output record of a window: named values, in order.
///
/// ```
/// use weir_sdk::{Output, Value};
///
/// let output = Output::new().with("count", 3).with("sum", 4.5);
/// assert_eq!(output.get("sum"), Some(&Value::Float(4.5)));
/// assert_eq!(output.fields().len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    fields: Vec<Field>,
}

impl Output {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record with the field `name` set to `value` (replacing an earlier one of that name).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets the field `name` to `value`, replacing an earlier one of that name.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<Value>) {
        let field = Field::new(name, value);
        match self.fields.iter_mut().find(|f| f.name == field.name) {
            Some(existing) => existing.value = field.value,
            None => self.fields.push(field),
        }
    }

    /// The value of the field `name`, if set.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| &f.value)
    }

    /// The fields, in the order they were first set.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The fields, in the order they were first set.
    pub fn into_fields(self) -> Vec<Field> {
        self.fields
    }
}

impl From<Output> for Vec<Field> {
    fn from(output: Output) -> Self {
        output.into_fields()
    }
}

impl<N: Into<String>, V: Into<Value>> FromIterator<(N, V)> for Output {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(fields: I) -> Self {
        let mut output = Output::new();
        for (name, value) in fields {
            output.set(name, value);
        }
        output
    }
}
