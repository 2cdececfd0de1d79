//! `weir serve`, the HTTP API of `docs/api.md`, through the real binary: a server per test on
//! its own data directory and a free port, driven with a plain HTTP client. Operators are
//! uploaded to the registry, pipelines read events sent over HTTP, versions are rolled out,
//! shadowed and rolled back under load, and a server killed with SIGKILL resumes its pipelines.
//! Window results are checked against the reference model.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::reference::{Ev, run_model};
use crate::server::*;
use crate::support::component;

#[test]
fn uploads_are_validated_and_versions_are_immutable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    let v1 = std::fs::read(count_sum_v1()).expect("reading v1");

    let version = server.expect(
        "uploading v1",
        server.upload("count-sum", "1.0.0", &v1, Some(ADMIN)),
        201,
    );
    let digest = format!("sha256:{:x}", Sha256::digest(&v1));
    assert_eq!(version["name"], "count-sum", "{version}");
    assert_eq!(version["version"], "1.0.0", "{version}");
    assert_eq!(
        version["digest"],
        json!(digest),
        "the digest is of the bytes sent: {version}"
    );
    assert_eq!(version["size"], json!(v1.len()), "{version}");
    assert_eq!(version["world"], "aggregator", "{version}");
    assert!(
        version["uploaded_at_ms"].is_u64(),
        "uploaded_at_ms: {version}"
    );

    let listed = server.expect(
        "listing operators",
        server.get("/v1/operators", Some(ADMIN)),
        200,
    );
    assert!(
        listed.as_array().is_some_and(|all| all.contains(&version)),
        "the list holds the uploaded version: {listed}"
    );
    let one = server.expect(
        "getting count-sum/1.0.0",
        server.get("/v1/operators/count-sum/1.0.0", Some(ADMIN)),
        200,
    );
    assert_eq!(one, version);

    // Versions are immutable: neither the same bytes again nor others under the same version.
    server.expect_error(
        "uploading v1 again",
        server.upload("count-sum", "1.0.0", &v1, Some(ADMIN)),
        409,
    );
    let other = std::fs::read(component("sliding-average")).expect("reading sliding-average");
    server.expect_error(
        "uploading other bytes as 1.0.0",
        server.upload("count-sum", "1.0.0", &other, Some(ADMIN)),
        409,
    );

    // Not components.
    server.expect_error(
        "uploading `hello`",
        server.upload("count-sum", "1.0.1", b"hello", Some(ADMIN)),
        400,
    );
    server.expect_error(
        "uploading a core module",
        server.upload("count-sum", "1.0.2", b"\0asm\x01\0\0\0", Some(ADMIN)),
        400,
    );

    // Tokens.
    server.expect_error(
        "uploading without a token",
        server.upload("count-sum", "1.0.3", &v1, None),
        401,
    );
    server.expect_error(
        "uploading with an unknown token",
        server.upload("count-sum", "1.0.3", &v1, Some("not-a-token")),
        401,
    );
    server.expect_error(
        "uploading with the ingest token",
        server.upload("count-sum", "1.0.3", &v1, Some(INGEST)),
        403,
    );
    server.expect_error(
        "listing without a token",
        server.get("/v1/operators", None),
        401,
    );

    // Nothing changed.
    let listed = server.expect(
        "listing operators",
        server.get("/v1/operators", Some(ADMIN)),
        200,
    );
    assert_eq!(
        listed,
        json!([version]),
        "after the refused uploads, only 1.0.0 is there"
    );
    for refused in ["1.0.1", "1.0.2", "1.0.3"] {
        server.expect_error(
            &format!("getting the refused count-sum/{refused}"),
            server.get(&format!("/v1/operators/count-sum/{refused}"), Some(ADMIN)),
            404,
        );
    }

    // Over --max-upload.
    let small_dir = tempfile::tempdir().expect("a temporary directory");
    let small = Server::start_with(small_dir.path(), &["--max-upload", "1000"]);
    small.expect_error(
        "uploading v1 over --max-upload 1000",
        small.upload("count-sum", "1.0.0", &v1, Some(ADMIN)),
        413,
    );
    let listed = small.expect(
        "listing operators",
        small.get("/v1/operators", Some(ADMIN)),
        200,
    );
    assert_eq!(listed, json!([]), "nothing was registered");
}

