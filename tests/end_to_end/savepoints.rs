//! Savepoints over the API (issue 13): one taken from a running pipeline under load, forked into
//! a new pipeline, continues the original's output with nothing lost or repeated (byte for byte,
//! ids renamed), also with another operator version; a savepoint keeps the ingest log after it
//! until it is deleted; and every hostile name, spec and count is refused clearly.

use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{
    ADMIN, GatedSender, PATIENCE, Server, assert_same_emissions, assert_unique_ids, clicks,
    count_sum_v1, count_sum_v2, far_future, live_model, spec,
};

fn create(server: &Server, name: &str, segment_size: &str) {
    let mut spec = spec();
    spec["name"] = json!(name);
    spec["source"] = json!({"type": "http", "segment_size": segment_size});
    server.expect(
        &format!("creating {name}"),
        server.post_json("/v1/pipelines", Some(ADMIN), &spec),
        201,
    );
}

fn start(server: &Server, name: &str) {
    server.expect(
        &format!("starting {name}"),
        server.post(&format!("/v1/pipelines/{name}/start"), Some(ADMIN), b""),
        200,
    );
}

fn out_file(server: &Server, pipeline: &str, file: &str) -> String {
    let path = server
        .data()
        .join("pipelines")
        .join(pipeline)
        .join("out")
        .join(file);
    std::fs::read_to_string(path).unwrap_or_default()
}

fn log_bytes(server: &Server, pipeline: &str) -> u64 {
    crate::live::ingest_log_bytes(server.data(), pipeline).0
}

/// The fork's spec: the original's under another name, with operator `version`.
pub(crate) fn fork_spec(name: &str, version: &str) -> Value {
    let mut spec = spec();
    spec["name"] = json!(name);
    spec["operators"][0]["version"] = json!(version);
    spec
}

