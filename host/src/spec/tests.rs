//! Tests of whole specs, and the fixture the sections' tests share.

use std::path::Path;

use super::{
    OperatorCode, PipelineSpec, Result, Sink, SourceSpec, StateSpec, WindowSpec, parse_size,
};

/// A file-sourced pipeline with a sliding window and one aggregate, for the tests to vary.
pub(super) const SPEC: &str = r#"
        name = "demo"
        [source]
        type = "file"
        path = "events.jsonl"
        [event]
        key = "user"
        timestamp = "ts"
        [watermark]
        bound = "5s"
        [window]
        type = "sliding"
        size = "1m"
        slide = "30s"
        allowed_lateness = 1000
        [[operators]]
        name = "avg"
        kind = "aggregate"
        module = "avg.wasm"
    "#;

/// Parses a TOML spec whose paths are relative to `/specs`.
pub(super) fn parse(text: &str) -> Result<PipelineSpec> {
    PipelineSpec::parse(text, false, Path::new("/specs"))
}

#[test]
fn parses_a_full_spec_with_defaults() {
    let spec = parse(SPEC).unwrap();
    assert_eq!(spec.source, SourceSpec::File("/specs/events.jsonl".into()));
    assert_eq!(spec.watermark_bound, 5_000);
    assert_eq!(
        spec.window,
        Some(WindowSpec::Sliding {
            size: 60_000,
            slide: 30_000
        })
    );
    assert_eq!(spec.allowed_lateness, 1_000);
    assert_eq!(
        spec.aggregate.unwrap().code,
        OperatorCode::Component("/specs/avg.wasm".into())
    );
    assert_eq!(spec.state, StateSpec::Redb("weir-data/demo".into()));
    assert_eq!(spec.sinks.results, Sink::Stdout);
    assert_eq!(spec.checkpoint_interval, Some(1_000));
    assert_eq!(spec.memory_budget, 256 << 20);
}

#[test]
fn parses_checkpoint_and_memory_settings() {
    let text =
        format!("checkpoint_interval = \"250ms\"\n{SPEC}\n[state]\nmemory_budget = \"64MiB\"\n");
    let spec = parse(&text).unwrap();
    assert_eq!(spec.checkpoint_interval, Some(250));
    assert_eq!(spec.memory_budget, 64 << 20);
    let off = parse(&format!("checkpoint_interval = \"off\"\n{SPEC}")).unwrap();
    assert_eq!(off.checkpoint_interval, None);
    assert!(parse_size("3 parsecs").is_err());
}

#[test]
fn names_unknown_fields() {
    let err = parse(&SPEC.replace("bound = \"5s\"", "bund = \"5s\"")).unwrap_err();
    assert!(err.to_string().contains("bund"), "{err}");
}

#[test]
fn parses_json_specs() {
    let json = r#"{"name":"j","source":{"type":"stdin"},"event":{"key":"k","timestamp":"t"}}"#;
    let spec = PipelineSpec::parse(json, true, Path::new(".")).unwrap();
    assert_eq!(spec.source, SourceSpec::Stdin);
    assert!(spec.window.is_none());
}
