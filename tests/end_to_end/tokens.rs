//! Tokens made over the API of `weir serve` (part of issue 45): made, listed, rotated and
//! revoked by an admin, effective before the answer, kept across a SIGKILL as digests only;
//! narrowed to pipelines (a producer's ingest token for one pipeline sees nothing else, and
//! every route is walked for a narrowed admin); an expired token refused; bad requests
//! refused with the reason; many callers making tokens at once.

use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{ADMIN, INGEST, Server, clicks, count_sum_v1, ev, jsonl, spec};

fn named(name: &str) -> Value {
    let mut spec = spec();
    spec["name"] = json!(name);
    spec
}

/// Two running pipelines, `clicks` and `orders`.
fn with_two_pipelines(server: &Server) {
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    for name in ["clicks", "orders"] {
        server.expect(
            "creating",
            server.post_json("/v1/pipelines", Some(ADMIN), &named(name)),
            201,
        );
        server.expect(
            "starting",
            server.post(&format!("/v1/pipelines/{name}/start"), Some(ADMIN), b""),
            200,
        );
    }
}

/// Makes a token; its secret.
fn make(server: &Server, request: Value) -> String {
    let made = server.expect(
        "making a token",
        server.post_json("/v1/tokens", Some(ADMIN), &request),
        201,
    );
    assert_eq!(made["name"], request["name"], "{made}");
    assert!(
        made.get("sha256").is_none(),
        "no digest in the answer: {made}"
    );
    made["token"].as_str().expect("the secret").to_owned()
}

fn ingest(server: &Server, pipeline: &str, token: &str) -> (u16, String) {
    let body = jsonl(&clicks(5, 2));
    server.post(
        &format!("/v1/pipelines/{pipeline}/events"),
        Some(token),
        body.as_bytes(),
    )
}

