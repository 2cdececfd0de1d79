//! Replays (issue 13): the recorded input of a live pipeline rerun through two versions in a
//! sandbox shows, for the keys asked, exactly the windows and differences a shadow run of the
//! same versions showed live; from a savepoint, exactly those after it. Deterministic, the live
//! pipeline untouched, and every hostile request refused clearly.

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{ADMIN, PATIENCE, Server, clicks, count_sum_v1, far_future, live_model, spec};

/// A window as both sides show it: key, start, end, version a's value, version b's value (as
/// JSON text).
type Row = (String, i64, i64, String, String);

fn replay(server: &Server, pipeline: &str, request: &Value) -> Value {
    server.expect(
        &format!("replaying {request}"),
        server.post_json(
            &format!("/v1/pipelines/{pipeline}/replay"),
            Some(ADMIN),
            request,
        ),
        200,
    )
}

/// A record as a row: its key, window, and the two sides' values named `a` and `b`.
/// The pipeline's `weir_results_total` and `weir_dead_letters_total`, summed over their kinds
/// and causes.
fn output_series(server: &Server, pipeline: &str) -> (f64, f64) {
    let (status, text) = server.get("/metrics", Some(ADMIN));
    assert_eq!(status, 200, "{text}");
    let label = format!("pipeline=\"{pipeline}\"");
    let sum = |name: &str| -> f64 {
        (text.lines())
            .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(&label))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (sum("weir_results_total"), sum("weir_dead_letters_total"))
}

fn row(record: &Value, a: &str, b: &str) -> Row {
    (
        record["key"].as_str().unwrap().to_owned(),
        record["window_start"].as_i64().unwrap(),
        record["window_end"].as_i64().unwrap(),
        record[a].to_string(),
        record[b].to_string(),
    )
}

fn replay_rows(answer: &Value) -> BTreeSet<Row> {
    assert_eq!(answer["truncated"], false, "{answer}");
    (answer["rows"].as_array().unwrap().iter())
        .map(|r| row(r, "a", "b"))
        .collect()
}

/// The shadow log's comparisons of the keys in `keys`.
fn shadow_rows(shadow: &[Value], keys: &[&str]) -> BTreeSet<Row> {
    (shadow.iter())
        .filter(|r| keys.contains(&r["key"].as_str().unwrap()))
        .map(|r| row(r, "live", "candidate"))
        .collect()
}

fn differing(rows: &BTreeSet<Row>) -> BTreeSet<&Row> {
    rows.iter().filter(|(.., a, b)| a != b).collect()
}

