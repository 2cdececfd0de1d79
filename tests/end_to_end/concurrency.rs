//! The newer parts of `weir serve` under concurrency, slow callers and crashes (issue 39):
//! nothing lost, nothing stuck. Each test tells the failure it guards against:
//!
//! - savepoint listings racing each other, creates and deletes (a listing took an exclusive lock
//!   and created a missing file; a failed listing let truncation delete a savepoint's input);
//! - a damaged savepoint (it broke every savepoint route of its pipeline), and a listing that
//!   fails (it counted as "no savepoints", and the log went);
//! - slow request bodies (a few trickling connections held the whole in-flight budget);
//! - a pipeline deleted during its replay (the replay's sandbox came back as a damaged pipeline
//!   and held the server's one replay turn for minutes), and answers slower than the idle
//!   timeout (never delivered);
//! - resumed result streams that do not read (they took every reader of the server), and a
//!   `Last-Event-ID` inside a record (a torn record);
//! - a SIGKILL halfway through a fork, an upload or a savepoint (a half-made pipeline loaded as a
//!   normal one; `.partial` and orphan files stayed for good), and through its siblings: a
//!   component half written, a pipeline delete, a replay's sandbox made, a damaged version
//!   record (whose component must not be taken for an orphan);
//! - a full disk (the pipeline stayed failed, `/healthz` said ok, a savepoint got no answer);
//! - error messages naming the server's data directory; watermark partitions never forgotten.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::reference::{Emission, ModelSpec, WindowKind, run_model};
use crate::server::{
    ADMIN, INGEST, PATIENCE, Server, assert_same_emissions, clicks, count_sum_v1,
    create_and_start_spec, ev, far_future, spec,
};

/// A served pipeline named `name` whose ingest log rolls every `segment_size`, created and
/// started.
fn start_pipeline(server: &Server, name: &str, segment_size: &str) {
    let mut spec = spec();
    spec["name"] = json!(name);
    spec["source"] = json!({"type": "http", "segment_size": segment_size});
    create_and_start_spec(server, &spec);
}

fn savepoint(server: &Server, pipeline: &str, name: &str) -> (u16, String) {
    server.post_json(
        &format!("/v1/pipelines/{pipeline}/savepoints"),
        Some(ADMIN),
        &json!({"name": name}),
    )
}

/// A fork's spec: the original's under another name.
fn fork_spec(name: &str) -> Value {
    crate::savepoints::fork_spec(name, "1.0.0")
}

/// The names a savepoint listing shows.
fn listed_names(listing: &Value) -> Vec<String> {
    (listing.as_array().into_iter().flatten())
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Sends `events` in chunks of 500.
fn ingest_all(server: &Server, pipeline: &str, events: &[crate::reference::Ev]) {
    for chunk in events.chunks(500) {
        server.ingest(pipeline, chunk);
    }
}

#[test]
fn savepoint_listings_racing_creates_and_deletes_never_fail_nor_lose_a_savepoints_input() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    // Small segments: a lapse of the savepoint's pin deletes the log it needs at once.
    start_pipeline(&server, "orig", "8KiB");
    let events = clicks(6_000, 20);
    let (before, after) = events.split_at(1_000);
    ingest_all(&server, "orig", before);
    server.wait_for_events_in("orig", before.len());
    server.expect(
        "the savepoint kept",
        savepoint(&server, "orig", "keep"),
        201,
    );

    // Read tokens list the savepoints without a pause while an admin creates and deletes
    // others and events keep the checkpoints (and the log's truncation) going.
    let stop = Arc::new(AtomicBool::new(false));
    let listers: Vec<_> = (0..4)
        .map(|_| {
            let (client, stop) = (server.client(), stop.clone());
            thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    seen.push(client.get("/v1/pipelines/orig/savepoints", Some(INGEST)));
                }
                seen
            })
        })
        .collect();
    for (round, chunk) in after.chunks(500).enumerate() {
        server.ingest("orig", chunk);
        let name = format!("sp{round}");
        server.expect(
            "a savepoint beside the listings",
            savepoint(&server, "orig", &name),
            201,
        );
        // A fork from a savepoint racing its delete: made whole, or refused as unknown.
        let forking = {
            let client = server.client();
            let path = format!("/v1/pipelines/orig/savepoints/{name}/fork");
            let spec = fork_spec(&format!("fork{round}"));
            thread::spawn(move || client.post_json(&path, Some(ADMIN), &spec))
        };
        server.expect(
            "deleting it while it is listed",
            server.delete(
                &format!("/v1/pipelines/orig/savepoints/{name}"),
                Some(ADMIN),
            ),
            204,
        );
        let (status, body) = forking.join().unwrap();
        assert!(
            status == 201 || status == 404,
            "a fork racing the delete answered {status} {body}{}",
            server.diag()
        );
    }
    stop.store(true, Ordering::Release);
    let mut listings = 0;
    for lister in listers {
        for (status, body) in lister.join().unwrap() {
            listings += 1;
            assert_eq!(status, 200, "a concurrent listing: {body}{}", server.diag());
            let listing: Value = serde_json::from_str(&body).unwrap();
            assert!(
                listed_names(&listing).contains(&"keep".to_owned()),
                "a listing lost the savepoint kept: {listing}"
            );
            assert!(
                listing
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|s| s["damaged"].is_null()),
                "{listing}"
            );
        }
    }
    assert!(listings > 20, "only {listings} listings ran");

    // Nothing deleted came back, and its name is free again.
    let saved = dir.path().join("pipelines/orig/data/savepoints");
    let files: Vec<String> = std::fs::read_dir(&saved)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["keep.redb"], "savepoint files left: {files:?}");
    let listing = server.expect(
        "listing",
        server.get("/v1/pipelines/orig/savepoints", Some(INGEST)),
        200,
    );
    assert_eq!(listed_names(&listing), ["keep"]);
    server.expect(
        "a deleted name again",
        savepoint(&server, "orig", "sp0"),
        201,
    );

    // The log after the savepoint kept survived every truncation: a fork reads all of it.
    server.wait_for_events_in("orig", events.len());
    fork_and_read(&server, "keep", events.len());
}

