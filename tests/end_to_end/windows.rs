//! Window semantics through the real binary: out-of-order input, late events, updates within
//! the allowed lateness, session merges and retractions, compared with the reference model.

use crate::reference::{Ev, ModelSpec, WindowKind, run_model};
use crate::support::{Pipeline, assert_matches_model, count_sum_body, to_jsonl};

fn ev(key: &str, ts: i64, amount: i64) -> Ev {
    Ev {
        key: key.into(),
        ts,
        amount,
    }
}

fn check(spec: ModelSpec, events: &[Ev], args: &[&str]) -> crate::support::Run {
    let pipeline = Pipeline::new(&count_sum_body(&spec), &to_jsonl(events));
    let run = pipeline.run(args);
    assert_matches_model(&run, &run_model(&spec, events));
    run
}

/// A deterministic out-of-order stream: timestamps advance with jitter, and every 17th event is
/// far behind (late, or within the lateness).
fn disordered(n: usize, keys: usize) -> Vec<Ev> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|i| {
            let jitter = (next() % 40) as i64;
            let behind = if i % 17 == 0 {
                (next() % 300) as i64
            } else {
                0
            };
            ev(
                &format!("user-{}", next() % keys as u64),
                i as i64 * 10 - jitter - behind,
                (next() % 100) as i64,
            )
        })
        .collect()
}

#[test]
fn tumbling_windows_fire_on_the_watermark_and_update_within_lateness() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 10 },
        bound: 5,
        lateness: 5,
    };
    let events = [
        ev("a", 1, 1),
        ev("b", 3, 2),
        ev("a", 12, 3),
        ev("a", 16, 4), // W = 11: [0,10) fires for a and b
        ev("a", 8, 5),  // within lateness: [0,10) of a updated, version 2
        ev("a", 25, 6), // W = 20: [10,20) fires; [0,10) dropped
        ev("a", 2, 7),  // late
    ];
    let run = check(spec, &events, &[]);
    let kinds: Vec<_> = run
        .results
        .iter()
        .map(|r| {
            (
                r["window_start"].as_i64().unwrap(),
                r["kind"].as_str().unwrap().to_owned(),
                r["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (0, "result".into(), 1),
            (0, "result".into(), 1),
            (0, "update".into(), 2),
            (10, "result".into(), 1),
            (20, "result".into(), 1)
        ]
    );
    assert_eq!(run.late.len(), 1);
    assert!(run.late[0]["reason"].as_str().unwrap().contains("late"));
    assert_eq!(run.results[0]["operator"], "count-sum");
    assert_eq!(run.results[0]["operator_version"], "1.0.0");
    assert!(
        run.stderr
            .contains("7 events in, 5 results out, 1 late, 0 dead letters"),
        "{}",
        run.stderr
    );
}

#[test]
fn sliding_events_late_for_some_windows_join_the_others() {
    let spec = ModelSpec {
        window: WindowKind::Sliding {
            size: 20,
            slide: 10,
        },
        bound: 0,
        lateness: 0,
    };
    // ts 15 arrives at W = 20: late for [0,20) but not for [10,30).
    check(
        spec,
        &[
            ev("a", 5, 1),
            ev("a", 20, 2),
            ev("a", 15, 4),
            ev("a", 31, 8),
        ],
        &[],
    );
}

#[test]
fn sessions_merge_and_retract_superseded_results() {
    let spec = ModelSpec {
        window: WindowKind::Session { gap: 10 },
        bound: 0,
        lateness: 100,
    };
    let events = [
        ev("a", 0, 1),   // [0,10)
        ev("a", 30, 2),  // W = 30: [0,10) fires (v1); [30,40)
        ev("a", 50, 4),  // W = 50: [30,40) fires (v1); [50,60)
        ev("a", 15, 8), // [15,25) bridges nothing but touches none... opens a session within lateness
        ev("a", 22, 16), // [22,32) bridges [15,25) and [30,40): retract [30,40) v1, merged fires v2
        ev("a", 5, 32), // [5,15) touches [0,10) and [15,40): retracts, then v3 of [0,40)
    ];
    let run = check(spec, &events, &[]);
    assert!(
        run.results.iter().any(|r| r["kind"] == "retract"),
        "{:#?}",
        run.results
    );
}

#[test]
fn results_do_not_depend_on_shards_or_batch_size() {
    let events = disordered(3_000, 40);
    for window in [
        WindowKind::Tumbling { size: 100 },
        WindowKind::Sliding {
            size: 150,
            slide: 50,
        },
        WindowKind::Session { gap: 60 },
    ] {
        let spec = ModelSpec {
            window,
            bound: 50,
            lateness: 120,
        };
        let pipeline = Pipeline::new(&count_sum_body(&spec), &to_jsonl(&events));
        let expected = run_model(&spec, &events);
        assert!(
            !expected.late.is_empty() && expected.emissions.iter().any(|e| e.kind == "update"),
            "the stream exercises lateness"
        );
        for args in [
            &["--shards", "1"][..],
            &["--shards", "4", "--batch-size", "7"],
            &["--shards", "3", "--batch-size", "1000"],
        ] {
            let run = pipeline.run(args);
            assert_matches_model(&run, &expected);
        }
    }
}

#[test]
fn rfc3339_timestamps_mean_the_same_as_milliseconds() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 60_000 },
        bound: 1_000,
        lateness: 0,
    };
    let millis = [
        ev("a", 1_000, 1),
        ev("a", 61_000, 2),
        ev("a", 59_999, 4),
        ev("a", 200_000, 8),
    ];
    let rfc3339 = "{\"key\":\"a\",\"ts\":\"1970-01-01T00:00:01Z\",\"amount\":1}\n\
                   {\"key\":\"a\",\"ts\":\"1970-01-01T00:01:01Z\",\"amount\":2}\n\
                   {\"key\":\"a\",\"ts\":\"1970-01-01T01:00:59.999+01:00\",\"amount\":4}\n\
                   {\"key\":\"a\",\"ts\":\"1970-01-01T00:03:20Z\",\"amount\":8}\n";
    let run = Pipeline::new(&count_sum_body(&spec), rfc3339).run(&[]);
    assert_matches_model(&run, &run_model(&spec, &millis));
}

