//! Verified uploads (issue 42): `POST /v1/operators/{name}/{version}?verify=<pipeline>:<savepoint>`
//! runs the candidate's `migrate` over every state of that savepoint another version wrote,
//! before the version is accepted. A candidate that cannot convert a real state is refused
//! with the counterexample (key, window, the state, the error) and not stored; one that can is
//! stored with what was checked. Hostile: a malformed, unknown or escaping target, an enricher.
//! `?verify=examples` runs the examples `weir build` embeds in a component: a version that
//! breaks them is refused with the first that fails; a component without them, or with
//! examples that are not Weir's, is refused.

use serde_json::json;

use crate::server::{
    ADMIN, BASE_TS, PIPELINE, Server, count_sum_v1, count_sum_v2, create_and_start, ev,
};

#[test]
fn an_upload_whose_migration_fails_on_a_real_savepoint_is_refused_with_the_counterexample() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    // Open windows (nothing closes them): "big" sums to 150, "small" to 10.
    server.ingest(
        PIPELINE,
        &[
            ev("big", BASE_TS, 150),
            ev("small", BASE_TS + 1, 5),
            ev("small", BASE_TS + 2, 5),
        ],
    );
    server.wait_for_events_in(PIPELINE, 3);
    server.wait_for_checkpoint_of(PIPELINE, 3);
    server.expect(
        "a savepoint",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/savepoints"),
            Some(ADMIN),
            &json!({"name": "before"}),
        ),
        201,
    );
    let refuses = std::fs::read(crate::support::guest("migrate-refuses")).unwrap();
    let post = |version: &str, target: &str, bytes: &[u8]| {
        let path = format!("/v1/operators/count-sum/{version}?verify={target}");
        server.post_as(&path, Some(ADMIN), Some("application/wasm"), bytes, true)
    };
    let refused = server.expect_error(
        "a migration that fails",
        post("3.0.0", "clicks:before", &refuses),
        400,
    );
    for fragment in [
        "\"big\"",
        "written by 1.0.0",
        "cannot migrate a sum of 150",
        "savepoint \"before\"",
    ] {
        assert!(refused.contains(fragment), "{fragment}: {refused}");
    }
    // Refused, so not stored (and not deleted: the version is free for fixed bytes).
    server.expect_error(
        "the refused version",
        server.get("/v1/operators/count-sum/3.0.0", Some(ADMIN)),
        404,
    );

    // Version 2 of the example migrates every state: stored, with what was checked.
    let v2 = std::fs::read(count_sum_v2()).unwrap();
    let stored = server.expect(
        "a migration that works",
        post("2.0.0", "clicks:before", &v2),
        201,
    );
    assert_eq!(stored["verified"]["migrated"], 2, "{stored}");
    assert_eq!(stored["verified"]["savepoint"], "before");

    // Hostile targets and kinds.
    let enricher = std::fs::read(crate::support::component("enrich-customers")).unwrap();
    for (what, target, bytes, status, fragment) in [
        (
            "no savepoint named",
            "clicks",
            &refuses,
            400,
            "<pipeline>:<savepoint>",
        ),
        ("an unknown pipeline", "nope:before", &refuses, 404, "nope"),
        ("an unknown savepoint", "clicks:nope", &refuses, 404, "nope"),
        (
            "a path for a name",
            "clicks:..%2F..%2Fx",
            &refuses,
            400,
            "savepoint name",
        ),
        ("an enricher", "clicks:before", &enricher, 400, "enricher"),
    ] {
        let error = server.expect_error(what, post("4.0.0", target, bytes), status);
        assert!(error.contains(fragment), "{what}: {error}");
    }
    server.expect_error(
        "nothing stored",
        server.get("/v1/operators/count-sum/4.0.0", Some(ADMIN)),
        404,
    );
    // Without `verify`, the same bytes are taken as before.
    server.upload_ok(
        "count-sum",
        "3.0.0",
        &crate::support::guest("migrate-refuses"),
    );
}

/// `bytes` with a `weir-examples` custom section of `data` appended, as `weir build` embeds a
/// project's examples.
fn with_examples(bytes: &[u8], data: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                return;
            }
        }
    }
    let name = b"weir-examples";
    let mut content = Vec::new();
    leb128(name.len(), &mut content);
    content.extend_from_slice(name);
    content.extend_from_slice(data);
    let mut out = bytes.to_vec();
    out.push(0);
    leb128(content.len(), &mut out);
    out.extend_from_slice(&content);
    out
}

/// Two users' events in one minute and count-sum's results for them.
fn examples() -> Vec<u8> {
    let input = "{\"user\":\"u1\",\"ts\":1000,\"amount\":2}\n{\"user\":\"u1\",\"ts\":2000,\"amount\":3}\n\
                 {\"user\":\"u2\",\"ts\":3000,\"amount\":4}\n";
    let expected = "{\"key\":\"u1\",\"window_start\":0,\"window_end\":60000,\"value\":{\"count\":2,\"sum\":5}}\n\
                    {\"key\":\"u2\",\"window_start\":0,\"window_end\":60000,\"value\":{\"count\":1,\"sum\":4}}\n";
    json!({"name": "count-sum", "kind": "aggregate", "examples": [{"from": "examples/two-users.jsonl",
        "input": input, "expected": expected, "key": "user", "timestamp": "ts", "window": "1m"}]})
    .to_string()
    .into_bytes()
}

#[test]
fn an_upload_that_breaks_the_examples_it_carries_is_refused_with_the_first_that_fails() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let post = |version: &str, bytes: &[u8]| {
        let path = format!("/v1/operators/count-sum/{version}?verify=examples");
        server.post_as(&path, Some(ADMIN), Some("application/wasm"), bytes, true)
    };
    let v1 = with_examples(&std::fs::read(count_sum_v1()).unwrap(), &examples());
    let stored = server.expect("examples that hold", post("1.0.0", &v1), 201);
    assert_eq!(
        stored["verified"]["examples"],
        json!([{"example": "examples/two-users.jsonl", "results": 2}]),
        "{stored}"
    );
    // Version 2 adds an average: the examples it carries no longer hold.
    let v2 = with_examples(&std::fs::read(count_sum_v2()).unwrap(), &examples());
    let refused = server.expect_error("examples that break", post("2.0.0", &v2), 400);
    for fragment in ["examples/two-users.jsonl", "does not hold", "avg"] {
        assert!(refused.contains(fragment), "{fragment}: {refused}");
    }
    server.expect_error(
        "the refused version",
        server.get("/v1/operators/count-sum/2.0.0", Some(ADMIN)),
        404,
    );
    // Hostile: no examples, examples that are not Weir's, bytes that are not a component.
    let bare = std::fs::read(count_sum_v2()).unwrap();
    let message = server.expect_error("no examples", post("2.0.1", &bare), 400);
    assert!(message.contains("carries no examples"), "{message}");
    let garbage = with_examples(&bare, b"{not json");
    let message = server.expect_error("garbage examples", post("2.0.2", &garbage), 400);
    assert!(message.contains("not Weir's"), "{message}");
    server.expect_error("not a component", post("2.0.3", b"\0asm junk"), 400);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("pipelines"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".replay-"))
        .collect();
    assert!(leftovers.is_empty(), "sandboxes left behind: {leftovers:?}");
}
