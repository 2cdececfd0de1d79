//! `weir serve` under hostile callers and bad days, through the real binary on loopback: names
//! that are paths, specs that name files, tokens of the wrong scope on every route, timestamps at
//! the ends of `i64`, a busy pipeline beside an idle one, floods of half-sent requests, a full
//! disk, damaged files, swapped components, promotions and resumed result streams. Each class is
//! tried with several variants, and each test checks that nothing outside the pipeline's
//! directory was touched and that the other pipelines kept working.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::reference::Ev;
use crate::server::{
    ADMIN, BASE_TS, INGEST, PATIENCE, PIPELINE, Server, assert_same_emissions, assert_unique_ids,
    clicks, count_sum_v1, count_sum_v2, create_and_start, create_and_start_spec, ev, events_path,
    far_future, jsonl, live_model, spec,
};
use crate::support::guest;

/// A spec like [`spec`] with another name.
fn spec_named(name: &str) -> Value {
    let mut spec = spec();
    spec["name"] = name.into();
    spec
}

/// `events` and then the far-future event that closes all their windows, as sent.
fn with_end(events: &[Ev]) -> Vec<Ev> {
    let mut all = events.to_vec();
    all.push(far_future(events));
    all
}

/// Every file below `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

/// A raw HTTP request on a new connection; the status of the answer.
fn raw_status(server: &Server, request: &str) -> u16 {
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).expect("connecting");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).expect("sending");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

// ---------------------------------------------------------------------------------------------
// Names and paths.
// ---------------------------------------------------------------------------------------------

#[test]
fn names_that_are_paths_are_refused_and_touch_nothing() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let canary = root.path().join("canary.txt");
    std::fs::write(&canary, "still here").unwrap();
    let server = Server::start(&data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start_spec(&server, &spec_named("keep"));
    server.ingest("keep", &clicks(5, 1));
    // The checkpoint of all five written (and nothing after it: an idle pipeline takes none),
    // so that the files listed do not change on their own.
    server.wait_for_checkpoint_of("keep", 5);
    thread::sleep(Duration::from_millis(200));
    let before = tree(&data);

    // Created by name: every variant is a 400 that states the rule.
    let long = "x".repeat(65);
    for name in [
        "..", ".", ".hidden", "a/b", "a\\b", "../x", "é", "a..b", "-x", "", "a b", "a\nb", &long,
    ] {
        let message = server.expect_error(
            &format!("creating pipeline {name:?}"),
            server.post_json("/v1/pipelines", Some(ADMIN), &spec_named(name)),
            400,
        );
        assert!(message.contains("not a valid name"), "{name:?}: {message}");
    }
    // Named in the path, percent-encoded or not: 400 before anything is looked up.
    for path in [
        "/v1/pipelines/%2e%2e",
        "/v1/pipelines/%2E",
        "/v1/pipelines/..%2f..",
        "/v1/pipelines/%2fetc",
        "/v1/pipelines/.keep",
        "/v1/pipelines/%00",
    ] {
        server.expect_error(
            &format!("DELETE {path}"),
            server.delete(path, Some(ADMIN)),
            400,
        );
        server.expect_error(
            &format!("POST {path}/stop"),
            server.post(&format!("{path}/stop"), Some(ADMIN), b""),
            400,
        );
        server.expect_error(&format!("GET {path}"), server.get(path, Some(ADMIN)), 400);
    }
    let v2 = std::fs::read(count_sum_v2()).unwrap();
    for (name, version) in [
        ("%2e%2e", "1.0.0"),
        ("count-sum", "%2e%2e"),
        ("x", "..%2fy"),
        (".hidden", "1"),
        ("count-sum", ".1"),
    ] {
        server.expect_error(
            &format!("uploading {name}/{version}"),
            server.upload(name, version, &v2, Some(ADMIN)),
            400,
        );
        server.expect_error(
            &format!("deleting {name}/{version}"),
            server.delete(&format!("/v1/operators/{name}/{version}"), Some(ADMIN)),
            400,
        );
    }
    assert_eq!(
        tree(&data),
        before,
        "a refused call changed the data directory"
    );
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "still here");
    let status = server.status("keep");
    assert_eq!(status["state"], "running", "{status}");
}

