//! Quarantine and re-drive (issue 42): with `"quarantine"` in its spec, a served pipeline parks
//! the keys whose events trap in a version (their events kept, their windows held) instead of
//! making dead letters of them; after a rollback, `POST .../quarantine/redrive` sends the parked
//! events through the version then serving the key, exactly once, and the results are those of a
//! pipeline that never saw the bad version, across a SIGKILL of the server while keys are parked
//! too. A second re-drive does nothing; the quarantine is bounded per key, keys parked past their
//! TTL give their events up as dead letters, and bad requests are refused clearly.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::reference::Ev;

use crate::server::{
    ADMIN, BASE_TS, INGEST, PATIENCE, Server, count_sum_v1, ev, far_future, spec, trap_on_key,
};

/// A pipeline named `name` on count-sum 1.0.0, with `quarantine` if given.
fn pipeline(name: &str, quarantine: Option<Value>) -> Value {
    let mut spec = spec();
    spec["name"] = json!(name);
    if let Some(quarantine) = quarantine {
        spec["quarantine"] = quarantine;
    }
    spec
}

/// 4 keys, two of which (`boom-...`) trap in trap-on-key, over 8 windows of 1 s.
fn events() -> Vec<Ev> {
    (0..80)
        .map(|i| {
            let key = ["ann", "boom-1", "bob", "boom-2"][i % 4];
            ev(key, BASE_TS + i as i64 * 100, i as i64 % 7 + 1)
        })
        .collect()
}

/// Each result as (key, window start, end, kind, value), whichever version made it.
fn results(server: &Server, pipeline: &str) -> BTreeSet<String> {
    (server.results(pipeline).iter())
        .map(|r| {
            json!([
                r["key"],
                r["window_start"],
                r["window_end"],
                r["kind"],
                r["value"]
            ])
            .to_string()
        })
        .collect()
}

fn quarantine(server: &Server, pipeline: &str) -> Value {
    server.status(pipeline)["quarantine"].clone()
}

fn wait_for_parked(server: &Server, pipeline: &str, keys: u64) -> Value {
    server.wait_for(&format!("{keys} parked keys"), PATIENCE, || {
        let parked = quarantine(server, pipeline);
        match parked["keys"].as_u64() == Some(keys) {
            true => Ok(parked),
            false => Err(parked.to_string()),
        }
    })
}

fn redrive(server: &Server, pipeline: &str, token: &str, body: &Value) -> (u16, String) {
    let path = format!("/v1/pipelines/{pipeline}/quarantine/redrive");
    server.post_json(&path, Some(token), body)
}

#[test]
fn keys_a_candidate_traps_on_are_parked_and_after_rollback_their_redrive_gives_a_clean_runs_results()
 {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &trap_on_key());
    crate::server::create_and_start_spec(&server, &pipeline("parked", Some(json!({}))));
    crate::server::create_and_start_spec(&server, &pipeline("clean", None));
    server.expect(
        "a rollout of the candidate that traps",
        server.post_json(
            "/v1/pipelines/parked/rollout",
            Some(ADMIN),
            &json!({"version": "2.0.0", "percent": 100}),
        ),
        200,
    );
    server.wait_for_routing("parked", "the candidate serving every key", |r| {
        r["candidate"] == "2.0.0" && r["percent"] == 100
    });
    let events = events();
    let (first, second) = events.split_at(40);
    for name in ["parked", "clean"] {
        server.ingest(name, first);
    }
    let parked = wait_for_parked(&server, "parked", 2);
    let keys: Vec<&str> = (parked["parked"].as_array().unwrap().iter())
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["boom-1", "boom-2"], "{parked}");
    assert!(
        parked["parked"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("count-sum@2.0.0"),
        "{parked}"
    );

    // A SIGKILL with keys parked: they come back parked from the checkpoint.
    let events_in = server.status("parked")["events_in"].as_u64().unwrap();
    server.wait_for_checkpoint_of("parked", events_in as usize);
    server.kill();
    let server = Server::start(dir.path());
    wait_for_parked(&server, "parked", 2);
    for name in ["parked", "clean"] {
        server.ingest(name, second);
    }
    server.wait_for("every event read", PATIENCE, || {
        let read = server.status("parked")["events_in"].as_u64().unwrap_or(0);
        (read >= events.len() as u64)
            .then_some(())
            .ok_or(read.to_string())
    });
    assert!(
        server.output("parked", "dead-letters.jsonl").is_empty(),
        "a trap made dead letters"
    );

    server.expect(
        "the rollback",
        server.post_json("/v1/pipelines/parked/rollback", Some(ADMIN), &json!({})),
        200,
    );
    server.wait_for_routing("parked", "the rollback applied", |r| {
        r["candidate"].is_null()
    });
    let answer = server.expect(
        "the re-drive",
        redrive(&server, "parked", ADMIN, &json!({})),
        202,
    );
    assert_eq!(answer["redriving"], "all");
    wait_for_parked(&server, "parked", 0);
    // A second re-drive of a key no longer parked does nothing.
    server.expect(
        "a second re-drive",
        redrive(&server, "parked", ADMIN, &json!({"keys": ["boom-1"]})),
        202,
    );
    let end = [far_future(&events)];
    for name in ["parked", "clean"] {
        server.ingest(name, &end);
    }
    let want = server.wait_for("the clean run's results", PATIENCE, || {
        let got = results(&server, "clean");
        (got.len() == 32)
            .then_some(got)
            .ok_or_else(|| "not yet".to_string())
    });
    let got = server.wait_for("the parked run's results", PATIENCE, || {
        let got = results(&server, "parked");
        (got == want).then_some(got.clone()).ok_or_else(|| {
            let missing: Vec<_> = want.difference(&got).collect();
            let extra: Vec<_> = got.difference(&want).collect();
            format!("missing {missing:?}, extra {extra:?}")
        })
    });
    assert!(got.iter().any(|r| r.contains("boom-2")), "{got:?}");
    assert_eq!(
        server.results("parked").len(),
        32,
        "a result was written twice"
    );
    assert!(server.output("parked", "dead-letters.jsonl").is_empty());
}

