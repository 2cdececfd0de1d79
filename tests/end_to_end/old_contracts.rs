//! Components built against the older contracts keep running: `tests/guests/count-sum-0-1`,
//! `count-sum-0-2`, `enrich-customers-0-1` and `enrich-customers-0-2` are the count-sum aggregate
//! and the customer enricher written against `wit/operator.wit` (0.1) and `wit/v0.2` (0.2) with
//! `wit-bindgen` alone, as components were built before the SDKs moved to 0.3. Each runs the pipelines the examples (0.3) run, and gives
//! the same results, late events and dead letters, byte for byte; their hostile cues (a trap,
//! an origin outside the batch) cost only the events that raised them. Rollouts and restarts
//! that move keys between contracts are in `operator_rollouts.rs`, `serve.rs` and
//! `recovery.rs`.

use std::path::Path;

use serde_json::Value;

use crate::reference::{ModelSpec, WindowKind};
use crate::support::{Pipeline, Run, component, count_sum_body, guest};

/// The count-sum fixtures, by the contract they were built against.
const COUNT_SUMS: [&str; 2] = ["count-sum-0-1", "count-sum-0-2"];

/// The enricher fixtures, likewise.
const ENRICHERS: [&str; 2] = ["enrich-customers-0-1", "enrich-customers-0-2"];

/// `count_sum_body` with `module` instead of the example.
fn count_sum_with(spec: &ModelSpec, module: &Path) -> String {
    let example = component("tumbling-count-sum").display().to_string();
    count_sum_body(spec).replace(
        &format!("{example:?}"),
        &format!("{:?}", module.display().to_string()),
    )
}

/// Events of 7 keys with integer amounts, a float every 13th, and two the aggregate refuses
/// (text, none); every 11th arrives 250 ms late (past the lateness: late) and most 4th 40 ms
/// late (an update within the lateness).
fn mixed_events() -> String {
    (0..600i64)
        .map(|i| {
            let ts = i * 7
                - match i {
                    _ if i % 11 == 10 => 250,
                    _ if i % 4 == 3 => 40,
                    _ => 0,
                };
            let amount = match i {
                97 => "\"x\"".to_owned(),
                _ if i % 13 == 0 => format!("{}.5", i % 10),
                _ => (i % 10).to_string(),
            };
            let amount = if i == 150 {
                String::new()
            } else {
                format!(",\"amount\":{amount}")
            };
            format!("{{\"key\":\"user-{}\",\"ts\":{ts}{amount}}}\n", i % 7)
        })
        .collect()
}

fn run_ok(pipeline: &Pipeline, args: &[&str]) -> Run {
    let run = pipeline.run(args);
    assert!(run.success, "{}", run.stderr);
    run
}

#[test]
fn aggregates_built_against_contracts_0_1_and_0_2_give_what_0_3_gives() {
    let windows = [
        WindowKind::Tumbling { size: 100 },
        WindowKind::Sliding {
            size: 100,
            slide: 50,
        },
        WindowKind::Session { gap: 30 },
    ];
    for window in windows {
        let spec = ModelSpec {
            window,
            bound: 20,
            lateness: 60,
        };
        let input = mixed_events();
        let example = Pipeline::new(&count_sum_body(&spec), &input);
        let expected = run_ok(&example, &[]);
        assert!(
            expected.results.iter().any(|r| r["value"]["sum"].is_f64())
                && expected.results.iter().any(|r| r["kind"] != "insert")
                && !expected.late.is_empty()
                && expected.dead_letters.iter().any(|d| d["line"] == 98)
                && expected.dead_letters.iter().any(|d| d["line"] == 151),
            "{window:?}: the input exercises floats, updates, late events and dead letters: {} results, {} late, {:?}",
            expected.results.len(),
            expected.late.len(),
            expected.dead_letters
        );
        for old in COUNT_SUMS {
            let pipeline = Pipeline::new(&count_sum_with(&spec, &guest(old)), &input);
            for batch in ["1024", "3"] {
                let run = run_ok(&pipeline, &["--batch-size", batch]);
                let case = format!("{old}, {window:?}, batch {batch}");
                assert_eq!(run.results, expected.results, "{case}: results");
                assert_eq!(run.late, expected.late, "{case}: late events");
                assert_eq!(
                    run.dead_letters, expected.dead_letters,
                    "{case}: dead letters"
                );
            }
        }
    }
}