/// Forks pipeline `orig` from its savepoint `savepoint` into `copy`, starts it, and waits until
/// it has read `events` events.
fn fork_and_read(server: &Server, savepoint: &str, events: usize) {
    server.expect(
        &format!("forking from savepoint {savepoint}"),
        server.post_json(
            &format!("/v1/pipelines/orig/savepoints/{savepoint}/fork"),
            Some(ADMIN),
            &fork_spec("copy"),
        ),
        201,
    );
    server.expect(
        "starting the fork",
        server.post("/v1/pipelines/copy/start", Some(ADMIN), b""),
        200,
    );
    server.wait_for_events_in("copy", events);
}

/// A server in `dir` with pipeline `orig` (8 KiB log segments) started, and the first 1,000
/// of the 3,000 events returned read by it.
fn orig_with_a_thousand_events(dir: &Path) -> (Server, Vec<crate::reference::Ev>) {
    let server = Server::start(dir);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    start_pipeline(&server, "orig", "8KiB");
    let events = clicks(3_000, 20);
    ingest_all(&server, "orig", &events[..1_000]);
    server.wait_for_events_in("orig", 1_000);
    (server, events)
}

#[test]
fn a_damaged_savepoint_is_listed_as_damaged_and_keeps_the_whole_log_until_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, events) = orig_with_a_thousand_events(dir.path());
    server.expect("a good savepoint", savepoint(&server, "orig", "good"), 201);
    server.kill();
    drop(server);
    // What a crash or a stray write may leave: an empty file and one that is not a store.
    let saved = dir.path().join("pipelines/orig/data/savepoints");
    std::fs::write(saved.join("empty.redb"), b"").unwrap();
    std::fs::write(saved.join("broken.redb"), b"not a redb file at all").unwrap();

    let server = Server::start(dir.path());
    let listing = server.expect(
        "listing",
        server.get("/v1/pipelines/orig/savepoints", Some(INGEST)),
        200,
    );
    let damaged: Vec<&str> = (listing.as_array().unwrap().iter())
        .filter(|s| s["damaged"].is_string())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(damaged, ["broken", "empty"], "{listing}");
    assert!(listed_names(&listing).contains(&"good".to_owned()));
    let refused = server.expect_error(
        "forking from a damaged savepoint",
        server.post_json(
            "/v1/pipelines/orig/savepoints/broken/fork",
            Some(ADMIN),
            &fork_spec("from-broken"),
        ),
        409,
    );
    assert!(refused.contains("damaged"), "{refused}");
    let refused = server.expect_error(
        "replaying from a damaged savepoint",
        server.post_json(
            "/v1/pipelines/orig/replay",
            Some(ADMIN),
            &json!({"versions": ["1.0.0", "1.0.0"], "keys": ["u1"], "savepoint": "empty"}),
        ),
        409,
    );
    assert!(refused.contains("damaged"), "{refused}");
    server.expect(
        "another savepoint",
        savepoint(&server, "orig", "other"),
        201,
    );

    // What cannot be read keeps everything: the log's first segment stays through checkpoints.
    let first_segment = dir.path().join("pipelines/orig/ingest.jsonl");
    ingest_all(&server, "orig", &events[1_000..2_000]);
    server.wait_for_checkpoint_of("orig", 2_000);
    thread::sleep(Duration::from_millis(600)); // a few truncation ticks
    assert!(
        first_segment.exists(),
        "a damaged savepoint's log was truncated"
    );
    for name in ["broken", "empty"] {
        server.expect(
            "deleting a damaged savepoint",
            server.delete(
                &format!("/v1/pipelines/orig/savepoints/{name}"),
                Some(ADMIN),
            ),
            204,
        );
    }
    ingest_all(&server, "orig", &events[2_000..]);
    server.wait_for("the log before the good savepoint to go", PATIENCE, || {
        if first_segment.exists() {
            Err("the first segment is still there".into())
        } else {
            Ok(())
        }
    });
    server.expect(
        "forking from the good savepoint",
        server.post_json(
            "/v1/pipelines/orig/savepoints/good/fork",
            Some(ADMIN),
            &fork_spec("from-good"),
        ),
        201,
    );
}