#[test]
fn served_specs_name_only_what_the_server_provides() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let outside = root.path().join("outside");
    let server = Server::start(&data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let module = count_sum_v1().display().to_string();
    let events = root.path().join("events.jsonl");
    std::fs::write(&events, "{\"user\":\"a\",\"ts\":1}\n").unwrap();
    let with = |patch: Value| {
        let mut spec = spec_named("evil");
        for (field, value) in patch.as_object().unwrap() {
            spec[field] = value.clone();
        }
        spec
    };
    let cases = [
        (
            with(json!({"source": {"type": "file", "path": events}})),
            "source",
        ),
        (with(json!({"source": {"type": "stdin"}})), "source"),
        (
            with(json!({"source": {"type": "generator", "events": 1000000000}})),
            "source",
        ),
        (
            with(
                json!({"operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate", "module": module}]}),
            ),
            "module",
        ),
        (with(json!({"state": {"dir": outside}})), "state.dir"),
        (with(json!({"state": {"dir": "../../x"}})), "state.dir"),
        (
            with(json!({"sinks": {"results": outside.join("r.jsonl")}})),
            "sinks.results",
        ),
        (
            with(json!({"sinks": {"late": "../../../late.jsonl"}})),
            "sinks.late",
        ),
        (
            with(json!({"sinks": {"dead_letters": "out/../../x"}})),
            "sinks.dead_letters",
        ),
        (
            with(json!({"sinks": {"late": "results.jsonl"}})),
            "the same file",
        ),
        (
            with(json!({"sinks": {"results": "shadow.jsonl"}})),
            "shadow",
        ),
        (
            with(json!({"sinks": {"results": "stdout"}})),
            "sinks.results",
        ),
        (
            with(json!({"sinks": {"results": "stderr"}})),
            "sinks.results",
        ),
        (
            with(json!({"window": {"type": "sliding", "size": "1d", "slide": "1ms"}})),
            "limit is 1000",
        ),
        (with(json!({"shards": 100000})), "shards"),
        (with(json!({"batch_size": 4000000000u64})), "batch_size"),
    ];
    for (spec, expected) in cases {
        let message = server.expect_error(
            &format!("creating {spec}"),
            server.post_json("/v1/pipelines", Some(ADMIN), &spec),
            400,
        );
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    assert!(
        !outside.exists(),
        "a refused spec created {}",
        outside.display()
    );
    let (status, body) = server.get("/v1/pipelines", Some(ADMIN));
    assert_eq!((status, body.trim()), (200, "[]"), "nothing was created");
    // A sink inside the pipeline's own out/ directory is fine.
    create_and_start_spec(
        &server,
        &with(json!({"sinks": {"results": "mine/results.jsonl", "late": "discard"}})),
    );
    let events = clicks(30, 3);
    server.ingest("evil", &events);
    server.ingest("evil", &[far_future(&events)]);
    server.wait_for("results in the pipeline's own file", PATIENCE, || {
        let path = data.join("pipelines/evil/out/mine/results.jsonl");
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > 0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Scopes and tokens.
// ---------------------------------------------------------------------------------------------

#[test]
fn every_route_answers_by_its_scope() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    let deploy = json!([{"name": "ci", "token": "deploy-secret-1", "scopes": ["deploy"]}]);
    std::fs::write(&tokens, deploy.to_string()).unwrap();
    let server = Server::start_env(
        dir.path(),
        &["--tokens", tokens.to_str().unwrap()],
        &[
            ("WEIR_METRICS_TOKEN", "metrics-secret"),
            ("WEIR_READ_TOKEN", "read-secret-1"),
        ],
    );
    let openapi = server.expect("GET /openapi.json", server.get("/openapi.json", None), 200);
    let paths = openapi["paths"].as_object().expect("paths");
    let mut checked = 0;
    for (template, operations) in paths {
        let path = template
            .replace("{name}", "nothing-here")
            .replace("{version}", "9.9.9");
        for (method, operation) in operations.as_object().expect("operations") {
            let needs = operation["security"][0]["bearer"][0].as_str();
            let call = |token: Option<&str>| -> u16 {
                match method.as_str() {
                    "get" => server.get(&path, token).0,
                    "delete" => server.delete(&path, token).0,
                    "post" => server.post(&path, token, b"{}").0,
                    "put" => server.put_json(&path, token, &json!({})).0,
                    other => panic!("a method the test does not know: {other}"),
                }
            };
            let what = format!("{method} {template}");
            match needs {
                None => {
                    for token in [None, Some("wrong-token-1"), Some(INGEST)] {
                        let code = call(token);
                        assert!(code != 401 && code != 403, "{what} with {token:?}: {code}");
                    }
                }
                Some(scope) => {
                    assert_eq!(call(None), 401, "{what} without a token");
                    assert_eq!(
                        call(Some("wrong-token-1")),
                        401,
                        "{what} with an unknown token"
                    );
                    let ingest = call(Some(INGEST));
                    let metrics = call(Some("metrics-secret"));
                    let read = call(Some("read-secret-1"));
                    let deploy = call(Some("deploy-secret-1"));
                    let admin = call(Some(ADMIN));
                    assert!(
                        admin != 401 && admin != 403,
                        "{what} with the admin token: {admin}"
                    );
                    match scope {
                        "ingest" | "read" => {
                            assert!(ingest != 401 && ingest != 403, "{what}: {ingest}")
                        }
                        _ => assert_eq!(ingest, 403, "{what} with the ingest token"),
                    }
                    match scope {
                        "read" => assert!(read != 401 && read != 403, "{what}: {read}"),
                        _ => assert_eq!(read, 403, "{what} with the read token"),
                    }
                    match scope {
                        "read" | "deploy" => {
                            assert!(deploy != 401 && deploy != 403, "{what}: {deploy}")
                        }
                        _ => assert_eq!(deploy, 403, "{what} with the deploy token"),
                    }
                    match scope {
                        "metrics" => assert!(metrics != 401 && metrics != 403, "{what}: {metrics}"),
                        _ => assert_eq!(metrics, 403, "{what} with the metrics token"),
                    }
                }
            }
            checked += 1;
        }
    }
    // The document (and so the table it is made from) against the scopes this test expects,
    // written out here on their own.
    let expected: &[(&str, &str, Option<&str>)] = &[
        ("get", "/healthz", None),
        ("get", "/openapi.json", None),
        ("get", "/", None),
        ("get", "/console/{file}", None),
        ("get", "/metrics", Some("metrics")),
        ("get", "/v1/whoami", Some("read")),
        ("get", "/v1/audit", Some("admin")),
        ("get", "/v1/tokens", Some("admin")),
        ("post", "/v1/tokens", Some("admin")),
        ("delete", "/v1/tokens/{name}", Some("admin")),
        ("post", "/v1/tokens/{name}/rotate", Some("admin")),
        ("get", "/v1/tenants", Some("admin")),
        ("put", "/v1/tenants/{name}", Some("admin")),
        ("get", "/v1/operators", Some("read")),
        ("post", "/v1/operators/{name}/{version}", Some("deploy")),
        ("get", "/v1/operators/{name}/{version}", Some("read")),
        ("delete", "/v1/operators/{name}/{version}", Some("admin")),
        ("get", "/v1/pipelines", Some("read")),
        ("post", "/v1/pipelines", Some("deploy")),
        ("get", "/v1/pipelines/{name}", Some("read")),
        ("get", "/v1/pipelines/{name}/spec", Some("read")),
        ("get", "/v1/pipelines/{name}/dead-letters", Some("read")),
        ("delete", "/v1/pipelines/{name}", Some("admin")),
        ("post", "/v1/pipelines/{name}/start", Some("deploy")),
        ("post", "/v1/pipelines/{name}/stop", Some("deploy")),
        ("post", "/v1/pipelines/{name}/events", Some("ingest")),
        ("get", "/v1/pipelines/{name}/results", Some("read")),
        ("post", "/v1/pipelines/{name}/rollout", Some("deploy")),
        ("post", "/v1/pipelines/{name}/rollback", Some("deploy")),
        ("post", "/v1/pipelines/{name}/promote", Some("deploy")),
        ("post", "/v1/pipelines/{name}/replay", Some("deploy")),
        ("post", "/v1/pipelines/{name}/repro", Some("deploy")),
        (
            "post",
            "/v1/pipelines/{name}/quarantine/redrive",
            Some("deploy"),
        ),
        ("post", "/v1/pipelines/{name}/savepoints", Some("deploy")),
        ("get", "/v1/pipelines/{name}/savepoints", Some("read")),
        (
            "delete",
            "/v1/pipelines/{name}/savepoints/{savepoint}",
            Some("admin"),
        ),
        (
            "post",
            "/v1/pipelines/{name}/savepoints/{savepoint}/fork",
            Some("deploy"),
        ),
    ];
    assert_eq!(checked, expected.len(), "routes in the document: {checked}");
    for (method, path, scope) in expected {
        let operation = &paths[*path][*method];
        assert_eq!(
            operation["security"][0]["bearer"][0].as_str(),
            *scope,
            "{method} {path}: {operation}"
        );
    }
    // The defect this replaces: a path that merely ends like the ingest route.
    let v1 = std::fs::read(count_sum_v1()).unwrap();
    server.expect_error(
        "uploading as `events` with the ingest token",
        server.upload("x", "events", &v1, Some(INGEST)),
        403,
    );
    // The scheme is case-insensitive; anything but a bearer token is refused.
    for (header, expected) in [
        (format!("bearer {ADMIN}"), 200),
        (format!("BEARER {ADMIN}"), 200),
        (format!("Bearer  {ADMIN} "), 200),
        (format!("Basic {ADMIN}"), 401),
        (format!("Bearer{ADMIN}"), 401),
        ("Bearer ".to_owned(), 401),
    ] {
        let request = format!(
            "GET /v1/pipelines HTTP/1.1\r\nHost: x\r\nAuthorization: {header}\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(raw_status(&server, &request), expected, "{header:?}");
    }
}

#[test]
fn bad_tokens_stop_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (
            r#"[{"token": "same-token-1", "scopes": ["admin"]}, {"token": "same-token-1", "scopes": ["ingest"]}]"#,
            &[],
            "twice",
        ),
        (
            r#"[{"token": "          ", "scopes": ["admin"]}]"#,
            &[],
            "blank",
        ),
        (
            r#"[{"token": "short", "scopes": ["admin"]}]"#,
            &[],
            "at least 8",
        ),
        (
            r#"[{"name": "../x", "token": "good-token-1", "scopes": ["admin"]}]"#,
            &[],
            "not a valid name",
        ),
        ("[]", &[("WEIR_INGEST_TOKEN", "   ")], "blank"),
    ];
    for (tokens, env, expected) in cases {
        std::fs::write(&file, tokens).unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .arg("--tokens")
            .arg(&file)
            .env_remove("WEIR_ADMIN_TOKEN")
            .env_remove("WEIR_INGEST_TOKEN")
            .envs(env.iter().copied())
            .output()
            .expect("running weir serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{tokens} was accepted: {stderr}");
        assert!(
            stderr.contains(expected),
            "{tokens}: expected {expected:?} in {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Time.
// ---------------------------------------------------------------------------------------------

#[test]
fn extreme_and_far_future_timestamps_are_dead_letters_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    for (name, window) in [
        (
            "sliding",
            json!({"type": "sliding", "size": 10000, "slide": 1000}),
        ),
        ("tumbling", json!({"type": "tumbling", "size": 1000})),
        ("session", json!({"type": "session", "gap": 1000})),
    ] {
        let mut spec = spec_named(name);
        spec["window"] = window;
        create_and_start_spec(&server, &spec);
        let now = chrono_now_ms();
        let bad = [
            i64::MIN.to_string(),
            i64::MAX.to_string(),
            "-8640000000000001".to_owned(),
            "8640000000000000".to_owned(),
            (now + 2 * 86_400_000).to_string(),
        ];
        let mut body: String = bad
            .iter()
            .map(|ts| format!("{{\"user\":\"evil\",\"ts\":{ts},\"amount\":1}}\n"))
            .collect();
        let good = clicks(40, 4);
        body.push_str(&jsonl(&good));
        body.push_str(&jsonl(&[far_future(&good)]));
        server.expect(
            &format!("sending extreme timestamps to {name}"),
            server.post_as(
                &events_path(name),
                Some(INGEST),
                Some("application/x-ndjson"),
                body.as_bytes(),
                false,
            ),
            202,
        );
        let dead = server.wait_for_dead_letters(name, bad.len());
        assert_eq!(dead.len(), bad.len(), "{dead:?}");
        assert!(
            dead.iter().all(|d| d["reason"]
                .as_str()
                .is_some_and(|r| r.contains("range") || r.contains("ahead of the wall clock"))),
            "{dead:?}"
        );
        // The far-future event did not move the watermark: the good events were not late.
        let results = server.wait_for("results", PATIENCE, || {
            let results = server.results(name);
            if results.is_empty() {
                Err("none yet".into())
            } else {
                Ok(results)
            }
        });
        assert!(server.output(name, "late.jsonl").len() < good.len() / 4);
        assert!(!results.is_empty(), "no results for {name}");
        for r in &results {
            assert!(
                r["window_start"].as_i64() < r["window_end"].as_i64(),
                "a window that ends before it starts: {r}"
            );
        }
    }
    let health = server.expect("GET /healthz", server.get("/healthz", None), 200);
    assert_eq!(health["status"], "ok");
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// ---------------------------------------------------------------------------------------------
// Locks, threads and connections.
// ---------------------------------------------------------------------------------------------

/// Waits until `pipeline`'s router has handed events to its shards (a spinning pipeline is then
/// busy in a call).
fn wait_until_routed(server: &Server, pipeline: &str) {
    server.wait_for(&format!("{pipeline} to route its events"), PATIENCE, || {
        let status = server.status(pipeline);
        match status["events_in"].as_u64() {
            Some(n) if n > 0 => Ok(()),
            _ => Err(status.to_string()),
        }
    });
}

/// A pipeline whose operator spins for a minute on `spin…` keys.
fn spinning_spec(name: &str) -> Value {
    let mut spec = spec_named(name);
    spec["operators"] = json!([{"name": "spin", "version": "1.0.0", "kind": "aggregate"}]);
    spec["sandbox"] = json!({"call_timeout": "60s"});
    spec
}

#[test]
fn a_busy_pipeline_blocks_no_other_and_health_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        &[
            "--stop-wait",
            "1s",
            "--stall-after",
            "2s",
            "--shutdown-timeout",
            "2s",
        ],
    );
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("spin", "1.0.0", &guest("infinite-loop"));
    create_and_start_spec(&server, &spinning_spec("busy"));
    create_and_start(&server);
    let spin: Vec<Ev> = (0..50).map(|i| ev("spin-1", BASE_TS + i, 1)).collect();
    server.ingest("busy", &spin);
    server.ingest("busy", &spin);
    // Once the router has handed the spinning batch to the shard, the pipeline is busy.
    wait_until_routed(&server, "busy");

    // The busy pipeline's stop answers within its wait, saying it is still stopping...
    let started = Instant::now();
    let (status, body) = server.post("/v1/pipelines/busy/stop", Some(ADMIN), b"");
    assert_eq!(status, 202, "{body}{}", server.diag());
    // (Against the spinner's 60 s: a stop that waited for it would take a minute.)
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // ... while every other call, about every pipeline, stays fast: each round of four calls
    // in well under the 60 s one of them would take if it waited on the spinning pipeline
    // (10 s leaves room for a slow disk's syncs on a loaded machine).
    let events = clicks(200, 5);
    for chunk in events.chunks(20) {
        let started = Instant::now();
        server.ingest(PIPELINE, chunk);
        server.status(PIPELINE);
        server.status("busy");
        server.expect("listing", server.get("/v1/pipelines", Some(ADMIN)), 200);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "calls took {:?} beside a busy pipeline",
            started.elapsed()
        );
    }
    server.ingest(PIPELINE, &[far_future(&events)]);
    let expected = live_model(&with_end(&events));
    let results = server.wait_for_results(PIPELINE, &expected);
    assert_same_emissions(&server, &results, &expected);
    let status = server.status("busy");
    assert_eq!(status["state"], "stopping", "{status}");
    server.expect_error(
        "starting a pipeline that is still stopping",
        server.post("/v1/pipelines/busy/start", Some(ADMIN), b""),
        409,
    );

    // A pipeline that stopped responding makes /healthz say so.
    let dir2 = tempfile::tempdir().unwrap();
    let other = Server::start_with(dir2.path(), &["--stall-after", "2s"]);
    other.upload_ok("spin", "1.0.0", &guest("infinite-loop"));
    create_and_start_spec(&other, &spinning_spec("stuck"));
    other.ingest("stuck", &spin);
    let health = other.wait_for(
        "/healthz to report the stuck pipeline",
        PATIENCE,
        || match other.get("/healthz", Some(ADMIN)) {
            (503, body) => Ok(other.json("healthz", &body)),
            (code, body) => Err(format!("{code} {body}")),
        },
    );
    assert_eq!(health["stalled"], json!(["stuck"]), "{health}");

    // SIGTERM ends the server within the shutdown timeout even with a stuck pipeline.
    server.signal("TERM");
    let exit = server.wait_exit(Duration::from_secs(15));
    assert!(
        exit.is_some(),
        "weir serve ignored SIGTERM{}",
        server.diag()
    );
}

#[test]
fn a_second_sigterm_exits_at_once_and_a_clean_one_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--shutdown-timeout", "60s"]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("spin", "1.0.0", &guest("infinite-loop"));
    let mut spec = spec();
    spec["checkpoint_interval"] = "1h".into(); // only the shutdown's final checkpoint records them
    create_and_start_spec(&server, &spec);
    let events = clicks(100, 4);
    server.ingest(PIPELINE, &events);
    server.wait_for_events_in(PIPELINE, events.len());
    create_and_start_spec(&server, &spinning_spec("busy"));
    server.ingest("busy", &[ev("spin-1", BASE_TS, 1)]);
    wait_until_routed(&server, "busy");
    server.signal("TERM");
    // The healthy pipeline stops with a final checkpoint (requests are still answered while
    // the pipelines stop); the busy one holds the server until its 60 s timeout.
    server.wait_for_checkpoint_of(PIPELINE, events.len());
    thread::sleep(Duration::from_millis(200));
    assert!(
        server.wait_exit(Duration::from_millis(10)).is_none(),
        "exited before its timeout"
    );
    server.signal("TERM");
    let exit = server.wait_exit(Duration::from_secs(5));
    assert!(
        exit.is_some(),
        "a second SIGTERM did not end the server{}",
        server.diag()
    );
    drop(server);

    // The healthy pipeline's final checkpoint was taken (read offline, before any replay).
    let state = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("state")
        .arg(dir.path().join("pipelines").join(PIPELINE).join("data"))
        .output()
        .expect("running weir state");
    let manifest: Value = serde_json::from_str(
        String::from_utf8_lossy(&state.stdout)
            .lines()
            .next()
            .expect("a manifest line"),
    )
    .unwrap();
    assert_eq!(manifest["manifest"]["events"], events.len(), "{manifest}");
    // A restart resumes with every event.
    std::fs::remove_dir_all(dir.path().join("pipelines/busy")).unwrap();
    let mut server = Server::start(dir.path());
    let status = server.wait_for_events_in(PIPELINE, events.len());
    assert_eq!(status["state"], "running", "{status}");
    server.signal("TERM");
    assert!(
        server.wait_exit(Duration::from_secs(15)).is_some(),
        "{}",
        server.diag()
    );
}