#[test]
fn a_savepoint_taken_under_load_forks_into_a_pipeline_that_continues_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    // Small segments: without the savepoint's hold, the log it needs would be deleted.
    create(&server, "orig", "8KiB");
    start(&server, "orig");
    let mut events = clicks(6_000, 20);
    events.push(far_future(&events));
    // The sender stops after 4,000 events until the savepoint is taken, so that it is taken
    // mid-stream however slowly the call is answered.
    let sender = {
        let client = server.client();
        let chunks: Vec<Vec<_>> = events.chunks(100).map(<[_]>::to_vec).collect();
        GatedSender::start(chunks, &[40], move |chunk| client.ingest("orig", chunk))
    };
    server.wait_for("a third of the events read", PATIENCE, || {
        let read = server.status("orig")["events_in"].as_u64().unwrap_or(0);
        if read >= 2_000 {
            Ok(())
        } else {
            Err(format!("{read}"))
        }
    });
    let saved = server.expect(
        "a savepoint under load",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(ADMIN),
            &json!({"name": "mid"}),
        ),
        201,
    );
    sender.join();
    let at = saved["events"].as_u64().unwrap();
    assert!(
        (2_000..=4_000).contains(&at),
        "the savepoint was taken mid-stream: {saved}"
    );
    let expected = live_model(&events);
    let original = server.wait_for_results("orig", &expected);
    assert_same_emissions(&server, &original, &expected);
    // The log after the savepoint is still there, though checkpoints went far past it.
    let listed = server.expect(
        "listing",
        server.get("/v1/pipelines/orig/savepoints", Some(ADMIN)),
        200,
    );
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["name"], "mid");
    let pinned = log_bytes(&server, "orig");

    // A pipeline made from the savepoint reads the events after it and writes exactly the
    // original's results after the savepoint's output position.
    let created = server.expect(
        "forking",
        server.post_json(
            "/v1/pipelines/orig/savepoints/mid/fork",
            Some(ADMIN),
            &fork_spec("copy", "1.0.0"),
        ),
        201,
    );
    assert_eq!(created["state"], "stopped", "{created}");
    start(&server, "copy");
    server.wait_for_events_in("copy", events.len());
    let position = saved["output"]["results"].as_u64().unwrap() as usize;
    let original_text = out_file(&server, "orig", "results.jsonl");
    let continued = original_text[position..].replace("\"orig/", "\"copy/");
    server.wait_for("the fork's results", PATIENCE, || {
        let text = out_file(&server, "copy", "results.jsonl");
        if text.len() >= continued.len() {
            Ok(())
        } else {
            Err(format!("{} of {} bytes", text.len(), continued.len()))
        }
    });
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        out_file(&server, "copy", "results.jsonl"),
        continued,
        "the fork's results are the original's after the savepoint"
    );
    let late_position = saved["output"]["late"].as_u64().unwrap() as usize;
    assert_eq!(
        out_file(&server, "copy", "late.jsonl"),
        out_file(&server, "orig", "late.jsonl")[late_position..]
    );
    assert!(
        position > 0 && !continued.is_empty(),
        "both sides of the savepoint hold results"
    );
    assert_unique_ids(&server.results("copy"));

    // With version 2, the same windows with v2's output (v1's fields plus avg).
    server.expect(
        "forking with v2",
        server.post_json(
            "/v1/pipelines/orig/savepoints/mid/fork",
            Some(ADMIN),
            &fork_spec("copy-v2", "2.0.0"),
        ),
        201,
    );
    start(&server, "copy-v2");
    server.wait_for_events_in("copy-v2", events.len());
    let v1 = server.results("copy");
    let v2 = server.wait_for("v2's results", PATIENCE, || {
        let v2 = server.results("copy-v2");
        if v2.len() >= v1.len() {
            Ok(v2)
        } else {
            Err(format!("{} of {}", v2.len(), v1.len()))
        }
    });
    assert_eq!(v1.len(), v2.len());
    for (a, b) in v1.iter().zip(&v2) {
        assert_eq!(
            (
                &a["key"],
                &a["window_start"],
                &a["value"]["count"],
                &a["value"]["sum"]
            ),
            (
                &b["key"],
                &b["window_start"],
                &b["value"]["count"],
                &b["value"]["sum"]
            ),
            "{a} vs {b}"
        );
        assert!(b["value"]["avg"].is_number(), "v2 adds avg: {b}");
    }

    // Deleting the savepoint lets the original's log be truncated again.
    server.expect(
        "deleting",
        server.delete("/v1/pipelines/orig/savepoints/mid", Some(ADMIN)),
        204,
    );
    server.ingest("orig", &[crate::server::ev("late-comer", 0, 1)]);
    server.wait_for("the log to shrink", PATIENCE, || {
        let now = log_bytes(&server, "orig");
        if now < pinned / 2 {
            Ok(())
        } else {
            Err(format!("{now} bytes, {pinned} while pinned"))
        }
    });
}

