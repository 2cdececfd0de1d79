//! Rollouts of every operator, not only the aggregate (issue 13): under continuous ingest, an
//! enricher goes from 0 to 50 to 100 % and back (a rollback), then out again and promoted, and
//! every order comes out exactly once (checked by result ids and order ids), duplicates dropped
//! across every switch (the versions share the per-key state, across contracts: 1.0.0 is built
//! against 0.1 or 0.2, 2.0.0 against 0.3); a shadow run compares both
//! versions' output; a SIGKILL mid-rollout resumes the split; and a stage operator of a
//! two-stage pipeline rolls out and back with results identical to a twin without a rollout.

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{ADMIN, GatedSender, PATIENCE, Server, version_entry};

const PIPELINE: &str = "orders";
const OPERATOR: &str = "enrich-customers";

fn spec() -> Value {
    json!({
        "name": PIPELINE,
        "source": {"type": "http"},
        "event": {"key": "customer_id", "timestamp": "ts"},
        "operators": [{"name": OPERATOR, "version": "1.0.0", "kind": "enrich"}],
        "checkpoint_interval": "50ms"
    })
}

/// `n` orders of 40 customers from order number `from` on, with every tenth an earlier order of
/// the same customer sent again (which the enricher drops).
fn orders(from: usize, n: usize) -> Vec<Value> {
    (from..from + n)
        .map(|i| {
            let again = i % 10 == 9 && i >= from + 40;
            let number = if again { i - 40 } else { i };
            json!({
                "order_id": format!("O-{number}"),
                "customer_id": format!("C{:03}", number % 40),
                "ts": 1_772_442_000_000i64 + i as i64 * 10,
                "amount": 1,
            })
        })
        .collect()
}

fn send(server: &crate::server::Client, orders: &[Value]) {
    for chunk in orders.chunks(40) {
        let body: String = chunk.iter().map(|o| format!("{o}\n")).collect();
        let (code, answer) = server.post(
            &format!("/v1/pipelines/{PIPELINE}/events"),
            Some(crate::server::INGEST),
            body.as_bytes(),
        );
        assert_eq!(code, 202, "{answer}");
        thread::sleep(Duration::from_millis(15));
    }
}

fn step(server: &Server, request: Value, path: &str) {
    server.expect(
        &format!("{path} {request}"),
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/{path}"),
            Some(ADMIN),
            &request,
        ),
        200,
    );
}

/// Waits until the routing applied at a checkpoint matches `check`.
fn applied(server: &Server, what: &str, check: impl Fn(&Value) -> bool) {
    server.wait_for_routing(PIPELINE, what, check);
}

/// A server in `data` with versions 1.0.0 and 2.0.0 of the enricher and the orders pipeline
/// created and started on 1.0.0. Version 2.0.0 is the example (contract 0.3); 1.0.0 is the same
/// enricher built against the older `contract` (`tests/guests/enrich-customers-0-1` or `-0-2`), so every
/// switch moves keys, and the orders they have seen, between contracts.
fn orders_pipeline(data: &std::path::Path, contract: &str) -> Server {
    let server = Server::start(data);
    server.upload_ok(OPERATOR, "1.0.0", &crate::support::guest(contract));
    server.upload_ok(OPERATOR, "2.0.0", &crate::support::component(OPERATOR));
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec()),
        201,
    );
    server.expect(
        "starting",
        server.post(&format!("/v1/pipelines/{PIPELINE}/start"), Some(ADMIN), b""),
        200,
    );
    server
}

