//! Live pipelines under `weir serve` (issue 12): a pipeline whose input pauses still closes its
//! windows with `[watermark] advance_when_idle`, and the advance is part of the input, so a
//! server killed and restarted replays it to the same results.

use std::thread;
use std::time::Duration;

use serde_json::json;

use crate::reference::run_model;
use crate::serve::{
    ADMIN, MODEL, PATIENCE, Server, assert_same_emissions, assert_unique_ids, clicks, count_sum_v1,
    live_model, spec,
};
use crate::support::emissions;

/// Creates and starts pipeline `name`: the serve tests' spec, with `advance_when_idle` if given.
fn create_and_start(server: &Server, name: &str, advance_when_idle: Option<&str>) {
    let mut spec = spec();
    spec["name"] = json!(name);
    if let Some(idle) = advance_when_idle {
        spec["watermark"]["advance_when_idle"] = json!(idle);
    }
    server.expect(
        &format!("creating {name}"),
        server.post_json("/v1/pipelines", Some(ADMIN), &spec),
        201,
    );
    server.expect(
        &format!("starting {name}"),
        server.post(&format!("/v1/pipelines/{name}/start"), Some(ADMIN), b""),
        200,
    );
}

#[test]
fn a_paused_input_closes_its_windows_with_advance_when_idle_and_replays_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server, "idle", Some("1s"));
    create_and_start(&server, "still", None);
    // 200 clicks over 7.4 s of event time, then nothing more.
    let events = clicks(200, 5);
    server.ingest("idle", &events);
    server.ingest("still", &events);
    // With the advance, every window closes as if the input had ended...
    let expected = run_model(&MODEL, &events).emissions;
    let open = live_model(&events);
    assert!(
        open.len() < expected.len(),
        "some windows wait for the watermark"
    );
    let results = server.wait_for_results("idle", &expected);
    assert_same_emissions(&server, &results, &expected);
    assert_unique_ids(&results);
    // ... and without it, the windows after the last event's time stay open.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(emissions(&server.results("still")), open);

    // The advance is in the ingest log: a server killed and restarted replays it to the same
    // results (none repeated, none lost), and advancing again closes nothing new.
    let before = std::fs::read(dir.path().join("pipelines/idle/out/results.jsonl")).unwrap();
    let log = std::fs::read_to_string(dir.path().join("pipelines/idle/ingest.jsonl")).unwrap();
    assert!(log.contains("#weir advance_ms="), "no advance in the log");
    server.kill();
    let server = Server::start(dir.path());
    server.wait_for("the pipeline to resume", PATIENCE, || {
        let status = server.status("idle");
        match status["state"].as_str() {
            Some("running") => Ok(()),
            _ => Err(status.to_string()),
        }
    });
    thread::sleep(Duration::from_millis(2_500));
    let after = std::fs::read(dir.path().join("pipelines/idle/out/results.jsonl")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&after),
        String::from_utf8_lossy(&before)
    );
}

#[test]
fn advance_when_idle_is_for_live_sources_and_positive() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    for (idle, says) in [
        (
            json!("0s"),
            "watermark.advance_when_idle must be greater than zero",
        ),
        (json!("soon"), "watermark.advance_when_idle"),
        (json!(-5), "must not be negative"),
    ] {
        let mut spec = spec();
        spec["watermark"]["advance_when_idle"] = idle;
        let error = server.expect_error(
            "a bad advance_when_idle",
            server.post_json("/v1/pipelines", Some(ADMIN), &spec),
            400,
        );
        assert!(error.contains(says), "{error}");
    }
    let pipeline = crate::support::Pipeline::new(
        "[event]\nkey = \"k\"\ntimestamp = \"ts\"\n[watermark]\nadvance_when_idle = \"1s\"\n",
        "",
    );
    let run = pipeline.run(&[]);
    assert!(!run.success);
    assert!(
        run.stderr.contains("for a live HTTP source"),
        "{}",
        run.stderr
    );
}