#[test]
fn the_quarantine_is_bounded_expires_and_refuses_bad_redrives() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    // The live version itself traps on `boom-...`: re-driving it parks the key again.
    server.upload_ok("count-sum", "1.0.0", &trap_on_key());
    let bounded = json!({"max_events_per_key": 3, "ttl": "5s"});
    crate::server::create_and_start_spec(&server, &pipeline("bounded", Some(bounded)));
    let flood: Vec<Ev> = (0..10)
        .map(|i| ev("boom-x", BASE_TS + i * 10, 1))
        .chain([ev("ann", BASE_TS + 1_500, 1)])
        .collect();
    server.ingest("bounded", &flood);
    let parked = wait_for_parked(&server, "bounded", 1);
    assert_eq!(parked["events"], 3, "{parked}");
    let dead = server.wait_for_dead_letters("bounded", 7);
    assert!(
        dead.iter()
            .all(|d| d["reason"].as_str().unwrap().contains("max_events_per_key")),
        "{dead:?}"
    );

    let refused = |what: &str, token: &str, body: Value, status: u16| {
        let (got, answer) = redrive(&server, "bounded", token, &body);
        assert_eq!(got, status, "{what}: {answer}");
        answer
    };
    refused("no keys", ADMIN, json!({"keys": []}), 400);
    refused("a huge key", ADMIN, json!({"keys": ["k".repeat(300)]}), 400);
    refused("an unknown field", ADMIN, json!({"key": "boom-x"}), 400);
    refused("an ingest token", INGEST, json!({}), 403);
    crate::server::create_and_start_spec(&server, &pipeline("plain", None));
    let answer = redrive(&server, "plain", ADMIN, &json!({}));
    assert_eq!(answer.0, 409, "{answer:?}");
    assert!(answer.1.contains("no quarantine"), "{answer:?}");
    for bad in [
        json!({"max_events_per_key": 0}),
        json!({"ttl": 0}),
        json!({"max_events": 1u64 << 40}),
        json!({"what": 1}),
    ] {
        let (status, body) = server.post_json(
            "/v1/pipelines",
            Some(ADMIN),
            &pipeline("bad", Some(bad.clone())),
        );
        assert_eq!(status, 400, "{bad}: {body}");
    }

    // Re-driven through the version that still traps: parked again, nothing lost.
    server.expect(
        "a re-drive",
        redrive(&server, "bounded", ADMIN, &json!({"keys": ["boom-x"]})),
        202,
    );
    std::thread::sleep(Duration::from_millis(500));
    let parked = wait_for_parked(&server, "bounded", 1);
    assert_eq!(parked["events"], 3, "{parked}");
    // Event time moves 5 s past the parking: the key gives its events up as dead letters.
    server.ingest("bounded", &[ev("ann", BASE_TS + 20_000, 1)]);
    wait_for_parked(&server, "bounded", 0);
    let dead = server.wait_for_dead_letters("bounded", 10);
    let expired = (dead.iter())
        .filter(|d| d["reason"].as_str().unwrap().contains("ttl"))
        .count();
    assert_eq!(expired, 3, "{dead:?}");
}