#[test]
fn a_savepoint_listing_that_fails_keeps_the_whole_log_until_one_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, events) = orig_with_a_thousand_events(dir.path());
    server.kill();
    drop(server);
    // The savepoints' directory made unlistable: a file where it should be (as root, which
    // the tests may run as, permissions would not stop the listing).
    let saved = dir.path().join("pipelines/orig/data/savepoints");
    let _ = std::fs::remove_dir_all(&saved);
    std::fs::write(&saved, b"not a directory").unwrap();

    let server = Server::start(dir.path());
    let (status, _) = server.get("/v1/pipelines/orig/savepoints", Some(INGEST));
    assert!(
        status >= 500,
        "a listing that cannot be made answered {status}"
    );
    let first_segment = dir.path().join("pipelines/orig/ingest.jsonl");
    ingest_all(&server, "orig", &events[1_000..2_000]);
    server.wait_for_checkpoint_of("orig", 2_000);
    thread::sleep(Duration::from_millis(600)); // a few truncation ticks
    assert!(
        first_segment.exists(),
        "the log was truncated while the savepoints could not be listed"
    );

    // Listable again (and empty): the next truncation reads them again and the log goes.
    std::fs::remove_file(&saved).unwrap();
    ingest_all(&server, "orig", &events[2_000..]);
    server.wait_for("the log to be truncated once listed", PATIENCE, || {
        if first_segment.exists() {
            Err("the first segment is still there".into())
        } else {
            Ok(())
        }
    });
}

#[test]
fn a_stopped_pipelines_savepoint_and_its_start_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    start_pipeline(&server, "orig", "8KiB");
    let events = clicks(1_000, 10);
    ingest_all(&server, "orig", &events);
    server.wait_for_checkpoint_of("orig", events.len());
    // The savepoint of a stopped pipeline copies its store while a start opens it: both at
    // once, released together, a few rounds.
    for round in 0..5 {
        server.expect(
            "stopping",
            server.post("/v1/pipelines/orig/stop", Some(ADMIN), b""),
            200,
        );
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let saver = {
            let (client, barrier) = (server.client(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                client.post_json(
                    "/v1/pipelines/orig/savepoints",
                    Some(ADMIN),
                    &json!({"name": format!("s{round}")}),
                )
            })
        };
        barrier.wait();
        let started = server.post("/v1/pipelines/orig/start", Some(ADMIN), b"");
        let saved = saver.join().unwrap();
        assert_eq!(
            started.0, 200,
            "round {round}: the start answered {started:?}"
        );
        assert_eq!(
            saved.0, 201,
            "round {round}: the savepoint answered {saved:?}"
        );
    }
    let listing = server.expect(
        "the savepoints",
        server.get("/v1/pipelines/orig/savepoints", Some(ADMIN)),
        200,
    );
    assert_eq!(listed_names(&listing), ["s0", "s1", "s2", "s3", "s4"]);
    assert!(
        (listing.as_array().unwrap().iter()).all(|s| s["damaged"].is_null()),
        "{listing}"
    );
    // Each is whole: a fork from the last reads on from the same input.
    fork_and_read(&server, "s4", events.len());
}

/// Opens a request that announces a body of `length` bytes and then sends one byte a second
/// until the server answers or `stop` is set; returns the status line of the answer (empty if
/// the connection closed without one) and how long it took.
fn trickle(server: &Server, path: &str, token: &str, length: usize) -> thread::JoinHandle<String> {
    let address = server.url("").trim_start_matches("http://").to_owned();
    let path = path.to_owned();
    let token = token.to_owned();
    thread::spawn(move || {
        let mut stream = TcpStream::connect(&address).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/x-ndjson\r\nContent-Length: {length}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let mut answer = Vec::new();
        for _ in 0..60 {
            let mut buffer = [0u8; 512];
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buffer[..n]);
                    break;
                }
                Err(_) => {}
            }
            if stream.write_all(b" ").is_err() {
                break;
            }
        }
        let text = String::from_utf8_lossy(&answer);
        text.lines().next().unwrap_or_default().to_owned()
    })
}