fn events_of(server: &Server, version: &str) -> u64 {
    let key = format!("{OPERATOR}@{version}");
    version_entry(&server.status(PIPELINE), &key)["events"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn an_enricher_rolls_out_and_back_under_load_with_every_order_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = orders_pipeline(dir.path(), "enrich-customers-0-1");
    let all = orders(0, 4_000);
    // 100 chunks of 40 orders; the sender stops before chunks 15, 35, 55 and 75 until the
    // rollout is at 0, 50 and 100 % and rolled back.
    let sender = {
        let client = server.client();
        let chunks: Vec<Vec<Value>> = all.chunks(40).map(<[Value]>::to_vec).collect();
        GatedSender::start(chunks, &[15, 35, 55, 75], move |chunk| send(&client, chunk))
    };
    let rollout =
        |percent: u8| json!({"operator": OPERATOR, "version": "2.0.0", "percent": percent});
    for (gate, percent) in [0u8, 50, 100].into_iter().enumerate() {
        sender.wait_at_gate(&server, gate);
        step(&server, rollout(percent), "rollout");
        applied(&server, &format!("{percent} % applied"), |r| {
            r["operator"] == OPERATOR && r["candidate"] == "2.0.0" && r["percent"] == percent
        });
        sender.open();
    }
    sender.wait_at_gate(&server, 3);
    // The orders sent at 50 and 100 % reach 2.0.0 (half of them, then all).
    server.wait_for(
        "2.0.0 to serve orders during the rollout",
        PATIENCE,
        || match events_of(&server, "2.0.0") {
            0 => Err("none yet".into()),
            _ => Ok(()),
        },
    );
    step(&server, json!({"reason": "back to 1.0.0"}), "rollback");
    applied(&server, "the rollback applied", |r| {
        r["operator"] == OPERATOR && r["candidate"].is_null()
    });
    let v1_after_rollback = events_of(&server, "1.0.0");
    sender.open();
    sender.join();

    // Every order once, duplicates dropped across every switch.
    let unique: BTreeSet<String> = all
        .iter()
        .map(|o| o["order_id"].as_str().unwrap().to_owned())
        .collect();
    server.wait_for("every unique order", PATIENCE, || {
        let results = server.results(PIPELINE);
        if results.len() >= unique.len() {
            Ok(results)
        } else {
            Err(format!("{} of {}", results.len(), unique.len()))
        }
    });
    thread::sleep(Duration::from_millis(300));
    let results = server.results(PIPELINE);
    assert_eq!(results.len(), unique.len(), "no order lost or repeated");
    let ids: BTreeSet<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), results.len(), "result ids are unique");
    let orders_out: BTreeSet<String> = results
        .iter()
        .map(|r| r["value"]["order_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(orders_out, unique);
    assert!(
        events_of(&server, "1.0.0") > v1_after_rollback,
        "1.0.0 serves every key after the rollback"
    );
    // Each record names the version that made it: both served during the rollout.
    let made_by = |version: &str| {
        (results.iter())
            .filter(|r| r["operator_version"] == version)
            .count()
    };
    assert!(made_by("2.0.0") > 0 && made_by("1.0.0") > 0, "{results:?}");
    assert_eq!(made_by("1.0.0") + made_by("2.0.0"), results.len());

    // Out again, promoted: 2.0.0 serves everything, and the spec names it.
    step(&server, rollout(30), "rollout");
    applied(&server, "30 % applied", |r| {
        r["candidate"] == "2.0.0" && r["percent"] == 30
    });
    step(&server, json!({}), "promote");
    applied(&server, "the promotion applied", |r| {
        r["operator"] == OPERATOR && r["live"] == "2.0.0" && r["candidate"].is_null()
    });
    let (v1, v2) = (events_of(&server, "1.0.0"), events_of(&server, "2.0.0"));
    let more = orders(4_000, 400);
    send(&server.client(), &more);
    let expected = unique.len()
        + more
            .iter()
            .filter(|o| !unique.contains(o["order_id"].as_str().unwrap()))
            .map(|o| o["order_id"].as_str().unwrap())
            .collect::<BTreeSet<_>>()
            .len();
    server.wait_for("the orders after the promotion", PATIENCE, || {
        let n = server.results(PIPELINE).len();
        if n >= expected {
            Ok(())
        } else {
            Err(format!("{n} of {expected}"))
        }
    });
    assert_eq!(
        events_of(&server, "1.0.0"),
        v1,
        "1.0.0 serves nothing after the promotion"
    );
    assert_eq!(events_of(&server, "2.0.0"), v2 + more.len() as u64);
    // After the promotion every record is 2.0.0's, though the run started on 1.0.0.
    let results = server.results(PIPELINE);
    let after: Vec<&Value> = results[unique.len()..].iter().collect();
    assert!(
        !after.is_empty() && after.iter().all(|r| r["operator_version"] == "2.0.0"),
        "{after:?}"
    );
    let status = server.status(PIPELINE);
    assert!(status["rollout"].is_null(), "{status}");
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("pipelines/orders/spec.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(spec["operators"][0]["version"], "2.0.0");
}

#[test]
fn an_enricher_shadow_compares_both_versions_and_serves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = orders_pipeline(dir.path(), "enrich-customers-0-2");
    step(
        &server,
        json!({"operator": OPERATOR, "version": "2.0.0", "percent": 0, "shadow": true}),
        "rollout",
    );
    applied(&server, "the shadow applied", |r| r["shadow"] == true);
    let sent = orders(0, 400);
    send(&server.client(), &sent);
    let shadow = server.wait_for("shadow comparisons", PATIENCE, || {
        let shadow = server.output(PIPELINE, "shadow.jsonl");
        let compared: u64 = version_entry(
                &server.status(PIPELINE),
                &format!("{OPERATOR}@2.0.0"),
            )["shadow_compared"]
                .as_u64()
                .unwrap_or(0);
        if compared > 0 && !shadow.is_empty() {
            Ok(shadow)
        } else {
            Err(format!("{compared} compared"))
        }
    });
    // The same behaviour built against two contracts (0.2 and 0.3): every comparison the same,
    // and 2.0.0 served nothing
    // (each unique order came out once, from 1.0.0).
    assert!(
        shadow
            .iter()
            .all(|r| r["same"] == true && r["operator"] == OPERATOR),
        "{shadow:?}"
    );
    let unique: BTreeSet<&str> = sent
        .iter()
        .map(|o| o["order_id"].as_str().unwrap())
        .collect();
    server.wait_for("every unique order", PATIENCE, || {
        let n = server.results(PIPELINE).len();
        if n >= unique.len() {
            Ok(())
        } else {
            Err(format!("{n} of {}", unique.len()))
        }
    });
    thread::sleep(Duration::from_millis(200));
    assert_eq!(server.results(PIPELINE).len(), unique.len());
    assert_eq!(events_of(&server, "1.0.0"), sent.len() as u64);
    let entry = version_entry(&server.status(PIPELINE), &format!("{OPERATOR}@2.0.0"));
    assert_eq!(entry["shadow_differed"], 0, "{entry}");
    // While it runs, another operator cannot be rolled out, and a crafted name is refused.
    for (request, why) in [
        (
            json!({"version": "2.0.0", "percent": 10}),
            "a rollout of enrich-customers is in progress",
        ),
        (
            json!({"operator": "../x", "version": "2.0.0", "percent": 10}),
            "name",
        ),
    ] {
        let (code, body) = server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &request,
        );
        assert!(code == 400 || code == 409, "{request}: {code} {body}");
        assert!(body.contains(why), "{request}: {body}");
    }
}