#[test]
fn a_pipeline_ingests_events_over_http_and_streams_results() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    let stream = server.subscribe(&format!("/v1/pipelines/{PIPELINE}/results"), ADMIN);

    let events = clicks(400, 7);
    let (lines, array) = events.split_at(200);
    // JSON Lines, in a few requests.
    for chunk in lines.chunks(50) {
        server.ingest(PIPELINE, chunk);
    }
    // A JSON array.
    let answer = server.post(
        &events_path(PIPELINE),
        Some(INGEST),
        json_array(array).as_bytes(),
    );
    let accepted = server.expect("sending a JSON array of events", answer, 202);
    assert_eq!(accepted, json!({"accepted": array.len()}));

    // Refused events change nothing.
    let one = jsonl(&events[..1]);
    let refused = server.post_as(
        &events_path(PIPELINE),
        None,
        Some("application/x-ndjson"),
        one.as_bytes(),
        false,
    );
    server.expect_error("sending events without a token", refused, 401);
    let refused = server.post_as(
        &events_path(PIPELINE),
        Some("not-a-token"),
        Some("application/x-ndjson"),
        one.as_bytes(),
        false,
    );
    server.expect_error("sending events with an unknown token", refused, 401);

    server.wait_for("events_in = 400 and some results", PATIENCE, || {
        let status = server.status(PIPELINE);
        let n = server.results(PIPELINE).len();
        if status["events_in"] == 400 && n > 0 {
            Ok(())
        } else {
            Err(format!("{n} results, status {status}"))
        }
    });

    let mut all = events.clone();
    all.push(far_future(&events));
    server.ingest(PIPELINE, &all[400..]);
    let expected = live_model(&all);
    let results = server.wait_for_results(PIPELINE, &expected);
    assert_same_emissions(&server, &results, &expected);
    assert_unique_ids(&results);
    let status = server.wait_for_events_in(PIPELINE, all.len());
    let model = run_model(&MODEL, &all);
    assert_eq!(
        status["late"],
        json!(model.late.len()),
        "late events: {status}"
    );
    assert_eq!(status["dead_letters"], 0, "{status}");
    assert_eq!(
        server.output(PIPELINE, "late.jsonl").len(),
        model.late.len(),
        "late.jsonl has the late events"
    );

    // The stream saw results, each one a record of results.jsonl.
    // Subscribed before the first event, it should see them all: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stream.lines().len() < results.len() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    let streamed = stream.lines();
    assert!(
        !streamed.is_empty(),
        "the SSE stream sent no data lines{}",
        server.diag()
    );
    for line in &streamed {
        let record = server.json("an SSE data line", line);
        assert!(
            results.contains(&record),
            "streamed {record}, which is not in results.jsonl"
        );
    }

    // A stopped pipeline takes no events.
    let stopped = server.expect(
        "stopping the pipeline",
        server.post(&format!("/v1/pipelines/{PIPELINE}/stop"), Some(ADMIN), b""),
        200,
    );
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    let refused = server.post_as(
        &events_path(PIPELINE),
        Some(INGEST),
        Some("application/x-ndjson"),
        one.as_bytes(),
        false,
    );
    server.expect_error("sending events to a stopped pipeline", refused, 409);
    assert_eq!(
        server.status(PIPELINE)["events_in"],
        json!(all.len()),
        "the refused events were not counted"
    );
}

