//! Live pipelines (issue 12): a pipeline whose input pauses still closes its windows with
//! `[watermark] advance_when_idle`, and the advance is part of the input, so a server killed and
//! restarted replays it to the same results; every pipeline metric is scraped from `/metrics`
//! (and from `weir run --metrics-listen`) and checked for its value.

use std::thread;
use std::time::Duration;

use serde_json::json;

use crate::reference::run_model;
use crate::server::{
    ADMIN, MODEL, PATIENCE, Server, assert_same_emissions, assert_unique_ids, clicks, count_sum_v1,
    create_and_start_spec, live_model, spec,
};
use crate::support::emissions;

/// Creates and starts pipeline `name`: the serve tests' spec, with `advance_when_idle` if given.
fn create_and_start(server: &Server, name: &str, advance_when_idle: Option<&str>) {
    let mut spec = spec();
    spec["name"] = json!(name);
    if let Some(idle) = advance_when_idle {
        spec["watermark"]["advance_when_idle"] = json!(idle);
    }
    create_and_start_spec(server, &spec);
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

/// The value of the sample `name{labels}` in a Prometheus text page, with every label given
/// (and maybe others).
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            let wanted = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (metric == name && wanted).then(|| value.parse().ok())?
        })
}

#[test]
fn every_pipeline_metric_is_scraped_with_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "6.6.6", &crate::server::trap_on_key());
    create_and_start(&server, "watched", None);
    // 300 clicks (some late), three lines that are not events, one event far ahead of the
    // wall clock, and a last one that closes every window.
    let mut events = clicks(300, 5);
    // Two events for windows closed long ago: late.
    let first = events[0].ts;
    events.push(crate::server::ev("user-1", first, 1));
    events.push(crate::server::ev("user-2", first + 1, 1));
    server.ingest("watched", &events);
    let ahead = crate::support::now_ms() + 10 * 86_400_000;
    let bad = format!(
        "not json\n{{\"user\":\"u\"}}\n[1]\n{{\"user\":\"u\",\"ts\":{ahead},\"amount\":1}}\n"
    );
    let (status, body) = server.post_as(
        "/v1/pipelines/watched/events",
        Some(crate::server::INGEST),
        Some("application/x-ndjson"),
        bad.as_bytes(),
        false,
    );
    assert_eq!(status, 202, "{body}");
    let end = crate::server::far_future(&events);
    server.ingest("watched", std::slice::from_ref(&end));
    let mut all = events.clone();
    all.push(end.clone());
    let status = server.wait_for_events_in("watched", all.len());
    let expected = live_model(&all);
    let model = run_model(&MODEL, &all);
    server.wait_for_results("watched", &expected);
    // A pipeline whose operator traps on `boom` keys.
    let mut trapping = spec();
    trapping["name"] = json!("trapping");
    trapping["operators"][0]["version"] = json!("6.6.6");
    create_and_start_spec(&server, &trapping);
    let booms: Vec<_> = (0..4)
        .map(|i| crate::server::ev("boom-1", crate::server::BASE_TS + i, 1))
        .collect();
    server.ingest("trapping", &booms);
    server.wait_for_events_in("trapping", booms.len());
    // The same count-sum crossing two fields: its windows are carried, but come without the
    // router's crossings (an event's one number), which only a single field has.
    let mut wide = spec();
    wide["name"] = json!("wide");
    wide["operators"][0]["fields"] = json!(["amount", "user"]);
    create_and_start_spec(&server, &wide);
    server.ingest("wide", &all);
    server.wait_for_results("wide", &expected);

    let page = server.wait_for("the checkpoint and trap figures", PATIENCE, || {
        let (code, page) = server.get("/metrics", Some(ADMIN));
        let ready = code == 200
            && sample(&page, "weir_checkpoints_total", &[("pipeline", "watched")])
                .is_some_and(|n| n >= 1.0)
            && sample(
                &page,
                "weir_dead_letters_total",
                &[("pipeline", "trapping"), ("cause", "trapped")],
            ) == Some(4.0);
        if ready { Ok(page) } else { Err(page) }
    });
    let get = |name: &str, labels: &[(&str, &str)]| {
        sample(&page, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{page}"))
    };
    let watched = [("pipeline", "watched")];
    let events_in = status["events_in"].as_f64().unwrap();
    assert_eq!(get("weir_events_in_total", &watched), events_in);
    assert_eq!(
        events_in as usize,
        all.len(),
        "the bad lines are not events"
    );
    assert_eq!(
        get("weir_ingested_events_total", &watched),
        (all.len() + 4) as f64
    );
    let late = model.late.len() as f64;
    assert!(late > 0.0, "the clicks have late events");
    assert_eq!(get("weir_late_events_total", &watched), late);
    assert!((get("weir_late_ratio", &watched) - late / events_in).abs() < 1e-9);
    let results = expected.len() as f64;
    assert_eq!(
        get(
            "weir_results_total",
            &[("pipeline", "watched"), ("kind", "result")]
        ),
        results
    );
    let cause = |c: &str| {
        get(
            "weir_dead_letters_total",
            &[("pipeline", "watched"), ("cause", c)],
        )
    };
    assert_eq!((cause("input"), cause("ahead")), (3.0, 1.0));
    assert_eq!(get("weir_watermark_ms", &watched), end.ts as f64);
    let lag = get("weir_watermark_lag_ms", &watched);
    let now = crate::support::now_ms() as f64;
    assert!((now - end.ts as f64 - lag).abs() < 60_000.0, "lag {lag}");
    assert_eq!(
        get("weir_input_lag_bytes", &watched),
        0.0,
        "the pipeline caught up"
    );
    assert!(get("weir_checkpoint_duration_seconds_count", &watched) >= 1.0);
    assert!(get("weir_checkpoint_bytes", &watched) > 0.0);
    assert!(get("weir_state_bytes", &watched) > 0.0);
    assert!(get("weir_state_keys", &watched) >= 0.0);
    assert!(get("weir_backpressure_milliseconds_total", &watched) >= 0.0);
    let v1 = [("pipeline", "watched"), ("version", "1.0.0")];
    let calls = get("weir_operator_calls_total", &v1);
    assert!(calls > 0.0);
    // One call in 16 is timed.
    let timed = get("weir_operator_call_duration_seconds_count", &v1);
    assert!(
        timed >= 1.0 && timed <= calls / 16.0 + 1.0,
        "{timed} of {calls} calls timed"
    );
    assert_eq!(get("weir_operator_traps_total", &v1), 0.0);
    // The count-sum builds contract 0.3: its windows are carried many to a call, and with one
    // number per event (`amount`), they come with the router's crossings.
    let carried = get("weir_operator_windows_carried_total", &v1);
    assert!(carried > 0.0, "windows carried: {carried}");
    let crossed = get("weir_operator_windows_crossed_total", &v1);
    assert!(
        crossed > 0.0 && crossed <= carried,
        "windows crossed: {crossed} of {carried}"
    );
    let version = crate::server::version_entry(&server.status("watched"), "1.0.0");
    assert_eq!(version["crossed_windows"], crossed as u64, "{version}");
    let wide = [("pipeline", "wide"), ("version", "1.0.0")];
    assert!(get("weir_operator_windows_carried_total", &wide) > 0.0);
    assert_eq!(get("weir_operator_windows_crossed_total", &wide), 0.0);
    let traps = get(
        "weir_operator_traps_total",
        &[("pipeline", "trapping"), ("version", "6.6.6")],
    );
    assert!(
        traps >= 4.0,
        "every boom event trapped at least once: {traps}"
    );
}