#[test]
fn a_second_server_on_the_same_data_directory_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let started = Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .env("WEIR_ADMIN_TOKEN", ADMIN)
        .output()
        .expect("running a second weir serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("in use by another weir serve"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let listed = server.expect(
        "listing operators",
        server.get("/v1/operators", Some(ADMIN)),
        200,
    );
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn a_flood_of_half_sent_requests_does_not_silence_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &[
            "--max-connections",
            "64",
            "--pressure-timeout",
            "1s",
            "--idle-timeout",
            "30s",
        ],
    );
    let address = server.url("").trim_start_matches("http://").to_owned();
    // More half-sent requests than the server allows connections.
    let mut flood = Vec::new();
    for _ in 0..400 {
        if let Ok(mut stream) = TcpStream::connect(&address) {
            let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
            flood.push(stream);
        }
    }
    let started = Instant::now();
    let health = server.wait_for("/healthz under the flood", PATIENCE, || {
        match server.get("/healthz", None) {
            (200, body) => Ok(body),
            (code, body) => Err(format!("{code} {body}")),
        }
    });
    assert!(health.contains("ok"), "{health}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // The idle connections are closed by the server, not kept for ever.
    for (i, stream) in flood[..20].iter_mut().enumerate() {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 256];
        match stream.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("half-sent connection {i} was not closed by the server: {other:?}"),
        }
    }
}