#[test]
fn a_replay_shows_exactly_the_differences_a_shadow_run_of_the_same_keys_shows() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    // 1.1.0 caps its `sum` output at 100: it differs in some windows only.
    server.upload_ok(
        "count-sum",
        "1.1.0",
        &crate::support::guest("count-sum-capped"),
    );
    let mut live = spec();
    live["name"] = json!("clicks");
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &live),
        201,
    );
    server.expect(
        "starting",
        server.post("/v1/pipelines/clicks/start", Some(ADMIN), b""),
        200,
    );
    server.expect(
        "a shadow rollout",
        server.post_json(
            "/v1/pipelines/clicks/rollout",
            Some(ADMIN),
            &json!({"version": "1.1.0", "percent": 0, "shadow": true}),
        ),
        200,
    );
    server.wait_for("the shadow to apply", PATIENCE, || {
        let status = server.status("clicks");
        if status["applied_routing"]["candidate"] == "1.1.0" {
            Ok(())
        } else {
            Err(status.to_string())
        }
    });
    let mut events = clicks(3_000, 20);
    events.push(far_future(&events));
    let (first, second) = events.split_at(1_500);
    for chunk in first.chunks(100) {
        server.ingest("clicks", chunk);
    }
    server.wait_for_events_in("clicks", first.len());
    let saved = server.expect(
        "a savepoint midway",
        server.post_json(
            "/v1/pipelines/clicks/savepoints",
            Some(ADMIN),
            &json!({"name": "mid"}),
        ),
        201,
    );
    for chunk in second.chunks(100) {
        server.ingest("clicks", chunk);
    }
    let expected = live_model(&events);
    server.wait_for_results("clicks", &expected);
    let shadow = server.wait_for("every window in the shadow log", PATIENCE, || {
        let shadow = server.output("clicks", "shadow.jsonl");
        if shadow.len() >= expected.len() {
            Ok(shadow)
        } else {
            Err(format!("{} of {}", shadow.len(), expected.len()))
        }
    });
    let results_before =
        std::fs::read(dir.path().join("pipelines/clicks/out/results.jsonl")).unwrap();

    let counted_before = output_series(&server, "clicks");
    assert!(counted_before.0 > 0.0, "{counted_before:?}");
    let keys = ["user-1", "user-7", "user-12", "user-19"];
    let request = json!({"versions": ["1.0.0", "1.1.0"], "keys": keys});
    let answer = replay(&server, "clicks", &request);
    let replayed = replay_rows(&answer);
    let shadowed = shadow_rows(&shadow, &keys);
    assert!(!shadowed.is_empty());
    assert_eq!(
        replayed, shadowed,
        "the replay's windows and values are the shadow's"
    );
    assert!(
        !differing(&shadowed).is_empty() && differing(&shadowed).len() < shadowed.len(),
        "the capped version differs in some windows, not all"
    );
    assert_eq!(differing(&replayed), differing(&shadowed));
    assert_eq!(answer["differing"], json!(differing(&replayed).len()));
    // Deterministic: the same call, the same answer.
    assert_eq!(replay(&server, "clicks", &request), answer);
    // `weir replay` asks the same and prints it side by side, differing windows marked.
    let base = server.url("");
    let cli = |extra: &[&str]| {
        let mut args = vec!["replay", "--server", &base, "clicks", "1.0.0", "1.1.0"];
        for key in keys {
            args.extend(["--key", key]);
        }
        args.extend(extra);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let printed: Value = serde_json::from_str(&cli(&["--json"])).unwrap();
    assert_eq!(printed, answer);
    let table = cli(&[]);
    let marked = table.lines().filter(|line| line.starts_with('*')).count();
    assert_eq!(marked, differing(&replayed).len(), "{table}");
    assert!(
        table.contains(&format!("{marked} of {} windows differ", replayed.len())),
        "{table}"
    );

    // The replays' results and dead letters are not the live pipeline's: its series are as
    // they were.
    assert_eq!(output_series(&server, "clicks"), counted_before);

    // From the savepoint: exactly the windows that closed after it, with state from before it.
    let from_savepoint = replay(
        &server,
        "clicks",
        &json!({"versions": ["1.0.0", "1.1.0"], "keys": keys, "savepoint": "mid"}),
    );
    let watermark = saved["watermark"].as_i64().unwrap();
    let after: BTreeSet<Row> = shadowed
        .iter()
        .filter(|(_, _, end, ..)| *end > watermark)
        .cloned()
        .collect();
    assert!(!after.is_empty() && after.len() < shadowed.len());
    assert_eq!(replay_rows(&from_savepoint), after);

    // A time range and a sample.
    let (from, to) = (
        shadowed.iter().map(|r| r.1).min().unwrap() + 10_000,
        shadowed.iter().map(|r| r.2).max().unwrap() - 10_000,
    );
    let ranged = replay(
        &server,
        "clicks",
        &json!({"versions": ["1.0.0", "1.1.0"], "keys": keys, "from": from, "to": to}),
    );
    let inside: BTreeSet<Row> = shadowed
        .iter()
        .filter(|r| r.1 >= from && r.2 <= to)
        .cloned()
        .collect();
    assert_eq!(replay_rows(&ranged), inside);
    let sampled = replay(
        &server,
        "clicks",
        &json!({"versions": ["1.0.0", "1.1.0"], "sample": 5}),
    );
    assert_eq!(
        sampled["keys"].as_array().unwrap().len(),
        5,
        "{}",
        sampled["keys"]
    );
    assert_eq!(
        replay(
            &server,
            "clicks",
            &json!({"versions": ["1.0.0", "1.1.0"], "sample": 5})
        )["keys"],
        sampled["keys"]
    );

    // The live pipeline was not touched: same results, no sandbox left behind.
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        std::fs::read(dir.path().join("pipelines/clicks/out/results.jsonl")).unwrap(),
        results_before
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("pipelines/clicks"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("replay-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(server.status("clicks")["state"], "running");
}

#[test]
fn hostile_replay_requests_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut live = spec();
    live["name"] = json!("small");
    live["source"] = json!({"type": "http", "segment_size": "4KiB"});
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &live),
        201,
    );
    server.expect(
        "starting",
        server.post("/v1/pipelines/small/start", Some(ADMIN), b""),
        200,
    );
    let v = |a: &str, b: &str| json!([a, b]);
    let long = "k".repeat(300);
    let too_many: Vec<String> = (0..1_001).map(|i| format!("k{i}")).collect();
    for (request, why) in [
        (
            json!({"versions": v("1.0.0", "1.0.0")}),
            "no keys and no sample",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "keys": ["a"], "sample": 3}),
            "both keys and a sample",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "sample": 0}),
            "a sample of none",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "sample": 1_000_000}),
            "a huge sample",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "keys": too_many}),
            "1,001 keys",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "keys": [long]}),
            "a 300-byte key",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "keys": ["a"], "from": 5, "to": 5}),
            "an empty range",
        ),
        (
            json!({"versions": v("../../x", "1.0.0"), "keys": ["a"]}),
            "a crafted version",
        ),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "keys": ["a"], "savepoint": "../data"}),
            "a crafted savepoint",
        ),
        (json!({"versions": ["1.0.0"], "keys": ["a"]}), "one version"),
        (
            json!({"versions": v("1.0.0", "1.0.0"), "keys": ["a"], "dir": "/"}),
            "an unknown field",
        ),
    ] {
        server.expect_error(
            why,
            server.post_json("/v1/pipelines/small/replay", Some(ADMIN), &request),
            400,
        );
    }
    server.expect_error(
        "an unknown version",
        server.post_json(
            "/v1/pipelines/small/replay",
            Some(ADMIN),
            &json!({"versions": v("1.0.0", "9.9.9"), "keys": ["a"]}),
        ),
        404,
    );
    server.expect_error(
        "an unknown savepoint",
        server.post_json(
            "/v1/pipelines/small/replay",
            Some(ADMIN),
            &json!({"versions": v("1.0.0", "1.0.0"), "keys": ["a"], "savepoint": "none"}),
        ),
        404,
    );
    server.expect_error(
        "an ingest token",
        server.post_json(
            "/v1/pipelines/small/replay",
            Some(crate::server::INGEST),
            &json!({"versions": v("1.0.0", "1.0.0"), "keys": ["a"]}),
        ),
        403,
    );
    // Once the log's start is truncated, a replay from empty state cannot see it.
    let events = clicks(2_000, 10);
    for chunk in events.chunks(100) {
        server.ingest("small", chunk);
    }
    server.wait_for_events_in("small", events.len());
    server.wait_for("the log's first segment to go", PATIENCE, || {
        if dir.path().join("pipelines/small/ingest.jsonl").exists() {
            Err("still there".to_owned())
        } else {
            Ok(())
        }
    });
    let error = server.expect_error(
        "a replay of a truncated log",
        server.post_json(
            "/v1/pipelines/small/replay",
            Some(ADMIN),
            &json!({"versions": v("1.0.0", "1.0.0"), "keys": ["user-1"]}),
        ),
        409,
    );
    assert!(error.contains("replay from a savepoint"), "{error}");
}