#[test]
fn slow_request_bodies_cannot_hold_the_budget_from_other_callers() {
    let dir = tempfile::tempdir().unwrap();
    // A budget of four full bodies; a body must keep up with 64 KiB/s after 3 s.
    let server = Server::start_with(
        dir.path(),
        &[
            "--max-inflight",
            "16777216",
            "--max-upload",
            "4194304",
            "--header-timeout",
            "3s",
        ],
    );
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    start_pipeline(&server, "flooded", "1MiB");
    start_pipeline(&server, "other", "1MiB");
    // Four requests with one ingest token, each announcing a full body and sending a byte a
    // second: once their handlers read them, they announce the whole budget.
    let slow: Vec<_> = (0..4)
        .map(|_| trickle(&server, "/v1/pipelines/flooded/events", INGEST, 4 << 20))
        .collect();
    server.wait_for("the four slow bodies to be read", PATIENCE, || {
        let reading = metric(&metrics(&server), "weir_request_bodies_in_flight");
        if reading >= 4.0 {
            Ok(())
        } else {
            Err(format!("{reading} bodies being read"))
        }
    });
    // The same pipeline, another pipeline with the same token, and an admin's create go on.
    server.ingest("flooded", &clicks(50, 5));
    server.ingest("other", &clicks(50, 5));
    let mut created = spec();
    created["name"] = json!("created-meanwhile");
    server.expect(
        "creating while slow bodies trickle in",
        server.post_json("/v1/pipelines", Some(ADMIN), &created),
        201,
    );
    let began = Instant::now();
    for answer in slow {
        let status = answer.join().unwrap();
        assert!(
            status.starts_with("HTTP/1.1 408"),
            "a body trickling at a byte a second was answered {status:?}{}",
            server.diag()
        );
    }
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "the slow bodies were cut off only after {:?}",
        began.elapsed()
    );
    let metrics = metrics(&server);
    assert!(
        metric(
            &metrics,
            "weir_request_bodies_refused_total{budget=\"too_slow\"}"
        ) >= 4.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "weir_request_bodies_in_flight"),
        0.0,
        "{metrics}"
    );
}

fn metrics(server: &Server) -> String {
    let (status, text) = server.get("/metrics", Some(ADMIN));
    assert_eq!(status, 200, "{text}");
    text
}

/// The value of the series named exactly `series` (with its labels), 0 when it is absent.
fn metric(metrics: &str, series: &str) -> f64 {
    (metrics.lines())
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

#[test]
fn deleting_a_pipeline_during_its_replay_stops_the_replay_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    // About a third of a millisecond per event: this version's replay takes many seconds.
    server.upload_ok(
        "count-sum",
        "9.0.0",
        &crate::support::guest("busy-per-event"),
    );
    start_pipeline(&server, "doomed", "1MiB");
    start_pipeline(&server, "kept", "1MiB");
    let events = clicks(20_000, 20);
    ingest_all(&server, "doomed", &events);
    ingest_all(&server, "kept", &events[..500]);
    server.wait_for_events_in("doomed", events.len());
    let replaying = {
        let client = server.client();
        thread::spawn(move || {
            let started = Instant::now();
            let answer = client.post_json(
                "/v1/pipelines/doomed/replay",
                Some(ADMIN),
                &json!({"versions": ["9.0.0", "1.0.0"], "sample": 3}),
            );
            (answer, started.elapsed())
        })
    };
    let pipelines = dir.path().join("pipelines");
    // Sandboxes beside the pipelines, or inside one (where an earlier Weir made them).
    let sandboxes = |dir: &Path| -> Vec<String> {
        let names = |dir: &Path| -> Vec<PathBuf> {
            files_in(dir).into_iter().map(|n| dir.join(n)).collect()
        };
        (names(dir).into_iter().chain(names(&dir.join("doomed"))))
            .filter(|path| path.to_string_lossy().contains("replay-"))
            .map(|path| path.display().to_string())
            .collect()
    };
    server.wait_for("the replay's sandbox", PATIENCE, || {
        match sandboxes(&pipelines).as_slice() {
            [] => Err("none yet".into()),
            _ => Ok(()),
        }
    });
    thread::sleep(Duration::from_millis(300)); // well into the slow version
    server.expect(
        "deleting the pipeline being replayed",
        server.delete("/v1/pipelines/doomed", Some(ADMIN)),
        204,
    );
    let ((status, body), took) = replaying.join().unwrap();
    assert_eq!(status, 409, "the replay answered {body}{}", server.diag());
    assert!(body.contains("deleted"), "{body}");
    assert!(
        took < Duration::from_secs(20),
        "the replay went on for {took:?}"
    );
    // The replay turn is free again at once: another pipeline replays.
    server.expect(
        "replaying another pipeline",
        server.post_json(
            "/v1/pipelines/kept/replay",
            Some(ADMIN),
            &json!({"versions": ["1.0.0", "1.0.0"], "sample": 2}),
        ),
        200,
    );
    server.wait_for("the sandbox to be removed", PATIENCE, || {
        match sandboxes(&pipelines).as_slice() {
            [] => Ok(()),
            left => Err(format!("{left:?}")),
        }
    });
    assert!(
        !pipelines.join("doomed").exists(),
        "the deleted pipeline's directory came back"
    );

    // After a restart, no damaged pipeline holds the name, which a new pipeline takes.
    server.kill();
    drop(server);
    let server = Server::start(dir.path());
    let listed = server.expect("listing", server.get("/v1/pipelines", Some(ADMIN)), 200);
    let names: Vec<&str> = (listed.as_array().unwrap().iter())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kept"], "{listed}");
    start_pipeline(&server, "doomed", "1MiB");
}

