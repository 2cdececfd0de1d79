//! Hostile guests and hostile input: the host keeps running, other keys' results are right,
//! and dead letters name the cause. The guests are in `tests/guests/`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::reference::{Ev, ModelSpec, WindowKind, run_model};
use crate::support::{Pipeline, count_sum_body, emissions, guest, to_jsonl};

const SPEC: ModelSpec = ModelSpec {
    window: WindowKind::Tumbling { size: 100 },
    bound: 10,
    lateness: 0,
};

/// Spec sections running `module` as the count-sum aggregate, with extra `[sandbox]` lines.
fn body(module: &Path, sandbox: &str) -> String {
    let healthy = crate::support::component("tumbling-count-sum");
    count_sum_body(&SPEC).replace(
        &format!("{:?}", healthy.display().to_string()),
        &format!("{:?}", module.display().to_string()),
    ) + &format!("[sandbox]\n{sandbox}\n")
}

/// Events for healthy keys and for keys with `prefix`, interleaved.
fn events(prefix: &str, n: usize) -> (Vec<Ev>, Vec<Ev>) {
    let all: Vec<Ev> = (0..n)
        .map(|i| {
            let key = if i % 5 == 0 {
                format!("{prefix}-{}", i % 3)
            } else {
                format!("user-{}", i % 7)
            };
            Ev {
                key,
                ts: i as i64 * 3,
                amount: i as i64 % 10,
            }
        })
        .collect();
    let healthy = all
        .iter()
        .filter(|e| !e.key.starts_with(prefix))
        .cloned()
        .collect();
    (all, healthy)
}