#[test]
fn weir_run_serves_its_metrics_while_it_runs() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let spec = piped_spec(dir.path());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            "--metrics-listen",
            "127.0.0.1:0",
            "--batch-size",
            "1",
        ])
        .arg(spec)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("metrics on http://") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "no metrics address printed"
        );
    }
    let url = line.split("metrics on ").nth(1).unwrap().trim().to_owned();
    let mut stdin = child.stdin.take().unwrap();
    for ts in [1, 2, 15] {
        writeln!(stdin, "{{\"k\":\"a\",\"ts\":{ts},\"amount\":1}}").unwrap();
    }
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let page = ureq::get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        let labels = [("pipeline", "piped"), ("kind", "result")];
        if sample(&page, "weir_results_total", &labels) == Some(1.0) {
            assert_eq!(
                sample(&page, "weir_events_in_total", &[("pipeline", "piped")]),
                Some(3.0)
            );
            assert_eq!(
                sample(&page, "weir_watermark_ms", &[("pipeline", "piped")]),
                Some(15.0)
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no result counted:\n{page}"
        );
        thread::sleep(Duration::from_millis(100));
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn an_idle_partition_stops_holding_the_watermark_back() {
    use crate::server::{BASE_TS, ev};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    for (name, idle) in [("idle-part", Some("1s")), ("still-part", None)] {
        let mut spec = spec();
        spec["name"] = json!(name);
        if let Some(idle) = idle {
            spec["watermark"]["idle_timeout"] = json!(idle);
        }
        server.expect(
            "creating",
            server.post_json("/v1/pipelines", Some(ADMIN), &spec),
            201,
        );
        let start = format!("/v1/pipelines/{name}/start");
        server.expect("starting", server.post(&start, Some(ADMIN), b""), 200);
    }
    let send = |events: &[crate::reference::Ev], partition: &str| {
        for name in ["idle-part", "still-part"] {
            let (status, body, _) = server.send_partition(name, events, Some(partition));
            assert_eq!(status, 202, "{body}");
        }
    };
    // Partitions a and b take turns for 5 s of event time (in time order: nothing is late),
    // then b goes quiet while a goes on for 5 s more, over 3 s of wall clock.
    let all: Vec<_> = (0..200)
        .map(|i| ev(&format!("user-{}", i % 5), BASE_TS + i * 50, 1))
        .collect();
    let (first, then) = all.split_at(100);
    for (i, chunk) in first.chunks(10).enumerate() {
        send(chunk, if i % 2 == 0 { "a" } else { "b" });
    }
    let b_max = first
        .chunks(10)
        .skip(1)
        .step_by(2)
        .flatten()
        .map(|e| e.ts)
        .max()
        .unwrap();
    for chunk in then.chunks(10) {
        send(chunk, "a");
        thread::sleep(Duration::from_millis(300));
    }
    // With idle_timeout, b stops holding the watermark back a second after its last batch:
    // every window before a's last event closes.
    let model = run_model(&MODEL, &all).emissions;
    let expected = live_model(&all);
    let results = server.wait_for_results("idle-part", &expected);
    assert_same_emissions(&server, &results, &expected);
    // Without it, b's last event holds the watermark.
    let held: Vec<_> = model.into_iter().filter(|e| e.end <= b_max).collect();
    assert!(held.len() < expected.len());
    assert_eq!(emissions(&server.results("still-part")), held);
    // A partition name is a name.
    let (status, body, _) = server.send_partition("idle-part", &all[..1], Some("../a b"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Weir-Partition"), "{body}");
}

/// The bytes of a served pipeline's ingest log on disk, over all its segments, and how many
/// segments there are. A segment listed but deleted before it is measured (the truncation
/// callers wait for) counts as gone.
pub(crate) fn ingest_log_bytes(data: &std::path::Path, pipeline: &str) -> (u64, usize) {
    let dir = data.join("pipelines").join(pipeline);
    let segments: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("ingest.jsonl"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .collect();
    (segments.iter().sum(), segments.len())
}

#[test]
fn the_ingest_log_stays_bounded_under_steady_load_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = spec();
    spec["name"] = json!("steady");
    spec["source"] = json!({"type": "http", "segment_size": "16KiB"});
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec),
        201,
    );
    server.expect(
        "starting",
        server.post("/v1/pipelines/steady/start", Some(ADMIN), b""),
        200,
    );
    // 6,000 events (about 330 KB of log) in 60 batches, each sent once the pipeline has read
    // the one before: the bound below is on truncation, not on how fast a loaded machine
    // routes (sent every 20 ms regardless, a slow moment let the log grow on its own).
    let events = clicks(6_000, 20);
    let mut largest = 0;
    for (i, chunk) in events.chunks(100).enumerate() {
        server.ingest("steady", chunk);
        server.wait_for_events_in("steady", (i * 100 + chunk.len()).min(events.len()));
        thread::sleep(Duration::from_millis(20));
        largest = largest.max(ingest_log_bytes(dir.path(), "steady").0);
    }
    server.wait_for_events_in("steady", events.len());
    let written = std::fs::read_to_string(dir.path().join("pipelines/steady/out/results.jsonl"))
        .map(|t| t.len())
        .unwrap_or(0);
    assert!(written > 0);
    // Segments behind the last checkpoint go: the log on disk stays within a few segments
    // (16 KiB each, plus the batch that fills one), far below what was sent.
    let (now, count) = server.wait_for("the log to be truncated", PATIENCE, || {
        let (bytes, count) = ingest_log_bytes(dir.path(), "steady");
        if bytes < 64 * 1024 {
            Ok((bytes, count))
        } else {
            Err(format!("{bytes} bytes in {count} segments"))
        }
    });
    assert!(largest < 160 * 1024, "the log grew to {largest} bytes");
    assert!(count >= 1 && now < 64 * 1024);
    let (code, page) = server.get("/metrics", Some(ADMIN));
    assert_eq!(code, 200);
    let gauge = sample(&page, "weir_ingest_log_bytes", &[("pipeline", "steady")]);
    assert!(gauge.is_some_and(|b| b < 160.0 * 1024.0), "{gauge:?}");
    // A server killed now resumes from its checkpoint in a later segment, losing and
    // repeating nothing.
    server.kill();
    let server = Server::start(dir.path());
    let end = crate::server::far_future(&events);
    server.ingest("steady", std::slice::from_ref(&end));
    let mut all = events.clone();
    all.push(end);
    let expected = live_model(&all);
    let results = server.wait_for_results("steady", &expected);
    assert_same_emissions(&server, &results, &expected);
    assert_unique_ids(&results);
}

#[test]
fn a_live_changelog_and_early_results_follow_the_model() {
    use crate::reference::{ModelSpec, WindowKind};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let model = ModelSpec {
        window: WindowKind::Tumbling { size: 1000 },
        bound: 0,
        lateness: 2000,
    };
    for (name, emit) in [
        ("changelog", json!({"mode": "changelog"})),
        ("early", json!({"mode": "early", "early_every": 4})),
    ] {
        let mut spec = spec();
        spec["name"] = json!(name);
        spec["window"]["allowed_lateness"] = json!(model.lateness);
        spec["emit"] = emit;
        server.expect(
            "creating",
            server.post_json("/v1/pipelines", Some(ADMIN), &spec),
            201,
        );
        let start = format!("/v1/pipelines/{name}/start");
        server.expect("starting", server.post(&start, Some(ADMIN), b""), 200);
    }
    let mut events = clicks(400, 3);
    // Late events within the allowed lateness: updates of windows already emitted.
    let last = events.iter().map(|e| e.ts).max().unwrap();
    for i in 0..6 {
        events.push(crate::server::ev(
            &format!("user-{}", i % 3),
            last - 1_500 - i * 100,
            1,
        ));
    }
    for chunk in events.chunks(50) {
        server.ingest("changelog", chunk);
        server.ingest("early", chunk);
    }
    let watermark = events.iter().map(|e| e.ts).max().unwrap();
    let live: Vec<_> = (run_model(&model, &events).emissions.into_iter())
        .filter(|e| e.end <= watermark)
        .collect();
    assert!(
        live.iter().any(|e| e.kind == "update"),
        "late events update windows"
    );
    let expected = crate::emit::as_changelog(&live);
    let results = server.wait_for_results("changelog", &expected);
    assert_same_emissions(&server, &results, &expected);
    // Early: every fourth event of a window shows its count before it closes; the rest is the
    // model's, versions after the early ones.
    let got = server.wait_for("the early pipeline's results", PATIENCE, || {
        let got = emissions(&server.results("early"));
        let closed = got.iter().filter(|e| e.kind != "early").count();
        if closed >= live.len() {
            Ok(got)
        } else {
            Err(format!("{closed} of {}", live.len()))
        }
    });
    let mut early: std::collections::BTreeMap<(String, i64, i64), Vec<i64>> = Default::default();
    for e in got.iter().filter(|e| e.kind == "early") {
        early
            .entry((e.key.clone(), e.start, e.end))
            .or_default()
            .push(e.count);
    }
    assert!(!early.is_empty());
    for counts in early.values() {
        assert_eq!(
            counts,
            &(1..=counts.len() as i64).map(|k| 4 * k).collect::<Vec<_>>()
        );
    }
    let rest: Vec<_> = (got.iter().filter(|e| e.kind != "early"))
        .map(|e| {
            let before = early
                .get(&(e.key.clone(), e.start, e.end))
                .map_or(0, Vec::len) as u64;
            crate::reference::Emission {
                version: e.version - before,
                ..e.clone()
            }
        })
        .collect();
    assert_eq!(rest, live);
}

#[test]
fn early_results_by_wall_clock_show_each_window_as_its_events_arrive() {
    use crate::server::{BASE_TS, ev, far_future};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = spec();
    spec["name"] = json!("ticking");
    spec["window"]["size"] = json!(60_000);
    spec["emit"] = json!({"mode": "early", "early_interval": "300ms"});
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec),
        201,
    );
    server.expect(
        "starting",
        server.post("/v1/pipelines/ticking/start", Some(ADMIN), b""),
        200,
    );
    // Five batches 700 ms apart, all in one minute window per key: early lines fall between
    // batches, so each early count is a key's count after some whole batch.
    let batches: Vec<Vec<_>> = (0..5)
        .map(|b| {
            (0..20)
                .map(|i| ev(&format!("user-{}", i % 2), BASE_TS + b * 1_000 + i, 1))
                .collect()
        })
        .collect();
    let mut after_batch: Vec<std::collections::BTreeMap<String, i64>> = Vec::new();
    let mut counts = std::collections::BTreeMap::new();
    for batch in &batches {
        server.ingest("ticking", batch);
        for e in batch {
            *counts.entry(e.key.clone()).or_insert(0) += 1;
        }
        after_batch.push(counts.clone());
        thread::sleep(Duration::from_millis(700));
    }
    let all: Vec<_> = batches.concat();
    server.ingest("ticking", &[far_future(&all)]);
    let mut with_end = all.clone();
    with_end.push(far_future(&all));
    let minute = crate::reference::ModelSpec {
        window: crate::reference::WindowKind::Tumbling { size: 60_000 },
        ..MODEL
    };
    let watermark = with_end.iter().map(|e| e.ts).max().unwrap();
    let expected: Vec<_> = (run_model(&minute, &with_end).emissions.into_iter())
        .filter(|e| e.end <= watermark)
        .collect();
    let got = server.wait_for("the final results", PATIENCE, || {
        let got = emissions(&server.results("ticking"));
        let closed = got.iter().filter(|e| e.kind != "early").count();
        if closed >= expected.len() {
            Ok(got)
        } else {
            Err(format!("{got:?}"))
        }
    });
    let early: Vec<_> = got.iter().filter(|e| e.kind == "early").collect();
    for key in ["user-0", "user-1"] {
        let shown: Vec<i64> = early
            .iter()
            .filter(|e| e.key == key)
            .map(|e| e.count)
            .collect();
        assert!(shown.len() >= 2, "{key}: early counts {shown:?}");
        let possible: Vec<i64> = after_batch.iter().map(|c| c[key]).collect();
        assert!(
            shown.iter().all(|c| possible.contains(c)),
            "{key}: {shown:?} not in {possible:?}"
        );
        assert!(
            shown.windows(2).all(|w| w[0] < w[1]),
            "{key}: an unchanged window was shown again"
        );
    }
    let rest: Vec<_> = (got.iter().filter(|e| e.kind != "early"))
        .map(|e| crate::reference::Emission {
            version: e.version
                - early
                    .iter()
                    .filter(|x| x.key == e.key && x.start == e.start)
                    .count() as u64,
            ..e.clone()
        })
        .collect();
    assert_eq!(rest, expected);
}