#[test]
fn tokens_made_over_the_api_work_at_once_and_survive_a_sigkill_as_digests() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    with_two_pipelines(&server);
    let producer = make(
        &server,
        json!({"name": "producer", "scopes": ["ingest"], "pipelines": ["clicks"]}),
    );
    server.expect("its own ingest", ingest(&server, "clicks", &producer), 202);
    // Another pipeline is answered as an unknown one: same status, same message.
    let hidden = server.expect_error(
        "another pipeline's ingest",
        ingest(&server, "orders", &producer),
        404,
    );
    let unknown = server.expect_error(
        "an unknown pipeline",
        server.get("/v1/pipelines/nothing-here", Some(ADMIN)),
        404,
    );
    assert_eq!(hidden, unknown.replace("nothing-here", "orders"));
    server.expect_error(
        "another pipeline's status",
        server.get("/v1/pipelines/orders", Some(&producer)),
        404,
    );
    let listed = server.expect(
        "the list",
        server.get("/v1/pipelines", Some(&producer)),
        200,
    );
    let names: Vec<&str> = (listed.as_array().unwrap().iter())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["clicks"]);
    server.expect_error(
        "the registry",
        server.get("/v1/operators", Some(&producer)),
        403,
    );

    let listing = server.expect("the tokens", server.get("/v1/tokens", Some(ADMIN)), 200);
    let made = listing["made"].as_array().unwrap();
    assert_eq!(made.len(), 1, "{listing}");
    assert_eq!(made[0]["pipelines"], json!(["clicks"]));
    assert_eq!(made[0]["created_by"], "WEIR_ADMIN_TOKEN");
    let fixed: Vec<&str> = (listing["set_at_start"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(fixed.contains(&"WEIR_ADMIN_TOKEN"), "{listing}");
    let text = listing.to_string();
    assert!(
        !text.contains(&producer) && !text.contains("sha256"),
        "{text}"
    );

    server.kill();
    drop(server);
    let mut server = Server::start(dir.path());
    server.expect("after a SIGKILL", ingest(&server, "clicks", &producer), 202);
    for file in ["api-tokens.json", "audit.jsonl"] {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(!text.contains(&producer), "the secret is in {file}");
    }

    let rotated = server.expect(
        "rotating",
        server.post("/v1/tokens/producer/rotate", Some(ADMIN), b""),
        200,
    );
    let renewed = rotated["token"].as_str().unwrap().to_owned();
    assert_ne!(renewed, producer);
    server.expect_error("the old secret", ingest(&server, "clicks", &producer), 401);
    server.expect("the new secret", ingest(&server, "clicks", &renewed), 202);
    server.expect(
        "revoking",
        server.delete("/v1/tokens/producer", Some(ADMIN)),
        204,
    );
    server.expect_error("revoked", ingest(&server, "clicks", &renewed), 401);
    server.expect_error(
        "revoked twice",
        server.delete("/v1/tokens/producer", Some(ADMIN)),
        404,
    );
    server.kill();
    drop(server);
    let server = Server::start(dir.path());
    server.expect_error(
        "revoked, after a SIGKILL",
        ingest(&server, "clicks", &renewed),
        401,
    );
    // Each change is on record under the admin's name, the secrets nowhere.
    let records = server.expect("the audit", server.get("/v1/audit", Some(ADMIN)), 200);
    let token_calls: Vec<(&str, &str, u64)> = (records["records"].as_array().unwrap().iter())
        .filter(|r| r["route"].as_str().unwrap().starts_with("/v1/tokens"))
        .map(|r| {
            let route = r["route"].as_str().unwrap();
            (
                r["method"].as_str().unwrap(),
                route,
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        token_calls,
        [
            ("POST", "/v1/tokens", 201),
            ("POST", "/v1/tokens/{name}/rotate", 200),
            ("DELETE", "/v1/tokens/{name}", 204),
            ("DELETE", "/v1/tokens/{name}", 404),
        ]
    );
}

/// A result stream opened with a token ends once the token is revoked: the records after it
/// reach a stream opened with a token still valid, not the revoked one's.
#[test]
fn a_result_stream_ends_when_its_token_is_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    with_two_pipelines(&server);
    let watcher = make(
        &server,
        json!({"name": "watcher", "scopes": ["read"], "pipelines": ["clicks"]}),
    );
    let watched = server.subscribe("/v1/pipelines/clicks/results", &watcher);
    let admin = server.subscribe("/v1/pipelines/clicks/results", ADMIN);
    let send = |ts: i64| {
        let events = [ev("u1", ts, 1), ev("u1", ts + 5_000, 1)];
        server.expect("ingest", ingest_events(&server, &events), 202);
    };
    send(1_000);
    server.wait_for(
        "a first result on both",
        Duration::from_secs(20),
        || match (watched.lines().len(), admin.lines().len()) {
            (1.., 1..) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let before = watched.lines().len();
    server.expect(
        "revoking",
        server.delete("/v1/tokens/watcher", Some(ADMIN)),
        204,
    );
    thread::sleep(Duration::from_millis(1_100));
    let admin_before = admin.lines().len();
    send(20_000);
    server.wait_for(
        "more results on the admin's",
        Duration::from_secs(20),
        || match admin.lines().len() > admin_before {
            true => Ok(()),
            false => Err("none yet".into()),
        },
    );
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        watched.lines().len(),
        before,
        "nothing after the revocation"
    );
    assert!(watched.ended(), "the revoked token's stream ended");
    // An idle stream ends too, and every stream ends with its pipeline.
    let idle = make(
        &server,
        json!({"name": "idle", "scopes": ["read"], "pipelines": ["orders"]}),
    );
    let quiet = server.subscribe("/v1/pipelines/orders/results", &idle);
    let other = server.subscribe("/v1/pipelines/clicks/results", ADMIN);
    server.expect(
        "revoking",
        server.delete("/v1/tokens/idle", Some(ADMIN)),
        204,
    );
    server.wait_for("the idle stream's end", Duration::from_secs(10), || {
        quiet.ended().then_some(()).ok_or_else(|| "open".to_owned())
    });
    server.expect(
        "deleting",
        server.delete("/v1/pipelines/clicks", Some(ADMIN)),
        204,
    );
    server.wait_for(
        "the deleted pipeline's stream's end",
        Duration::from_secs(10),
        || other.ended().then_some(()).ok_or_else(|| "open".to_owned()),
    );
}

fn ingest_events(server: &Server, events: &[crate::reference::Ev]) -> (u16, String) {
    server.post(
        "/v1/pipelines/clicks/events",
        Some(ADMIN),
        jsonl(events).as_bytes(),
    )
}

/// Every route with an admin token narrowed to `clicks`: a route naming `orders` (which
/// exists) answers 404 and changes nothing; a route naming none answers 403, but for the list
/// of pipelines and who-am-I; a route of `clicks` is let through (a fork, which makes a new
/// pipeline, excepted).
#[test]
fn a_narrowed_admin_reaches_its_own_pipelines_and_nothing_else_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    with_two_pipelines(&server);
    let narrowed = make(
        &server,
        json!({"name": "team-a", "scopes": ["admin"], "pipelines": ["clicks"]}),
    );
    let openapi = server.expect("GET /openapi.json", server.get("/openapi.json", None), 200);
    let mut walked = 0;
    for (template, operations) in openapi["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            if operation["security"][0]["bearer"][0].as_str().is_none() {
                continue;
            }
            let call = |path: &str| crate::tenants::call(&server, method, path, &narrowed);
            let what = format!("{method} {template}");
            let path = |pipeline: &str| {
                template
                    .replace("{name}", pipeline)
                    .replace("{version}", "1.0.0")
                    .replace("{savepoint}", "nothing")
            };
            if template.starts_with("/v1/pipelines/{name}") {
                let (status, body) = call(&path("orders"));
                assert_eq!(status, 404, "{what} on another pipeline: {body}");
                if template.ends_with("/fork") {
                    assert_eq!(call(&path("clicks")).0, 403, "{what}");
                }
            } else if method == "get" && ["/v1/pipelines", "/v1/whoami"].contains(&&**template) {
                assert_eq!(call(template).0, 200, "{what}");
            } else {
                let (status, body) = call(&path("clicks"));
                assert_eq!(status, 403, "{what}: {body}");
            }
            walked += 1;
        }
    }
    assert!(walked >= 30, "walked {walked} routes");
    // Nothing of `orders` changed; `clicks` is the narrowed admin's to stop and start.
    assert_eq!(server.status("orders")["state"], "running");
    server.expect(
        "its own stop",
        server.post("/v1/pipelines/clicks/stop", Some(&narrowed), b""),
        200,
    );
    // /healthz gives a narrowed admin the counts only, no names.
    let health = server.expect("health", server.get("/healthz", Some(&narrowed)), 200);
    assert!(health["failed"].is_number(), "{health}");
}