#[test]
fn rolling_out_from_0_to_100_percent_under_ingest_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    // 1.0.0 is the count-sum built against contract 0.2 (`tests/guests/count-sum-0-2`), 2.0.0
    // count-sum v2 on 0.3: the keys the rollout moves carry 0.2's state over to 0.3.
    server.upload_ok(
        "count-sum",
        "1.0.0",
        &crate::support::guest("count-sum-0-2"),
    );
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    create_and_start(&server);

    // 3000 events of 40 users, 10 ms apart, in 60 requests. The sender stops at chunks 15, 30
    // and 45 until the rollout reached 10, 50 and 100 percent, so each step sees traffic
    // before and after it.
    let events: Vec<Ev> = (0..3000)
        .map(|i| {
            ev(
                &format!("user-{}", i % 40),
                BASE_TS + i as i64 * 10,
                (i * 7 % 100) as i64 + 1,
            )
        })
        .collect();
    let sent_chunks = Arc::new(AtomicUsize::new(0));
    let stage = Arc::new(AtomicUsize::new(0));
    let sender = {
        let client = server.client();
        let chunks: Vec<Vec<Ev>> = events.chunks(50).map(<[Ev]>::to_vec).collect();
        let (sent_chunks, stage) = (Arc::clone(&sent_chunks), Arc::clone(&stage));
        thread::spawn(move || -> Result<(), String> {
            for (i, chunk) in chunks.iter().enumerate() {
                let gate = [(15, 1), (30, 2), (45, 3)]
                    .iter()
                    .find(|(at, _)| *at == i)
                    .map_or(0, |(_, stage)| *stage);
                let deadline = Instant::now() + PATIENCE;
                while stage.load(Ordering::SeqCst) < gate {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "gave up at chunk {i}: the rollout did not progress"
                        ));
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                client.try_ingest(PIPELINE, chunk)?;
                sent_chunks.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        })
    };

    for (step, (after_chunks, percent)) in [(10, 10), (25, 50), (40, 100)].into_iter().enumerate() {
        server.wait_for(&format!("{after_chunks} chunks sent"), PATIENCE, || {
            let sent = sent_chunks.load(Ordering::SeqCst);
            if sent >= after_chunks || sender.is_finished() {
                Ok(())
            } else {
                Err(format!("{sent}"))
            }
        });
        let rollout = json!({"version": "2.0.0", "percent": percent});
        let status = server.expect(
            &format!("rolling out to {percent} percent"),
            server.post_json(
                &format!("/v1/pipelines/{PIPELINE}/rollout"),
                Some(ADMIN),
                &rollout,
            ),
            200,
        );
        assert_eq!(status["rollout"]["candidate"], "2.0.0", "{status}");
        assert_eq!(status["rollout"]["percent"], percent, "{status}");
        server.wait_for(&format!("applied_percent = {percent}"), PATIENCE, || {
            let status = server.status(PIPELINE);
            if status["rollout"]["applied_percent"] == percent {
                Ok(())
            } else {
                Err(status["rollout"].to_string())
            }
        });
        stage.store(step + 1, Ordering::SeqCst);
    }
    let sent = sender.join().expect("the sender thread");
    if let Err(e) = sent {
        panic!("{e}{}", server.diag());
    }

    let mut all = events.clone();
    all.push(far_future(&events));
    server.ingest(PIPELINE, &all[events.len()..]);
    let status = server.wait_for_events_in(PIPELINE, all.len());

    // The last record of each window is the model's.
    let expected: BTreeMap<(String, i64, i64), (i64, i64)> = live_model(&all)
        .into_iter()
        .map(|e| ((e.key, e.start, e.end), (e.count, e.sum)))
        .collect();
    let last_per_window = |results: &[Value]| -> BTreeMap<(String, i64, i64), Value> {
        results
            .iter()
            .map(|r| {
                let window = (
                    r["key"].as_str().expect("key").to_owned(),
                    r["window_start"].as_i64().expect("window_start"),
                    r["window_end"].as_i64().expect("window_end"),
                );
                (window, r.clone())
            })
            .collect()
    };
    server.wait_for(
        &format!("results of all {} windows", expected.len()),
        PATIENCE,
        || {
            let n = last_per_window(&server.results(PIPELINE)).len();
            if n >= expected.len() {
                Ok(())
            } else {
                Err(format!("{n} windows"))
            }
        },
    );
    thread::sleep(Duration::from_millis(300));
    let results = server.results(PIPELINE);
    let last = last_per_window(&results);
    assert_eq!(
        last.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the windows with results are the model's{}",
        server.diag()
    );
    for (window, record) in &last {
        let value = &record["value"];
        let (count, sum) = (value["count"].as_i64(), value["sum"].as_i64());
        assert_eq!(
            (count, sum),
            expected
                .get(window)
                .map(|&(c, s)| (Some(c), Some(s)))
                .expect("an expected window"),
            "window {window:?}: {record}"
        );
        if let Some(avg) = value.get("avg") {
            let (count, sum) = (count.unwrap() as f64, sum.unwrap() as f64);
            let avg = avg
                .as_f64()
                .unwrap_or_else(|| panic!("avg is not a number: {record}"));
            assert!(
                (avg - sum / count).abs() < 1e-9,
                "avg is not sum/count: {record}"
            );
        }
    }

    // Versions: only the two, sticky and forward per key, each producing windows.
    let mut on_candidate = HashSet::new();
    let mut windows_by = BTreeMap::<&str, usize>::new();
    for record in &results {
        let version = record["operator_version"].as_str().unwrap_or_default();
        let key = record["key"].as_str().expect("key");
        match version {
            "1.0.0" => assert!(
                !on_candidate.contains(key),
                "key {key} went back from 2.0.0 to 1.0.0: {record}"
            ),
            "2.0.0" => {
                on_candidate.insert(key);
                assert!(
                    record["value"].get("avg").is_some(),
                    "2.0.0 outputs avg: {record}"
                );
            }
            other => panic!("a record of version {other:?}: {record}"),
        }
        *windows_by.entry(version).or_default() += 1;
    }
    assert!(
        windows_by.contains_key("1.0.0") && windows_by.contains_key("2.0.0"),
        "each version produced windows: {windows_by:?}"
    );
    assert_unique_ids(&results);
    assert_eq!(status["dead_letters"], 0, "{status}");
    for version in ["1.0.0", "2.0.0"] {
        let entry = version_entry(&status, version);
        assert!(
            entry["calls"].as_u64().is_some_and(|c| c > 0),
            "{version} was called: {status}"
        );
    }
}

