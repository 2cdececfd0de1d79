//! Checkpoints and recovery through the real seam: the `weir` process is killed with SIGKILL
//! at random points (or aborts inside a checkpoint commit), restarted on the same data
//! directory, and its committed output must be byte-identical to an uninterrupted run's.
//! Damaged data directories must be refused, never taken for empty ones.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::reference::{Ev, ModelSpec, WindowKind, run_model};
use crate::support::{Pipeline, count_sum_body, emissions, to_jsonl};

/// A large out-of-order stream with late events, lateness updates and session merges.
fn stream(n: usize) -> Vec<Ev> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|i| {
            let behind = if i % 13 == 0 {
                (next() % 400) as i64
            } else {
                (next() % 30) as i64
            };
            Ev {
                key: format!("user-{}", next() % 300),
                ts: i as i64 * 3 - behind,
                amount: (next() % 1000) as i64,
            }
        })
        .collect()
}

const SPEC: ModelSpec = ModelSpec {
    window: WindowKind::Session { gap: 40 },
    bound: 50,
    lateness: 200,
};

fn outputs(dir: &Path) -> [Vec<u8>; 3] {
    ["results.jsonl", "late.jsonl", "dead.jsonl"]
        .map(|f| std::fs::read(dir.join("out").join(f)).unwrap_or_default())
}

fn weir(pipeline: &Pipeline, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .arg("run")
        .arg(pipeline.dir.path().join("pipeline.toml"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Runs from the beginning, checkpointing every millisecond, and aborts the process right
/// after checkpoint `id` commits: a data directory left mid-run.
fn crash_after_checkpoint(pipeline: &Pipeline, id: u64, batch_size: &str) {
    let crashed = weir(
        pipeline,
        &[
            "--fresh",
            "--checkpoint-interval",
            "1ms",
            "--batch-size",
            batch_size,
        ],
    )
    .env("WEIR_TEST_CRASH", format!("after-commit:{id}"))
    .output()
    .unwrap();
    assert!(!crashed.status.success(), "the crash hook did not fire");
}

/// An uninterrupted run's output and how long it took.
fn uninterrupted(events: &str) -> ([Vec<u8>; 3], Duration) {
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), events);
    let started = Instant::now();
    let run = pipeline.run(&["--shards", "2"]);
    assert!(run.success, "{}", run.stderr);
    (outputs(pipeline.dir.path()), started.elapsed())
}

#[test]
fn committed_output_is_byte_identical_after_sigkill_at_random_points() {
    let events = stream(60_000);
    let input = to_jsonl(&events);
    let (expected, _took) = uninterrupted(&input);
    // The uninterrupted output is itself right.
    let expected_results: Vec<serde_json::Value> = String::from_utf8_lossy(&expected[0])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        emissions(&expected_results),
        run_model(&SPEC, &events).emissions
    );

    // A memory budget of 4 KiB: every commit evicts nearly all clean state, so the runs read
    // it back from redb while the next checkpoint is being written (the shards go on), and
    // windows born since the last checkpoint are never looked for there.
    let pipeline = Pipeline::with_state(&count_sum_body(&SPEC), &input, "memory_budget = 4096");
    let marker = pipeline.dir.path().join("data/CHECKPOINT");
    let committed = || {
        std::fs::read_to_string(&marker)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut kills = 0;
    let mut resumed = 0;
    for attempt in 0..8 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let mut args = vec![
            "--shards",
            if attempt % 2 == 0 { "2" } else { "3" },
            "--checkpoint-interval",
            "15ms",
        ];
        if attempt == 0 {
            args.push("--fresh");
        }
        // Each run is killed at a random point shortly after it has committed a checkpoint of
        // its own: it made progress, and whatever the machine's speed it is killed before the
        // end (during processing, and sometimes during the next commit).
        let before = if attempt == 0 { 0 } else { committed() };
        let mut child = weir(&pipeline, &args).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while committed() <= before
            && child.try_wait().unwrap().is_none()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_micros((seed >> 33) % 20_000));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        let output = child.wait_with_output().unwrap();
        resumed +=
            String::from_utf8_lossy(&output.stderr).contains("resumed from checkpoint") as usize;
    }
    let finish = weir(
        &pipeline,
        &["--shards", "2", "--checkpoint-interval", "15ms"],
    )
    .output()
    .unwrap();
    assert!(
        finish.status.success(),
        "{}",
        String::from_utf8_lossy(&finish.stderr)
    );
    assert!(
        kills >= 4,
        "only {kills} of 8 runs were killed before finishing (a whole run takes {_took:?})"
    );
    let got = outputs(pipeline.dir.path());
    for (name, (got, expected)) in ["results", "late", "dead letters"]
        .iter()
        .zip(got.iter().zip(&expected))
    {
        assert!(
            got == expected,
            "{name} differ after {kills} kills ({resumed} resumed runs): {} vs {} bytes",
            got.len(),
            expected.len()
        );
    }
}