#[test]
fn a_partition_field_keeps_a_slow_partition_on_time() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 100 },
        bound: 0,
        lateness: 0,
    };
    // Region b starts, region a runs 1 s ahead, then b catches up: with one watermark, b's
    // events after a's are late; with a watermark per region, none is.
    let at = |region: &str, i: i64| {
        (
            region.to_owned(),
            ev(&format!("k{}", i % 3), i * 10, i % 4 + 1),
        )
    };
    let mut input = vec![at("b", 0)];
    input.extend((0..1_000).map(|i| at("a", i)));
    input.extend((1..1_000).map(|i| at("b", i)));
    let lines: String = (input.iter())
        .map(|(region, e)| {
            format!(
                "{{\"key\":{:?},\"ts\":{},\"amount\":{},\"region\":{region:?}}}\n",
                e.key, e.ts, e.amount
            )
        })
        .collect();
    let body = count_sum_body(&spec);
    let one = Pipeline::new(&body, &lines).run(&[]);
    assert!(one.success, "{}", one.stderr);
    assert!(
        one.late.len() > 50,
        "one watermark makes b late: {}",
        one.late.len()
    );
    let partitioned = body.replace(
        "[watermark]\n",
        "[watermark]\npartition_field = \"region\"\n",
    );
    assert_ne!(partitioned, body);
    let run = Pipeline::new(&partitioned, &lines).run(&["--shards", "2"]);
    assert!(run.success, "{}", run.stderr);
    assert!(run.late.is_empty(), "{:?}", run.late);
    // Every event counted once, in its window: the model's results over the events in time
    // order (where nothing is late either).
    let mut sorted: Vec<Ev> = input.into_iter().map(|(_, e)| e).collect();
    sorted.sort_by_key(|e| e.ts);
    let mut expected = run_model(&spec, &sorted).emissions;
    let mut got = crate::support::emissions(&run.results);
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    // The partitions' marks are checkpointed: a run crashed after a checkpoint resumes to the
    // same output.
    let pipeline = Pipeline::new(&partitioned, &lines);
    let args = ["--checkpoint-interval", "1ms", "--batch-size", "5"];
    let whole = pipeline.run(&args);
    for id in [3, 8] {
        let crashed = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "--fresh"])
            .arg(pipeline.dir.path().join("pipeline.toml"))
            .args(args)
            .env("WEIR_TEST_CRASH", format!("after-commit:{id}"))
            .output()
            .unwrap();
        assert!(!crashed.status.success(), "the crash hook did not fire");
        let resumed = pipeline.resume(&args);
        assert!(resumed.success, "{}", resumed.stderr);
        assert_eq!(
            resumed.results, whole.results,
            "after a crash at checkpoint {id}"
        );
        assert!(resumed.late.is_empty());
    }
}