#[test]
fn an_answer_that_takes_longer_than_the_idle_timeout_still_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--idle-timeout", "1s"]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut slow = spec();
    slow["checkpoint_interval"] = json!("4s");
    create_and_start_spec(&server, &slow);
    server.ingest("clicks", &clicks(100, 5));
    // The first savepoint comes with a checkpoint; the second waits about 4 s for the next,
    // four times the idle timeout, with nothing read or written meanwhile.
    server.expect("a savepoint", savepoint(&server, "clicks", "first"), 201);
    let started = Instant::now();
    server.expect(
        "a savepoint that waits for the next checkpoint",
        savepoint(&server, "clicks", "second"),
        201,
    );
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "the answer came after {:?}: the test did not wait past the idle timeout",
        started.elapsed()
    );
}

/// Sends `GET path` with `Last-Event-ID: id` on a raw connection and never reads the answer.
fn unread_stream(server: &Server, path: &str, token: &str, id: &str) -> TcpStream {
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
         Accept: text/event-stream\r\nLast-Event-ID: {id}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

#[test]
fn resumed_result_streams_that_do_not_read_hold_back_no_other_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    start_pipeline(&server, "busy", "16MiB");
    start_pipeline(&server, "quiet", "1MiB");
    // Tens of thousands of results: far more than a stream's buffers hold.
    let mut events = clicks(80_000, 100);
    events.push(far_future(&events));
    ingest_all(&server, "busy", &events);
    let mut quiet = clicks(200, 5);
    quiet.push(far_future(&quiet));
    server.ingest("quiet", &quiet);
    server.expect(
        "stopping (results are flushed)",
        server.post("/v1/pipelines/busy/stop", Some(ADMIN), b""),
        200,
    );
    let results = dir.path().join("pipelines/busy/out/results.jsonl");
    let size = std::fs::metadata(&results).unwrap().len();
    assert!(size > 4 << 20, "only {size} bytes of results");

    // One read token opens 70 resumed streams of the whole file and reads none of them past
    // the first bytes of the answer (so each is being answered before the next step).
    let unread: Vec<TcpStream> = (0..70)
        .map(|_| {
            let mut stream = unread_stream(&server, "/v1/pipelines/busy/results", INGEST, "0");
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).unwrap();
            assert_eq!(&head, b"HTTP/1.1 200", "a resumed stream");
            stream
        })
        .collect();
    let text = std::fs::read_to_string(dir.path().join("pipelines/quiet/out/results.jsonl"))
        .unwrap_or_default();
    let first_end = text.find('\n').expect("a result of the quiet pipeline") + 1;
    let stream = server.subscribe_after(
        "/v1/pipelines/quiet/results",
        ADMIN,
        Some(&first_end.to_string()),
    );
    let expected = text.lines().count() - 1;
    server.wait_for("the resumed stream's records", PATIENCE, || {
        let got = stream.lines().len();
        if got >= expected {
            Ok(())
        } else {
            Err(format!("{got} of {expected}"))
        }
    });
    assert_eq!(stream.lines()[0], text.lines().nth(1).unwrap());
    drop(unread);

    // An id inside a record would send a torn one: refused.
    let refused = server.expect_error(
        "resuming inside a record",
        server.get_with(
            "/v1/pipelines/quiet/results",
            ADMIN,
            &[("Last-Event-ID", &(first_end - 5).to_string())],
        ),
        400,
    );
    assert!(refused.contains("Last-Event-ID"), "{refused}");
}

