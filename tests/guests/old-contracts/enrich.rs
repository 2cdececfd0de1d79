// The customer enricher's scope-side half, the same against contracts 0.1 and 0.2 (both use
// 0.1's `scope` and values): `include!`d by `enrich-customers-0-1` and `enrich-customers-0-2`,
// which bring `Scope` and `Value` into scope from their own bindings.

/// The customer's `name` and `tier` from the reference data, or `"unknown"` and `"none"`.
fn customer(state: &Scope) -> (Value, Value) {
    let reference = |name: &str, default: &str| {
        state
            .map_get("reference", name)
            .unwrap_or_else(|| Value::Text(default.into()))
    };
    (reference("name", "unknown"), reference("tier", "none"))
}

/// Whether order `id` (an event's value, as the SDK's `Value::to_text` makes an entry name of
/// it: text, or an integer's digits) was seen before; marks it seen. An order without a usable
/// id is never a duplicate.
fn seen_before(state: &Scope, id: Option<&Value>) -> bool {
    let id = match id {
        Some(Value::Text(text)) => text.clone(),
        Some(Value::Int(n)) => n.to_string(),
        _ => return false,
    };
    if state.map_get("seen_orders", &id).is_some() {
        return true;
    }
    state.map_put("seen_orders", &id, &Value::Boolean(true));
    false
}