/// Runs `module` over events with hostile keys; checks the healthy keys' results against the
/// model and returns the dead letters' reasons.
fn run_hostile(module: &Path, prefix: &str, sandbox: &str) -> Vec<String> {
    let (all, healthy) = events(prefix, 400);
    let run = Pipeline::new(&body(module, sandbox), &to_jsonl(&all)).run(&[]);
    assert!(run.success, "the host failed:\n{}", run.stderr);
    assert_eq!(
        emissions(&run.results),
        run_model(&SPEC, &healthy).emissions,
        "healthy keys' results"
    );
    let hostile_events = all.len() - healthy.len();
    assert_eq!(
        run.dead_letters.len(),
        hostile_events,
        "every hostile key's event is a dead letter"
    );
    run.dead_letters
        .iter()
        .map(|d| d["reason"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_guest_that_panics_on_some_keys_costs_only_their_events() {
    let reasons = run_hostile(&guest("trap-on-key"), "boom", "");
    assert!(
        reasons
            .iter()
            .all(|r| r.starts_with("count-sum@1.0.0 operator trapped")),
        "{reasons:?}"
    );
}

#[test]
fn a_runaway_loop_is_interrupted_within_the_call_timeout() {
    let started = Instant::now();
    let reasons = run_hostile(&guest("infinite-loop"), "spin", "call_timeout = \"100ms\"");
    assert!(
        reasons
            .iter()
            .all(|r| r.contains("exceeded its time limit of 100 ms")),
        "{reasons:?}"
    );
    // 80 looping events, each interrupted after about 100 ms (plus one batch call per window).
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_memory_bomb_stops_at_the_memory_limit() {
    let reasons = run_hostile(&guest("memory-bomb"), "bomb", "memory = \"16MiB\"");
    assert!(
        reasons
            .iter()
            .all(|r| r.contains("exceeded its memory limit of 16777216 bytes")),
        "{reasons:?}"
    );
}

#[test]
fn a_memory_bomb_stops_at_the_pipelines_memory_pool() {
    // Each instance may grow to 256 MiB, but all of them together (one per shard) to 24 MiB:
    // the pool binds first, and the instances' memory comes back to it after each trap.
    let reasons = run_hostile(
        &guest("memory-bomb"),
        "bomb",
        "memory = \"256MiB\"\ntotal_memory = \"24MiB\"",
    );
    assert!(
        reasons.iter().all(|r| r
            .contains("operator instances together reached their memory limit of 25165824 bytes")),
        "{reasons:?}"
    );
}

#[test]
fn huge_outputs_are_refused_and_the_window_is_not_emitted() {
    let (all, healthy) = events("huge", 200);
    let module = guest("huge-output");
    let run = Pipeline::new(
        &body(&module, "memory = \"256MiB\"\nmax_output_bytes = \"1MiB\""),
        &to_jsonl(&all),
    )
    .run(&[]);
    assert!(run.success, "{}", run.stderr);
    assert_eq!(
        emissions(&run.results),
        run_model(&SPEC, &healthy).emissions
    );
    assert!(!run.dead_letters.is_empty());
    for dead in &run.dead_letters {
        let reason = dead["reason"].as_str().unwrap();
        assert!(
            reason.contains("could not finish the window")
                && reason.contains("more than the limit of 1048576 bytes"),
            "{reason}"
        );
    }
}

#[test]
fn a_component_importing_what_weir_does_not_offer_is_refused_before_any_input() {
    let pipeline = Pipeline::new(
        &body(&guest("bad-import"), ""),
        "{\"key\":\"a\",\"ts\":1,\"amount\":1}\n",
    );
    let run = pipeline.run(&[]);
    assert!(!run.success);
    assert!(
        run.stderr.contains("cannot be linked") && run.stderr.contains("test:bad/secrets"),
        "{}",
        run.stderr
    );
    assert!(
        !pipeline.dir.path().join("out").exists(),
        "no output before the refusal"
    );
}

#[test]
fn hostile_input_becomes_dead_letters_with_reasons() {
    let good = Ev {
        key: "a".into(),
        ts: 5,
        amount: 1,
    };
    let mut input = to_jsonl(std::slice::from_ref(&good)).into_bytes();
    let bad: Vec<(&[u8], &str)> = vec![
        (b"{\"key\":\"a\",\"ts\":5,\"amount\":NaN}", "not valid JSON"),
        (
            b"{\"key\":\"a\",\"ts\":5,\"amount\":1e400}",
            "not valid JSON",
        ),
        (
            b"{\"key\":\"a\",\"ts\":1e300,\"amount\":1}",
            "not an integer",
        ),
        (
            b"{\"key\":\"a\",\"ts\":-9000000000000000,\"amount\":1}",
            "out of range",
        ),
        (b"{\"key\":\"\",\"ts\":5,\"amount\":1}", "is empty"),
        (
            b"{\"key\":[1],\"ts\":5,\"amount\":1}",
            "must be text or an integer",
        ),
        (
            b"{\"key\":\"a\",\"ts\":\"\\u0000\",\"amount\":1}",
            "not RFC 3339",
        ),
        (b"{\"key\":\"a\xff\xfe\",\"ts\":5}", "not valid UTF-8"),
        (
            b"{\"key\":\"a\",\"ts\":5,\"amount\":\"lots\"}",
            "operator rejected",
        ),
        (
            b"{\"key\":\"a\",\"ts\":5,\"amount\":{\"nested\":[1,2]}}",
            "operator rejected",
        ),
    ];
    for (line, _) in &bad {
        input.extend_from_slice(line);
        input.push(b'\n');
    }
    let huge = format!(
        "{{\"key\":\"a\",\"ts\":5,\"pad\":\"{}\"}}\n",
        "x".repeat(2 << 20)
    );
    input.extend_from_slice(huge.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.bin"), &input).unwrap();
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), "");
    std::fs::copy(
        dir.path().join("events.bin"),
        pipeline.dir.path().join("events.jsonl"),
    )
    .unwrap();
    let run = pipeline.run(&[]);
    assert!(run.success, "{}", run.stderr);
    assert_eq!(emissions(&run.results), run_model(&SPEC, &[good]).emissions);
    let reasons: Vec<&str> = run
        .dead_letters
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons.len(), bad.len() + 1, "{reasons:#?}");
    for ((_, expected), reason) in bad.iter().zip(&reasons) {
        assert!(
            reason.contains(expected),
            "expected {expected:?}, got {reason:?}"
        );
    }
    assert!(
        reasons
            .last()
            .unwrap()
            .contains("more than the limit of 1048576 bytes"),
        "{reasons:?}"
    );
}

#[test]
fn repeated_traps_at_load_lose_nothing_of_the_healthy_keys() {
    // 30,000 events, a fifth of them for keys the hostile version traps on, every one of them
    // a trap and an instance replacement. The healthy keys' results must equal the healthy
    // version's, and every hostile event must be accounted for.
    let (all, healthy) = events("boom", 30_000);
    let input = to_jsonl(&all);
    let run_with = |module: &Path| {
        let pipeline = Pipeline::new(&body(module, ""), &input);
        let started = Instant::now();
        let run = pipeline.run(&["--shards", "2"]);
        assert!(run.success, "{}", run.stderr);
        (run, started.elapsed())
    };
    let (hostile, hostile_took) = run_with(&guest("trap-on-key"));
    let (clean, clean_took) = run_with(&crate::support::component("tumbling-count-sum"));
    assert_eq!(
        emissions(&hostile.results),
        run_model(&SPEC, &healthy).emissions
    );
    let clean_healthy: Vec<_> = emissions(&clean.results)
        .into_iter()
        .filter(|e| !e.key.starts_with("boom"))
        .collect();
    assert_eq!(
        emissions(&hostile.results),
        clean_healthy,
        "the healthy keys' results do not depend on the hostile ones"
    );
    assert_eq!(hostile.dead_letters.len(), all.len() - healthy.len());
    eprintln!(
        "healthy run {:.0} events/s; with a fifth of the events trapping {:.0} events/s",
        all.len() as f64 / clean_took.as_secs_f64(),
        all.len() as f64 / hostile_took.as_secs_f64()
    );
}

#[test]
fn writes_in_finish_are_discarded() {
    // Lateness, so windows fire again (updates) after a `finish` that wrote to their state.
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 100 },
        bound: 10,
        lateness: 300,
    };
    let events: Vec<Ev> = (0..400i64)
        .map(|i| Ev {
            key: format!("user-{}", i % 5),
            ts: i * 3 - if i % 7 == 0 { 60 } else { 0 },
            amount: i % 10,
        })
        .collect();
    let healthy = crate::support::component("tumbling-count-sum");
    let body = count_sum_body(&spec).replace(
        &format!("{:?}", healthy.display().to_string()),
        &format!("{:?}", guest("finish-writes").display().to_string()),
    );
    let run = Pipeline::new(&body, &to_jsonl(&events)).run(&[]);
    assert!(run.success, "{}", run.stderr);
    let expected = run_model(&spec, &events);
    assert!(
        expected.emissions.iter().any(|e| e.kind == "update"),
        "the input must make windows fire again"
    );
    assert_eq!(emissions(&run.results), expected.emissions);
}

