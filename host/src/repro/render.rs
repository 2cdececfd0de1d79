//! A [`Bundle`] as a test in the operator's own language, for the SDK's test runner: Python's
//! `unittest`, `node --test`, `cargo test`. The test adds the window's events to an empty
//! in-memory state in one batch, finishes the window and compares the output with the live
//! version's, field by field and kind by kind (an int is not a float).
//!
//! Depends on `project` (the languages) and the bundle.

use super::Bundle;
use crate::project::Language;

/// Where the operator is, in the project's source: the name passed to `export_aggregate`
/// (Rust, Python) or `exportAggregate` (JavaScript), and the module that defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The type (Rust), class or instance (Python) or object (JavaScript).
    pub name: String,
    /// The Python module or the JavaScript file (`app`, `./app.js`); unused for Rust.
    pub module: String,
}

/// A test file: its path in the project and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// Relative to the project.
    pub path: String,
    /// The file's contents.
    pub text: String,
}

/// The name given to the SDK's export call in `source`: what the test calls.
pub fn exported_operator(language: Language, source: &str) -> Option<String> {
    let call = match language {
        Language::Rust => "export_aggregate!(",
        Language::Python => "export_aggregate(",
        Language::Js => "exportAggregate(",
    };
    let at = source.find(call)? + call.len();
    let name: String = (source[at..].trim_start().chars())
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The bundle as a test of `operator` in `language`.
pub fn render(bundle: &Bundle, language: Language, operator: &Operator) -> Rendered {
    match language {
        Language::Python => python(bundle, operator),
        Language::Js => js(bundle, operator),
        Language::Rust => rust(bundle, operator),
    }
}

/// What the test's comment says about the two versions.
fn story(bundle: &Bundle, comment: &str) -> String {
    let said = |said: &super::Said| match (&said.output, &said.error) {
        (Some(output), _) => format!("gave {output}"),
        (None, Some(error)) => format!("failed: {error}"),
        (None, None) => "gave no result".to_owned(),
    };
    let mut lines = vec![
        format!(
            "A repro bundle made by `weir repro` from a {} of pipeline `{}`: key {:?}, window [{}, {}),",
            bundle.made_from, bundle.pipeline, bundle.key, bundle.window_start, bundle.window_end
        ),
        format!(
            "its {} events from the ingest log, from an empty state. {}@{} {}",
            bundle.events.len(),
            bundle.operator,
            bundle.expected.version,
            said(&bundle.expected)
        ),
        format!(
            "(the expectation); {}@{} {}.",
            bundle.operator,
            bundle.candidate.version,
            said(&bundle.candidate)
        ),
        "It passes on the live version's source and fails on the candidate's.".to_owned(),
    ];
    if let Some(note) = &bundle.note {
        lines.push(format!("Note: {note}"));
    }
    lines
        .iter()
        .map(|line| format!("{comment}{line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn expected_fields(bundle: &Bundle) -> Vec<(&String, &serde_json::Value)> {
    match &bundle.expected.output {
        Some(serde_json::Value::Object(fields)) => fields.iter().collect(),
        _ => Vec::new(),
    }
}

/// A JSON number as written in source: an integer as it is, a float with its fraction.
fn number(n: &serde_json::Number, int_suffix: &str) -> String {
    match (n.as_i64(), n.as_f64()) {
        (Some(i), _) if !n.is_f64() => format!("{i}{int_suffix}"),
        (_, Some(f)) => format!("{f:?}"),
        _ => n.to_string(),
    }
}

fn python_value(value: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match value {
        J::Null => "None".into(),
        J::Bool(true) => "True".into(),
        J::Bool(false) => "False".into(),
        J::Number(n) => number(n, ""),
        J::String(_) => value.to_string(),
        J::Array(_) | J::Object(_) => serde_json::Value::String(value.to_string()).to_string(),
    }
}

fn python(bundle: &Bundle, operator: &Operator) -> Rendered {
    let slug = bundle.slug();
    let fields: Vec<String> = bundle
        .fields()
        .iter()
        .map(|f| python_value(&(*f).into()))
        .collect();
    let rows: Vec<String> = (bundle.rows().iter())
        .map(|(ts, values)| {
            let values: Vec<String> = values.iter().map(|v| python_value(v)).collect();
            format!("    ({ts}, [{}]),", values.join(", "))
        })
        .collect();
    let expected: Vec<String> = (expected_fields(bundle).iter())
        .map(|(name, value)| {
            format!(
                "    {}: {},",
                python_value(&(*name).as_str().into()),
                python_value(value)
            )
        })
        .collect();
    let name = &operator.name;
    let text = format!(
        r#""""
{story}

Run it with the project's other tests: ``python3 -m unittest`` in the project directory.
"""

import unittest

from weir_sdk import Events, Window
from weir_sdk.testing import MemoryState

from {module} import {name}

KEY = {key}
WINDOW = Window({start}, {end})
FIELDS = [{fields}]
EVENTS = [
{rows}
]
EXPECTED = {{
{expected}
}}


def kinds(record: object) -> dict[str, tuple[str, object]]:
    """Each field with its kind, so that an int and a float of the same value differ."""
    return {{name: (type(value).__name__, value) for name, value in dict(record).items()}}  # type: ignore[call-overload]


class Repro(unittest.TestCase):
    def test_key_{slug}_gives_what_the_live_version_gave(self) -> None:
        operator = {name}() if isinstance({name}, type) else {name}
        memory = MemoryState(KEY)
        operator.add(memory.state(), Events.of(FIELDS, EVENTS))
        self.assertEqual(kinds(operator.finish(memory.state(), WINDOW)), kinds(EXPECTED))


if __name__ == "__main__":
    unittest.main()
"#,
        story = story(bundle, ""),
        module = operator.module,
        key = python_value(&bundle.key.as_str().into()),
        start = bundle.window_start,
        end = bundle.window_end,
        fields = fields.join(", "),
        rows = rows.join("\n"),
        expected = expected.join("\n"),
    );
    Rendered {
        path: format!("test_repro_{slug}.py"),
        text,
    }
}

fn js_value(value: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match value {
        J::Number(n) => number(n, "n"),
        J::Array(_) | J::Object(_) => serde_json::Value::String(value.to_string()).to_string(),
        _ => value.to_string(),
    }
}

fn js(bundle: &Bundle, operator: &Operator) -> Rendered {
    let slug = bundle.slug();
    let fields: Vec<String> = bundle
        .fields()
        .iter()
        .map(|f| js_value(&(*f).into()))
        .collect();
    let rows: String = (bundle.rows().iter())
        .map(|(ts, values)| {
            let values: Vec<String> = values.iter().map(|v| js_value(v)).collect();
            format!("\n  .withRow({ts}n, [{}])", values.join(", "))
        })
        .collect();
    let expected: Vec<String> = (expected_fields(bundle).iter())
        .map(|(name, value)| {
            format!(
                "  {}: {},",
                js_value(&(*name).as_str().into()),
                js_value(value)
            )
        })
        .collect();
    let text = format!(
        r#"{story}
// Run it with the project's other tests: `node --test` in the project directory.

import assert from 'node:assert/strict';
import {{ test }} from 'node:test';

const {{ Events, Window }} = await import('weir-sdk');
const {{ MemoryState }} = await import('weir-sdk/testing');
const {{ {name} }} = await import('{module}');

const KEY = {key};
const WINDOW = new Window({start}n, {end}n);
const EVENTS = new Events([{fields}]){rows};
const EXPECTED = {{
{expected}
}};

test('key {slug} gives what the live version gave', () => {{
  const memory = new MemoryState(KEY);
  {name}.add(memory.state(), EVENTS);
  assert.deepEqual({{ ...{name}.finish(memory.state(), WINDOW) }}, EXPECTED);
}});
"#,
        story = story(bundle, "// "),
        name = operator.name,
        module = operator.module,
        key = js_value(&bundle.key.as_str().into()),
        start = bundle.window_start,
        end = bundle.window_end,
        fields = fields.join(", "),
        expected = expected.join("\n"),
    );
    Rendered {
        path: format!("repro-{slug}.test.mjs"),
        text,
    }
}

fn rust_value(value: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match value {
        J::Null => "Value::Null".into(),
        J::Bool(b) => format!("Value::Boolean({b})"),
        J::Number(n) if !n.is_f64() && n.as_i64().is_some() => format!("Value::Int({})", n),
        J::Number(n) => format!("Value::Float({:?})", n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => format!("Value::Text({s:?}.into())"),
        J::Array(_) | J::Object(_) => format!("Value::Text({:?}.into())", value.to_string()),
    }
}

fn rust(bundle: &Bundle, operator: &Operator) -> Rendered {
    let slug = bundle.slug();
    let fields: Vec<String> = bundle.fields().iter().map(|f| format!("{f:?}")).collect();
    let rows: String = (bundle.rows().iter())
        .map(|(ts, values)| {
            let values: Vec<String> = values.iter().map(|v| rust_value(v)).collect();
            format!("\n        .with_row({ts}, [{}])", values.join(", "))
        })
        .collect();
    let expected = expected_fields(bundle);
    let checks: String = (expected.iter())
        .map(|(name, value)| {
            format!(
                "\n    assert_eq!(output.get({name:?}), Some(&{}), \"field {name}\");",
                rust_value(value)
            )
        })
        .collect();
    let text = format!(
        r#"{story}
//! Run it with the crate's other tests: `cargo test` (`weir repro` added `mod repro_{slug};`
//! under `#[cfg(test)]` to src/lib.rs).

use weir_sdk::testing::MemoryState;
use weir_sdk::{{Aggregate, Events, Value, Window}};

#[test]
fn key_{slug}_gives_what_the_live_version_gave() {{
    let memory = MemoryState::new({key:?});
    let events = Events::new([{fields}]){rows};
    crate::{name}::add(&memory.state(), &events).expect("the live version accepts these events");
    let window = Window {{ start: {start}, end: {end} }};
    let output = crate::{name}::finish(&memory.state(), window).expect("the live version finishes");
    assert_eq!(output.fields().len(), {count}, "{{output:?}}");{checks}
}}
"#,
        story = story(bundle, "//! "),
        name = operator.name,
        key = bundle.key,
        start = bundle.window_start,
        end = bundle.window_end,
        fields = fields.join(", "),
        count = expected.len(),
    );
    Rendered {
        path: format!("src/repro_{slug}.rs"),
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::{ReproEvent, Said};
    use serde_json::json;

    fn bundle() -> Bundle {
        Bundle {
            pipeline: "clicks".into(),
            operator: "count-sum".into(),
            key: "u\"1".into(),
            window_start: 0,
            window_end: 60_000,
            made_from: "shadow result".into(),
            events: vec![
                ReproEvent {
                    timestamp: 1_000,
                    fields: vec![("user".into(), json!("u\"1")), ("amount".into(), json!(5))],
                },
                ReproEvent {
                    timestamp: 2_000,
                    fields: vec![("user".into(), json!("u\"1")), ("x".into(), json!(2.0))],
                },
            ],
            state_before: json!({}),
            expected: Said {
                version: "1.0.0".into(),
                output: Some(json!({"count": 2, "sum": 5.5})),
                error: None,
            },
            candidate: Said {
                version: "2.0.0".into(),
                output: None,
                error: Some("trapped".into()),
            },
            note: None,
        }
    }

    #[test]
    fn values_keep_their_kind_in_every_language() {
        let operator = Operator {
            name: "CountSum".into(),
            module: "app".into(),
        };
        let python = render(&bundle(), Language::Python, &operator);
        assert_eq!(python.path, "test_repro_u_1_0.py");
        assert!(
            python.text.contains(r#"(2000, ["u\"1", None, 2.0]),"#),
            "{}",
            python.text
        );
        assert!(python.text.contains(r#""sum": 5.5,"#), "{}", python.text);
        let js = render(&bundle(), Language::Js, &operator);
        assert!(
            js.text.contains(r#".withRow(1000n, ["u\"1", 5n, null])"#),
            "{}",
            js.text
        );
        let rust = render(&bundle(), Language::Rust, &operator);
        assert!(
            rust.text.contains(
                r#".with_row(2000, [Value::Text("u\"1".into()), Value::Null, Value::Float(2.0)])"#
            ),
            "{}",
            rust.text
        );
        assert!(
            rust.text.contains(r#"Some(&Value::Int(2))"#),
            "{}",
            rust.text
        );
    }

    #[test]
    fn the_exported_operator_is_found_in_each_language() {
        let found = |l, s| exported_operator(l, s);
        assert_eq!(
            found(Language::Rust, "weir_sdk::export_aggregate!(CountSum);").as_deref(),
            Some("CountSum")
        );
        assert_eq!(
            found(
                Language::Python,
                "Aggregate = weir_sdk.export_aggregate( Mine )"
            )
            .as_deref(),
            Some("Mine")
        );
        assert_eq!(
            found(
                Language::Js,
                "export const aggregate = exportAggregate(countSum);"
            )
            .as_deref(),
            Some("countSum")
        );
        assert_eq!(found(Language::Js, "nothing here"), None);
    }
}
