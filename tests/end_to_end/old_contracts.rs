//! Components built against the older contracts keep running: `tests/guests/count-sum-0-1`,
//! `count-sum-0-2`, `enrich-customers-0-1` and `enrich-customers-0-2` are the count-sum aggregate
//! and the customer enricher written against `wit/operator.wit` (0.1) and `wit/v0.2` (0.2) with
//! `wit-bindgen` alone, as components were built before the SDKs moved to 0.3. Each runs the
//! pipelines the examples (0.3) run, and writes the same results, late events and dead letters,
//! byte for byte; their hostile cues (a trap, an origin outside the batch) cost only the events
//! that raised them. Rollouts and restarts that move keys between contracts are in
//! `operator_rollouts.rs`, `serve.rs` and `recovery.rs`.

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
    let example = format!(
        "{:?}",
        component("tumbling-count-sum").display().to_string()
    );
    let body = count_sum_body(spec);
    assert!(
        body.contains(&example),
        "the body names the example: {body}"
    );
    body.replace(&example, &format!("{:?}", module.display().to_string()))
}

/// Events of 7 keys (49 ms apart within a key) with integer amounts, a float every 13th, and
/// two the aggregate refuses (text, none). Every 11th arrives 250 ms late (past the lateness:
/// late); most 4th 73 ms late, within the lateness: an update of a window already fired, and,
/// with sessions of a 30 ms gap, an event between its key's two previous sessions, which
/// merges them (one of them fired: retracted).
fn mixed_events() -> String {
    (0..600i64)
        .map(|i| {
            let ts = i * 7
                - match i {
                    _ if i % 11 == 10 => 250,
                    _ if i % 4 == 3 => 73,
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

/// The three outputs a run wrote, as written: results, late events and dead letters.
fn written(pipeline: &Pipeline) -> [String; 3] {
    let out = pipeline.dir.path().join("out");
    ["results.jsonl", "late.jsonl", "dead.jsonl"]
        .map(|file| std::fs::read_to_string(out.join(file)).unwrap_or_default())
}

fn run_ok(pipeline: &Pipeline, args: &[&str]) -> Run {
    let run = pipeline.run(args);
    assert!(run.success, "{}", run.stderr);
    run
}

fn kinds(run: &Run) -> std::collections::BTreeSet<&str> {
    run.results
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect()
}

#[test]
fn aggregates_built_against_contracts_0_1_and_0_2_give_what_0_3_gives() {
    let windows = [
        (
            WindowKind::Tumbling { size: 100 },
            &["result", "update"][..],
        ),
        (
            WindowKind::Sliding {
                size: 100,
                slide: 50,
            },
            &["result", "update"],
        ),
        (
            WindowKind::Session { gap: 30 },
            &["result", "retract", "update"],
        ),
    ];
    for (window, expected_kinds) in windows {
        let spec = ModelSpec {
            window,
            bound: 20,
            lateness: 60,
        };
        let input = mixed_events();
        let example = Pipeline::new(&count_sum_body(&spec), &input);
        let run = run_ok(&example, &[]);
        let kinds = kinds(&run);
        assert!(
            expected_kinds.iter().all(|kind| kinds.contains(kind))
                && run.results.iter().any(|r| r["value"]["sum"].is_f64())
                && !run.late.is_empty()
                && run.dead_letters.iter().any(|d| d["line"] == 98)
                && run.dead_letters.iter().any(|d| d["line"] == 151),
            "{window:?}: the input exercises {expected_kinds:?} (got {kinds:?}), float sums, late \
             events and dead letters: {} results, {} late, {:?}",
            run.results.len(),
            run.late.len(),
            run.dead_letters
        );
        let expected = written(&example);
        for old in COUNT_SUMS {
            let pipeline = Pipeline::new(&count_sum_with(&spec, &guest(old)), &input);
            for batch in ["1024", "3"] {
                run_ok(&pipeline, &["--batch-size", batch]);
                let case = format!("{old}, {window:?}, batch {batch}");
                let [results, late, dead] = written(&pipeline);
                assert_eq!(results, expected[0], "{case}: results");
                assert_eq!(late, expected[1], "{case}: late events");
                assert_eq!(dead, expected[2], "{case}: dead letters");
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
    // The healthy keys' events alone, in the same lines (blank for the others), so that
    // results carry the same ids.
    let healthy: String = input
        .lines()
        .map(|l| {
            if l.contains("boom") {
                "\n".to_owned()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let expected = run_ok(&Pipeline::new(&count_sum_body(&spec), &healthy), &[]);
    assert!(expected.results.len() > 20, "{:?}", expected.results);
    for old in COUNT_SUMS {
        let run = run_ok(
            &Pipeline::new(&count_sum_with(&spec, &guest(old)), &input),
            &[],
        );
        assert_eq!(
            run.results, expected.results,
            "{old}: the healthy keys' results"
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

/// Lines that each bring a field name of their own (some past the interned length), so that a
/// window's batch is as wide as it is long: each key's one window of about 1,700 events and as
/// many names is past the width a call may carry (2^20 values), so the old contracts' batches (a
/// list per event in 0.1, field after field in 0.2) are refused and retried a call per event,
/// with the same windows as the 0.3 example's.
#[test]
fn old_contracts_take_a_new_field_name_on_every_line_as_0_3_does() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 2_000 },
        bound: 10,
        lateness: 0,
    };
    let input: String = (0..12_000)
        .map(|i| {
            let name = match i % 3 {
                0 => format!("f{i}"),
                1 => format!("{}{i}", "n".repeat(300)),
                _ => format!("é\\u00e9{i}"),
            };
            format!(
                "{{\"{name}\":{i},\"key\":\"user-{}\",\"ts\":{},\"amount\":{}}}\n",
                i % 7,
                i / 8,
                i % 10
            )
        })
        .collect();
    let example = Pipeline::new(&count_sum_body(&spec), &input);
    let run = run_ok(&example, &[]);
    assert!(
        run.results.len() == 7 && run.dead_letters.is_empty(),
        "{} results, {:?}",
        run.results.len(),
        run.dead_letters.first()
    );
    let expected = written(&example);
    for old in COUNT_SUMS {
        let pipeline = Pipeline::new(&count_sum_with(&spec, &guest(old)), &input);
        run_ok(&pipeline, &[]);
        assert_eq!(written(&pipeline), expected, "{old}");
    }
}

/// A pipeline enriching `examples/enrich-customers`' orders (with `extra` lines appended) with
/// `module`, its customers as reference data, and customer C020 with a name but no tier.
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
    let customers = std::fs::read_to_string(example.join("customers.jsonl")).unwrap()
        + "{\"customer_id\": \"C020\", \"name\": \"Only A Name\"}\n";
    std::fs::write(pipeline.dir.path().join("customers.jsonl"), customers).unwrap();
    pipeline
}

/// Orders after the example's last, of the kinds its file lacks: order ids as integers (one
/// sent twice), null or absent; orders that already carry a `tier` (and one a
/// `customer_name` too); a customer whose reference data has a name but no tier.
const ODD_ORDERS: &str = "\
{\"order_id\": 20001, \"customer_id\": \"C001\", \"ts\": 1772442665001, \"amount\": 1}
{\"order_id\": null, \"customer_id\": \"C002\", \"ts\": 1772442665002, \"amount\": 2}
{\"customer_id\": \"C003\", \"ts\": 1772442665003, \"amount\": 3}
{\"order_id\": \"O-T1\", \"customer_id\": \"C004\", \"ts\": 1772442665004, \"tier\": \"old\"}
{\"order_id\": \"O-T2\", \"customer_id\": \"C004\", \"ts\": 1772442665005, \"tier\": 1, \"customer_name\": \"x\"}
{\"order_id\": 20001, \"customer_id\": \"C001\", \"ts\": 1772442665006, \"amount\": 4}
{\"order_id\": \"O-N1\", \"customer_id\": \"C020\", \"ts\": 1772442665007, \"amount\": 5}
";

#[test]
fn enrichers_built_against_contracts_0_1_and_0_2_give_what_0_3_gives() {
    // Compared at each batch size: a batch's events share one list of field names, so an
    // order that brings its own `tier` puts it before `customer_name` in the output of every
    // order of its batch (the same for every contract; JSON readers do not see it).
    let example = orders_pipeline(&component("enrich-customers"), ODD_ORDERS);
    for batch in ["1024", "1"] {
        let run = run_ok(&example, &["--batch-size", batch]);
        let count = |field: &str, value: &str| {
            (run.results.iter())
                .filter(|r| r["value"][field] == value)
                .count()
        };
        assert!(
            run.results.len() == 306
                && count("tier", "none") > 0
                && count("customer_name", "Only A Name") == 1,
            "{} results",
            run.results.len()
        );
        let expected = written(&example);
        for old in ENRICHERS {
            let pipeline = orders_pipeline(&guest(old), ODD_ORDERS);
            run_ok(&pipeline, &["--batch-size", batch]);
            assert_eq!(written(&pipeline), expected, "{old}, batch {batch}");
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
