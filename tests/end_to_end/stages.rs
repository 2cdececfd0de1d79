//! Multi-stage pipelines with allowed lateness: updates and retractions of the first
//! aggregate's results flow into the stage after it, which replaces or withdraws each upstream
//! result's contribution, so no upstream result is ever counted twice downstream.
//!
//! The first aggregate is the Wasm count-sum, checked against the reference model elsewhere;
//! here the model's emissions are the stage's input, and the test computes the stage's results
//! from them on its own: the top three keys by count per 20 ms window of upstream window ends.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use crate::reference::{Emission, Ev, ModelSpec, WindowKind, run_model};
use crate::support::{Pipeline, assert_matches_model, component, count_sum_body, to_jsonl};

const STAGE_SIZE: i64 = 20;

/// Events over six keys whose times jump back now and then: many late within a 30 ms
/// lateness (updates upstream), some past it, and, in session windows, bridges between
/// sessions already emitted (retractions upstream).
fn events(seed: u64, n: usize) -> Vec<Ev> {
    let mut state = seed;
    let mut next = move |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let mut now = 0i64;
    (0..n)
        .map(|_| {
            now += next(4) as i64;
            let back = if next(4) == 0 { next(45) as i64 } else { 0 };
            Ev {
                key: format!("k{}", next(6)),
                ts: now - back,
                amount: next(5) as i64 + 1,
            }
        })
        .collect()
}

fn spec(window: WindowKind) -> ModelSpec {
    ModelSpec {
        window,
        bound: 5,
        lateness: 30,
    }
}

/// The pipeline: the count-sum of `model`, then a global stage ranking its results.
fn pipeline(model: &ModelSpec, events: &[Ev]) -> Pipeline {
    let stage = format!(
        "[[stages]]\n[stages.window]\ntype = \"tumbling\"\nsize = {STAGE_SIZE}\n\
         [stages.operator]\nname = \"top-keys\"\nkind = \"aggregate\"\nmodule = {:?}\n",
        component("top-keys").display().to_string()
    );
    Pipeline::new(
        &format!("{}{stage}", count_sum_body(model)),
        &to_jsonl(events),
    )
}

type Origin = (String, i64, i64);
type Top = Vec<(String, i64)>;

/// The stage window `[start, end)` an upstream result of window end `end` falls in.
fn stage_window(end: i64) -> (i64, i64) {
    let at = end - 1;
    let start = at - at.rem_euclid(STAGE_SIZE);
    (start, start + STAGE_SIZE)
}

/// The top three keys by summed count of the upstream results `current` holds in `window`.
fn top(current: &BTreeMap<Origin, i64>, window: (i64, i64)) -> Top {
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for ((key, _, end), count) in current {
        if stage_window(*end) == window {
            *counts.entry(key).or_default() += count;
        }
    }
    let mut ranked: Top = counts.into_iter().map(|(k, c)| (k.to_owned(), c)).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(3);
    ranked
}

/// Applies one upstream emission to the upstream results in force.
fn apply(current: &mut BTreeMap<Origin, i64>, emission: &Emission) {
    let origin = (emission.key.clone(), emission.start, emission.end);
    match emission.kind.as_str() {
        "retract" => current.remove(&origin),
        _ => current.insert(origin, emission.count),
    };
}

/// The stage's records, per window in output order: the ranking, or `None` for a retraction.
fn stage_records(results: &[Value]) -> BTreeMap<(i64, i64), Vec<Option<Top>>> {
    let mut records: BTreeMap<(i64, i64), Vec<Option<Top>>> = BTreeMap::new();
    for record in results {
        assert_eq!(record["key"], "*", "a global stage: {record}");
        let window = (
            record["window_start"].as_i64().expect("window_start"),
            record["window_end"].as_i64().expect("window_end"),
        );
        let ranking = (record["kind"] != "retract").then(|| {
            (1..=3)
                .map_while(|rank| {
                    let key = record["value"][format!("key_{rank}")].as_str()?;
                    let count = record["value"][format!("count_{rank}")].as_i64()?;
                    Some((key.to_owned(), count))
                })
                .collect()
        });
        records.entry(window).or_default().push(ranking);
    }
    records
}