/// Sends a request the server is expected to die during (a crash point): whatever answer.
fn send_and_die(server: &mut Server, method: &str, path: &str, body: &[u8], content_type: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let url = server.url(path);
    let bearer = format!("Bearer {ADMIN}");
    let answer = match method {
        "POST" => (agent.post(&url))
            .header("Authorization", &bearer)
            .header("Content-Type", content_type)
            .send(body),
        "DELETE" => agent.delete(&url).header("Authorization", &bearer).call(),
        other => panic!("{other}"),
    };
    assert!(
        answer.is_err(),
        "the server answered instead of dying: {answer:?}"
    );
    let exit = server.wait_exit(Duration::from_secs(30));
    assert!(exit.is_some(), "the server did not die at its crash point");
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_crash_halfway_through_a_fork_an_upload_or_a_savepoint_leaves_it_done_or_absent() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "3.0.0", &count_sum_v1());
    start_pipeline(&server, "orig", "8KiB");
    ingest_all(&server, "orig", &clicks(1_000, 10));
    server.wait_for_events_in("orig", 1_000);
    server.expect("a savepoint", savepoint(&server, "orig", "mid"), 201);
    server.kill();
    drop(server);

    let crash = |point: &str, method: &str, path: &str, body: &[u8], content_type: &str| {
        let mut server = Server::start_env(data, &[], &[("WEIR_TEST_CRASH_AT", point)]);
        send_and_die(&mut server, method, path, body, content_type);
    };
    let fork = fork_spec("copy").to_string();
    crash(
        "pipeline-seeded",
        "POST",
        "/v1/pipelines/orig/savepoints/mid/fork",
        fork.as_bytes(),
        "application/json",
    );
    let v2 = std::fs::read(crate::server::count_sum_v2()).unwrap();
    let leftovers = files_in(&data.join("pipelines"));
    assert!(
        leftovers.iter().any(|n| n.starts_with(".creating-")),
        "the fork died before its pipeline was in place: {leftovers:?}"
    );
    crash(
        "upload-component-written",
        "POST",
        "/v1/operators/count-sum/2.0.0",
        &v2,
        "application/wasm",
    );
    crash(
        "savepoint-copied",
        "POST",
        "/v1/pipelines/orig/savepoints",
        br#"{"name": "half"}"#,
        "application/json",
    );
    crash(
        "delete-tombstone-written",
        "DELETE",
        "/v1/operators/count-sum/3.0.0",
        b"",
        "application/json",
    );
    let server = Server::start(data);
    // The delete is not done: the version is there (its tombstone names its own bytes), and
    // done again it leaves the version deleted for good.
    server.expect(
        "the half-deleted version",
        server.get("/v1/operators/count-sum/3.0.0", Some(ADMIN)),
        200,
    );
    server.expect(
        "deleting again",
        server.delete("/v1/operators/count-sum/3.0.0", Some(ADMIN)),
        204,
    );
    server.expect_error(
        "the deleted version with other bytes",
        server.upload("count-sum", "3.0.0", &v2, Some(ADMIN)),
        409,
    );
    // The fork is absent, whole: no pipeline, no half-made directory, the name free.
    server.expect_error(
        "the half-made fork",
        server.get("/v1/pipelines/copy", Some(ADMIN)),
        404,
    );
    assert_eq!(files_in(&data.join("pipelines")), ["orig"]);
    // The upload is absent: no version, no component nor half-written file left.
    server.expect_error(
        "the half-made upload",
        server.get("/v1/operators/count-sum/2.0.0", Some(ADMIN)),
        404,
    );
    let blobs = files_in(&data.join("operators/blobs"));
    assert_eq!(blobs.len(), 1, "component files: {blobs:?}");
    // The savepoint is absent, with no half-copied file.
    let saved = files_in(&data.join("pipelines/orig/data/savepoints"));
    assert_eq!(saved, ["mid.redb"], "savepoint files: {saved:?}");
    // Each can be done again, whole.
    server.expect(
        "forking again",
        server.post_json(
            "/v1/pipelines/orig/savepoints/mid/fork",
            Some(ADMIN),
            &fork_spec("copy"),
        ),
        201,
    );
    server.upload_ok("count-sum", "2.0.0", &crate::server::count_sum_v2());
    server.expect(
        "the savepoint again",
        savepoint(&server, "orig", "half"),
        201,
    );
    server.expect(
        "starting the fork",
        server.post("/v1/pipelines/copy/start", Some(ADMIN), b""),
        200,
    );
    server.wait_for_events_in("copy", 1_000);
}

