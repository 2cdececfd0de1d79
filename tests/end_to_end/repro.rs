//! Repro bundles (issue 42): a row a user saw (a candidate's shadow result, a result, a dead
//! letter) becomes, with `weir repro`, a test in the operator's own language that passes on the
//! live version's source and fails on the candidate's, run by the SDK's own test runner (Python
//! `unittest`, `node --test`, `cargo test`), for projects made by `weir new`. Rows that name no
//! window or no logged event, versions that give the same, unknown versions and the wrong token
//! are refused clearly; two repros at once never fail the server.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::polyglot::{project_test, succeed, toolchains, weir};
use crate::server::{
    ADMIN, BASE_TS, INGEST, PATIENCE, Server, count_sum_v1, count_sum_v2, ev, far_future, spec,
};
use crate::support::workspace;

/// The candidate's change in each language's `weir new` source: every window counts one more.
fn candidate_edit(language: &str) -> (&'static str, &'static str) {
    match language {
        "python" => (
            r#"{"count": state.get_int("count", 0),"#,
            r#"{"count": state.get_int("count", 0) + 1,"#,
        ),
        "js" => (
            "count: state.getInt('count') ?? 0n,",
            "count: (state.getInt('count') ?? 0n) + 1n,",
        ),
        _ => (
            r#".with("count", state.get_int("count").unwrap_or(0))"#,
            r#".with("count", state.get_int("count").unwrap_or(0) + 1)"#,
        ),
    }
}

fn source_file(language: &str) -> &'static str {
    match language {
        "python" => "app.py",
        "js" => "app.js",
        _ => "src/lib.rs",
    }
}

/// Builds the project in `dir` and uploads it as `name@version`.
fn build_and_deploy(server: &Server, language: &str, dir: &Path, name: &str, version: &str) {
    let mut build = weir();
    build
        .arg("build")
        .current_dir(dir)
        .env("WEIR_TOOLCHAINS", toolchains());
    if language == "rust" {
        build.env("CARGO_TARGET_DIR", workspace().join("target"));
    }
    succeed(&format!("weir build ({language} {version})"), &mut build);
    succeed(
        &format!("weir deploy ({language} {version})"),
        weir()
            .args(["deploy", "--server", &server.url(""), name, version])
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .current_dir(dir),
    );
}

/// Only the repro's own test, with the project's runner.
fn repro_test(language: &str, dir: &Path, file: &str) -> Command {
    let mut command = project_test(language, dir);
    match language {
        "python" => command.arg(file.trim_end_matches(".py")),
        "js" => command.arg(file),
        _ => command.arg("repro_"),
    };
    command
}