/// Input that invents a new field name on every line, past what the host interns (16,384
/// names for the whole process) and what a decoder caches (4,096), some longer than an
/// interned name may be: every event is still counted and the operator still finds `amount`
/// beside names it has never seen. After the flood, with the table full, events whose only
/// field is `amount` (interned with the first line) cross from the router's crossings, and
/// three whose only field is a name first seen then (not interned, so never crossed) share
/// their windows: they are read from the events, and only they become dead letters.
#[test]
fn a_new_field_name_on_every_line_changes_no_result() {
    let mut events: Vec<Ev> = (0..40_000)
        .map(|i| Ev {
            key: format!("user-{}", i % 7),
            ts: i as i64 / 40,
            amount: i as i64 % 10,
        })
        .collect();
    let input: String = to_jsonl(&events)
        .lines()
        .enumerate()
        .map(|(i, line)| {
            // Names long and short, some past the interned length of 256 bytes.
            let name = match i % 3 {
                0 => format!("f{i}"),
                1 => format!("{}{i}", "n".repeat(300)),
                _ => format!("é\\u00e9{i}"),
            };
            format!("{{\"{name}\":{i},{}\n", &line[1..])
        })
        .collect();
    let after: Vec<Ev> = (0..2_000)
        .map(|i| Ev {
            key: format!("user-{}", i % 7),
            ts: 1_000 + i as i64 / 2,
            amount: i as i64 % 10,
        })
        .collect();
    let mut input = input;
    for (i, line) in to_jsonl(&after).lines().enumerate() {
        input += line;
        input += "\n";
        if [500, 1_000, 1_500].contains(&i) {
            let ts = after[i].ts;
            input += &format!("{{\"key\":\"user-1\",\"ts\":{ts},\"never_seen_{i}\":5}}\n");
        }
    }
    events.extend(after);
    let run = Pipeline::new(&count_sum_body(&SPEC), &input).run_logged(&[]);
    assert!(run.success, "{}", run.stderr);
    // The flood's wide windows are not sent many to a call past what the guest's memory holds:
    // a trap there made the instance give up calls carrying many windows for the whole run.
    assert!(
        !run.stderr.contains("one call per window from now on"),
        "{}",
        run.stderr
    );
    let reasons: Vec<&str> = (run.dead_letters.iter())
        .map(|dead| dead["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons
            .iter()
            .all(|reason| reason.contains("event without a numeric `amount` field")),
        "{reasons:?}"
    );
    assert_eq!(emissions(&run.results), run_model(&SPEC, &events).emissions);
}