#[test]
fn what_a_crash_leaves_of_an_upload_a_pipeline_delete_or_a_replay_is_removed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let crash = |point: &str, method: &str, path: &str, body: &[u8], content_type: &str| {
        let mut server = Server::start_env(data, &[], &[("WEIR_TEST_CRASH_AT", point)]);
        send_and_die(&mut server, method, path, body, content_type);
    };
    let v1 = std::fs::read(count_sum_v1()).unwrap();
    // An upload dying with its component written but not yet in place: a `.partial`.
    crash(
        "atomic-write-synced.wasm",
        "POST",
        "/v1/operators/count-sum/1.0.0",
        &v1,
        "application/wasm",
    );
    let blobs = files_in(&data.join("operators/blobs"));
    assert!(
        blobs.iter().any(|n| n.ends_with(".partial")),
        "the upload died before its component was half-made: {blobs:?}"
    );
    let mut server = Server::start(data);
    assert_eq!(
        files_in(&data.join("operators/blobs")),
        Vec::<String>::new()
    );
    server.expect_error(
        "the half-made upload",
        server.get("/v1/operators/count-sum/1.0.0", Some(ADMIN)),
        404,
    );
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("other", "1.0.0", &crate::server::count_sum_v2());
    start_pipeline(&server, "doomed", "8KiB");
    ingest_all(&server, "doomed", &clicks(500, 10));
    server.wait_for_events_in("doomed", 500);
    server.kill();
    drop(server);

    // A pipeline delete dying with the pipeline moved aside, and a replay with its sandbox made.
    crash(
        "pipeline-in-trash",
        "DELETE",
        "/v1/pipelines/doomed",
        b"",
        "application/json",
    );
    let trash = files_in(&data.join("pipelines"));
    assert!(
        trash.iter().any(|n| n.starts_with(".deleted-")),
        "{trash:?}"
    );
    // The delete is done at the restart; the crash server above had nothing to replay, so the
    // pipeline comes back for the replay's crash.
    let server = Server::start(data);
    assert_eq!(files_in(&data.join("pipelines")), Vec::<String>::new());
    server.expect_error(
        "the half-deleted pipeline",
        server.get("/v1/pipelines/doomed", Some(ADMIN)),
        404,
    );
    start_pipeline(&server, "doomed", "8KiB");
    ingest_all(&server, "doomed", &clicks(500, 10));
    server.wait_for_events_in("doomed", 500);
    drop(server);
    crash(
        "sandbox-made",
        "POST",
        "/v1/pipelines/doomed/replay",
        json!({"versions": ["1.0.0", "1.0.0"], "keys": ["u1"]})
            .to_string()
            .as_bytes(),
        "application/json",
    );
    let sandboxes = files_in(&data.join("pipelines"));
    assert!(
        sandboxes.iter().any(|n| n.starts_with(".replay-")),
        "{sandboxes:?}"
    );

    // A version record damaged on disk: every component stays (it may name any of them).
    std::fs::write(data.join("operators/other/1.0.0.json"), b"{").unwrap();
    let server = Server::start(data);
    assert_eq!(files_in(&data.join("pipelines")), ["doomed"]);
    assert_eq!(
        files_in(&data.join("operators/blobs")).len(),
        2,
        "a component was removed while a record that may name it could not be read"
    );
    let listing = server.expect(
        "the pipelines",
        server.get("/v1/pipelines", Some(ADMIN)),
        200,
    );
    assert_eq!(listing.as_array().map(Vec::len), Some(1), "{listing}");
    server.expect(
        "replaying after the crash",
        server.post_json(
            "/v1/pipelines/doomed/replay",
            Some(ADMIN),
            &json!({"versions": ["1.0.0", "1.0.0"], "keys": ["u1"]}),
        ),
        200,
    );
}

/// The live model of the disk test's pipeline: tumbling 1 s windows behind a watermark
/// `bound` ms behind the latest event.
fn live_model_with_bound(events: &[crate::reference::Ev], bound: i64) -> Vec<Emission> {
    let model = ModelSpec {
        window: WindowKind::Tumbling { size: 1000 },
        bound,
        lateness: 0,
    };
    let watermark = events.iter().map(|e| e.ts).max().unwrap() - bound;
    (run_model(&model, events).emissions.into_iter())
        .filter(|e| e.end <= watermark)
        .collect()
}

fn health(server: &Server) -> (u16, Value) {
    let (status, body) = server.get("/healthz", Some(ADMIN));
    (status, server.json("healthz", &body))
}