/// Checks the stage's output against the upstream emissions: each window's last record is the
/// ranking of the upstream results finally in force (none if they were all withdrawn), and each
/// earlier one the ranking after some prefix of the upstream emissions, the prefixes advancing
/// (a double-counted update would match none).
fn assert_stage_follows(upstream: &[Emission], results: &[Value], label: &str) {
    let records = stage_records(results);
    let mut finally = BTreeMap::new();
    upstream.iter().for_each(|e| apply(&mut finally, e));
    let expected: BTreeMap<(i64, i64), Top> = finally
        .keys()
        .map(|(_, _, end)| stage_window(*end))
        .map(|window| (window, top(&finally, window)))
        .collect();
    let last: BTreeMap<(i64, i64), Top> = records
        .iter()
        .filter_map(|(window, list)| Some((*window, list.last()?.clone()?)))
        .collect();
    assert_eq!(last, expected, "{label}: the final rankings");
    for (window, list) in &records {
        let (mut current, mut applied) = (BTreeMap::new(), 0);
        for ranking in list.iter().flatten() {
            while top(&current, *window) != *ranking {
                assert!(
                    applied < upstream.len(),
                    "{label}: window {window:?} emitted {ranking:?}, which no prefix of the \
                     upstream results gives (records: {list:?})"
                );
                apply(&mut current, &upstream[applied]);
                applied += 1;
            }
        }
    }
}

#[test]
fn updates_and_retractions_upstream_are_never_counted_twice_downstream() {
    for (window, seed) in [
        (WindowKind::Tumbling { size: 10 }, 1),
        (WindowKind::Tumbling { size: 10 }, 2),
        (WindowKind::Session { gap: 6 }, 3),
        (WindowKind::Session { gap: 6 }, 4),
    ] {
        let model = spec(window);
        let input = events(seed, 600);
        let expected = run_model(&model, &input);
        let kinds = |kind: &str| expected.emissions.iter().filter(|e| e.kind == kind).count();
        assert!(kinds("update") > 10, "the input makes updates upstream");
        if matches!(window, WindowKind::Session { .. }) {
            assert!(kinds("retract") > 3, "the input makes retractions upstream");
        }
        let pipeline = pipeline(&model, &input);
        for shards in ["1", "3"] {
            let run = pipeline.run(&["--shards", shards, "--batch-size", "37"]);
            assert!(run.success, "{}", run.stderr);
            assert!(run.dead_letters.is_empty(), "{:?}", run.dead_letters);
            let label = format!("{window:?}, seed {seed}, {shards} shards");
            assert!(
                run.results.iter().any(|r| r["kind"] == "update"),
                "{label}: the stage updates its results"
            );
            assert_stage_follows(&expected.emissions, &run.results, &label);
        }
    }
}

#[test]
fn a_stage_with_lateness_resumes_after_a_crash_to_the_same_output() {
    let model = spec(WindowKind::Session { gap: 6 });
    let pipeline = pipeline(&model, &events(5, 5_000));
    let args = ["--checkpoint-interval", "1ms", "--batch-size", "10"];
    let expected = pipeline.run(&args);
    assert!(expected.success, "{}", expected.stderr);
    let spec = pipeline.dir.path().join("pipeline.toml");
    for id in [2, 5, 9] {
        let crashed = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "--fresh"])
            .arg(&spec)
            .args(args)
            .env("WEIR_TEST_CRASH", format!("after-commit:{id}"))
            .output()
            .expect("running weir");
        assert!(!crashed.status.success(), "the crash hook did not fire");
        let resumed = pipeline.resume(&args);
        assert!(resumed.success, "{}", resumed.stderr);
        assert!(resumed.stderr.contains("resum"), "{}", resumed.stderr);
        assert_eq!(
            resumed.results, expected.results,
            "after a crash at checkpoint {id}"
        );
        assert_eq!(resumed.late, expected.late);
    }
}