#[test]
fn a_repro_from_a_shadow_difference_passes_on_the_live_version_and_fails_on_the_candidate_in_each_language()
 {
    let projects = tempfile::tempdir().expect("a temporary directory");
    let data = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(data.path());
    for language in ["python", "js", "rust"] {
        let name = format!("repro-{language}");
        succeed(
            &format!("weir new ({language})"),
            weir()
                .args(["new", &name, "--lang", language, "--dir"])
                .arg(projects.path()),
        );
        let dir = projects.path().join(&name);
        // The candidate gives other results than the project's examples say: without them,
        // `weir build` builds it (it refuses a version that breaks its examples).
        let project_file = std::fs::read_to_string(dir.join("weir.toml")).unwrap();
        let without_examples = project_file.split("[[examples]]").next().unwrap();
        std::fs::write(dir.join("weir.toml"), without_examples).unwrap();
        let source = dir.join(source_file(language));
        let live = std::fs::read_to_string(&source).expect("the project's source");
        let (from, to) = candidate_edit(language);
        assert!(
            live.contains(from),
            "{language}: the template changed:\n{live}"
        );
        let candidate = live.replace(from, to);
        build_and_deploy(&server, language, &dir, &name, "1.0.0");
        std::fs::write(&source, &candidate).unwrap();
        build_and_deploy(&server, language, &dir, &name, "2.0.0");
        std::fs::write(&source, &live).unwrap();

        let mut pipeline = spec();
        pipeline["name"] = json!(name);
        pipeline["operators"][0]["name"] = json!(name);
        crate::server::create_and_start_spec(&server, &pipeline);
        server.expect(
            "a shadow rollout",
            server.post_json(
                &format!("/v1/pipelines/{name}/rollout"),
                Some(ADMIN),
                &json!({"version": "2.0.0", "shadow": true}),
            ),
            200,
        );
        server.wait_for_routing(&name, "the shadow applied", |routing| {
            routing["candidate"] == "2.0.0"
        });
        let events = vec![
            ev("ann", BASE_TS + 10, 3),
            ev("bob", BASE_TS + 20, 4),
            ev("ann", BASE_TS + 30, 5),
            ev("ann", BASE_TS + 1_500, 7),
        ];
        let mut all = events.clone();
        all.push(far_future(&events));
        server.ingest(&name, &all);
        let row = server.wait_for("ann's first shadow result", PATIENCE, || {
            (server.output(&name, "shadow.jsonl").into_iter())
                .find(|r| r["key"] == "ann" && r["window_start"] == BASE_TS)
                .ok_or_else(|| "not yet".to_string())
        });
        assert_eq!(
            row["candidate"]["count"], 3,
            "the candidate counts one more: {row}"
        );

        let printed = succeed(
            &format!("weir repro ({language})"),
            weir()
                .args(["repro", "--server", &server.url(""), &name, "--row"])
                .arg(row.to_string())
                .arg("--project")
                .arg(&dir)
                .env("WEIR_ADMIN_TOKEN", ADMIN),
        );
        assert!(printed.contains("2 events"), "{language}: {printed}");
        let file = printed
            .lines()
            .find_map(|line| line.strip_prefix("wrote "))
            .map(|path| {
                Path::new(path.trim())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_else(|| panic!("{language}: no file written: {printed}"));
        // `weir repro` adds the test's module to a Rust crate's root.
        let live = std::fs::read_to_string(&source).unwrap();
        let candidate = live.replace(from, to);
        let passed = succeed(
            &format!("the repro on the live version ({language})"),
            &mut repro_test(language, &dir, &file),
        );
        let ran_one = ["Ran 1 test", "# pass 1", "test result: ok. 1 passed"];
        assert!(
            ran_one.iter().any(|said| passed.contains(said)),
            "{language}: the repro did not run:\n{passed}"
        );
        std::fs::write(&source, &candidate).unwrap();
        let failed = repro_test(language, &dir, &file).output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&failed.stdout),
            String::from_utf8_lossy(&failed.stderr)
        );
        assert!(
            !failed.status.success(),
            "{language}: the repro passed on the candidate:\n{said}"
        );
        assert!(
            said.contains('3'),
            "{language}: the failure shows the count of 3:\n{said}"
        );
        std::fs::write(&source, &live).unwrap();
    }
}

fn repro(server: &Server, pipeline: &str, token: &str, body: &Value) -> (u16, String) {
    server.post_json(
        &format!("/v1/pipelines/{pipeline}/repro"),
        Some(token),
        body,
    )
}

