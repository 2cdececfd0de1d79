//! Bad input and bad modules: clear refusals before any input is read, dead letters with
//! reasons for bad lines and rejected events, and the run goes on.

use crate::reference::{Ev, ModelSpec, WindowKind, run_model};
use crate::support::{Pipeline, component, count_sum_body, emissions, to_jsonl};

const SPEC: ModelSpec = ModelSpec {
    window: WindowKind::Tumbling { size: 10 },
    bound: 0,
    lateness: 0,
};

fn with_module(module: &str, kind: &str) -> String {
    count_sum_body(&SPEC)
        .replace(
            &format!(
                "{:?}",
                component("tumbling-count-sum").display().to_string()
            ),
            &format!("{module:?}"),
        )
        .replace("kind = \"aggregate\"", &format!("kind = \"{kind}\""))
}

fn refused(body: &str, expected: &str) {
    let pipeline = Pipeline::new(body, "{\"key\":\"a\",\"ts\":1,\"amount\":1}\n");
    let run = pipeline.run(&[]);
    assert!(!run.success, "weir accepted a bad pipeline");
    assert!(
        run.stderr.contains(expected),
        "expected {expected:?} in:\n{}",
        run.stderr
    );
    assert!(
        !pipeline.dir.path().join("out").exists(),
        "output was written before the refusal"
    );
}

#[test]
fn refuses_a_missing_module() {
    refused(
        &with_module("/nonexistent/op.wasm", "aggregate"),
        "cannot read operator module /nonexistent/op.wasm",
    );
    // The cause is said once, not once by the message and again by the error chain.
    let pipeline = Pipeline::new(&with_module("/nonexistent/op.wasm", "aggregate"), "");
    let run = pipeline.run(&[]);
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("weir: error:"))
        .unwrap();
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
}

#[test]
fn refuses_a_file_that_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    refused(
        &with_module(core.to_str().unwrap(), "aggregate"),
        "is not a WebAssembly component",
    );
    let text = dir.path().join("text.wasm");
    std::fs::write(&text, b"hello").unwrap();
    refused(
        &with_module(text.to_str().unwrap(), "aggregate"),
        "is not a WebAssembly component",
    );
}

#[test]
fn refuses_a_component_exporting_the_wrong_world() {
    let enricher = component("enrich-customers");
    refused(
        &with_module(enricher.to_str().unwrap(), "aggregate"),
        "does not implement the `aggregator` world",
    );
    let body = format!(
        "[event]\nkey = \"key\"\ntimestamp = \"ts\"\n[[operators]]\nname = \"e\"\nkind = \"enrich\"\nmodule = {:?}\n",
        component("tumbling-count-sum").display().to_string()
    );
    refused(&body, "use kind = \"aggregate\"");
}

#[test]
fn refuses_a_sliding_window_whose_slide_exceeds_its_size() {
    let body = count_sum_body(&ModelSpec {
        window: WindowKind::Sliding {
            size: 10,
            slide: 10,
        },
        ..SPEC
    })
    .replace("slide = 10", "slide = 20");
    refused(&body, "must not exceed window.size");
}

#[test]
fn bad_lines_become_dead_letters_and_the_run_goes_on() {
    let good = [
        Ev {
            key: "a".into(),
            ts: 1,
            amount: 1,
        },
        Ev {
            key: "a".into(),
            ts: 25,
            amount: 2,
        },
    ];
    let input = format!(
        "{}not json\n{{\"ts\":3,\"amount\":1}}\n{{\"key\":\"a\",\"ts\":\"noon\",\"amount\":1}}\n{{\"key\":\"\",\"ts\":4,\"amount\":1}}\n{}",
        to_jsonl(&good[..1]),
        to_jsonl(&good[1..])
    );
    let run = Pipeline::new(&count_sum_body(&SPEC), &input).run(&[]);
    assert!(run.success, "{}", run.stderr);
    assert_eq!(emissions(&run.results), run_model(&SPEC, &good).emissions);
    let reasons: Vec<(u64, &str)> = run
        .dead_letters
        .iter()
        .map(|d| (d["line"].as_u64().unwrap(), d["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert_eq!(reasons[0].0, 2);
    assert!(reasons[0].1.contains("not valid JSON"));
    assert!(reasons[1].1.contains("missing key field `key`"));
    assert!(reasons[2].1.contains("not RFC 3339"));
    assert!(reasons[3].1.contains("is empty"));
    assert_eq!(run.dead_letters[0]["raw"], "not json");
    assert!(
        run.stderr
            .contains("2 events in, 2 results out, 0 late, 4 dead letters"),
        "{}",
        run.stderr
    );
}

#[test]
fn events_the_operator_rejects_are_dead_letters_and_the_rest_of_the_window_counts() {
    // The count-sum operator rejects an event without a numeric `amount`. Whatever the batch
    // size, only that event is rejected.
    let input = "{\"key\":\"a\",\"ts\":1,\"amount\":1}\n{\"key\":\"a\",\"ts\":2,\"amount\":\"x\"}\n{\"key\":\"a\",\"ts\":3,\"amount\":2}\n{\"key\":\"b\",\"ts\":3,\"amount\":5}\n";
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), input);
    for batch in ["1", "1000"] {
        let run = pipeline.run(&["--batch-size", batch]);
        assert!(run.success, "{}", run.stderr);
        let sums: Vec<(String, i64, i64)> = emissions(&run.results)
            .into_iter()
            .map(|e| (e.key, e.count, e.sum))
            .collect();
        assert_eq!(sums, [("a".to_owned(), 2, 3), ("b".to_owned(), 1, 5)]);
        assert_eq!(run.dead_letters.len(), 1, "{:?}", run.dead_letters);
        assert_eq!(run.dead_letters[0]["line"], 2);
        let reason = run.dead_letters[0]["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("count-sum@1.0.0 operator rejected the input"),
            "{reason}"
        );
    }
}