#[test]
fn sigterm_mid_run_stops_after_a_final_checkpoint_and_the_restart_loses_nothing() {
    let events = stream(60_000);
    let input = to_jsonl(&events);
    let (expected, _took) = uninterrupted(&input);
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), &input);
    let marker = pipeline.dir.path().join("data/CHECKPOINT");
    // Each run is stopped by SIGTERM while it reads (after its first checkpoint), then the
    // next goes on: the record being read as the stop came must not be lost.
    let mut stopped = 0;
    for attempt in 0..3 {
        let _ = std::fs::remove_file(&marker);
        let mut args = vec!["--checkpoint-interval", "15ms"];
        if attempt == 0 {
            args.push("--fresh");
        }
        let child = weir(&pipeline, &args).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !marker.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        stopped += usize::from(stderr.contains("stopping after a final checkpoint"));
    }
    assert!(stopped >= 2, "the runs were stopped mid-input");
    let rest = weir(&pipeline, &[]).output().unwrap();
    assert!(rest.status.success());
    assert!(
        outputs(pipeline.dir.path()) == expected,
        "output after SIGTERMs and restarts differs from an uninterrupted run's"
    );
}

#[test]
fn a_crash_inside_the_checkpoint_commit_loses_and_duplicates_nothing() {
    let input = to_jsonl(&stream(20_000));
    let (expected, _) = uninterrupted(&input);
    for point in ["before-commit:3", "after-commit:3"] {
        let pipeline = Pipeline::new(&count_sum_body(&SPEC), &input);
        let crashed = weir(
            &pipeline,
            &[
                "--fresh",
                "--checkpoint-interval",
                "5ms",
                "--batch-size",
                "500",
            ],
        )
        .env("WEIR_TEST_CRASH", point)
        .output()
        .unwrap();
        assert!(
            !crashed.status.success(),
            "{point}: the crash hook did not fire"
        );
        assert!(String::from_utf8_lossy(&crashed.stderr).contains("WEIR_TEST_CRASH"));
        let resumed = weir(&pipeline, &["--checkpoint-interval", "5ms"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&resumed.stderr);
        assert!(resumed.status.success(), "{stderr}");
        let from = if point.starts_with("before") {
            "resumed from checkpoint 2"
        } else {
            "resumed from checkpoint 3"
        };
        assert!(stderr.contains(from), "{point}: {stderr}");
        assert!(
            outputs(pipeline.dir.path()) == expected,
            "{point}: output differs"
        );
    }
}

#[test]
fn a_finished_pipeline_run_again_changes_nothing() {
    let input = to_jsonl(&stream(2_000));
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), &input);
    assert!(pipeline.run(&[]).success);
    let before = outputs(pipeline.dir.path());
    let again = pipeline.resume(&[]);
    assert!(again.success, "{}", again.stderr);
    assert!(again.stderr.contains("0 events in"), "{}", again.stderr);
    assert!(outputs(pipeline.dir.path()) == before);
}