#[test]
fn shadow_results_are_kept_apart() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    create_and_start(&server);

    let rollout = json!({"version": "2.0.0", "percent": 0, "shadow": true});
    let status = server.expect(
        "starting a shadow rollout",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &rollout,
        ),
        200,
    );
    assert_eq!(status["rollout"]["shadow"], true, "{status}");
    assert_eq!(status["rollout"]["candidate"], "2.0.0", "{status}");
    // The shadow starts at the next checkpoint barrier (every 50 ms).
    wait_for_shadow_applied(&server);

    let events = clicks(300, 5);
    for chunk in events.chunks(60) {
        server.ingest(PIPELINE, chunk);
        thread::sleep(Duration::from_millis(100));
    }
    let mut all = events.clone();
    all.push(far_future(&events));
    server.ingest(PIPELINE, &all[events.len()..]);
    let expected = live_model(&all);
    let results = server.wait_for_results(PIPELINE, &expected);
    assert_same_emissions(&server, &results, &expected);
    for record in &results {
        assert_eq!(
            record["operator_version"], "1.0.0",
            "the shadow served a result: {record}"
        );
        assert!(
            record["value"].get("avg").is_none(),
            "a shadow result in results.jsonl: {record}"
        );
    }

    let shadow = server.wait_for("shadow.jsonl", PATIENCE, || {
        let shadow = server.output(PIPELINE, "shadow.jsonl");
        if shadow.is_empty() {
            Err("empty or missing".into())
        } else {
            Ok(shadow)
        }
    });
    assert!(!shadow.is_empty());
    let entry = server.wait_for("shadow comparisons in the status", PATIENCE, || {
        let entry = version_entry(&server.status(PIPELINE), "2.0.0");
        let positive = |field: &str| entry[field].as_u64().is_some_and(|n| n > 0);
        if positive("shadow_compared") && positive("shadow_differed") {
            Ok(entry)
        } else {
            Err(entry.to_string())
        }
    });
    assert!(
        entry["shadow_differed"].as_u64() <= entry["shadow_compared"].as_u64(),
        "more differences than comparisons: {entry}"
    );
}

