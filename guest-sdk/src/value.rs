//! Conversions and accessors for [`Value`] and [`Field`].

use crate::{Field, Value};

impl Value {
    /// Whether this is [`Value::Null`] (JSON `null`, or a field missing from an event).
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Whether this is a number: [`Value::Int`] or [`Value::Float`].
    pub fn is_number(&self) -> bool {
        matches!(self, Value::Int(_) | Value::Float(_))
    }

    /// The boolean, if this is [`Value::Boolean`].
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Boolean(value) => Some(*value),
            _ => None,
        }
    }

    /// The integer, if this is [`Value::Int`].
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(value) => Some(*value),
            _ => None,
        }
    }

    /// The number as a float, if this is [`Value::Float`] or [`Value::Int`] (converted, so
    /// integers beyond ±2⁵³ may be rounded).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(value) => Some(*value),
            Value::Int(value) => Some(*value as f64),
            _ => None,
        }
    }

    /// The text, if this is [`Value::Text`].
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(value) => Some(value),
            _ => None,
        }
    }

    /// The bytes, if this is [`Value::Bytes`].
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(value) => Some(value),
            _ => None,
        }
    }

    /// The value as text, for use as a name (of a map entry, say) the way the host names keys:
    /// text as it is, integers in decimal. `None` for every other kind of value.
    ///
    /// ```
    /// use weir_sdk::Value;
    ///
    /// assert_eq!(Value::Int(42).to_text().as_deref(), Some("42"));
    /// assert_eq!(Value::from("42").to_text().as_deref(), Some("42"));
    /// assert_eq!(Value::Float(4.2).to_text(), None);
    /// ```
    pub fn to_text(&self) -> Option<String> {
        match self {
            Value::Text(value) => Some(value.clone()),
            Value::Int(value) => Some(value.to_string()),
            _ => None,
        }
    }

    /// The sum of two numbers: an integer if both are integers (and the sum fits in `i64`),
    /// a float otherwise. `None` if either is not a number.
    ///
    /// ```
    /// use weir_sdk::Value;
    ///
    /// assert_eq!(Value::Int(2).plus(&Value::Int(3)), Some(Value::Int(5)));
    /// assert_eq!(Value::Int(2).plus(&Value::Float(0.5)), Some(Value::Float(2.5)));
    /// assert_eq!(Value::Int(2).plus(&Value::from("3")), None);
    /// ```
    #[inline]
    pub fn plus(&self, other: &Value) -> Option<Value> {
        if let (Value::Int(a), Value::Int(b)) = (self, other)
            && let Some(sum) = a.checked_add(*b)
        {
            return Some(Value::Int(sum));
        }
        Some(Value::Float(self.as_float()? + other.as_float()?))
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Boolean(value)
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl From<i32> for Value {
    fn from(value: i32) -> Self {
        Value::Int(value.into())
    }
}

impl From<u32> for Value {
    fn from(value: u32) -> Self {
        Value::Int(value.into())
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Self {
        Value::Float(value)
    }
}

impl From<f32> for Value {
    fn from(value: f32) -> Self {
        Value::Float(value.into())
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Text(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Text(value)
    }
}

impl From<&String> for Value {
    fn from(value: &String) -> Self {
        Value::Text(value.clone())
    }
}

impl From<Vec<u8>> for Value {
    fn from(value: Vec<u8>) -> Self {
        Value::Bytes(value)
    }
}

impl From<&Value> for Value {
    fn from(value: &Value) -> Self {
        value.clone()
    }
}

/// `None` becomes [`Value::Null`].
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::Null, Into::into)
    }
}

impl Field {
    /// A field named `name` with the value `value`.
    pub fn new(name: impl Into<String>, value: impl Into<Value>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }
}