#[test]
fn headers_trickled_a_byte_at_a_time_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--header-timeout", "2s", "--idle-timeout", "60s"],
    );
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut streams: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&address).expect("connecting"))
        .collect();
    let started = Instant::now();
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut cut = vec![None; streams.len()];
    // One byte every 200 ms: never silent long enough for the idle timeout.
    for i in 0..60 {
        for (n, stream) in streams.iter_mut().enumerate() {
            let byte = request.get(i).copied().unwrap_or(b'a');
            if cut[n].is_none() && stream.write_all(&[byte]).is_err() {
                cut[n] = Some(started.elapsed());
            }
        }
        thread::sleep(Duration::from_millis(200));
        if cut.iter().all(Option::is_some) {
            break;
        }
    }
    // The server closed each one soon after its header timeout (writes then fail), instead of
    // keeping it for the 60 s idle timeout.
    for (n, when) in cut.iter().enumerate() {
        match when {
            Some(when) => assert!(
                *when < Duration::from_secs(8),
                "connection {n} cut after {when:?}"
            ),
            None => panic!("connection {n} still open after trickling for 12 s"),
        }
    }
    let health = server.expect("GET /healthz", server.get("/healthz", None), 200);
    assert_eq!(health["status"], "ok");
}

#[test]
fn request_bodies_in_flight_are_held_to_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--max-inflight", "65536"]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    create_and_start_spec(&server, &spec_named("other"));
    create_and_start_spec(&server, &spec_named("third"));
    let address = server.url("").trim_start_matches("http://").to_owned();
    // A sender announces a body as large as the whole budget, sends almost a pipeline's
    // quarter of it (16 KiB: bodies are charged what they deliver) and stops.
    let slow_sender = |pipeline: &str| {
        let mut stream = TcpStream::connect(&address).unwrap();
        write!(
            stream,
            "POST /v1/pipelines/{pipeline}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {INGEST}\r\nContent-Length: 65536\r\n\r\n{}",
            " ".repeat((16 << 10) - 100)
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        stream
    };
    // Whether the server answered the slow sender (it lost the race for the budget to a probe).
    let answered = |stream: &mut TcpStream| {
        let mut buf = [0u8; 64];
        !matches!(stream.read(&mut buf), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    };
    // Until `probe` answers 503 saying `budget`, with `stream` (re-opened to `pipeline` when
    // the server answered it instead) holding its bytes.
    let spent = |stream: &mut TcpStream,
                 pipeline: &str,
                 budget: &str,
                 probe: &dyn Fn() -> (u16, String)| {
        server.wait_for(
            &format!("a 503 while the {budget} budget is spent"),
            PATIENCE,
            || match probe() {
                (503, body) if body.contains(budget) => Ok(body),
                (code, body) => {
                    if answered(stream) {
                        *stream = slow_sender(pipeline);
                    }
                    Err(format!("{code} {body}"))
                }
            },
        )
    };
    let mut stream = slow_sender(PIPELINE);
    // Once the server has read what the sender sent, the pipeline's share is spent: the next
    // body is refused with 503, not queued.
    let body = spent(&mut stream, PIPELINE, "pipeline", &|| {
        send(&server, PIPELINE, &clicks(5, 1))
    });
    assert!(body.contains("--max-inflight"), "{body}");
    // Another pipeline's ingest, with the same token, goes on; so does a create.
    assert_eq!(send(&server, "other", &clicks(5, 1)).0, 202);
    server.expect(
        "a create while one pipeline's share is spent",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec_named("fourth")),
        201,
    );
    // A second slow sender on another pipeline with the same token: the token's half is spent,
    // and its ingest into a third pipeline is refused, while another token's goes on.
    let mut second = slow_sender("other");
    spent(&mut second, "other", "token", &|| {
        send(&server, "third", &clicks(5, 1))
    });
    let (code, body) = server.post_as(
        "/v1/pipelines/third/events",
        Some(ADMIN),
        Some("application/x-ndjson"),
        jsonl(&clicks(5, 1)).as_bytes(),
        false,
    );
    assert_eq!(
        code, 202,
        "another token's ingest while one token's share is spent: {body}"
    );
    // Requests without a body still pass, and the budget returns when the senders go.
    server.status(PIPELINE);
    drop(stream);
    drop(second);
    server.wait_for("the budget to return", PATIENCE, || {
        match send(&server, PIPELINE, &clicks(5, 1)) {
            (202, _) => Ok(()),
            (code, body) => Err(format!("{code} {body}")),
        }
    });
}