#[test]
fn a_shadow_starts_from_the_live_state_so_open_windows_compare_fairly() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    // The same code under another version: a fair shadow differs nowhere.
    server.upload_ok("count-sum", "1.0.1", &count_sum_v1());
    create_and_start(&server);
    // Windows open (1 s windows, events 37 ms apart) before the shadow begins...
    let events = clicks(300, 5);
    let (before, after) = events.split_at(150);
    server.ingest(PIPELINE, before);
    server.wait_for_events_in(PIPELINE, before.len());
    let rollout = json!({"version": "1.0.1", "percent": 0, "shadow": true});
    let path = format!("/v1/pipelines/{PIPELINE}/rollout");
    server.expect(
        "a shadow rollout",
        server.post_json(&path, Some(ADMIN), &rollout),
        200,
    );
    wait_for_shadow_applied(&server);
    // ... and go on after it: it starts from a copy of their live state.
    server.ingest(PIPELINE, after);
    server.ingest(PIPELINE, &[far_future(&events)]);
    let entry = server.wait_for("shadow comparisons", PATIENCE, || {
        let entry = version_entry(&server.status(PIPELINE), "1.0.1");
        match entry["shadow_compared"].as_u64() {
            Some(n) if n >= 5 => Ok(entry),
            _ => Err(entry.to_string()),
        }
    });
    assert_eq!(entry["shadow_differed"], 0, "{entry}");
    let shadow = server.output(PIPELINE, "shadow.jsonl");
    assert!(shadow.iter().all(|r| r["same"] == true), "{shadow:?}");
}

#[test]
fn a_candidate_that_traps_is_rolled_back_automatically() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "9.0.0", &trap_on_key());
    create_and_start(&server);

    // Events 50 ms apart; `trickle` sends one for a quiet key.
    let mut ts = BASE_TS;
    let mut send = |keys: &[&str]| {
        let batch: Vec<Ev> = keys
            .iter()
            .map(|key| {
                ts += 50;
                ev(key, ts, 1)
            })
            .collect();
        server.ingest(PIPELINE, &batch);
        ts
    };
    send(&["calm-1", "calm-2", "calm-3"]);

    let rollout = json!({
        "version": "9.0.0",
        "percent": 100,
        "policy": {"max_trap_rate": 0.01, "window": "10s", "min_calls": 1}
    });
    server.expect(
        "rolling out the trapping version",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &rollout,
        ),
        200,
    );
    server.wait_for("applied_percent = 100", PATIENCE, || {
        send(&["calm-1"]);
        let status = server.status(PIPELINE);
        if status["rollout"]["applied_percent"] == 100 {
            Ok(())
        } else {
            Err(status["rollout"].to_string())
        }
    });

    send(&[
        "boom-1", "calm-1", "boom-2", "boom-3", "calm-2", "boom-4", "boom-5", "calm-3",
    ]);
    let rolled_back = server.wait_for("an automatic rollback", Duration::from_secs(20), || {
        send(&["calm-2"]);
        let status = server.status(PIPELINE);
        match &status["rollout"]["rolled_back"] {
            Value::Null => Err(status["rollout"].to_string()),
            reason => Ok(reason.to_string()),
        }
    });
    assert!(
        rolled_back.to_lowercase().contains("trap"),
        "the rollback's reason names the traps: {rolled_back}"
    );
    server.wait_for("applied_percent = 0 after the rollback", PATIENCE, || {
        send(&["calm-3"]);
        let status = server.status(PIPELINE);
        if status["rollout"]["applied_percent"] == 0 {
            Ok(())
        } else {
            Err(status["rollout"].to_string())
        }
    });
    let status = server.status(PIPELINE);
    assert!(
        version_entry(&status, "9.0.0")["traps"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "the candidate's traps are counted: {status}"
    );
    let dead = server.wait_for("dead letters of the traps", PATIENCE, || {
        let dead = server.output(PIPELINE, "dead-letters.jsonl");
        let trapped = dead
            .iter()
            .filter(|d| d["reason"].as_str().is_some_and(|r| r.contains("trapped")))
            .count();
        if trapped > 0 {
            Ok(dead)
        } else {
            Err(format!("{dead:?}"))
        }
    });
    assert!(!dead.is_empty());
    // The version that trapped is the one named: the candidate, never the live version.
    let traps: Vec<&str> = (dead.iter())
        .filter_map(|d| d["reason"].as_str())
        .filter(|reason| reason.contains("trapped"))
        .collect();
    assert!(
        traps
            .iter()
            .all(|reason| reason.starts_with("count-sum@9.0.0 operator trapped")),
        "{traps:?}"
    );

    // After the rollback, 1.0.0 serves every key: a fresh key's windows are its.
    let first = ts - ts.rem_euclid(1000) + 1000; // the next window
    let after: Vec<Ev> = (0..10)
        .map(|i| ev("after-rollback", first + i * 150, 3))
        .collect();
    server.ingest(PIPELINE, &after);
    server.ingest(PIPELINE, &[far_future(&after)]);
    let records = server.wait_for(
        "results of the key sent after the rollback",
        PATIENCE,
        || {
            let records: Vec<Value> = server
                .results(PIPELINE)
                .into_iter()
                .filter(|r| r["key"] == "after-rollback")
                .collect();
            let count: i64 = records
                .iter()
                .filter_map(|r| r["value"]["count"].as_i64())
                .sum();
            if count >= 10 {
                Ok(records)
            } else {
                Err(format!("{records:?}"))
            }
        },
    );
    for record in &records {
        assert_eq!(
            record["operator_version"], "1.0.0",
            "after the rollback: {record}"
        );
    }
}

