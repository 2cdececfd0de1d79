//! The audit trail of `weir serve` (part of issue 45): every state-changing call but ingest is
//! on record with who made it, what it targeted and how it was answered, refused calls too
//! (a known token beyond its scope included),
//! and every acknowledged one survives a SIGKILL; calls from several callers at once are all
//! there, each whole; reading it takes an admin token and a sane limit.

use std::thread;

use serde_json::{Value, json};

use crate::server::{ADMIN, INGEST, Server, clicks, count_sum_v1, spec};

fn audit(server: &Server, query: &str) -> Vec<Value> {
    let answer = server.expect(
        "the audit log",
        server.get(&format!("/v1/audit{query}"), Some(ADMIN)),
        200,
    );
    answer["records"].as_array().unwrap().clone()
}

fn named(name: &str) -> Value {
    let mut spec = spec();
    spec["name"] = json!(name);
    spec
}

#[test]
fn every_change_is_on_record_with_who_and_outcome_across_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &named("clicks")),
        201,
    );
    server.expect(
        "starting",
        server.post("/v1/pipelines/clicks/start", Some(ADMIN), b""),
        200,
    );
    server.ingest("clicks", &clicks(100, 5)); // data, not on record
    server.expect_error(
        "a create refused",
        server.post_json("/v1/pipelines", Some(ADMIN), &json!({"name": "../x"})),
        400,
    );
    server.expect_error(
        "an ingest token's delete",
        server.delete("/v1/pipelines/clicks", Some(INGEST)),
        403,
    );
    server.expect(
        "deleting",
        server.delete("/v1/pipelines/clicks", Some(ADMIN)),
        204,
    );
    server.kill();
    drop(server);

    let server = Server::start(dir.path());
    let records = audit(&server, "");
    let calls: Vec<(String, String, u64)> = (records.iter())
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_owned(),
                r["path"].as_str().unwrap().to_owned(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("POST", "/v1/operators/count-sum/1.0.0", 201),
        ("POST", "/v1/pipelines", 201),
        ("POST", "/v1/pipelines/clicks/start", 200),
        ("POST", "/v1/pipelines", 400),
        ("DELETE", "/v1/pipelines/clicks", 403),
        ("DELETE", "/v1/pipelines/clicks", 204),
    ]
    .map(|(m, p, s)| (m.to_owned(), p.to_owned(), s));
    assert_eq!(calls, want, "{records:?}");
    let who: Vec<&str> = records.iter().map(|r| r["who"].as_str().unwrap()).collect();
    assert_eq!(who[4], "WEIR_INGEST_TOKEN", "{records:?}");
    assert!(
        (who.iter().enumerate()).all(|(i, w)| i == 4 || *w == "WEIR_ADMIN_TOKEN"),
        "{records:?}"
    );
    assert!((records.iter()).all(|r| r["at_ms"].as_u64() > Some(0)));
    assert_eq!(records[5]["route"], "/v1/pipelines/{name}");
    // The token's name only: no secret on record.
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains(ADMIN) && !text.contains(INGEST), "{text}");
    assert_eq!(audit(&server, "?limit=2").len(), 2);
}

#[test]
fn calls_from_many_callers_at_once_are_all_on_record_and_reading_it_is_guarded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let callers: Vec<_> = (0..4)
        .map(|t| {
            let client = server.client();
            thread::spawn(move || {
                for i in 0..5 {
                    let name = format!("p{t}-{i}");
                    let (status, body) =
                        client.post_json("/v1/pipelines", Some(ADMIN), &named(&name));
                    assert_eq!(status, 201, "{body}");
                    let (status, body) =
                        client.delete(&format!("/v1/pipelines/{name}"), Some(ADMIN));
                    assert_eq!(status, 204, "{body}");
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    let records = audit(&server, "?limit=1000");
    assert_eq!(records.len(), 1 + 4 * 5 * 2, "{records:?}");
    for t in 0..4 {
        for i in 0..5 {
            let path = format!("/v1/pipelines/p{t}-{i}");
            assert!(
                (records.iter()).any(|r| r["method"] == "DELETE" && r["path"] == path.as_str()),
                "{path} missing"
            );
        }
    }
    // A refusal with a long path is on record with the path cut short.
    let long = format!("/v1/pipelines/{}", "a".repeat(2_000));
    server.expect_error(
        "a long refused delete",
        server.delete(&long, Some(INGEST)),
        403,
    );
    let last = audit(&server, "?limit=1");
    let path = last[0]["path"].as_str().unwrap();
    assert!(path.len() <= 260 && path.ends_with("..."), "{path}");
    server.expect_error(
        "an ingest token reading the audit log",
        server.get("/v1/audit", Some(INGEST)),
        403,
    );
    for query in ["?limit=0", "?limit=20000", "?limit=x", "?since=1"] {
        server.expect_error(
            &format!("the audit log with {query}"),
            server.get(&format!("/v1/audit{query}"), Some(ADMIN)),
            400,
        );
    }
}