#[test]
fn idle_pipelines_cost_no_cpu_and_list_fast() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let n = 100;
    for i in 0..n {
        create_and_start_spec(&server, &spec_named(&format!("idle-{i}")));
    }
    thread::sleep(Duration::from_secs(1));
    let cpu = || -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", server.pid())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    };
    // The least of up to three 3-second windows: the tail of a hundred starts can spill into
    // the first on a loaded machine, while a server that burns CPU when idle fails all three.
    let mut used = f64::MAX;
    for _ in 0..3 {
        let before = cpu();
        thread::sleep(Duration::from_secs(3));
        used = used.min(cpu() - before);
        if used < 0.3 {
            break;
        }
    }
    assert!(
        used < 0.3,
        "{n} idle pipelines used {used:.2} s of CPU in 3 s"
    );
    let started = Instant::now();
    let listed = server.expect("listing", server.get("/v1/pipelines", Some(ADMIN)), 200);
    assert_eq!(listed.as_array().map(Vec::len), Some(n));
    // A listing that waited on each pipeline in turn (50 ms each) would take 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "listing took {:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Disks and files.
// ---------------------------------------------------------------------------------------------

/// A small file system for the data directory: a tmpfs mounted here when the machine allows
/// it (root), unmounted when dropped.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(SmallDisk { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk; returns the filler file.
    pub fn fill(&self) -> std::path::PathBuf {
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 << 10];
        while file.write_all(&block).is_ok() {}
        let mut byte = [0u8; 1];
        while file.write_all(&byte).is_ok() {
            byte[0] = 1;
        }
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Sends events, returning the status.
fn send(server: &Server, pipeline: &str, events: &[Ev]) -> (u16, String) {
    server.post_as(
        &events_path(pipeline),
        Some(INGEST),
        Some("application/x-ndjson"),
        jsonl(events).as_bytes(),
        false,
    )
}