#[test]
fn deleting_a_version_in_use_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    server.upload_ok("count-sum", "3.0.0", &count_sum_v2());
    create_and_start(&server);

    server.expect_error(
        "deleting the live version",
        server.delete("/v1/operators/count-sum/1.0.0", Some(ADMIN)),
        409,
    );
    server.expect(
        "getting the live version",
        server.get("/v1/operators/count-sum/1.0.0", Some(ADMIN)),
        200,
    );

    let rollout = json!({"version": "3.0.0", "percent": 10});
    server.expect(
        "rolling out 3.0.0",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &rollout,
        ),
        200,
    );
    server.expect_error(
        "deleting the candidate version",
        server.delete("/v1/operators/count-sum/3.0.0", Some(ADMIN)),
        409,
    );

    server.expect_error(
        "deleting with the ingest token",
        server.delete("/v1/operators/count-sum/2.0.0", Some(INGEST)),
        403,
    );
    let (status, body) = server.delete("/v1/operators/count-sum/2.0.0", Some(ADMIN));
    assert_eq!(
        status,
        204,
        "deleting an unused version: {body}{}",
        server.diag()
    );
    server.expect_error(
        "getting the deleted version",
        server.get("/v1/operators/count-sum/2.0.0", Some(ADMIN)),
        404,
    );
    // 3.0.0 has the same bytes as the deleted 2.0.0: it must not have gone with it.
    server.expect(
        "getting 3.0.0",
        server.get("/v1/operators/count-sum/3.0.0", Some(ADMIN)),
        200,
    );
    let status = server.status(PIPELINE);
    assert_eq!(status["state"], "running", "{status}");

    // A deleted version never comes back with other bytes (its tombstone keeps its digest),
    // across a restart too; the same bytes again are welcome.
    let v1 = std::fs::read(count_sum_v1()).unwrap();
    let v2 = std::fs::read(count_sum_v2()).unwrap();
    let refused = server.expect_error(
        "uploading the deleted 2.0.0 with other bytes",
        server.upload("count-sum", "2.0.0", &v1, Some(ADMIN)),
        409,
    );
    assert!(refused.contains("was deleted"), "{refused}");
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    server.upload_ok("count-sum", "4.0.0", &count_sum_v1());
    server.expect(
        "deleting 4.0.0",
        server.delete("/v1/operators/count-sum/4.0.0", Some(ADMIN)),
        204,
    );
    drop(server);
    let server = Server::start(dir.path());
    let refused = server.expect_error(
        "uploading the deleted 4.0.0 with other bytes after a restart",
        server.upload("count-sum", "4.0.0", &v2, Some(ADMIN)),
        409,
    );
    assert!(refused.contains("was deleted"), "{refused}");
    server.upload_ok("count-sum", "4.0.0", &count_sum_v1());
}

