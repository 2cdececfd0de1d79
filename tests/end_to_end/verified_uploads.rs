//! Verified uploads (issue 42): `POST /v1/operators/{name}/{version}?verify=<pipeline>:<savepoint>`
//! runs the candidate's `migrate` over every state of that savepoint another version wrote,
//! before the version is accepted. A candidate that cannot convert a real state is refused
//! with the counterexample (key, window, the state, the error) and not stored; one that can is
//! stored with what was checked. Hostile: a malformed, unknown or escaping target, an enricher.

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
