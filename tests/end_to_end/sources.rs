//! Sources other than files: standard input (with results on standard output), and the
//! deterministic generator.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::reference::{Ev, ModelSpec, WindowKind, run_model};
use crate::support::{count_sum_body, emissions, to_jsonl};

fn spec_file(dir: &std::path::Path, source: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join("pipeline.toml");
    std::fs::write(
        &path,
        format!("name = \"src\"\n[source]\n{source}\n[state]\nbackend = \"memory\"\n{body}"),
    )
    .unwrap();
    path
}

#[test]
fn reads_stdin_and_writes_results_to_stdout() {
    let spec = ModelSpec {
        window: WindowKind::Tumbling { size: 10 },
        bound: 2,
        lateness: 0,
    };
    let events: Vec<Ev> = (0..50)
        .map(|i| Ev {
            key: format!("k{}", i % 3),
            ts: (i * 7) % 60 + i,
            amount: i,
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = spec_file(dir.path(), "type = \"stdin\"", &count_sum_body(&spec));
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", path.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(to_jsonl(&events).as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected = run_model(&spec, &events);
    assert_eq!(emissions(&results), expected.emissions);
    // Late events go to standard error by default, next to the summary.
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("\"reason\":\"late"))
            .count(),
        expected.late.len()
    );
    assert!(stderr.contains("50 events in"), "{stderr}");
}

#[test]
fn the_generator_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let body = count_sum_body(&ModelSpec {
        window: WindowKind::Tumbling { size: 1_000 },
        bound: 100,
        lateness: 0,
    });
    let path = spec_file(
        dir.path(),
        "type = \"generator\"\nevents = 20000\nkeys = 50\nseed = 7\nmax_delay_ms = 100",
        &body,
    );
    let run = |shards: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", path.to_str().unwrap(), "--shards", shards])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    let first = run("1");
    assert!(!first.is_empty());
    assert_eq!(
        first,
        run("2"),
        "the same generator spec gives the same output, for any shard count"
    );
}
