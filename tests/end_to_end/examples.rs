//! The bundled examples, run exactly as the README tells a user to: `weir run
//! examples/<name>/pipeline.toml`, each with its own component and sample data.

use std::process::Command;

use serde_json::Value;

use crate::support::{component, workspace};

struct ExampleRun {
    stdout: String,
    stderr: String,
    results: Vec<Value>,
    late: Vec<Value>,
    dead_letters: Vec<Value>,
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Runs an example from the beginning (`--fresh`: the example's data directory may hold the
/// finished checkpoint of an earlier run).
fn run_example(name: &str, component_name: &str) -> ExampleRun {
    component(component_name);
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(workspace())
        .args([
            "run",
            &format!("examples/{name}/pipeline.toml"),
            "--shards",
            "2",
            "--fresh",
        ])
        .output()
        .expect("running weir");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "examples/{name} failed:\n{stderr}");
    let out = workspace().join("target/weir-out").join(name);
    let read = |file: &str| {
        std::fs::read_to_string(out.join(file))
            .map(|t| lines(&t))
            .unwrap_or_default()
    };
    ExampleRun {
        results: read("results.jsonl"),
        late: read("late.jsonl"),
        dead_letters: read("dead-letters.jsonl"),
        stdout,
        stderr,
    }
}

#[test]
fn tumbling_count_sum_example_counts_every_accepted_event() {
    let run = run_example("tumbling-count-sum", "tumbling-count-sum");
    assert_eq!(
        run.dead_letters.len(),
        3,
        "the sample has three malformed lines: {:?}",
        run.dead_letters
    );
    assert!(!run.late.is_empty(), "the sample has late events");
    assert!(run.results.iter().all(|r| r["operator"] == "count-sum"));
    // Every event is either late, a dead letter, or counted exactly once in the latest version
    // of its window.
    let mut latest: std::collections::HashMap<(String, i64), (u64, i64)> = Default::default();
    for r in &run.results {
        let slot = latest
            .entry((
                r["key"].as_str().unwrap().into(),
                r["window_start"].as_i64().unwrap(),
            ))
            .or_default();
        let version = r["version"].as_u64().unwrap();
        if version > slot.0 {
            *slot = (version, r["value"]["count"].as_i64().unwrap());
        }
    }
    let counted: i64 = latest.values().map(|(_, count)| count).sum();
    let lines =
        std::fs::read_to_string(workspace().join("examples/tumbling-count-sum/events.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
    assert_eq!(
        counted as usize + run.late.len() + run.dead_letters.len(),
        lines
    );
    assert!(
        run.stderr.contains(&format!("{} events in", lines - 3)),
        "{}",
        run.stderr
    );
}

#[test]
fn sliding_average_example_averages_rfc3339_readings() {
    let run = run_example("sliding-average", "sliding-average");
    assert!(!run.results.is_empty());
    for r in &run.results {
        let (count, sum, avg) = (
            r["value"]["count"].as_f64().unwrap(),
            r["value"]["sum"].as_f64().unwrap(),
            r["value"]["avg"].as_f64().unwrap(),
        );
        assert!((sum / count - avg).abs() < 1e-9, "{r}");
        assert_eq!(
            r["window_end"].as_i64().unwrap() - r["window_start"].as_i64().unwrap(),
            60_000
        );
        assert_eq!(r["window_start"].as_i64().unwrap() % 15_000, 0);
    }
}

#[test]
fn session_summary_example_reports_sessions_separated_by_the_gap() {
    let run = run_example("session-summary", "session-summary");
    let finals: Vec<_> = run
        .results
        .iter()
        .filter(|r| r["kind"] != "retract")
        .collect();
    assert!(!finals.is_empty());
    for r in finals {
        let v = &r["value"];
        assert_eq!(
            v["duration_ms"].as_i64().unwrap(),
            v["last"].as_i64().unwrap() - v["first"].as_i64().unwrap()
        );
        assert_eq!(
            r["window_start"].as_i64().unwrap(),
            v["first"].as_i64().unwrap()
        );
        assert_eq!(
            r["window_end"].as_i64().unwrap(),
            v["last"].as_i64().unwrap() + 30_000
        );
    }
}

/// The operator keeps its items in a map, which a call carrying many windows (contract 0.3)
/// does not reach: each of its windows answers that it needs its scope and goes alone. The
/// latest result of each window must equal a count made here from the sample, late sales left
/// out.
#[test]
fn distinct_count_example_counts_items_once() {
    let run = run_example("distinct-count", "distinct-count");
    let late: std::collections::HashSet<u64> = (run.late.iter())
        .map(|l| l["line"].as_u64().unwrap())
        .collect();
    let text =
        std::fs::read_to_string(workspace().join("examples/distinct-count/events.jsonl")).unwrap();
    type Window = (String, i64);
    let mut expected: std::collections::BTreeMap<Window, (std::collections::HashSet<String>, i64)> =
        Default::default();
    for (i, line) in text.lines().enumerate() {
        if late.contains(&(i as u64 + 1)) {
            continue;
        }
        let sale: Value = serde_json::from_str(line).unwrap();
        let start = sale["ts"].as_i64().unwrap() / 300_000 * 300_000;
        let window = expected
            .entry((sale["store"].as_str().unwrap().into(), start))
            .or_default();
        window.0.insert(match &sale["item"] {
            Value::String(item) => item.clone(),
            item => item.to_string(),
        });
        window.1 += 1;
    }
    let mut latest: std::collections::BTreeMap<Window, (u64, i64, i64)> = Default::default();
    for r in &run.results {
        let window = (
            r["key"].as_str().unwrap().into(),
            r["window_start"].as_i64().unwrap(),
        );
        let version = r["version"].as_u64().unwrap();
        let slot = latest.entry(window).or_default();
        if version > slot.0 {
            let value = &r["value"];
            *slot = (
                version,
                value["distinct"].as_i64().unwrap(),
                value["events"].as_i64().unwrap(),
            );
        }
    }
    let expected: Vec<(Window, i64, i64)> = (expected.into_iter())
        .map(|(window, (items, events))| (window, items.len() as i64, events))
        .collect();
    let got: Vec<(Window, i64, i64)> = (latest.into_iter())
        .map(|(window, (_, distinct, events))| (window, distinct, events))
        .collect();
    assert!(expected.len() > 10, "{expected:?}");
    assert_eq!(got, expected);
}

#[test]
fn enrichment_example_joins_the_reference_table_and_drops_duplicates() {
    let run = run_example("enrich-customers", "enrich-customers");
    let events = lines(&run.stdout);
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e["kind"] == "event"));
    let named = events
        .iter()
        .filter(|e| e["value"]["customer_name"] != "unknown")
        .count();
    assert!(
        named > 0 && named < events.len(),
        "some customers are in the reference table, some are not"
    );
    let mut orders: Vec<&str> = events
        .iter()
        .map(|e| e["value"]["order_id"].as_str().unwrap())
        .collect();
    let before = orders.len();
    orders.sort_unstable();
    orders.dedup();
    assert_eq!(orders.len(), before, "duplicate orders were dropped");
    let input = std::fs::read_to_string(workspace().join("examples/enrich-customers/orders.jsonl"))
        .unwrap();
    assert!(
        input.lines().count() > events.len(),
        "the sample has duplicates to drop"
    );
}

/// `weir bench` runs as the README tells (small, so it is a check of behaviour, not speed):
/// both runs agree on their results, from the generator and from a JSON Lines file, with the
/// shards' and the router's CPU time per event where the platform tells them, and the file is
/// removed afterwards. `--jsonl` where it means nothing, and bad parameters, are refused.
#[test]
fn the_benchmark_runs_from_the_generator_and_from_a_json_lines_file() {
    let module = component("tumbling-count-sum");
    let temp = tempfile::tempdir().unwrap();
    let bench = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .current_dir(workspace())
            .env("TMPDIR", temp.path())
            .arg("bench")
            .args(args)
            .output()
            .expect("running weir bench")
    };
    for extra in [&[][..], &["--jsonl"][..]] {
        let module = module.to_str().unwrap();
        let mut args = vec!["--events", "40000", "--keys", "50", "--module", module];
        args.extend(["--python", "-", "--js", "-", "--runs", "2"]);
        args.extend(extra);
        let output = bench(&args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let from = if extra.is_empty() {
            "generator"
        } else {
            "JSON Lines file"
        };
        assert!(
            stdout.contains(&format!("40000 events from the {from}")),
            "{stdout}"
        );
        for label in [
            "rust wasm",
            "native",
            "wasm/native throughput ratio",
            "run 2 of 2",
        ] {
            assert!(stdout.contains(label), "{label}: {stdout}");
        }
        let medians = stdout.split("medians of 2 runs").nth(1).unwrap_or_default();
        assert!(medians.contains("x native ("), "{stdout}");
        if weir::cpu_time::this_thread().is_some() {
            // The operators' cost apart from the router's: the shards' CPU time per event.
            for label in [
                "CPU per event: shards ",
                "wasm/native by shard CPU per event",
            ] {
                assert!(stdout.contains(label), "{label}: {stdout}");
            }
            let shard_ns: Vec<f64> = (medians.split("shard CPU ").skip(1))
                .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
                .collect();
            assert_eq!(shard_ns.len(), 2, "{stdout}");
            assert!(shard_ns.iter().all(|&ns| ns > 0.0), "{stdout}");
        }
        let left: Vec<_> = std::fs::read_dir(temp.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "the benchmark left {left:?} behind");
    }
    for (args, says) in [
        (&["--keys", "0"][..], "must be at least 1"),
        (&["--runs", "0"][..], "not in 1..=100"),
        (&["--runs", "101"][..], "not in 1..=100"),
        (&["--jsonl", "--checkpoints"][..], "cannot be used with"),
        (
            &["--jsonl", "nexmark"][..],
            "apply to the count-sum benchmark only",
        ),
        (
            &["--recovery", "nexmark"][..],
            "apply to the count-sum benchmark only",
        ),
        (&["--runs", "2", "--recovery"][..], "run once"),
        (&["--large"][..], "--checkpoints"),
    ] {
        let output = bench(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// `weir bench serve` runs as the benchmarks chapter tells (small: a check of behaviour, not
/// speed): it starts its own server, every event is accepted and read, and the server and its
/// directory are gone afterwards. Hostile: `--runs` is refused.
#[test]
fn the_served_ingest_benchmark_runs_and_cleans_up() {
    let module = component("tumbling-count-sum");
    let temp = tempfile::tempdir().unwrap();
    let bench = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .env("TMPDIR", temp.path())
            .args(["bench"])
            .args(args)
            .output()
            .expect("running weir bench serve")
    };
    let module = module.to_str().unwrap();
    let args = [
        "serve",
        "--events",
        "20000",
        "--batch",
        "1000",
        "--clients",
        "3",
        "--module",
        module,
    ];
    let output = bench(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "20000 events in 20 batches of 1000 from 3 clients",
        "accepted (durable)",
        "read by the pipeline",
        "20000 events)",
        "p99",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    let left: Vec<_> = std::fs::read_dir(temp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "the server's directory is removed: {left:?}"
    );
    let refused = bench(&["--runs", "2", "serve", "--module", module]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("runs once"));
}