#[test]
fn a_served_pipeline_with_a_stage_ranks_each_windows_keys() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut staged = spec();
    staged["stages"] = json!([{
        "window": {"type": "tumbling", "size": 1000},
        "operator": {"name": "top-keys", "version": "1.0.0", "kind": "aggregate"}
    }]);
    let refused = server.expect_error(
        "a stage whose operator is not uploaded",
        server.post_json("/v1/pipelines", Some(ADMIN), &staged),
        400,
    );
    assert!(
        refused.contains("top-keys@1.0.0 is not in the registry"),
        "{refused}"
    );
    server.upload_ok("top-keys", "1.0.0", &component("top-keys"));
    server.expect(
        "creating the two-stage pipeline",
        server.post_json("/v1/pipelines", Some(ADMIN), &staged),
        201,
    );
    server.expect(
        "starting it",
        server.post(&format!("/v1/pipelines/{PIPELINE}/start"), Some(ADMIN), b""),
        200,
    );
    // Users u0..u6, each window a different number of events per user.
    let events: Vec<Ev> = (0..420i64)
        .map(|i| ev(&format!("u{}", (i * i) % 7), BASE_TS + i * 12, 1))
        .collect();
    server.ingest(PIPELINE, &events);
    server.ingest(PIPELINE, &[far_future(&events)]);
    let mut counts: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
    for e in &events {
        *counts
            .entry(e.ts.div_euclid(1000) * 1000)
            .or_default()
            .entry(e.key.clone())
            .or_default() += 1;
    }
    let expected: Vec<Value> = counts
        .into_iter()
        .map(|(start, users)| {
            let mut ranked: Vec<(i64, String)> =
                users.into_iter().map(|(user, n)| (-n, user)).collect();
            ranked.sort();
            let mut value = serde_json::Map::new();
            for (rank, (n, user)) in ranked.into_iter().take(3).enumerate() {
                value.insert(format!("key_{}", rank + 1), json!(user));
                value.insert(format!("count_{}", rank + 1), json!(-n));
            }
            json!({"key": "*", "window_start": start, "value": value})
        })
        .collect();
    let results = server.wait_for(&format!("{} results", expected.len()), PATIENCE, || {
        let results = server.results(PIPELINE);
        if results.len() >= expected.len() {
            Ok(results)
        } else {
            Err(format!("{} results", results.len()))
        }
    });
    let got: Vec<Value> = results
        .iter()
        .map(|r| json!({"key": r["key"], "window_start": r["window_start"], "value": r["value"]}))
        .collect();
    assert_eq!(got, expected, "{}", server.diag());
    assert!(results.iter().all(|r| r["operator"] == "top-keys"));
    server.expect_error(
        "deleting the stage's operator",
        server.delete("/v1/operators/top-keys/1.0.0", Some(ADMIN)),
        409,
    );
}

