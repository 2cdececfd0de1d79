//! Emit modes (`[emit]`), through the real binary, against the reference model: a changelog
//! writes each update after the retraction of the result it replaces, so a downstream sum can
//! subtract; early results show a window's current result every N of its events before it
//! closes, then the result on time; a result equal to the last one written is not repeated.

use std::collections::BTreeMap;

use crate::reference::{Emission, Ev, ModelSpec, WindowKind, run_model};
use crate::support::{Pipeline, count_sum_body, emissions, to_jsonl};

/// Out-of-order events over four keys: every fifth far behind (updates within the lateness,
/// and some late).
fn events(n: usize) -> Vec<Ev> {
    (0..n as i64)
        .map(|i| Ev {
            key: format!("k{}", i % 4),
            ts: i * 7 - if i % 5 == 0 { (i * 37) % 250 } else { 0 },
            amount: i % 9 + 1,
        })
        .collect()
}

fn run(model: &ModelSpec, events: &[Ev], emit: &str) -> crate::support::Run {
    let body = format!("{}[emit]\n{emit}\n", count_sum_body(model));
    let run = Pipeline::new(&body, &to_jsonl(events)).run(&["--shards", "2"]);
    assert!(run.success, "{}", run.stderr);
    assert!(run.dead_letters.is_empty(), "{:?}", run.dead_letters);
    run
}

/// The model's emissions as a changelog: each update after the retraction of the window's
/// previous result.
pub fn as_changelog(model: &[Emission]) -> Vec<Emission> {
    let mut last: BTreeMap<(String, i64, i64), Emission> = BTreeMap::new();
    let mut out = Vec::new();
    for e in model {
        let window = (e.key.clone(), e.start, e.end);
        match e.kind.as_str() {
            "retract" => {
                last.remove(&window);
            }
            "update" => {
                if let Some(previous) = last.get(&window) {
                    out.push(Emission {
                        kind: "retract".into(),
                        ..previous.clone()
                    });
                }
                last.insert(window, e.clone());
            }
            _ => {
                last.insert(window, e.clone());
            }
        }
        out.push(e.clone());
    }
    out
}

#[test]
fn a_changelog_retracts_each_replaced_result_so_a_downstream_sum_can_subtract() {
    for window in [
        WindowKind::Tumbling { size: 100 },
        WindowKind::Session { gap: 40 },
    ] {
        let model = ModelSpec {
            window,
            bound: 10,
            lateness: 200,
        };
        let input = events(600);
        let expected = run_model(&model, &input);
        assert!(expected.emissions.iter().any(|e| e.kind == "update"));
        let run = run(&model, &input, "mode = \"changelog\"");
        let got = emissions(&run.results);
        assert_eq!(got, as_changelog(&expected.emissions), "{window:?}");
        // Adding results and updates and subtracting retractions counts every event that was
        // not late exactly once.
        let signed: i64 = got
            .iter()
            .map(|e| {
                if e.kind == "retract" {
                    -e.count
                } else {
                    e.count
                }
            })
            .sum();
        assert_eq!(
            signed as usize,
            input.len() - expected.late.len(),
            "{window:?}"
        );
    }
}

#[test]
fn early_results_come_every_n_events_then_the_result_on_time() {
    let model = ModelSpec {
        window: WindowKind::Tumbling { size: 100 },
        bound: 10,
        lateness: 200,
    };
    let input = events(600);
    let expected = run_model(&model, &input);
    let run = run(&model, &input, "mode = \"early\"\nearly_every = 3");
    let got = emissions(&run.results);
    // Early results: each window's count after every third of its events, before it closes.
    let mut early: BTreeMap<(String, i64, i64), Vec<i64>> = BTreeMap::new();
    for e in got.iter().filter(|e| e.kind == "early") {
        early
            .entry((e.key.clone(), e.start, e.end))
            .or_default()
            .push(e.count);
    }
    assert!(!early.is_empty(), "no early results");
    for (window, counts) in &early {
        let expected: Vec<i64> = (1..=counts.len() as i64).map(|k| k * 3).collect();
        assert_eq!(counts, &expected, "{window:?}");
    }
    // The rest is the model's output, with versions after the window's early ones.
    let rest: Vec<Emission> = got
        .iter()
        .filter(|e| e.kind != "early")
        .map(|e| {
            let before = early
                .get(&(e.key.clone(), e.start, e.end))
                .map_or(0, Vec::len);
            Emission {
                version: e.version - before as u64,
                ..e.clone()
            }
        })
        .collect();
    assert_eq!(rest, expected.emissions);
}

#[test]
fn bad_emit_sections_are_refused_with_what_to_do() {
    let model = ModelSpec {
        window: WindowKind::Tumbling { size: 100 },
        bound: 0,
        lateness: 0,
    };
    for (emit, says) in [
        (
            "mode = \"eager\"",
            "expected \"on_close\", \"changelog\" or \"early\"",
        ),
        ("mode = \"early\"", "needs early_every"),
        ("mode = \"early\"\nearly_every = 0", "give 1 to 1000000000"),
        ("early_every = 5", "is for emit.mode = \"early\""),
        ("mode = \"changelog\"\nextra = 1", "unknown field"),
    ] {
        let body = format!("{}[emit]\n{emit}\n", count_sum_body(&model));
        let run = Pipeline::new(&body, "").run(&[]);
        assert!(!run.success, "{emit:?} was accepted");
        assert!(run.stderr.contains(says), "{emit:?}: {}", run.stderr);
    }
}

#[test]
fn a_late_event_that_changes_nothing_writes_no_update() {
    // The highest bid per window: a late, lower bid leaves the result as it was.
    let body = "[event]\nkey = \"kind\"\ntimestamp = \"ts\"\n\
                [window]\ntype = \"tumbling\"\nsize = 100\nallowed_lateness = 1000\n\
                [[operators]]\nname = \"q7\"\nkind = \"aggregate\"\nnative = \"nexmark-q7\"\n";
    let bid = |ts: i64, price: i64| {
        format!("{{\"kind\":\"bid\",\"ts\":{ts},\"price\":{price},\"auction\":1,\"bidder\":2}}\n")
    };
    let input = [bid(10, 50), bid(150, 5), bid(20, 40), bid(30, 70)].concat();
    let run = Pipeline::new(body, &input).run(&[]);
    assert!(run.success, "{}", run.stderr);
    let written: Vec<(String, i64)> = (run.results.iter())
        .filter(|r| r["window_start"] == 0)
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["value"]["price"].as_i64().unwrap(),
            )
        })
        .collect();
    // The bid of 40 came late but lower: no update; the bid of 70 raised it: an update.
    assert_eq!(written, [("result".into(), 50), ("update".into(), 70)]);
}