#[test]
fn a_global_aggregate_with_lateness_equals_the_model_over_one_key() {
    // The shards' partials are updated by late events; the combine replaces each updated
    // partial instead of merging it twice, so the result is the model's over one key.
    let model = spec(WindowKind::Tumbling { size: 10 });
    let input = events(6, 800);
    let one_key: Vec<Ev> = (input.iter())
        .map(|e| Ev {
            key: "*".into(),
            ..e.clone()
        })
        .collect();
    let expected = run_model(&model, &one_key);
    assert!(expected.emissions.iter().any(|e| e.kind == "update"));
    assert!(!expected.late.is_empty());
    let body = format!("{}global = true\n", count_sum_body(&model));
    let pipeline = Pipeline::new(&body, &to_jsonl(&input));
    for shards in ["1", "3"] {
        assert_matches_model(
            &pipeline.run(&["--shards", shards, "--batch-size", "50"]),
            &expected,
        );
    }
    // And a stage after it: the global counts ranked per 20 ms follow them.
    let stage = format!(
        "[[stages]]\n[stages.window]\ntype = \"tumbling\"\nsize = {STAGE_SIZE}\n\
         [stages.operator]\nname = \"top-keys\"\nkind = \"aggregate\"\nnative = \"top-keys\"\n"
    );
    let staged = Pipeline::new(&format!("{body}{stage}"), &to_jsonl(&input));
    let run = staged.run(&["--shards", "2"]);
    assert!(run.success, "{}", run.stderr);
    assert_stage_follows(&expected.emissions, &run.results, "global, then a stage");
}

#[test]
fn keys_of_every_length_around_the_inline_limit_give_the_model_results() {
    // Keys are kept inside the event up to 24 bytes and on the heap past that, and a
    // pre-aggregated key's bucket keys (`<key>/<bucket>`) cross the limit from 21 bytes on:
    // plain and pre-aggregated, on one shard and several, the results are the model's. The
    // limits count bytes, not characters: three keys hold a two-byte `é`, one of them 24
    // characters long in 25 bytes.
    let lengths = [1, 21, 22, 24, 25, 40];
    let key_of = |k: usize| match k {
        1 => format!("1é{}", "x".repeat(18)),
        3 => format!("3{}é", "x".repeat(21)),
        4 => format!("4{}é", "x".repeat(22)),
        _ => format!("{k}{}", "x".repeat(lengths[k] - 1)),
    };
    for (k, &length) in lengths.iter().enumerate() {
        assert_eq!(key_of(k).len(), length, "key {k} has {length} bytes");
    }
    assert_eq!(key_of(4).chars().count(), 24);
    let model = spec(WindowKind::Tumbling { size: 10 });
    let input: Vec<Ev> = (events(11, 600).into_iter())
        .map(|mut event| {
            let k: usize = event.key[1..].parse().expect("keys are k0 to k5");
            event.key = key_of(k);
            event
        })
        .collect();
    let expected = run_model(&model, &input);
    let plain = count_sum_body(&model);
    for body in [plain.clone(), format!("{plain}pre_aggregate = true\n")] {
        let pipeline = Pipeline::new(&body, &to_jsonl(&input));
        for shards in ["1", "3"] {
            assert_matches_model(
                &pipeline.run(&["--shards", shards, "--batch-size", "50"]),
                &expected,
            );
        }
    }
}

#[test]
fn a_pre_aggregated_aggregate_equals_the_model_key_by_key() {
    // Six hot keys, each spread over 32 buckets by arrival, folded in the shards and merged per
    // key: the results are the plain aggregate's, updates included.
    let model = spec(WindowKind::Tumbling { size: 10 });
    let input = events(7, 800);
    let expected = run_model(&model, &input);
    assert!(expected.emissions.iter().any(|e| e.kind == "update"));
    let body = format!("{}pre_aggregate = true\n", count_sum_body(&model));
    let pipeline = Pipeline::new(&body, &to_jsonl(&input));
    for shards in ["1", "3"] {
        assert_matches_model(
            &pipeline.run(&["--shards", shards, "--batch-size", "50"]),
            &expected,
        );
    }
    let both = body.replace(
        "pre_aggregate = true",
        "pre_aggregate = true\nglobal = true",
    );
    let refused = Pipeline::new(&both, "").run(&[]);
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("two ways to combine partials"),
        "{}",
        refused.stderr
    );
}
