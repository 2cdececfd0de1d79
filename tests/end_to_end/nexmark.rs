//! The Nexmark source and queries: each query's example component and its native twin give the
//! same results, and both equal an independent computation over the source's events (read
//! through Q0); a run aborted after a checkpoint resumes to the uninterrupted output; bad
//! Nexmark specs and unknown native operators are refused with what to do.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::component;

const EVENTS: u64 = 30_000;
const RATE: u64 = 500;

/// A Nexmark pipeline for `query` in `dir`: `code` is `module = "..."` or `native = "..."`.
fn spec(dir: &Path, query: &str, code: &str, extra: &str) -> std::path::PathBuf {
    let (kinds, key, kind, window) = match query {
        "q0" => ("", "kind", "enrich", ""),
        "q1" | "q2" => ("kinds = [\"bid\"]", "auction", "enrich", ""),
        "q5" => (
            "kinds = [\"bid\"]",
            "auction",
            "aggregate",
            "[window]\ntype = \"sliding\"\nsize = \"10s\"\nslide = \"2s\"",
        ),
        "q7" => (
            "kinds = [\"bid\"]",
            "kind",
            "aggregate",
            "[window]\ntype = \"tumbling\"\nsize = \"10s\"",
        ),
        // Q8: a window join of persons (by id) with auctions (by seller).
        "q8" => (
            "kinds = [\"person\", \"auction\"]",
            "id",
            "aggregate",
            "[window]\ntype = \"tumbling\"\nsize = \"10s\"\n\
             [join]\nfield = \"kind\"\nleft = { value = \"person\", key = \"id\" }\n\
             right = { value = \"auction\", key = \"seller\" }",
        ),
        // Q7 as a global aggregate: bids spread over the shards by auction, pre-aggregated.
        "q7-global" => (
            "kinds = [\"bid\"]",
            "auction",
            "aggregate",
            "[window]\ntype = \"tumbling\"\nsize = \"10s\"",
        ),
        _ => (
            "kinds = [\"bid\"]",
            "bidder",
            "aggregate",
            "[window]\ntype = \"session\"\ngap = \"10s\"",
        ),
    };
    let native = code.starts_with("native");
    let name = format!("{query}-{}", if native { "native" } else { "wasm" });
    // Q5's second stage: the window's auctions ranked by their count, under one key.
    let stage = match (query, native) {
        ("q5", true) => "native = \"top-keys\"".to_owned(),
        ("q5", false) => format!("module = \"{}\"", component("top-keys").display()),
        _ => String::new(),
    };
    let stage = if query == "q7-global" {
        "global = true\n".to_owned()
    } else if stage.is_empty() {
        stage
    } else {
        format!(
            "[[stages]]\n[stages.window]\ntype = \"tumbling\"\nsize = \"2s\"\n\
             [stages.operator]\nname = \"hot-items\"\nkind = \"aggregate\"\n{stage}\n"
        )
    };
    // Only the fields each operator reads cross into it (as in the example pipelines): results
    // must not change.
    let projection = match query {
        "q5" | "q11" => "fields = []\n",
        "q7" | "q7-global" => "fields = [\"price\", \"auction\", \"bidder\"]\n",
        "q1" => "fields = [\"auction\", \"bidder\", \"price\"]\n",
        "q2" => "fields = [\"auction\", \"price\"]\n",
        "q8" => "fields = [\"side\", \"name\"]\n",
        _ => "",
    };
    let text = format!(
        "name = \"{name}\"\nbatch_size = 512\n{extra}\n\
         [source]\ntype = \"nexmark\"\nevents = {EVENTS}\nrate = {RATE}\nseed = 3\n{kinds}\n\
         [event]\nkey = \"{key}\"\ntimestamp = \"date_time\"\n{window}\n\
         [[operators]]\nname = \"{query}\"\nkind = \"{kind}\"\n{code}\n{projection}{stage}\
         [state]\ndir = \"data-{name}\"\n\
         [sinks]\nresults = \"{name}/results.jsonl\"\nlate = \"{name}/late.jsonl\"\n\
         dead_letters = \"{name}/dead.jsonl\"\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("writing the spec");
    path
}

fn weir_run(spec: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(spec)
        .args(args)
        .output()
        .expect("running weir")
}

/// The results of a run of `spec` from the beginning, as (key, window, value) sorted.
fn results(spec: &Path) -> Vec<Value> {
    let output = weir_run(spec, &["--fresh", "--shards", "2"]);
    assert!(
        output.status.success(),
        "{}: {}",
        spec.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = spec.with_extension("");
    for sink in ["late", "dead"] {
        let text = std::fs::read_to_string(dir.join(format!("{sink}.jsonl"))).unwrap_or_default();
        assert!(text.is_empty(), "{}: {sink}: {text}", spec.display());
    }
    let text = std::fs::read_to_string(dir.join("results.jsonl")).expect("results");
    let mut records: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
        .map(|record| {
            json!({
                "key": record["key"],
                "start": record["window_start"],
                "end": record["window_end"],
                "value": record["value"],
            })
        })
        .collect();
    records.sort_by_key(Value::to_string);
    records
}

fn module(query: &str) -> String {
    let query = query.trim_end_matches("-global");
    format!(
        "module = \"{}\"",
        component(&format!("nexmark-{query}")).display()
    )
}

fn native(query: &str) -> String {
    format!("native = \"nexmark-{}\"", query.trim_end_matches("-global"))
}

fn int(value: &Value, field: &str) -> i64 {
    value[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} in {value}"))
}

/// What each query must give, computed here from the events alone.
fn expected(query: &str, events: &[Value]) -> Vec<Value> {
    let bids: Vec<&Value> = events.iter().filter(|e| e["kind"] == "bid").collect();
    let row = |key: String, start: Value, end: Value, value: Value| json!({"key": key, "start": start, "end": end, "value": value});
    let mut rows: Vec<Value> = match query {
        "q0" => events
            .iter()
            .map(|e| {
                row(
                    e["kind"].as_str().unwrap().into(),
                    Value::Null,
                    Value::Null,
                    e.clone(),
                )
            })
            .collect(),
        "q1" => bids
            .iter()
            .map(|b| {
                let value = json!({"auction": b["auction"], "bidder": b["bidder"],
                    "price": int(b, "price") * 908 / 1000, "date_time": b["date_time"]});
                row(
                    int(b, "auction").to_string(),
                    Value::Null,
                    Value::Null,
                    value,
                )
            })
            .collect(),
        "q2" => bids
            .iter()
            .filter(|b| int(b, "auction") % 123 == 0)
            .map(|b| {
                let value = json!({"auction": b["auction"], "price": b["price"]});
                row(
                    int(b, "auction").to_string(),
                    Value::Null,
                    Value::Null,
                    value,
                )
            })
            .collect(),
        "q5" => hot_items(&bids),
        "q8" => new_users(events),
        "q7-global" => expected("q7", events)
            .into_iter()
            .map(|mut row| {
                row["key"] = json!("*");
                row
            })
            .collect(),
        "q7" => {
            let mut best: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
            for b in &bids {
                let window = int(b, "date_time").div_euclid(10_000) * 10_000;
                let bid = (int(b, "price"), -int(b, "auction"), -int(b, "bidder"));
                let entry = best.entry(window).or_insert(bid);
                *entry = (*entry).max(bid);
            }
            best.into_iter()
                .map(|(start, (price, auction, bidder))| {
                    let value = json!({"auction": -auction, "bidder": -bidder, "price": price});
                    row("bid".into(), json!(start), json!(start + 10_000), value)
                })
                .collect()
        }
        _ => {
            let mut times: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for b in &bids {
                times
                    .entry(int(b, "bidder"))
                    .or_default()
                    .push(int(b, "date_time"));
            }
            let mut rows = Vec::new();
            for (bidder, mut times) in times {
                times.sort();
                let mut session = (times[0], times[0] + 10_000, 0);
                for &t in &times {
                    if t > session.1 {
                        rows.push((bidder, session));
                        session = (t, t + 10_000, 0);
                    }
                    session.1 = session.1.max(t + 10_000);
                    session.2 += 1;
                }
                rows.push((bidder, session));
            }
            rows.into_iter()
                .map(|(bidder, (start, end, bids))| {
                    row(
                        bidder.to_string(),
                        json!(start),
                        json!(end),
                        json!({"bids": bids}),
                    )
                })
                .collect()
        }
    };
    rows.sort_by_key(Value::to_string);
    rows
}

/// Q8: per 10 s window, the persons who registered in it and opened at least one auction in
/// it, with their name and how many.
fn new_users(events: &[Value]) -> Vec<Value> {
    let window = |e: &Value| int(e, "date_time").div_euclid(10_000) * 10_000;
    let mut auctions: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for a in events.iter().filter(|e| e["kind"] == "auction") {
        *auctions.entry((int(a, "seller"), window(a))).or_default() += 1;
    }
    events
        .iter()
        .filter(|e| e["kind"] == "person")
        .filter_map(|p| {
            let (id, start) = (int(p, "id"), window(p));
            let n = *auctions.get(&(id, start))?;
            Some(
                json!({"key": id.to_string(), "start": start, "end": start + 10_000,
                "value": {"name": p["name"], "auctions": n}}),
            )
        })
        .collect()
}

/// Q5: bids per auction in sliding windows (10 s, every 2 s), then per window end the three
/// auctions with the most (ties to the lower id as text).
fn hot_items(bids: &[&Value]) -> Vec<Value> {
    let mut counts: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for b in bids {
        let t = int(b, "date_time");
        let last = t.div_euclid(2_000) * 2_000;
        for k in 0..5 {
            let start = last - k * 2_000;
            *counts
                .entry((start + 10_000, int(b, "auction").to_string()))
                .or_default() += 1;
        }
    }
    let mut by_end: BTreeMap<i64, Vec<(i64, String)>> = BTreeMap::new();
    for ((end, auction), count) in counts {
        by_end.entry(end).or_default().push((-count, auction));
    }
    by_end
        .into_iter()
        .map(|(end, mut ranked)| {
            ranked.sort();
            let mut value = serde_json::Map::new();
            for (rank, (count, auction)) in ranked.into_iter().take(3).enumerate() {
                value.insert(format!("key_{}", rank + 1), json!(auction));
                value.insert(format!("count_{}", rank + 1), json!(-count));
            }
            json!({"key": "*", "start": end - 2_000, "end": end, "value": value})
        })
        .collect()
}

#[test]
fn every_query_equals_its_native_twin_and_an_independent_computation() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // The source's events, as Q0 (native) passes them through.
    let events: Vec<Value> = results(&spec(dir.path(), "q0", "native = \"nexmark-q0\"", ""))
        .into_iter()
        .map(|row| row["value"].clone())
        .collect();
    assert_eq!(events.len() as u64, EVENTS);
    let kinds = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count() as u64;
    assert_eq!(
        (kinds("person"), kinds("auction"), kinds("bid")),
        (EVENTS / 50, EVENTS * 3 / 50, EVENTS * 46 / 50)
    );
    for query in ["q0", "q1", "q2", "q5", "q7", "q7-global", "q8", "q11"] {
        let wasm = results(&spec(dir.path(), query, &module(query), ""));
        let native = results(&spec(dir.path(), query, &native(query), ""));
        let model = expected(query, &events);
        assert!(!model.is_empty(), "{query} has results");
        assert_eq!(wasm.len(), model.len(), "{query}: Wasm against the model");
        for (got, want) in wasm.iter().zip(&model) {
            assert_eq!(got, want, "{query}: Wasm against the model");
        }
        assert_eq!(native, wasm, "{query}: native against Wasm");
    }
}

/// A run of `spec` from the beginning, checkpointing every millisecond; with `crash_after`,
/// aborted right after that checkpoint commits.
fn checkpointed_run(spec: &Path, crash_after: Option<u64>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .args(["run", "--fresh", "--checkpoint-interval", "1ms"])
        .arg(spec);
    if let Some(id) = crash_after {
        command.env("WEIR_TEST_CRASH", format!("after-commit:{id}"));
    }
    command.output().expect("running weir")
}

#[test]
fn a_nexmark_run_aborted_after_a_checkpoint_resumes_to_the_same_output() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Q11 (sessions), and Q5 with a second stage per auction whose windows (10 s of 2 s
    // results) stay open across many checkpoints, many without further input: they fire after
    // a restart only if the stage's windows were restored.
    let q5 = spec(dir.path(), "q5", &module("q5"), "");
    let text = std::fs::read_to_string(&q5).unwrap();
    let longer = text.replace(
        "[[stages]]\n[stages.window]\ntype = \"tumbling\"\nsize = \"2s\"",
        "[[stages]]\nkey = \"key\"\n[stages.window]\ntype = \"tumbling\"\nsize = \"10s\"",
    );
    assert_ne!(text, longer);
    std::fs::write(&q5, longer).unwrap();
    for (spec, outputs) in [
        (spec(dir.path(), "q11", &module("q11"), ""), "q11-wasm"),
        (q5, "q5-wasm"),
        (
            spec(dir.path(), "q7-global", &module("q7-global"), ""),
            "q7-global-wasm",
        ),
    ] {
        let read = || {
            ["results", "late", "dead"].map(|sink| {
                std::fs::read(dir.path().join(format!("{outputs}/{sink}.jsonl")))
                    .unwrap_or_default()
            })
        };
        assert!(checkpointed_run(&spec, None).status.success());
        let expected = read();
        assert!(!expected[0].is_empty());
        for id in [2, 7, 19] {
            let crashed = checkpointed_run(&spec, Some(id));
            assert!(!crashed.status.success(), "the crash hook did not fire");
            let resumed = weir_run(&spec, &["--checkpoint-interval", "1ms"]);
            let stderr = String::from_utf8_lossy(&resumed.stderr);
            assert!(resumed.status.success(), "{stderr}");
            assert!(stderr.contains("resum"), "{stderr}");
            assert_eq!(
                read(),
                expected,
                "{outputs}: after a crash at checkpoint {id}"
            );
        }
    }
}

#[test]
fn bad_nexmark_specs_and_unknown_native_operators_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cases = [
        // Persons have no `auction` field.
        (
            "q1",
            "native = \"nexmark-q1\"",
            "kinds = [\"bid\"]",
            "",
            "event.key = \"auction\" is not a field of Nexmark person events",
        ),
        (
            "q1",
            "native = \"nexmark-q1\"",
            "rate = 500",
            "rate = 0",
            "source.rate = 0",
        ),
        (
            "q1",
            "native = \"nexmark-q1\"",
            "seed = 3",
            "seed = -3",
            "invalid value",
        ),
        (
            "q7",
            "native = \"nexmark-q9\"",
            "",
            "",
            "unknown native aggregate operator \"nexmark-q9\": the built-in aggregate operators are: count-sum, top-keys, nexmark-q5, nexmark-q7, nexmark-q8, nexmark-q11",
        ),
        (
            "q1",
            "native = \"nexmark-q7\"",
            "",
            "",
            "unknown native enrichment operator \"nexmark-q7\"",
        ),
    ];
    for (query, code, from, to, expected) in cases {
        let path = spec(dir.path(), query, code, "");
        let text = std::fs::read_to_string(&path).unwrap();
        let text = if from.is_empty() {
            text
        } else {
            text.replace(from, to)
        };
        std::fs::write(&path, text).unwrap();
        let output = weir_run(&path, &["--fresh"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{query} {from} -> {to}");
        assert!(
            stderr.contains(expected),
            "{query} {from} -> {to}: {stderr}"
        );
    }
}

#[test]
fn results_a_stage_cannot_take_become_dead_letters_with_the_reason() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = spec(dir.path(), "q5", "native = \"nexmark-q5\"", "");
    let text = std::fs::read_to_string(&path).unwrap();
    // A key field the results lack.
    let keyed = text.replace("[[stages]]\n", "[[stages]]\nkey = \"auction_id\"\n");
    assert_ne!(keyed, text);
    std::fs::write(&path, keyed).unwrap();
    let output = weir_run(&path, &["--fresh"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dead = std::fs::read_to_string(dir.path().join("q5-native/dead.jsonl")).unwrap();
    let first: Value = serde_json::from_str(dead.lines().next().expect("dead letters")).unwrap();
    assert_eq!(
        first["reason"],
        "hot-items@0.0.0: the result has no text or integer field `auction_id` to key by"
    );
    assert!(first["raw"].as_str().unwrap().contains("\"count\""));
    let results = std::fs::read_to_string(dir.path().join("q5-native/results.jsonl")).unwrap();
    assert!(results.is_empty(), "{results}");
    // A join sees an event on neither side (a bid, when the sides are persons and auctions).
    let q8 = spec(dir.path(), "q8", "native = \"nexmark-q8\"", "");
    let text8 = std::fs::read_to_string(&q8).unwrap();
    std::fs::write(
        &q8,
        text8.replace("kinds = [\"person\", \"auction\"]\n", ""),
    )
    .unwrap();
    let output = weir_run(&q8, &["--fresh"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dead = std::fs::read_to_string(dir.path().join("q8-native/dead.jsonl")).unwrap();
    assert!(
        dead.lines().next().expect("dead letters").contains(
            "on neither side of the join: `kind` is neither \\\"person\\\" nor \\\"auction\\\""
        ),
        "{}",
        &dead[..dead.len().min(500)]
    );
    // An operator that rejects what the stage before gives it (Q11's results have no `count`).
    let sessions = text
        .replace("native = \"nexmark-q5\"", "native = \"nexmark-q11\"")
        .replace(
            "type = \"sliding\"\nsize = \"10s\"\nslide = \"2s\"",
            "type = \"session\"\ngap = \"10s\"",
        );
    std::fs::write(&path, sessions).unwrap();
    let output = weir_run(&path, &["--fresh"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dead = std::fs::read_to_string(dir.path().join("q5-native/dead.jsonl")).unwrap();
    assert!(
        dead.lines()
            .next()
            .expect("dead letters")
            .contains("event without an integer `count`"),
        "{dead}"
    );
}

#[test]
fn a_join_over_json_lines_keys_each_side_by_its_own_field() {
    let body = "[event]\nkey = \"id\"\ntimestamp = \"date_time\"\n\
                [window]\ntype = \"tumbling\"\nsize = \"10s\"\n\
                [join]\nfield = \"kind\"\nleft = { value = \"person\", key = \"id\" }\n\
                right = { value = \"auction\", key = \"seller\" }\n\
                [[operators]]\nname = \"q8\"\nkind = \"aggregate\"\nnative = \"nexmark-q8\"\n";
    let events = [
        json!({"kind": "person", "id": 7, "name": "Ann", "date_time": 1_000}),
        // An auction keeps its own `id` field; it is keyed by `seller`, and has no `id` key.
        json!({"kind": "auction", "id": 99, "seller": 7, "date_time": 2_000}),
        json!({"kind": "auction", "seller": 7, "date_time": 3_000}),
        json!({"kind": "person", "id": 8, "name": "Bo", "date_time": 4_000}),
        json!({"kind": "bid", "auction": 99, "date_time": 5_000}),
        json!({"kind": "auction", "id": 100, "date_time": 6_000}),
        json!({"id": 9, "date_time": 7_000}),
    ];
    let lines: Vec<String> = events.iter().map(Value::to_string).collect();
    let pipeline = crate::support::Pipeline::new(body, &(lines.join("\n") + "\n"));
    let run = pipeline.run(&[]);
    assert!(run.success, "{}", run.stderr);
    let results: Vec<Value> = run
        .results
        .iter()
        .map(|r| json!([r["key"], r["value"]]))
        .collect();
    assert_eq!(
        results,
        [json!(["7", {"name": "Ann", "auctions": 2}])],
        "{:?}",
        run.results
    );
    let reasons: Vec<&str> = run
        .dead_letters
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "on neither side of the join: `kind` is neither \"person\" nor \"auction\"",
            "the right side's key field `seller` is not text or an integer",
            "on neither side of the join: it has no field `kind`",
        ]
    );
}

/// A run's records of `sink` in output order.
fn records(dir: &Path, sink: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join(format!("{sink}.jsonl")))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect()
}

/// An interval join of persons (by `id`) with the auctions they open (by `seller`) within
/// `lower ..= upper` ms of signing up, with no operator: its results are the pairs.
fn interval_join_spec(dir: &Path, name: &str, lower: i64, upper: i64) -> std::path::PathBuf {
    let text = format!(
        "name = \"{name}\"\nbatch_size = 64\n\
         [source]\ntype = \"nexmark\"\nevents = {EVENTS}\nrate = {RATE}\nseed = 3\n\
         kinds = [\"person\", \"auction\"]\n\
         [event]\ntimestamp = \"date_time\"\n\
         [join]\ntype = \"interval\"\nfield = \"kind\"\n\
         left = {{ value = \"person\", key = \"id\" }}\n\
         right = {{ value = \"auction\", key = \"seller\" }}\nlower = {lower}\nupper = {upper}\n\
         [state]\ndir = \"data-{name}\"\n\
         [sinks]\nresults = \"{name}/results.jsonl\"\nlate = \"{name}/late.jsonl\"\n\
         dead_letters = \"{name}/dead.jsonl\"\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("writing the spec");
    path
}

/// The pairs an interval join must give, in its order, computed here from the source's events
/// in arrival order: each event pairs with the earlier events of the other side and its key
/// within the bounds, those by time then arrival; `(person, auction, time)`.
fn interval_pairs(events: &[&Value], lower: i64, upper: i64) -> Vec<(i64, i64, i64)> {
    let mut pairs = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let person = event["kind"] == "person";
        let key = |e: &Value| {
            int(
                e,
                if e["kind"] == "person" {
                    "id"
                } else {
                    "seller"
                },
            )
        };
        let t = int(event, "date_time");
        let mut matches: Vec<(i64, usize)> = events[..i]
            .iter()
            .enumerate()
            .filter(|(_, other)| (other["kind"] == "person") != person)
            .filter(|(_, other)| key(other) == key(event))
            .filter(|(_, other)| {
                let (p, a) = if person {
                    (t, int(other, "date_time"))
                } else {
                    (int(other, "date_time"), t)
                };
                p + lower <= a && a <= p + upper
            })
            .map(|(j, other)| (int(other, "date_time"), j))
            .collect();
        matches.sort();
        for (time, j) in matches {
            let other = events[j];
            let (p, a) = if person {
                (*event, other)
            } else {
                (other, *event)
            };
            pairs.push((int(p, "id"), int(a, "id"), t.max(time)));
        }
    }
    pairs
}

#[test]
fn an_interval_join_pairs_each_person_with_the_auctions_opened_within_its_bounds() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let q0 = spec(dir.path(), "q0", "native = \"nexmark-q0\"", "");
    assert!(weir_run(&q0, &["--fresh"]).status.success());
    let all: Vec<Value> = records(&q0.with_extension(""), "results")
        .into_iter()
        .map(|record| record["value"].clone())
        .collect();
    let events: Vec<&Value> = all.iter().filter(|e| e["kind"] != "bid").collect();
    for (name, lower, upper) in [("ij-after", 0, 5_000), ("ij-around", -2_000, 3_000)] {
        let expected = interval_pairs(&events, lower, upper);
        assert!(expected.len() > 100, "{name}: the bounds make pairs");
        let spec = interval_join_spec(dir.path(), name, lower, upper);
        let out = dir.path().join(name);
        let mut outputs = Vec::new();
        for shards in ["1", "3"] {
            let run = weir_run(&spec, &["--fresh", "--shards", shards]);
            assert!(
                run.status.success(),
                "{}",
                String::from_utf8_lossy(&run.stderr)
            );
            assert!(records(&out, "late").is_empty() && records(&out, "dead").is_empty());
            let results = records(&out, "results");
            let pairs: Vec<(i64, i64, i64)> = results
                .iter()
                .map(|r| {
                    let value = &r["value"];
                    assert_eq!(value["left_kind"], "person");
                    assert_eq!(
                        r["key"],
                        value["left_id"].to_string(),
                        "keyed by the person"
                    );
                    (
                        int(value, "left_id"),
                        int(value, "right_id"),
                        int(r, "timestamp"),
                    )
                })
                .collect();
            assert_eq!(pairs, expected, "{name}, {shards} shards");
            outputs.push(std::fs::read(out.join("results.jsonl")).unwrap());
        }
        assert_eq!(
            outputs[0], outputs[1],
            "{name}: the same bytes for any shard count"
        );
        // Kept events are state: a crash after a checkpoint resumes to the same output.
        for id in [3, 11] {
            let crashed = checkpointed_run(&spec, Some(id));
            assert!(!crashed.status.success(), "the crash hook did not fire");
            let resumed = weir_run(&spec, &["--checkpoint-interval", "1ms"]);
            assert!(resumed.status.success());
            let results = std::fs::read(out.join("results.jsonl")).unwrap();
            assert!(
                results == outputs[0],
                "{name}: after a crash at checkpoint {id}"
            );
        }
    }
}

#[test]
fn interval_joins_judge_late_events_and_refuse_bounds_that_make_no_sense() {
    let body = "[event]\ntimestamp = \"date_time\"\n\
                [watermark]\nbound = 1000\n\
                [join]\ntype = \"interval\"\nfield = \"kind\"\nlower = \"0s\"\nupper = \"5s\"\n\
                left = { value = \"person\", key = \"id\" }\n\
                right = { value = \"auction\", key = \"seller\" }\n";
    let events = [
        json!({"kind": "person", "id": 7, "date_time": 10_000}),
        json!({"kind": "auction", "id": 1, "seller": 7, "date_time": 12_000}),
        json!({"kind": "person", "id": 8, "date_time": 20_000}),
        // Behind the watermark (19 s): late, though it would pair with person 7.
        json!({"kind": "auction", "id": 2, "seller": 7, "date_time": 14_000}),
        // Within the bound: not late, and after person 8's sign-up.
        json!({"kind": "auction", "id": 3, "seller": 8, "date_time": 19_500}),
        json!({"kind": "auction", "id": 4, "seller": 8, "date_time": 21_000}),
    ];
    let lines: Vec<String> = events.iter().map(Value::to_string).collect();
    let pipeline = crate::support::Pipeline::new(body, &(lines.join("\n") + "\n"));
    let run = pipeline.run(&[]);
    assert!(run.success, "{}", run.stderr);
    let pairs: Vec<(i64, i64)> = (run.results.iter())
        .map(|r| (int(&r["value"], "left_id"), int(&r["value"], "right_id")))
        .collect();
    assert_eq!(pairs, [(7, 1), (8, 4)]);
    assert_eq!(run.late.len(), 1, "{:?}", run.late);
    assert!(
        run.late[0]["reason"]
            .as_str()
            .unwrap()
            .contains("interval join")
    );
    for (from, to, says) in [
        (
            "upper = \"5s\"",
            "upper = \"-1s\"",
            "lower (0 ms) is above upper (-1000 ms)",
        ),
        (
            "upper = \"5s\"\n",
            "",
            "an interval join needs lower and upper",
        ),
        (
            "type = \"interval\"",
            "type = \"intervals\"",
            "expected \"window\" or \"interval\"",
        ),
        (
            "type = \"interval\"\n",
            "",
            "lower and upper are the bounds of an interval join",
        ),
        ("lower = \"0s\"", "lower = \"-x\"", "join.lower"),
    ] {
        let refused = crate::support::Pipeline::new(&body.replace(from, to), "");
        let run = refused.run(&[]);
        assert!(!run.success, "{to:?} was accepted");
        assert!(run.stderr.contains(says), "{to:?}: {}", run.stderr);
    }
}