/// Checks the full-disk promise on `server`: a refused batch answers 507, leaves nothing in the
/// log, and none of its events is ever processed; the next batches are taken whole.
fn refused_batches_leave_nothing(server: &Server, fill: impl FnOnce() -> Box<dyn FnOnce()>) {
    let all = clicks(300, 5);
    let (first, rest) = all.split_at(100);
    let (refused, last) = rest.split_at(100);
    server.ingest(PIPELINE, first);
    server.wait_for_events_in(PIPELINE, first.len());
    let log = server
        .data()
        .join("pipelines")
        .join(PIPELINE)
        .join("ingest.jsonl");
    let length = std::fs::metadata(&log).unwrap().len();
    let free = fill();
    let (status, body) = send(server, PIPELINE, refused);
    assert_eq!(status, 507, "{body}{}", server.diag());
    assert!(body.contains("full"), "{body}");
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        length,
        "the log kept part of a refused batch"
    );
    free();
    server.ingest(PIPELINE, last);
    let mut accepted: Vec<Ev> = first.to_vec();
    accepted.extend_from_slice(last);
    server.ingest(PIPELINE, &[far_future(&accepted)]);
    let status = server.wait_for_events_in(PIPELINE, accepted.len() + 1);
    assert_eq!(status["dead_letters"], 0, "{status}");
    // Results are flushed at checkpoints: stop for the final one.
    server.expect(
        "stopping",
        server.post(&format!("/v1/pipelines/{PIPELINE}/stop"), Some(ADMIN), b""),
        200,
    );
    let expected = live_model(&with_end(&accepted));
    let results = server.wait_for_results(PIPELINE, &expected);
    assert_same_emissions(server, &results, &expected);
}

#[test]
fn a_full_disk_refuses_a_batch_whole_and_loses_nothing_acknowledged() {
    let Some(disk) = SmallDisk::mount(48) else {
        eprintln!("cannot mount a tmpfs here (not root?): the fault-hook test covers the promise");
        return;
    };
    let data = disk.path().join("data");
    let server = Server::start(&data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = spec();
    spec["checkpoint_interval"] = "1h".into(); // no checkpoint while the disk is full
    create_and_start_spec(&server, &spec);
    refused_batches_leave_nothing(&server, || {
        let filler = disk.fill();
        Box::new(move || std::fs::remove_file(filler).unwrap())
    });
}

#[test]
fn a_failed_write_cuts_the_batch_back_out_of_the_log() {
    // The same promise through the test hook that fails a write part-way, as a full disk does.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    server.ingest(PIPELINE, &clicks(10, 2));
    server.wait_for_events_in(PIPELINE, 10);
    server.kill();
    drop(server);
    // Restart with a limit a little past the log's current end.
    let log = data.join("pipelines").join(PIPELINE).join("ingest.jsonl");
    let length = std::fs::metadata(&log).unwrap().len();
    let limit = (length + 2_000).to_string();
    let server = Server::start_env(&data, &[], &[("WEIR_TEST_INGEST_FAIL_AFTER", &limit)]);
    server.wait_for_events_in(PIPELINE, 10);
    let big = clicks(200, 3);
    let (status, body) = send(&server, PIPELINE, &big);
    assert_eq!(status, 507, "{body}{}", server.diag());
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        length,
        "the log kept part of a refused batch"
    );
    let small = &big[..5];
    server.ingest(PIPELINE, small);
    let status = server.wait_for_events_in(PIPELINE, 15);
    assert_eq!(status["dead_letters"], 0, "{status}");
}

#[test]
fn damaged_files_fail_their_pipeline_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("other", "1.0.0", &count_sum_v1());
    for name in ["bad-spec", "bad-desired", PIPELINE] {
        create_and_start_spec(&server, &spec_named(name));
    }
    server.ingest("bad-spec", &clicks(20, 2));
    server.wait_for_events_in("bad-spec", 20);
    server.kill();
    drop(server);
    let pipelines = dir.path().join("pipelines");
    std::fs::write(pipelines.join("bad-spec/spec.json"), "{ not json").unwrap();
    std::fs::write(pipelines.join("bad-desired/desired.json"), "[1, 2").unwrap();
    std::fs::write(dir.path().join("operators/other/1.0.0.json"), "garbage").unwrap();

    let server = Server::start(dir.path());
    let listed = server.expect("listing", server.get("/v1/pipelines", Some(ADMIN)), 200);
    let state = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} vanished from the list: {listed}"))
    };
    for name in ["bad-spec", "bad-desired"] {
        let status = state(name);
        assert_eq!(status["state"], "failed", "{status}");
        assert!(
            status["error"].as_str().unwrap().contains("damaged"),
            "{status}"
        );
        server.expect_error(
            &format!("starting {name}"),
            server.post(&format!("/v1/pipelines/{name}/start"), Some(ADMIN), b""),
            409,
        );
    }
    assert_eq!(state(PIPELINE)["state"], "running");
    server.ingest(PIPELINE, &clicks(10, 2));
    server.wait_for_events_in(PIPELINE, 10);
    let public = server.expect("healthz", server.get("/healthz", None), 200);
    assert_eq!(
        public["damaged_pipelines"], 2,
        "no names without a token: {public}"
    );
    assert!(!public.to_string().contains("bad-spec"), "{public}");
    let health = server.expect("healthz", server.get("/healthz", Some(ADMIN)), 200);
    assert_eq!(
        health["damaged_pipelines"],
        json!(["bad-desired", "bad-spec"]),
        "{health}"
    );
    assert!(
        health["damaged_operators"].to_string().contains("other"),
        "{health}"
    );
    let operators = server.expect("operators", server.get("/v1/operators", Some(ADMIN)), 200);
    assert_eq!(operators.as_array().map(Vec::len), Some(1), "{operators}");

    // A damaged pipeline can be deleted, and its name taken afresh: nothing is inherited.
    server.expect(
        "deleting bad-spec",
        server.delete("/v1/pipelines/bad-spec", Some(ADMIN)),
        204,
    );
    create_and_start_spec(&server, &spec_named("bad-spec"));
    let status = server.status("bad-spec");
    assert_eq!(status["events_in"], 0, "{status}");
    assert!(server.results("bad-spec").is_empty());
}