#[test]
fn a_token_past_its_life_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let short = make(
        &server,
        json!({"name": "short", "scopes": ["read"], "expires_in_s": 2}),
    );
    server.expect("alive", server.get("/v1/whoami", Some(&short)), 200);
    let listing = server.expect("the tokens", server.get("/v1/tokens", Some(ADMIN)), 200);
    assert!(
        listing["made"][0]["expires_at_ms"].as_u64() > Some(0),
        "{listing}"
    );
    thread::sleep(Duration::from_millis(2_100));
    server.expect_error("expired", server.get("/v1/whoami", Some(&short)), 401);
}

#[test]
fn bad_token_requests_are_refused_with_the_reason_and_make_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--max-upload", "4096"]);
    let many: Vec<String> = (0..65).map(|i| format!("p{i}")).collect();
    let cases = [
        (json!("not an object"), 400, "token request"),
        (
            json!({"name": "a", "scopes": ["read"], "colour": 1}),
            400,
            "colour",
        ),
        (
            json!({"name": "../a", "scopes": ["read"]}),
            400,
            "token name",
        ),
        (json!({"name": "a", "scopes": []}), 400, "scope"),
        (json!({"name": "a", "scopes": ["root"]}), 400, "root"),
        (
            json!({"name": "a", "scopes": ["ingest"], "pipelines": many}),
            400,
            "pipelines",
        ),
        (
            json!({"name": "a", "scopes": ["read"], "pipelines": ["../x"]}),
            400,
            "pipeline name",
        ),
        (
            json!({"name": "a", "scopes": ["metrics"], "pipelines": ["x"]}),
            400,
            "metrics",
        ),
        (
            json!({"name": "a", "scopes": ["read"], "expires_in_s": 0}),
            400,
            "expires_in_s",
        ),
        (
            json!({"name": "WEIR_X_TOKEN", "scopes": ["read"]}),
            400,
            "set at start",
        ),
        (
            json!({"name": "token-2", "scopes": ["read"]}),
            400,
            "set at start",
        ),
        (
            json!({"name": "typo.x", "scopes": ["read"], "tenant": "typo", "pipelines": ["x"]}),
            400,
            "pipelines",
        ),
        (
            json!({"name": "a", "scopes": ["read"], "expires_in_s": -5}),
            400,
            "expires_in_s",
        ),
        (
            json!({"name": "a", "scopes": ["read"], "expires_in_s": 1e12}),
            400,
            "expires_in_s",
        ),
        (
            json!({"name": "WEIR_INGEST_TOKEN", "scopes": ["read"]}),
            400,
            "set at start",
        ),
    ];
    for (request, status, expected) in cases {
        let message = server.expect_error(
            &request.to_string(),
            server.post_json("/v1/tokens", Some(ADMIN), &request),
            status,
        );
        assert!(message.contains(expected), "{request}: {message}");
    }
    let big = json!({"name": "a", "scopes": ["read"], "pipelines": ["x".repeat(5_000)]});
    server.expect_error(
        "too large",
        server.post_json("/v1/tokens", Some(ADMIN), &big),
        413,
    );
    let fine = json!({"name": "a", "scopes": ["read"]});
    server.expect_error(
        "an ingest token making one",
        server.post_json("/v1/tokens", Some(INGEST), &fine),
        403,
    );
    server.expect_error(
        "revoking one set at start",
        server.delete("/v1/tokens/WEIR_INGEST_TOKEN", Some(ADMIN)),
        409,
    );
    server.expect_error(
        "rotating an unknown one",
        server.post("/v1/tokens/nobody/rotate", Some(ADMIN), b""),
        404,
    );
    server.expect_error(
        "a name that is not one",
        server.delete("/v1/tokens/a..b", Some(ADMIN)),
        400,
    );
    let listing = server.expect("the tokens", server.get("/v1/tokens", Some(ADMIN)), 200);
    assert_eq!(listing["made"], json!([]), "nothing was made");
    let tenants = server.expect("the tenants", server.get("/v1/tenants", Some(ADMIN)), 200);
    assert_eq!(
        tenants["tenants"],
        json!({}),
        "no tenant made for a refused token"
    );
}