#[test]
fn repros_of_rows_that_name_nothing_to_reproduce_are_refused_and_two_at_once_never_fail() {
    let data = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(data.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "1.0.1", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    crate::server::create_and_start(&server);
    let pipeline = crate::server::PIPELINE;
    let events = [
        ev("ann", BASE_TS + 10, 3),
        ev("ann", BASE_TS + 30, 5),
        ev("bob", BASE_TS + 40, 1),
    ];
    // A line the operator refuses (no numeric amount) in ann's window: a dead letter.
    let bad = json!({"user": "ann", "ts": BASE_TS + 50, "amount": "many"});
    let batch = format!(
        "{}{bad}\n{}",
        crate::server::jsonl(&events),
        crate::server::jsonl(&[far_future(&events)])
    );
    let (status, body) = server.post_as(
        &crate::server::events_path(pipeline),
        Some(INGEST),
        Some("application/x-ndjson"),
        batch.as_bytes(),
        false,
    );
    assert_eq!(status, 202, "{body}");
    let result = server.wait_for("ann's result", PATIENCE, || {
        (server.results(pipeline).into_iter())
            .find(|r| r["key"] == "ann")
            .ok_or_else(|| "not yet".to_string())
    });
    let versions = json!(["1.0.0", "2.0.0"]);

    let bundle = server.expect(
        "a repro of a result",
        repro(
            &server,
            pipeline,
            ADMIN,
            &json!({"row": result, "versions": versions}),
        ),
        200,
    );
    assert_eq!(bundle["key"], "ann");
    assert_eq!(bundle["made_from"], "result");
    assert_eq!(bundle["expected"]["output"], result["value"], "{bundle}");
    assert!(bundle.get("note").is_none(), "{bundle}");
    assert_eq!(bundle["candidate"]["output"]["avg"], 4.0, "{bundle}");
    let amounts: Vec<&Value> = (bundle["events"].as_array().unwrap().iter())
        .map(|e| &e["fields"][2][1])
        .collect();
    assert_eq!(amounts, [&json!(3), &json!(5), &json!("many")], "{bundle}");

    let dead = server.wait_for_dead_letters(pipeline, 1).remove(0);
    let from_dead = server.expect(
        "a repro of a dead letter",
        repro(
            &server,
            pipeline,
            ADMIN,
            &json!({"row": dead, "versions": versions}),
        ),
        200,
    );
    assert_eq!(from_dead["made_from"], "dead letter");
    assert_eq!(from_dead["window_start"], BASE_TS);

    let refused = |what: &str, body: Value, status: u16| {
        let message = server.expect_error(what, repro(&server, pipeline, ADMIN, &body), status);
        assert!(
            !message.contains(&*data.path().to_string_lossy()),
            "{message}"
        );
        message
    };
    let message = refused("no versions and no rollout", json!({"row": result}), 400);
    assert!(message.contains("versions"), "{message}");
    let message = refused(
        "versions that give the same",
        json!({"row": result, "versions": ["1.0.0", "1.0.1"]}),
        409,
    );
    assert!(message.contains("nothing to reproduce"), "{message}");
    let mut nobody = result.clone();
    nobody["key"] = json!("nobody");
    refused(
        "a key with no events",
        json!({"row": nobody, "versions": versions}),
        404,
    );
    let late = json!({"line": 3, "key": "ann", "timestamp": BASE_TS, "watermark": BASE_TS + 5000,
        "event": {}, "reason": "late"});
    refused(
        "a late event",
        json!({"row": late, "versions": versions}),
        400,
    );
    refused(
        "a row that is text",
        json!({"row": "ann", "versions": versions}),
        400,
    );
    refused(
        "an unknown version",
        json!({"row": result, "versions": ["1.0.0", "9.9.9"]}),
        404,
    );
    refused(
        "a version that is a path",
        json!({"row": result, "versions": ["1.0.0", "../x"]}),
        400,
    );
    refused(
        "an unknown field",
        json!({"row": result, "versions": versions, "x": 1}),
        400,
    );
    let mut inverted = result.clone();
    inverted["window_end"] = json!(BASE_TS - 1);
    refused(
        "a window that ends before it starts",
        json!({"row": inverted, "versions": versions}),
        400,
    );
    let (status, _) = repro(
        &server,
        pipeline,
        INGEST,
        &json!({"row": result, "versions": versions}),
    );
    assert_eq!(status, 403, "an ingest token made a repro");

    // Two at once: each gets its bundle or a 429 to retry, never a failure.
    let both: Vec<u16> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    repro(
                        &server,
                        pipeline,
                        ADMIN,
                        &json!({"row": result, "versions": versions}),
                    )
                    .0
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert!(both.iter().all(|s| *s == 200 || *s == 429), "{both:?}");
    assert!(both.contains(&200), "{both:?}");
    std::thread::sleep(Duration::from_millis(10));
    let leftovers: Vec<_> = std::fs::read_dir(data.path().join("pipelines"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".replay-"))
        .collect();
    assert!(leftovers.is_empty(), "sandboxes left behind: {leftovers:?}");
}