#[test]
fn files_read_in_turn_are_watermark_partitions() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 100 },
        bound: 0,
        lateness: 0,
    };
    // A dense file and a sparse one over the same 5 s, read a line from each in turn: the
    // sparse one's times run ten times ahead of the dense one's.
    let dense: Vec<Ev> = (0..500)
        .map(|i| ev(&format!("d{}", i % 3), i * 10, 1))
        .collect();
    let sparse: Vec<Ev> = (0..50)
        .map(|i| ev(&format!("s{}", i % 2), i * 100 + 5, 2))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dense.jsonl"), to_jsonl(&dense)).unwrap();
    std::fs::write(dir.path().join("sparse.jsonl"), to_jsonl(&sparse)).unwrap();
    let body = count_sum_body(&spec);
    let write_spec = |source: &str| {
        let text = format!(
            "name = \"files\"\n[source]\n{source}\n[state]\ndir = \"data\"\n\
             [sinks]\nresults = \"out/results.jsonl\"\nlate = \"out/late.jsonl\"\n\
             dead_letters = \"out/dead.jsonl\"\n{body}"
        );
        std::fs::write(dir.path().join("pipeline.toml"), text).unwrap();
    };
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "--fresh"])
            .arg(dir.path().join("pipeline.toml"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let read = |name: &str| {
            std::fs::read_to_string(dir.path().join("out").join(name))
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .collect::<Vec<_>>()
        };
        (read("results.jsonl"), read("late.jsonl"))
    };
    // One watermark over the interleaved lines: the sparse file's times make most of the dense
    // file late.
    let interleaved: Vec<String> = (0..500)
        .flat_map(|i| {
            let mut lines = vec![to_jsonl(&dense[i..=i])];
            lines.extend(sparse.get(i).map(|e| to_jsonl(std::slice::from_ref(e))));
            lines
        })
        .collect();
    std::fs::write(dir.path().join("one.jsonl"), interleaved.concat()).unwrap();
    write_spec("type = \"file\"\npath = \"one.jsonl\"");
    let (_, late) = run(&[]);
    assert!(late.len() > 300, "one watermark: {} late", late.len());
    // A watermark per file: nothing is late, every event counted once, in its window.
    write_spec("type = \"files\"\npaths = [\"dense.jsonl\", \"sparse.jsonl\"]");
    let (results, late) = run(&["--shards", "2"]);
    assert!(late.is_empty(), "{late:?}");
    let mut all: Vec<Ev> = dense.iter().chain(&sparse).cloned().collect();
    all.sort_by_key(|e| e.ts);
    let mut expected = run_model(&spec, &all).emissions;
    let mut got = crate::support::emissions(&results);
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    // Resumed after a crash, the files go on in turn from where they were.
    let (whole, _) = run(&["--checkpoint-interval", "1ms", "--batch-size", "5"]);
    for id in [2, 6] {
        let crashed = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args([
                "run",
                "--fresh",
                "--checkpoint-interval",
                "1ms",
                "--batch-size",
                "5",
            ])
            .arg(dir.path().join("pipeline.toml"))
            .env("WEIR_TEST_CRASH", format!("after-commit:{id}"))
            .output()
            .unwrap();
        assert!(!crashed.status.success(), "the crash hook did not fire");
        let resumed = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "--checkpoint-interval", "1ms", "--batch-size", "5"])
            .arg(dir.path().join("pipeline.toml"))
            .output()
            .unwrap();
        assert!(resumed.status.success());
        let text = std::fs::read_to_string(dir.path().join("out/results.jsonl")).unwrap();
        let after: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(after, whole, "after a crash at checkpoint {id}");
    }
    // Bad lists are refused.
    for (paths, says) in [
        ("[]", "give 1 to"),
        ("[\"dense.jsonl\", \"dense.jsonl\"]", "twice"),
    ] {
        write_spec(&format!("type = \"files\"\npaths = {paths}"));
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("run")
            .arg(dir.path().join("pipeline.toml"))
            .output()
            .unwrap();
        assert!(!output.status.success());
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(says),
            "{paths}"
        );
    }
}