/// Eight callers making one name at once make one token; sixteen making sixteen make them all,
/// each usable after a SIGKILL; revoking and rotating at once from many callers loses none of
/// the changes.
#[test]
fn many_callers_making_revoking_and_rotating_tokens_at_once_lose_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let race = |requests: Vec<Value>| -> Vec<(u16, String)> {
        let callers: Vec<_> = (requests.into_iter())
            .map(|request| {
                let client = server.client();
                thread::spawn(move || client.post_json("/v1/tokens", Some(ADMIN), &request))
            })
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).collect()
    };
    let same = race(vec![json!({"name": "same", "scopes": ["read"]}); 8]);
    let made = same.iter().filter(|(status, _)| *status == 201).count();
    let refused = same.iter().filter(|(status, _)| *status == 409).count();
    assert_eq!((made, refused), (1, 7), "{same:?}");
    let answers = race(
        (0..16)
            .map(|i| json!({"name": format!("t{i}"), "scopes": ["read"]}))
            .collect(),
    );
    let secrets: Vec<String> = (answers.iter())
        .map(|(status, body)| {
            assert_eq!(*status, 201, "{body}");
            serde_json::from_str::<Value>(body).unwrap()["token"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    server.kill();
    drop(server);
    server = Server::start(dir.path());
    for secret in &secrets {
        server.expect(
            "after a SIGKILL",
            server.get("/v1/whoami", Some(secret)),
            200,
        );
    }
    let changes: Vec<_> = (0..16)
        .map(|i| {
            let client = server.client();
            thread::spawn(move || match i % 2 {
                0 => client.delete(&format!("/v1/tokens/t{i}"), Some(ADMIN)),
                _ => client.post(&format!("/v1/tokens/t{i}/rotate"), Some(ADMIN), b""),
            })
        })
        .collect();
    let changed: Vec<(u16, String)> = changes.into_iter().map(|c| c.join().unwrap()).collect();
    for (i, (status, body)) in changed.iter().enumerate() {
        assert_eq!(*status, if i % 2 == 0 { 204 } else { 200 }, "t{i}: {body}");
    }
    for secret in &secrets {
        server.expect_error(
            "revoked or rotated",
            server.get("/v1/whoami", Some(secret)),
            401,
        );
    }
    let listing = server.expect("the tokens", server.get("/v1/tokens", Some(ADMIN)), 200);
    let mut names: Vec<&str> = (listing["made"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..16)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("t{i}"))
        .collect();
    want.push("same".into());
    want.sort();
    assert_eq!(names, want);
}

/// `weir token` makes, lists, rotates and revokes tokens through a running server.
#[test]
fn weir_token_manages_a_servers_tokens_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    with_two_pipelines(&server);
    let url = server.url("");
    let weir = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("token")
            .args(args)
            .args(["--server", url.trim_end_matches('/')])
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.success(), stdout, stderr)
    };
    let (ok, secret, stderr) = weir(&[
        "create",
        "producer",
        "--scope",
        "ingest",
        "--pipeline",
        "clicks",
        "--expires-in",
        "1h",
    ]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("not shown again"), "{stderr}");
    server.expect("its ingest", ingest(&server, "clicks", &secret), 202);
    server.expect_error("another's", ingest(&server, "orders", &secret), 404);
    let (ok, listing, stderr) = weir(&["list"]);
    assert!(ok, "{stderr}");
    let listing: Value = serde_json::from_str(&listing).unwrap();
    assert_eq!(listing["made"][0]["name"], "producer");
    let (ok, renewed, stderr) = weir(&["rotate", "producer"]);
    assert!(ok, "{stderr}");
    server.expect_error("the old secret", ingest(&server, "clicks", &secret), 401);
    server.expect("the new one", ingest(&server, "clicks", &renewed), 202);
    let (ok, _, stderr) = weir(&["revoke", "producer"]);
    assert!(ok, "{stderr}");
    server.expect_error("revoked", ingest(&server, "clicks", &renewed), 401);
    let (ok, _, stderr) = weir(&[
        "create", "team-x.r", "--scope", "read", "--tenant", "team-x",
    ]);
    assert!(ok, "{stderr}");
    let (_, listing, _) = weir(&["list"]);
    assert!(listing.contains("\"tenant\": \"team-x\""), "{listing}");
    let (ok, _, stderr) = weir(&["create", "x", "--scope", "read", "--expires-in", "5w"]);
    assert!(!ok && stderr.contains("--expires-in"), "{stderr}");
    let (ok, _, stderr) = weir(&["revoke", "producer"]);
    assert!(!ok && stderr.contains("404"), "{stderr}");
}