#[test]
fn an_enricher_rollout_survives_a_sigkill_with_every_order_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = orders_pipeline(dir.path(), "enrich-customers-0-2");
    step(
        &server,
        json!({"operator": OPERATOR, "version": "2.0.0", "percent": 50}),
        "rollout",
    );
    applied(&server, "50 % applied", |r| r["percent"] == 50);
    let first = orders(0, 1_000);
    send(&server.client(), &first);
    server.kill();
    let server = Server::start(dir.path());
    // The checkpoint's routing is restored: the split goes on where it was.
    applied(&server, "the routing restored", |r| {
        r["operator"] == OPERATOR && r["candidate"] == "2.0.0" && r["percent"] == 50
    });
    let second = orders(1_000, 1_000);
    send(&server.client(), &second);
    let unique: BTreeSet<String> = first
        .iter()
        .chain(&second)
        .map(|o| o["order_id"].as_str().unwrap().to_owned())
        .collect();
    server.wait_for("every unique order", PATIENCE, || {
        let n = server.results(PIPELINE).len();
        if n >= unique.len() {
            Ok(())
        } else {
            Err(format!("{n} of {}", unique.len()))
        }
    });
    thread::sleep(Duration::from_millis(300));
    let results = server.results(PIPELINE);
    let out: BTreeSet<String> = results
        .iter()
        .map(|r| r["value"]["order_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        results.len(),
        unique.len(),
        "no order lost or repeated across the kill"
    );
    assert_eq!(out, unique);
    assert!(events_of(&server, "2.0.0") > 0 && events_of(&server, "1.0.0") > 0);
}