#[test]
fn an_old_contracts_trap_costs_only_its_keys_events() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 100 },
        bound: 10,
        lateness: 0,
    };
    let input: String = (0..400)
        .map(|i| {
            let key = if i % 5 == 0 {
                format!("boom-{}", i % 3)
            } else {
                format!("user-{}", i % 7)
            };
            format!(
                "{{\"key\":\"{key}\",\"ts\":{},\"amount\":{}}}\n",
                i * 3,
                i % 10
            )
        })
        .collect();
    let healthy: String = input
        .lines()
        .filter(|l| !l.contains("boom"))
        .map(|l| format!("{l}\n"))
        .collect();
    let expected = run_ok(&Pipeline::new(&count_sum_body(&spec), &healthy), &[]);
    for old in COUNT_SUMS {
        let run = run_ok(
            &Pipeline::new(&count_sum_with(&spec, &guest(old)), &input),
            &[],
        );
        let windows =
            |run: &Run| -> Vec<Value> { run.results.iter().map(|r| r["value"].clone()).collect() };
        assert_eq!(
            windows(&run),
            windows(&expected),
            "{old}: the healthy keys' windows"
        );
        assert_eq!(
            run.dead_letters.len(),
            80,
            "{old}: every trapping key's event"
        );
        for dead in &run.dead_letters {
            let reason = dead["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("count-sum@1.0.0 operator trapped"),
                "{old}: {reason}"
            );
        }
    }
}

/// A pipeline enriching `examples/enrich-customers`' orders (with `extra` lines appended) with
/// `module`, its customers as reference data.
fn orders_pipeline(module: &Path, extra: &str) -> Pipeline {
    let example = crate::support::workspace().join("examples/enrich-customers");
    let orders = std::fs::read_to_string(example.join("orders.jsonl")).unwrap();
    let body = format!(
        "[event]\nkey = \"customer_id\"\ntimestamp = \"ts\"\n\
         [watermark]\nbound = \"5s\"\n\
         [[operators]]\nname = \"enrich-customers\"\nversion = \"1.0.0\"\nkind = \"enrich\"\nmodule = {:?}\n\
         reference = {{ path = \"customers.jsonl\", key = \"customer_id\" }}\n",
        module.display().to_string()
    );
    let pipeline = Pipeline::new(&body, &(orders + extra));
    std::fs::copy(
        example.join("customers.jsonl"),
        pipeline.dir.path().join("customers.jsonl"),
    )
    .unwrap();
    pipeline
}

#[test]
fn enrichers_built_against_contracts_0_1_and_0_2_give_what_0_3_gives() {
    let expected = run_ok(&orders_pipeline(&component("enrich-customers"), ""), &[]);
    let unknown = expected
        .results
        .iter()
        .filter(|r| r["value"]["tier"] == "none")
        .count();
    assert!(
        expected.results.len() == 300 && unknown > 0,
        "{} results",
        expected.results.len()
    );
    for old in ENRICHERS {
        let pipeline = orders_pipeline(&guest(old), "");
        for batch in ["1024", "1"] {
            let run = run_ok(&pipeline, &["--batch-size", batch]);
            assert_eq!(
                run.results, expected.results,
                "{old}, batch {batch}: results"
            );
            assert_eq!(
                (run.late.len(), run.dead_letters.len()),
                (0, 0),
                "{old}, batch {batch}"
            );
        }
    }
}

#[test]
fn an_old_enrichers_refused_output_keeps_none_of_its_state_writes() {
    // The fixtures name an origin outside the batch for an order with `bad`: the host refuses
    // the call and retries its events one by one. Were the refused call's writes (the orders it
    // saw) kept, the retried orders would be dropped as duplicates.
    let bad = "{\"order_id\":\"O-BAD\",\"customer_id\":\"C005\",\"ts\":1772442665002,\"amount\":1,\"bad\":true}\n";
    let later =
        "{\"order_id\":\"O-AFTER\",\"customer_id\":\"C005\",\"ts\":1772442665001,\"amount\":2}\n";
    let extra = format!("{later}{bad}{later}");
    let example = run_ok(
        &orders_pipeline(&component("enrich-customers"), &extra),
        &[],
    );
    let expected: Vec<&Value> = example
        .results
        .iter()
        .filter(|r| r["value"]["order_id"] != "O-BAD")
        .collect();
    for old in ENRICHERS {
        let run = run_ok(
            &orders_pipeline(&guest(old), &extra),
            &["--batch-size", "1024"],
        );
        assert_eq!(
            run.results.iter().collect::<Vec<_>>(),
            expected,
            "{old}: every order but the bad one, once"
        );
        assert_eq!(run.dead_letters.len(), 1, "{old}");
        let reason = run.dead_letters[0]["reason"].as_str().unwrap();
        assert!(reason.contains("names origin"), "{old}: {reason}");
    }
}