#[test]
fn a_pipeline_failed_by_a_full_disk_shows_in_healthz_and_recovers_by_itself() {
    let Some(disk) = crate::hostile_server::SmallDisk::mount(64) else {
        eprintln!("cannot mount a tmpfs here (not root?): skipped");
        return;
    };
    let data = disk.path().join("data");
    let server = Server::start(&data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    // A watermark far behind: no window fires until the last event, which fires them all.
    let bound = 1_000_000_000;
    let mut spec = spec();
    spec["watermark"] = json!({"bound": bound});
    spec["checkpoint_interval"] = json!("200ms");
    create_and_start_spec(&server, &spec);
    let mut events = clicks(2_000, 200);
    ingest_all(&server, "clicks", &events);
    server.wait_for_checkpoint_of("clicks", events.len());
    assert!(server.results("clicks").is_empty());

    // Leave 16 KiB: the last event fits in the log, the hundreds of results it fires do not.
    let filler = disk.fill();
    let length = std::fs::metadata(&filler).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(length - (16 << 10))
        .unwrap();
    let last = ev("zz-final", events.last().unwrap().ts + 2 * bound, 1);
    events.push(last.clone());
    server.ingest("clicks", &[last]);
    // A savepoint asked for as the pipeline meets the full disk: its barrier may be on its way
    // when the collector fails, and it must still be answered (it was dropped before, with no
    // answer in 6 of 7 tries).
    let racing = {
        let client = server.client();
        thread::spawn(move || {
            let asked = Instant::now();
            let answer = client.post_json(
                "/v1/pipelines/clicks/savepoints",
                Some(ADMIN),
                &json!({"name": "racing"}),
            );
            (answer, asked.elapsed())
        })
    };
    let status = server.wait_for("the pipeline to fail on the full disk", PATIENCE, || {
        let status = server.status("clicks");
        if status["disk_full"] == true {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    });
    assert!(status["error"].as_str().is_some(), "{status}");
    let ((code, body), took) = racing.join().unwrap();
    assert!(
        matches!(code, 201 | 507) && took < Duration::from_secs(20),
        "the savepoint racing the full disk: {code} {body} after {took:?}"
    );
    // Degraded while it fails, and while it is started again and fails again.
    let healthz = server.wait_for("healthz to say degraded", PATIENCE, || {
        match health(&server) {
            (503, body) => Ok(body),
            (code, body) => Err(format!("{code} {body}")),
        }
    });
    assert_eq!(healthz["failed"], json!(["clicks"]), "{healthz}");
    assert_eq!(healthz["status"], "degraded");

    // A savepoint is refused at once as the disk is full (the docs promise 507).
    let started = Instant::now();
    let refused = server.expect_error(
        "a savepoint on the full disk",
        savepoint(&server, "clicks", "on-full-disk"),
        507,
    );
    assert!(refused.contains("full"), "{refused}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // Room again: the pipeline starts by itself, and its results are exactly the model's.
    std::fs::remove_file(filler).unwrap();
    let expected = live_model_with_bound(&events, bound);
    let results = server.wait_for_results("clicks", &expected);
    assert_same_emissions(&server, &results, &expected);
    server.wait_for("healthz to be ok again", PATIENCE, || {
        match health(&server) {
            (200, _) => Ok(()),
            (code, body) => Err(format!("{code} {body}")),
        }
    });
    let status = server.status("clicks");
    assert_eq!(status["state"], "running", "{status}");
    let restarts = metric(
        &metrics(&server),
        "weir_pipeline_restarts_total{pipeline=\"clicks\"}",
    );
    assert!(restarts >= 1.0, "{restarts} restarts counted");
}

#[test]
fn error_messages_never_show_where_the_server_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    let server = Server::start(&data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec()),
        201,
    );
    let shown = data.display().to_string();
    let answers = [
        // A stopped pipeline that never ran has no checkpoint to save.
        (savepoint(&server, "clicks", "none-yet"), 409),
        (
            server.delete("/v1/pipelines/clicks/savepoints/unknown", Some(ADMIN)),
            404,
        ),
        (
            server.post_json(
                "/v1/pipelines/clicks/savepoints/unknown/fork",
                Some(ADMIN),
                &fork_spec("other"),
            ),
            404,
        ),
    ];
    for (answer, status) in answers {
        let message = server.expect_error("a refused request", answer, status);
        assert!(!message.contains(&shown), "{message:?} names {shown}");
    }
}

#[test]
fn watermark_partitions_quiet_for_ten_idle_timeouts_are_forgotten_and_new_ones_taken() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = spec();
    spec["watermark"] = json!({"bound": 0, "idle_timeout": "100ms"});
    create_and_start_spec(&server, &spec);
    // The table's 1,024 partitions, each named once.
    for n in 0..1_024 {
        let event = [ev("user-1", crate::server::BASE_TS + n, 1)];
        let (status, body, _) = server.send_partition("clicks", &event, Some(&format!("p{n}")));
        assert_eq!(status, 202, "{body}");
    }
    server.wait_for_events_in("clicks", 1_024);
    // More than ten idle timeouts later, on the ingest clock: those names are forgotten.
    thread::sleep(Duration::from_millis(1_500));
    let steady = [ev("user-2", crate::server::BASE_TS + 2_000, 1)];
    let (status, body, _) = server.send_partition("clicks", &steady, Some("steady"));
    assert_eq!(status, 202, "{body}");
    let newcomer = [ev("user-3", crate::server::BASE_TS + 2_001, 1)];
    let (status, body, _) = server.send_partition("clicks", &newcomer, Some("newcomer"));
    assert_eq!(status, 202, "{body}");
    let status = server.wait_for_events_in("clicks", 1_026);
    assert_eq!(
        status["dead_letters"], 0,
        "a new partition was refused: {status}"
    );
}