#[test]
fn state_evicted_over_a_tiny_memory_budget_is_read_back_correctly() {
    let events = stream(5_000);
    let pipeline = Pipeline::with_state(
        &count_sum_body(&SPEC),
        &to_jsonl(&events),
        "memory_budget = 2048",
    );
    let run = pipeline.run(&["--checkpoint-interval", "2ms", "--batch-size", "100"]);
    assert!(run.success, "{}", run.stderr);
    assert_eq!(emissions(&run.results), run_model(&SPEC, &events).emissions);
}

fn damaged(pipeline: &Pipeline, expected: &str) {
    let run = weir(pipeline, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success(),
        "a damaged data directory was accepted"
    );
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in:\n{stderr}"
    );
}

#[test]
fn damaged_data_directories_are_refused_not_taken_for_empty() {
    let input = to_jsonl(&stream(3_000));
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), &input);
    crash_after_checkpoint(&pipeline, 4, "200");
    let data = pipeline.dir.path().join("data");
    let state = data.join("state.redb");
    let good = std::fs::read(&state).unwrap();

    std::fs::write(&state, &good[..good.len() / 2]).unwrap();
    damaged(&pipeline, "corrupt");

    let mut garbage = good.clone();
    for (i, byte) in garbage.iter_mut().enumerate().skip(good.len() / 3) {
        *byte = (i * 7 + 3) as u8;
    }
    std::fs::write(&state, &garbage).unwrap();
    damaged(&pipeline, "corrupt");

    std::fs::write(&state, b"").unwrap();
    damaged(&pipeline, "empty");

    std::fs::remove_file(&state).unwrap();
    damaged(&pipeline, "holds no checkpoint");

    std::fs::write(&state, &good).unwrap();
    let results = pipeline.dir.path().join("out/results.jsonl");
    let committed = std::fs::read(&results).unwrap();
    std::fs::write(&results, &committed[..committed.len() / 3]).unwrap();
    damaged(&pipeline, "truncated or replaced");

    // Put back, it resumes.
    std::fs::write(&results, &committed).unwrap();
    let run = pipeline.resume(&[]);
    assert!(run.success, "{}", run.stderr);
}

#[test]
fn savepoints_restore_an_earlier_state_even_with_a_new_operator_version() {
    let events = stream(4_000);
    let input = to_jsonl(&events);
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), &input);
    let spec = pipeline.dir.path().join("pipeline.toml");
    crash_after_checkpoint(&pipeline, 5, "300");
    let cli = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let spec_arg = spec.to_str().unwrap();
    assert!(cli(&["savepoint", "create", spec_arg, "mid"]).contains("checkpoint 5"));
    assert!(cli(&["savepoint", "list", spec_arg]).starts_with("mid\tcheckpoint 5"));

    // Offline inspection shows the key's windows and state at the checkpoint.
    let all = cli(&["state", spec_arg]);
    let manifest: serde_json::Value = serde_json::from_str(all.lines().next().unwrap()).unwrap();
    // The last event before the checkpoint: its session is still open.
    let key = &events[manifest["manifest"]["events"].as_u64().unwrap() as usize - 1].key;
    let state = cli(&["state", spec_arg, "--key", key]);
    let lines: Vec<serde_json::Value> = state
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["manifest"]["id"], 5);
    assert!(
        lines.iter().any(|l| l["state"]["key"] == key.as_str()
            && l["state"]["value"]["values"]["count"]["Int"].is_i64()),
        "{state}"
    );
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.get("window").or(l.get("state")).unwrap()["key"] == key.as_str())
    );

    let finished = pipeline.resume(&[]);
    assert!(finished.success, "{}", finished.stderr);
    let complete = outputs(pipeline.dir.path());
    assert_eq!(
        emissions(&finished.results),
        run_model(&SPEC, &events).emissions
    );

    // Back to the savepoint, with a new operator version: the same results, the later ones
    // labelled with the new version.
    cli(&["savepoint", "restore", spec_arg, "mid"]);
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("version = \"1.0.0\"", "version = \"2.0.0\"");
    std::fs::write(&spec, text).unwrap();
    let replayed = pipeline.resume(&[]);
    assert!(replayed.success, "{}", replayed.stderr);
    assert!(
        replayed.stderr.contains("resumed from checkpoint 5"),
        "{}",
        replayed.stderr
    );
    assert_eq!(
        emissions(&replayed.results),
        run_model(&SPEC, &events).emissions
    );
    let versions: Vec<&str> = replayed
        .results
        .iter()
        .map(|r| r["operator_version"].as_str().unwrap())
        .collect();
    assert!(
        versions.first() == Some(&"1.0.0") && versions.last() == Some(&"2.0.0"),
        "{versions:?}"
    );
    assert!(
        complete[1] == outputs(pipeline.dir.path())[1],
        "late output replays identically"
    );
}