/// Events of every shape in the same windows: integer and float amounts, a text amount, none,
/// a null one, an extra field, fields in another order, and keys whose windows hold only
/// integers (in two orders of fields, or with an extra field) or only floats. The Wasm
/// count-sum gets some windows' amounts from what the router took of each event (its only
/// crossing field, beside it) and the rest from the events themselves; its results and dead
/// letters are the native twin's, line for line, with the default fields or `fields =
/// ["amount"]`, on one shard in one batch or on two in batches of three.
#[test]
fn events_of_every_shape_give_the_native_twins_results() {
    let mut lines = vec![
        r#"{"key":"a","ts":1,"amount":5}"#,
        r#"{"key":"a","ts":2,"amount":2.5}"#,
        r#"{"ts":3,"amount":7,"key":"a"}"#,
        r#"{"key":"a","ts":4,"amount":"x"}"#,
        r#"{"key":"a","ts":5}"#,
        r#"{"key":"a","ts":6,"amount":1,"note":"n"}"#,
        r#"{"key":"a","ts":8,"amount":null}"#,
        r#"{"key":"b","ts":11,"amount":2}"#,
        r#"{"key":"b","ts":12,"amount":"y"}"#,
        r#"{"key":"b","ts":13,"amount":-4}"#,
    ];
    let uniform: Vec<String> = (0..80)
        .map(|i| match i % 4 {
            0 => format!(r#"{{"key":"ints","ts":{i},"amount":{}}}"#, 3 * i + 1),
            1 => format!(r#"{{"key":"floats","ts":{i},"amount":{}.5}}"#, i - 40),
            2 => format!(r#"{{"amount":{i},"key":"orders","ts":{i}}}"#),
            _ => format!(r#"{{"key":"orders","ts":{i},"amount":{i},"note":"n"}}"#),
        })
        .collect();
    lines.extend(uniform.iter().map(String::as_str));
    // Numbers at their edges, each key's window all of one kind: read from the crossings.
    lines.extend([
        r#"{"key":"max","ts":90,"amount":9223372036854775807}"#,
        r#"{"key":"max","ts":91,"amount":-9223372036854775808}"#,
        r#"{"key":"zero","ts":92,"amount":-0.0}"#,
        r#"{"key":"zero","ts":93,"amount":-0.0}"#,
        r#"{"key":"big","ts":94,"amount":1e308}"#,
        r#"{"key":"big","ts":95,"amount":-1e308}"#,
    ]);
    lines.push(r#"{"key":"a","ts":100,"amount":1}"#);
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 10 },
        bound: 0,
        lateness: 0,
    };
    let input = lines.join("\n") + "\n";
    let shapes = [
        ("", &[][..]),
        (
            "fields = [\"amount\"]\n",
            &["--shards", "2", "--batch-size", "3"],
        ),
    ];
    for (fields, args) in shapes {
        let wasm = count_sum_body(&spec) + fields;
        let module = wasm.lines().find(|l| l.starts_with("module")).unwrap();
        let native = wasm.replace(module, "native = \"count-sum\"");
        let runs = [&wasm, &native].map(|body| Pipeline::new(body, &input).run(args));
        for run in &runs {
            assert!(run.success, "{}", run.stderr);
        }
        let [wasm, native] = runs;
        assert_eq!(wasm.results, native.results, "{fields} {args:?}");
        let lines_of = |run: &crate::support::Run| -> Vec<u64> {
            let lines = run.dead_letters.iter().map(|dead| dead["line"].as_u64());
            lines.map(Option::unwrap).collect()
        };
        assert_eq!(lines_of(&wasm), lines_of(&native));
        assert_eq!(lines_of(&wasm), [4, 5, 7, 9], "{:?}", wasm.dead_letters);
        let sum = |key: &str, start: i64| {
            let found = (wasm.results.iter())
                .find(|r| r["key"] == key && r["window_start"] == start)
                .unwrap_or_else(|| panic!("no result for {key} at {start}: {:?}", wasm.results));
            found["value"]["sum"].clone()
        };
        assert_eq!(sum("ints", 20), serde_json::json!(61 + 73 + 85));
        assert_eq!(sum("floats", 20), serde_json::json!(-19.5 - 15.5 - 11.5));
        assert_eq!(sum("orders", 20), serde_json::json!(22 + 23 + 26 + 27));
        assert_eq!(sum("b", 10), serde_json::json!(-2));
        assert_eq!(sum("max", 90), serde_json::json!(-1));
        assert_eq!(sum("big", 90), serde_json::json!(0.0));
        // A sum starts at 0, and 0 + -0.0 is 0.0.
        assert_eq!(
            sum("zero", 90).as_f64().map(f64::to_bits),
            Some(0.0f64.to_bits())
        );
    }
}

/// A window join whose aggregate names one field takes the router's crossings (the join keys
/// each side by its own field; the crossing is the event's `amount`): its sums equal those of
/// the same join read from the events (the aggregate given two fields, so nothing crosses),
/// of its native twin, and of sums worked out by hand, on one shard and on two in batches of
/// three. In these debug builds every crossing read is also checked against its event. This
/// checks the sums, not that crossings are taken (`weir run` does not say; `live.rs` checks
/// that for a plain pipeline): made wrong on purpose, the crossed integers failed it.
#[test]
fn a_window_join_whose_aggregate_reads_one_field_sums_from_the_crossings() {
    let lines = [
        r#"{"kind":"order","user":"ann","ts":1000,"amount":5}"#,
        r#"{"kind":"refund","customer":"ann","ts":2000,"amount":-2}"#,
        r#"{"kind":"order","user":"bo","ts":2500,"amount":7}"#,
        r#"{"kind":"order","user":"ann","ts":3000,"amount":10}"#,
        // Neither side: a dead letter, whatever the aggregate reads.
        r#"{"kind":"bid","user":"ann","ts":3500,"amount":100}"#,
        r#"{"kind":"refund","customer":"bo","ts":4000,"amount":-1}"#,
        // A float amount: ann's second window sums as a float, from its crossings too.
        r#"{"kind":"order","user":"ann","ts":12000,"amount":0.5}"#,
        r#"{"kind":"refund","customer":"ann","ts":13000,"amount":-0.25}"#,
        r#"{"kind":"order","user":"cy","ts":25000,"amount":1}"#,
    ];
    let input = lines.join("\n") + "\n";
    let body = |code: &str, fields: &str| {
        format!(
            "[event]\nkey = \"user\"\ntimestamp = \"ts\"\n\
             [window]\ntype = \"tumbling\"\nsize = \"10s\"\n\
             [join]\nfield = \"kind\"\nleft = {{ value = \"order\", key = \"user\" }}\n\
             right = {{ value = \"refund\", key = \"customer\" }}\n\
             [[operators]]\nname = \"count-sum\"\nversion = \"1.0.0\"\nkind = \"aggregate\"\n\
             {code}\nfields = {fields}\n"
        )
    };
    let module = format!(
        "module = {:?}",
        crate::support::component("tumbling-count-sum")
            .display()
            .to_string()
    );
    // Each run's results by window start, then key (two shards emit them in either order).
    let sums = |run: &crate::support::Run| -> Vec<serde_json::Value> {
        assert!(run.success, "{}", run.stderr);
        let mut sums: Vec<serde_json::Value> = (run.results.iter())
            .map(|r| serde_json::json!([r["key"], r["window_start"], r["value"]]))
            .collect();
        sums.sort_by_key(|r| (r[1].as_i64(), r[0].as_str().map(str::to_owned)));
        sums
    };
    let expected = [
        serde_json::json!(["ann", 0, {"count": 3, "sum": 13}]),
        serde_json::json!(["bo", 0, {"count": 2, "sum": 6}]),
        serde_json::json!(["ann", 10000, {"count": 2, "sum": 0.25}]),
        serde_json::json!(["cy", 20000, {"count": 1, "sum": 1}]),
    ];
    for args in [&[][..], &["--shards", "2", "--batch-size", "3"][..]] {
        let runs = [
            (module.as_str(), "[\"amount\"]"),
            (module.as_str(), "[\"amount\", \"kind\"]"),
            ("native = \"count-sum\"", "[\"amount\"]"),
        ]
        .map(|(code, fields)| Pipeline::new(&body(code, fields), &input).run(args));
        assert_eq!(sums(&runs[0]), expected, "{args:?}: {:?}", runs[0].results);
        for other in &runs[1..] {
            assert_eq!(sums(other), sums(&runs[0]), "{args:?}");
        }
        for run in &runs {
            let reasons: Vec<&str> = (run.dead_letters.iter())
                .map(|d| d["reason"].as_str().unwrap())
                .collect();
            assert_eq!(
                reasons,
                ["on neither side of the join: `kind` is neither \"order\" nor \"refund\""],
                "{args:?}"
            );
        }
    }
}