#[test]
fn a_restarted_server_resumes_its_pipelines_from_checkpoints() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);

    let events = clicks(600, 9);
    let (first, second) = events.split_at(300);
    for chunk in first.chunks(100) {
        server.ingest(PIPELINE, chunk);
    }
    server.wait_for_checkpoint_of(PIPELINE, first.len());
    server.kill();
    drop(server);

    let server = Server::start(dir.path());
    server.wait_for("the pipeline running again", PATIENCE, || {
        let status = server.status(PIPELINE);
        if status["state"] == "running" {
            Ok(())
        } else {
            Err(status.to_string())
        }
    });
    for chunk in second.chunks(100) {
        server.ingest(PIPELINE, chunk);
    }
    let mut all = events.clone();
    all.push(far_future(&events));
    server.ingest(PIPELINE, &all[events.len()..]);
    server.wait_for_events_in(PIPELINE, all.len());
    let expected = live_model(&all);
    let results = server.wait_for_results(PIPELINE, &expected);
    assert_same_emissions(&server, &results, &expected);
    assert_unique_ids(&results);
}

#[test]
fn health_and_openapi_need_no_token_and_metrics_needs_one() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    let health = server.expect("GET /healthz", server.get("/healthz", None), 200);
    assert_eq!(health["status"], "ok", "{health}");

    // Some activity first, so that there are metrics to show.
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    server.ingest(PIPELINE, &clicks(20, 3));
    server.wait_for_events_in(PIPELINE, 20);
    server.expect_error(
        "GET /metrics without a token",
        server.get("/metrics", None),
        401,
    );
    server.expect_error(
        "GET /metrics with an ingest token",
        server.get("/metrics", Some(INGEST)),
        403,
    );
    let (status, metrics) = server.get("/metrics", Some(ADMIN));
    assert_eq!(status, 200, "GET /metrics: {metrics}{}", server.diag());
    assert!(metrics.contains("weir_"), "no weir_ metrics in:\n{metrics}");

    let openapi = server.expect("GET /openapi.json", server.get("/openapi.json", None), 200);
    assert!(
        openapi.get("openapi").is_some(),
        "no `openapi` field: {openapi}"
    );
    assert!(
        openapi["paths"].get("/v1/pipelines").is_some(),
        "no /v1/pipelines among the paths: {}",
        openapi["paths"]
    );
}

/// Malformed specs and requests are refused with a 4xx and a JSON message, and leave nothing
/// behind.
#[test]
fn malformed_specs_and_requests_are_refused_with_clear_errors() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(data.path(), &["--max-upload", "4096"]);
    let cases: Vec<(&[u8], u16, &str)> = vec![
        (b"{not json", 400, "not a JSON pipeline spec"),
        (b"{\"name\": \"x\"}", 400, "missing field"),
        (br#"{"name": "x", "source": {"type": "http"}, "event": {"key": "k", "timestamp": "t"}, "bogus": 1}"#, 400, "bogus"),
        (
            br#"{"name": "x", "source": {"type": "http"}, "event": {"key": "k", "timestamp": "t"}, "window": {"type": "tumbling", "size": "1m"}, "operators": [{"name": "count-sum", "version": "9.9.9", "kind": "aggregate"}]}"#,
            400,
            "not in the registry",
        ),
        (br#"{"name": "../escape", "source": {"type": "http"}, "event": {"key": "k", "timestamp": "t"}}"#, 400, "not a valid name"),
    ];
    for (body, status, expected) in cases {
        let message = server.expect_error(
            "creating a malformed pipeline",
            server.post("/v1/pipelines", Some(ADMIN), body),
            status,
        );
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    let big = vec![b' '; 10_000];
    server.expect_error(
        "an oversized spec",
        server.post("/v1/pipelines", Some(ADMIN), &big),
        413,
    );
    let (status, body) = server.get("/v1/pipelines", Some(ADMIN));
    assert_eq!((status, body.trim()), (200, "[]"), "nothing was created");
    let message = server.expect_error(
        "a rollout of a pipeline that does not exist",
        server.post(
            "/v1/pipelines/none/rollout",
            Some(ADMIN),
            br#"{"version": "2.0.0", "percent": 200}"#,
        ),
        404,
    );
    assert!(message.contains("no pipeline"), "{message}");
}

/// Waits until a shadow rollout of the pipeline is applied (at a checkpoint barrier).
fn wait_for_shadow_applied(server: &Server) {
    server.wait_for_routing(PIPELINE, "the shadow applied", |r| r["shadow"] == true);
}
