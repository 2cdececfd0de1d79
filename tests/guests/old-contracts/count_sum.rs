// The count-sum's scope-side half, the same against contracts 0.1 and 0.2 (both use 0.1's
// `scope`, values and fields): `include!`d by `count-sum-0-1` and `count-sum-0-2`, which bring
// `Scope`, `Value`, `Field` into scope from their own bindings. Not a crate of its own: each
// fixture's bindings define its own types.

/// What `add` answers for an event without a numeric `amount`, as the SDK example does.
const NOT_NUMERIC: &str = "event without a numeric `amount` field";

/// The sum of two numbers as the SDK's `Value::plus` makes it: an integer while both are and it
/// fits, a float otherwise; `None` if either is not a number.
fn plus(a: &Value, b: &Value) -> Option<Value> {
    let float = |value: &Value| match *value {
        Value::Int(n) => Some(n as f64),
        Value::Float(x) => Some(x),
        _ => None,
    };
    if let (Value::Int(a), Value::Int(b)) = (a, b)
        && let Some(sum) = a.checked_add(*b)
    {
        return Some(Value::Int(sum));
    }
    Some(Value::Float(float(a)? + float(b)?))
}

/// An integer value, if it is one.
fn int(value: Option<Value>) -> Option<i64> {
    match value {
        Some(Value::Int(n)) => Some(n),
        _ => None,
    }
}

/// Folds `source`'s count and sum into `target`'s.
fn merge_scopes(target: &Scope, source: &Scope) -> Result<(), String> {
    let (Some(count), Some(sum)) = (int(source.get("count")), source.get("sum")) else {
        return Ok(()); // an empty source
    };
    let total = plus(&target.get("sum").unwrap_or(Value::Int(0)), &sum);
    target.put("sum", &total.ok_or("state `sum` is not a number")?);
    let before = int(target.get("count")).unwrap_or(0);
    target.put("count", &Value::Int(before.saturating_add(count)));
    Ok(())
}

/// The output record: `count` and `sum`.
fn output(state: &Scope) -> Vec<Field> {
    let count = int(state.get("count")).unwrap_or(0);
    let sum = state.get("sum").unwrap_or(Value::Int(0));
    vec![
        Field {
            name: "count".into(),
            value: Value::Int(count),
        },
        Field {
            name: "sum".into(),
            value: sum,
        },
    ]
}