/// A two-stage pipeline `name`: count-sum per user over 1 s windows, then the top users of
/// each window (the `top-users` stage operator, version 1.0.0).
fn two_stage_spec(name: &str) -> Value {
    json!({
        "name": name,
        "source": {"type": "http"},
        "event": {"key": "user", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "stages": [{
            "window": {"type": "tumbling", "size": 1000},
            "operator": {"name": "top-users", "version": "1.0.0", "kind": "aggregate"}
        }],
        "checkpoint_interval": "50ms"
    })
}

#[test]
fn a_stage_operator_rolls_out_and_back_under_load_with_the_same_results_as_without() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &crate::server::count_sum_v1());
    let top = crate::support::component("top-keys");
    server.upload_ok("top-users", "1.0.0", &top);
    server.upload_ok("top-users", "2.0.0", &top);
    for name in ["rolled", "steady"] {
        crate::server::create_and_start_spec(&server, &two_stage_spec(name));
    }
    let mut events = crate::server::clicks(3_000, 30);
    events.push(crate::server::far_future(&events));
    // 61 chunks to both pipelines; the sender stops before chunks 15, 30 and 45 until the
    // stage's rollout is at 0 and 100 % and rolled back.
    let sender = {
        let client = server.client();
        let chunks: Vec<Vec<_>> = events.chunks(50).map(<[_]>::to_vec).collect();
        GatedSender::start(chunks, &[15, 30, 45], move |chunk| {
            client.ingest("rolled", chunk);
            client.ingest("steady", chunk);
        })
    };
    let path = "/v1/pipelines/rolled/rollout";
    for (gate, percent) in [0u8, 100].into_iter().enumerate() {
        sender.wait_at_gate(&server, gate);
        let request = json!({"operator": "top-users", "version": "2.0.0", "percent": percent});
        server.expect(
            "a stage rollout",
            server.post_json(path, Some(ADMIN), &request),
            200,
        );
        server.wait_for_routing("rolled", "the stage routing applied", |r| {
            r["operator"] == "top-users" && r["percent"] == percent
        });
        sender.open();
    }
    sender.wait_at_gate(&server, 2);
    // The windows that chunks 30 to 44 close reach the stage, which 2.0.0 now serves.
    server.wait_for(
        "2.0.0 to serve the stage during the rollout",
        PATIENCE,
        || {
            let entry = version_entry(&server.status("rolled"), "top-users@2.0.0");
            match entry["events"].as_u64().unwrap_or(0) {
                0 => Err(entry.to_string()),
                _ => Ok(()),
            }
        },
    );
    server.expect(
        "a rollback",
        server.post_json("/v1/pipelines/rolled/rollback", Some(ADMIN), &json!({})),
        200,
    );
    sender.open();
    sender.join();
    // Both pipelines have read every event, and their results stopped growing (the same count
    // on two polls a second apart): equal counts alone can be met midway, the two pipelines
    // keeping pace with each other.
    for name in ["rolled", "steady"] {
        server.wait_for_events_in(name, events.len());
    }
    let mut last = (0, 0);
    let steady = server.wait_for("the steady pipeline's results", PATIENCE, || {
        let a = server.results("steady");
        let b = server.results("rolled");
        let now = (a.len(), b.len());
        let settled = !a.is_empty() && a.len() == b.len() && now == last;
        last = now;
        if settled {
            Ok(a)
        } else {
            thread::sleep(Duration::from_secs(1));
            Err(format!("{} and {}", a.len(), b.len()))
        }
    });
    let rename = |records: Vec<Value>| -> Vec<Value> {
        records
            .into_iter()
            .map(|mut r| {
                let id = r["id"].as_str().unwrap().replacen("rolled/", "steady/", 1);
                r["id"] = id.into();
                r["operator_version"] = Value::Null;
                r
            })
            .collect()
    };
    let rolled = rename(server.results("rolled"));
    let steady = rename(if steady.len() == rolled.len() {
        server.results("steady")
    } else {
        steady
    });
    assert_eq!(
        rolled, steady,
        "the same stage results, each once, with and without the rollout"
    );
}