#[test]
fn a_deleted_pipelines_name_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    let events = clicks(50, 3);
    server.ingest(PIPELINE, &events);
    server.ingest(PIPELINE, &[far_future(&events)]);
    server.wait_for_results(PIPELINE, &live_model(&with_end(&events)));
    server.expect(
        "deleting",
        server.delete(&format!("/v1/pipelines/{PIPELINE}"), Some(ADMIN)),
        204,
    );
    assert!(!dir.path().join("pipelines").join(PIPELINE).exists());
    create_and_start(&server);
    let status = server.status(PIPELINE);
    assert_eq!(status["events_in"], 0, "{status}");
    assert!(
        server.results(PIPELINE).is_empty(),
        "the new pipeline inherited results"
    );
}

#[test]
fn a_swapped_component_is_refused_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let info = server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    server.kill();
    drop(server);
    let digest = info["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let blob = dir
        .path()
        .join("operators/blobs")
        .join(format!("{digest}.wasm"));
    assert!(
        blob.exists(),
        "components are stored by digest: {}",
        blob.display()
    );
    std::fs::copy(count_sum_v2(), &blob).unwrap();
    let server = Server::start(dir.path());
    let status = server.wait_for("the pipeline to fail", PATIENCE, || {
        let status = server.status(PIPELINE);
        if status["state"] == "failed" {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    });
    assert!(
        status["error"]
            .as_str()
            .unwrap()
            .contains("does not match its recorded digest"),
        "{status}"
    );
}

// ---------------------------------------------------------------------------------------------
// Rollouts and result streams.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_promoted_candidate_becomes_live_and_the_old_version_can_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    create_and_start(&server);
    server.expect_error(
        "promoting without a rollout",
        server.post(
            &format!("/v1/pipelines/{PIPELINE}/promote"),
            Some(ADMIN),
            b"",
        ),
        409,
    );
    let events = clicks(600, 8);
    let (a, rest) = events.split_at(200);
    let (b, c) = rest.split_at(200);
    server.ingest(PIPELINE, a);
    let message = server.expect_error(
        "a malformed rollout",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &json!({"version": "2.0.0", "percent": 200}),
        ),
        400,
    );
    assert!(message.contains("between 0 and 100"), "{message}");
    server.expect(
        "rolling out",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &json!({"version": "2.0.0", "percent": 50}),
        ),
        200,
    );
    server.ingest(PIPELINE, b);
    let status = server.expect(
        "promoting",
        server.post(
            &format!("/v1/pipelines/{PIPELINE}/promote"),
            Some(ADMIN),
            b"",
        ),
        200,
    );
    assert_eq!(status["operator"]["version"], "2.0.0", "{status}");
    assert_eq!(status["rollout"], Value::Null, "{status}");
    server.wait_for_routing(PIPELINE, "the promotion to apply at a barrier", |applied| {
        applied["live"] == "2.0.0"
    });
    server.ingest(PIPELINE, c);
    server.ingest(PIPELINE, &[far_future(&events)]);
    let expected = live_model(&with_end(&events));
    let results = server.wait_for_results(PIPELINE, &expected);
    assert_same_emissions(&server, &results, &expected);
    assert_unique_ids(&results);
    let last = results.last().unwrap();
    assert_eq!(last["operator_version"], "2.0.0", "{last}");
    server.expect(
        "deleting the old version",
        server.delete("/v1/operators/count-sum/1.0.0", Some(ADMIN)),
        204,
    );
    server.kill();
    drop(server);
    let server = Server::start(dir.path());
    let status = server.wait_for_events_in(PIPELINE, events.len() + 1);
    assert_eq!(status["operator"]["version"], "2.0.0", "{status}");
    assert_eq!(status["state"], "running", "{status}");
}

#[test]
fn result_streams_survive_stop_and_start_and_resume_from_their_last_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start(&server);
    let results_path = format!("/v1/pipelines/{PIPELINE}/results");
    let stream = server.subscribe(&results_path, ADMIN);
    let events = clicks(400, 6);
    let (first, second) = events.split_at(200);
    server.ingest(PIPELINE, first);
    server.wait_for_events_in(PIPELINE, first.len());
    server.expect(
        "stopping",
        server.post(&format!("/v1/pipelines/{PIPELINE}/stop"), Some(ADMIN), b""),
        200,
    );
    server.expect(
        "starting",
        server.post(&format!("/v1/pipelines/{PIPELINE}/start"), Some(ADMIN), b""),
        200,
    );
    server.ingest(PIPELINE, second);
    server.ingest(PIPELINE, &[far_future(&events)]);
    let expected = live_model(&with_end(&events));
    let results = server.wait_for_results(PIPELINE, &expected);
    let received = server.wait_for("every result on the stream", PATIENCE, || {
        let got = stream.events();
        if got.len() >= results.len() {
            Ok(got)
        } else {
            Err(format!("{} of {}", got.len(), results.len()))
        }
    });
    let file: Vec<String> = results.iter().map(|r| r.to_string()).collect();
    let streamed: Vec<String> = received
        .iter()
        .map(|(_, data)| serde_json::from_str::<Value>(data).unwrap().to_string())
        .collect();
    assert_eq!(
        streamed, file,
        "the stream missed or repeated records across stop and start"
    );

    // Resume after the 10th record: exactly the rest, with the same ids.
    let (Some(tenth), _) = received[9].clone() else {
        panic!("records without ids: {received:?}")
    };
    let resumed = server.subscribe_after(&results_path, ADMIN, Some(&tenth));
    let rest = server.wait_for("the resumed stream", PATIENCE, || {
        let got = resumed.events();
        if got.len() >= received.len() - 10 {
            Ok(got)
        } else {
            Err(format!("{} records", got.len()))
        }
    });
    thread::sleep(Duration::from_millis(300));
    assert_eq!(resumed.events().len(), received.len() - 10);
    assert_eq!(rest, received[10..].to_vec());
    server.expect_error(
        "a Last-Event-ID that is not ours",
        server.get_with(&results_path, ADMIN, &[("Last-Event-ID", "yesterday")]),
        400,
    );
}