#[test]
fn savepoint_requests_with_hostile_names_specs_and_counts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create(&server, "orig", "1MiB");
    // Nothing committed yet: nothing to save.
    let error = server.expect_error(
        "a savepoint before any checkpoint",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(ADMIN),
            &json!({"name": "early"}),
        ),
        409,
    );
    assert!(error.contains("no committed checkpoint"), "{error}");
    start(&server, "orig");
    server.ingest("orig", &clicks(200, 5));
    server.wait_for_events_in("orig", 200);
    for bad in ["../escape", "a/b", "", ".hidden", &"x".repeat(65)] {
        server.expect_error(
            &format!("savepoint name {bad:?}"),
            server.post_json(
                "/v1/pipelines/orig/savepoints",
                Some(ADMIN),
                &json!({"name": bad}),
            ),
            400,
        );
    }
    server.expect_error(
        "an unknown field",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(ADMIN),
            &json!({"name": "a", "path": "/etc"}),
        ),
        400,
    );
    server.expect(
        "a savepoint",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(ADMIN),
            &json!({"name": "one"}),
        ),
        201,
    );
    server.expect_error(
        "the same name again",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(ADMIN),
            &json!({"name": "one"}),
        ),
        409,
    );
    server.expect_error(
        "an ingest token",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(crate::server::INGEST),
            &json!({"name": "two"}),
        ),
        403,
    );
    server.expect_error(
        "deleting an unknown savepoint",
        server.delete("/v1/pipelines/orig/savepoints/none", Some(ADMIN)),
        404,
    );
    server.expect_error(
        "deleting by a crafted name",
        server.delete("/v1/pipelines/orig/savepoints/..%2F..%2Fspec", Some(ADMIN)),
        400,
    );
    assert!(server.data().join("pipelines/orig/spec.json").exists());
    // Forks: another window, an unknown savepoint, a taken name, a crafted savepoint name.
    let mut other = fork_spec("other", "1.0.0");
    other["window"] = json!({"type": "tumbling", "size": 2000});
    let error = server.expect_error(
        "a fork with other windows",
        server.post_json(
            "/v1/pipelines/orig/savepoints/one/fork",
            Some(ADMIN),
            &other,
        ),
        400,
    );
    assert!(error.contains("different key, timestamp"), "{error}");
    server.expect_error(
        "a fork of an unknown savepoint",
        server.post_json(
            "/v1/pipelines/orig/savepoints/none/fork",
            Some(ADMIN),
            &fork_spec("x", "1.0.0"),
        ),
        404,
    );
    server.expect_error(
        "a fork onto a taken name",
        server.post_json(
            "/v1/pipelines/orig/savepoints/one/fork",
            Some(ADMIN),
            &fork_spec("orig", "1.0.0"),
        ),
        409,
    );
    server.expect_error(
        "a fork by a crafted name",
        server.post_json(
            "/v1/pipelines/orig/savepoints/..%2F..%2Fdata/fork",
            Some(ADMIN),
            &fork_spec("y", "1.0.0"),
        ),
        400,
    );
    assert!(
        !server.data().join("pipelines/other").exists()
            && !server.data().join("pipelines/x").exists()
    );
    // At most 32 savepoints per pipeline, stopped or running.
    server.expect(
        "stopping",
        server.post("/v1/pipelines/orig/stop", Some(ADMIN), b""),
        200,
    );
    for i in 2..=32 {
        server.expect(
            &format!("savepoint {i}"),
            server.post_json(
                "/v1/pipelines/orig/savepoints",
                Some(ADMIN),
                &json!({"name": format!("s{i}")}),
            ),
            201,
        );
    }
    let error = server.expect_error(
        "a 33rd savepoint",
        server.post_json(
            "/v1/pipelines/orig/savepoints",
            Some(ADMIN),
            &json!({"name": "s33"}),
        ),
        409,
    );
    assert!(error.contains("delete one first"), "{error}");
}

#[test]
fn weir_savepoint_with_server_does_what_the_api_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create(&server, "orig", "1MiB");
    start(&server, "orig");
    server.ingest("orig", &clicks(300, 5));
    server.wait_for_events_in("orig", 300);
    let base = server.url("");
    let weir = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("savepoint")
            .args(args)
            .args(["--server", &base])
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr),
        )
    };
    let (ok, out) = weir(&["create", "orig", "by-cli"]);
    assert!(ok, "{out}");
    let listed = server.expect(
        "listing",
        server.get("/v1/pipelines/orig/savepoints", Some(ADMIN)),
        200,
    );
    assert_eq!(listed[0]["name"], "by-cli", "{listed}");
    let (ok, out) = weir(&["list", "orig"]);
    assert!(ok && out.contains("by-cli"), "{out}");
    let spec_file = dir.path().join("copy.json");
    std::fs::write(&spec_file, fork_spec("cli-copy", "1.0.0").to_string()).unwrap();
    let (ok, out) = weir(&["fork", "orig", "by-cli", spec_file.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert_eq!(server.status("cli-copy")["state"], "stopped");
    let (ok, out) = weir(&["restore", "orig", "by-cli"]);
    assert!(!ok && out.contains("fork"), "{out}");
    let (ok, out) = weir(&["delete", "orig", "../x"]);
    assert!(!ok && out.contains("name"), "{out}");
    let (ok, out) = weir(&["delete", "orig", "by-cli"]);
    assert!(ok, "{out}");
    let listed = server.expect(
        "listing",
        server.get("/v1/pipelines/orig/savepoints", Some(ADMIN)),
        200,
    );
    assert_eq!(listed, json!([]));
}