#[test]
fn results_carry_stable_output_ids() {
    let events = stream(3_000);
    let pipeline = Pipeline::new(&count_sum_body(&SPEC), &to_jsonl(&events));
    let run = pipeline.run(&[]);
    let ids: Vec<&str> = run
        .results
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "output ids are unique");
    let first = &run.results[0];
    assert_eq!(
        first["id"],
        format!(
            "test/count-sum/{}/{}/{}/{}",
            first["window_start"],
            first["window_end"],
            first["version"],
            first["key"].as_str().unwrap()
        )
    );
    assert!(
        run.results
            .iter()
            .filter(|r| r["kind"] == "retract")
            .all(|r| r["id"]
                .as_str()
                .unwrap()
                .contains(&format!("/{}r/", r["version"])))
    );
}

#[test]
fn a_new_operator_version_migrates_the_state_the_old_one_wrote() {
    // Version 1 is the count-sum built against contract 0.1 (`tests/guests/count-sum-0-1`, state
    // written by one host call per put), version 2 count-sum v2 on 0.3.
    let events = stream(4_000);
    let example = crate::support::component("tumbling-count-sum")
        .display()
        .to_string();
    let v1 = crate::support::guest("count-sum-0-1").display().to_string();
    let body = count_sum_body(&SPEC).replace(&example, &v1);
    let pipeline = Pipeline::new(&body, &to_jsonl(&events));
    crash_after_checkpoint(&pipeline, 4, "300");
    // Restart with version 2 of the operator: it reads version 1's state (count-sum v2 keeps
    // the layout; its `migrate` notes where a window came from).
    let spec = pipeline.dir.path().join("pipeline.toml");
    let v2 = crate::support::component("count-sum-v2")
        .display()
        .to_string();
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace(&v1, &v2)
        .replace("version = \"1.0.0\"", "version = \"2.0.0\"");
    std::fs::write(&spec, text).unwrap();
    let resumed = pipeline.resume(&[]);
    assert!(resumed.success, "{}", resumed.stderr);
    assert_eq!(
        emissions(&resumed.results),
        run_model(&SPEC, &events).emissions
    );
    let migrated: Vec<_> = resumed
        .results
        .iter()
        .filter(|r| r["value"].get("migrated_from").is_some())
        .collect();
    assert!(
        !migrated.is_empty(),
        "windows open at the checkpoint were migrated"
    );
    assert!(
        migrated
            .iter()
            .all(|r| r["value"]["migrated_from"] == "1.0.0" && r["operator_version"] == "2.0.0")
    );
    let fresh = resumed
        .results
        .iter()
        .filter(|r| r["operator_version"] == "2.0.0" && r["value"].get("migrated_from").is_none())
        .count();
    assert!(
        fresh > 0,
        "windows opened after the restart were never v1's and are not migrated"
    );
    assert!(
        resumed
            .results
            .iter()
            .filter(|r| r["operator_version"] == "1.0.0")
            .all(|r| r["value"].get("migrated_from").is_none())
    );
}