#[test]
fn a_stream_resumed_with_nobody_listening_in_between_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = spec();
    spec["checkpoint_interval"] = "1h".into(); // nothing but the stream flushes the results
    create_and_start_spec(&server, &spec);
    let events = clicks(300, 5);
    server.ingest(PIPELINE, &events);
    server.ingest(PIPELINE, &[far_future(&events)]);
    server.wait_for_events_in(PIPELINE, events.len() + 1);
    let expected = live_model(&with_end(&events));
    let stream = server.subscribe_after(
        &format!("/v1/pipelines/{PIPELINE}/results"),
        ADMIN,
        Some("0"),
    );
    let received = server.wait_for("every result so far", PATIENCE, || {
        let got = stream.events();
        if got.len() >= expected.len() {
            Ok(got)
        } else {
            Err(format!("{} of {}", got.len(), expected.len()))
        }
    });
    let records: Vec<Value> = received
        .iter()
        .map(|(_, data)| serde_json::from_str(data).unwrap())
        .collect();
    assert_same_emissions(&server, &records, &expected);
}

#[test]
fn metrics_can_have_their_own_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
    let line = server.wait_for("the metrics address", PATIENCE, || {
        server
            .stderr()
            .lines()
            .find(|l| l.contains("metrics on http://"))
            .map(str::to_owned)
            .ok_or_else(|| "not printed yet".to_owned())
    });
    let url = line.split("metrics on ").nth(1).unwrap().trim().to_owned();
    let answer = ureq::get(&url).call().expect("GET metrics");
    assert_eq!(answer.status().as_u16(), 200);
    server.expect_error(
        "GET /metrics on the API address",
        server.get("/metrics", None),
        401,
    );
}

#[test]
fn a_pipeline_far_behind_answers_429_and_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("spin", "1.0.0", &guest("infinite-loop"));
    let mut spec = spinning_spec("behind");
    spec["source"] = json!({"type": "http", "max_behind": "32KiB"});
    spec["sandbox"] = json!({"call_timeout": "3s"});
    spec["batch_size"] = json!(100);
    create_and_start_spec(&server, &spec);
    // One call spins for 3 s: the pipeline stops reading while events keep coming.
    let spin = ev("spin-1", BASE_TS - 1_000_000, 1);
    server.ingest("behind", std::slice::from_ref(&spin));
    wait_until_routed(&server, "behind");
    let events = clicks(12_000, 20);
    let mut refused = 0;
    // Sends a chunk as a producer would: again after the delay whenever it is pushed back.
    let mut send = |chunk: &[Ev]| loop {
        match server.send_events("behind", chunk) {
            (202, _, _) => break,
            (429, body, retry_after) => {
                refused += 1;
                assert!(body.contains("is behind"), "{body}");
                assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
                thread::sleep(Duration::from_millis(300));
            }
            (status, body, _) => panic!("{status} {body}{}", server.diag()),
        }
    };
    for chunk in events.chunks(500) {
        send(chunk);
    }
    let accepted = events.clone();
    send(&[far_future(&accepted)]);
    assert!(
        refused > 0,
        "a flood at a stalled pipeline was never pushed back"
    );
    let status = server.wait_for_events_in("behind", accepted.len() + 2);
    assert_eq!(
        status["dead_letters"], 1,
        "only the spinning event: {status}"
    );
    server.expect(
        "stopping",
        server.post("/v1/pipelines/behind/stop", Some(ADMIN), b""),
        200,
    );
    let expected = live_model(&with_end(&accepted));
    let results = server.output("behind", "results.jsonl");
    assert_same_emissions(&server, &results, &expected);
}

#[test]
fn an_ingest_rate_limit_answers_429_beyond_it_and_keeps_what_it_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = spec_named("limited");
    spec["source"] = json!({"type": "http", "max_events_per_second": 500});
    create_and_start_spec(&server, &spec);
    let limits = server.status("limited")["limits"].clone();
    assert_eq!(limits["max_events_per_second"], 500, "{limits}");
    assert_eq!(limits["max_behind_bytes"], 64 << 20, "{limits}");
    let events = clicks(2_000, 5);
    let started = Instant::now();
    let mut refused = 0;
    for chunk in events.chunks(100) {
        loop {
            match server.send_events("limited", chunk) {
                (202, _, _) => break,
                (429, body, retry_after) => {
                    refused += 1;
                    assert!(body.contains("at most 500 events per second"), "{body}");
                    assert_eq!(retry_after.as_deref(), Some("1"));
                    thread::sleep(Duration::from_millis(50));
                }
                (status, body, _) => panic!("{status} {body}"),
            }
        }
    }
    // A second's worth at once, then 500 a second: 2,000 events take at least 3 s.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2_900), "{took:?}");
    assert!(refused > 0);
    server.wait_for_events_in("limited", events.len());
    let mut zero = spec_named("zero");
    zero["source"] = json!({"type": "http", "max_events_per_second": 0});
    let error = server.expect_error(
        "a zero rate",
        server.post_json("/v1/pipelines", Some(ADMIN), &zero),
        400,
    );
    assert!(error.contains("at least 1"), "{error}");
}