#[test]
fn a_replay_from_the_log_makes_the_same_idle_advances() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    // No checkpoint for an hour: a restart replays the whole ingest log, advances included.
    let mut spec = spec();
    spec["name"] = json!("replayed");
    spec["watermark"]["advance_when_idle"] = json!("1s");
    spec["checkpoint_interval"] = json!("1h");
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec),
        201,
    );
    let start = "/v1/pipelines/replayed/start";
    server.expect("starting", server.post(start, Some(ADMIN), b""), 200);
    let events = clicks(200, 5);
    server.ingest("replayed", &events);
    let expected = run_model(&MODEL, &events).emissions;
    let results = server.wait_for_results("replayed", &expected);
    assert_same_emissions(&server, &results, &expected);
    // An event for a window the advance closed: late, because of where the advance is.
    let last = events.iter().map(|e| e.ts).max().unwrap();
    server.ingest("replayed", &[crate::server::ev("user-1", last - 300, 1)]);
    let late_one = |server: &Server| {
        let status = server.status("replayed");
        if status["late"] == json!(1) && status["events_in"] == json!(events.len() + 1) {
            Ok(())
        } else {
            Err(status.to_string())
        }
    };
    server.wait_for("the late event", PATIENCE, || late_one(&server));
    let file = dir.path().join("pipelines/replayed/out/results.jsonl");
    let before = std::fs::read_to_string(&file).unwrap();
    server.kill();
    let server = Server::start(dir.path());
    // The replay reads the log from its start, advances included, and rewrites the results:
    // the same bytes, and the same event late (had the advance not been replayed where it
    // was, that event would now be on time, and in a result).
    server.wait_for("the replay's late event", PATIENCE, || late_one(&server));
    server.wait_for("the replay to write the same results", PATIENCE, || {
        let now = std::fs::read_to_string(&file).unwrap_or_default();
        if now == before {
            Ok(())
        } else {
            Err(format!("{} of {} bytes", now.len(), before.len()))
        }
    });
}

/// A spec in `dir` of a pipeline `piped` reading JSON Lines from standard input (`k`, `ts`)
/// into a built-in count-sum over windows of 10 ms: its path.
pub(crate) fn piped_spec(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("stdin.toml");
    std::fs::write(
        &path,
        "name = \"piped\"\n[source]\ntype = \"stdin\"\n[event]\nkey = \"k\"\ntimestamp = \"ts\"\n\
         [window]\ntype = \"tumbling\"\nsize = 10\n\
         [[operators]]\nname = \"count-sum\"\nkind = \"aggregate\"\nnative = \"count-sum\"\n\
         [state]\nbackend = \"memory\"\n[sinks]\nresults = \"out.jsonl\"\n",
    )
    .unwrap();
    path
}
