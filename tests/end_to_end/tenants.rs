//! Tenants of `weir serve` (part of issue 45): two teams on one server, each with an admin
//! token bound to its tenant, cannot see, address or change each other's pipelines, operators,
//! tokens, audit records or metrics (every route walked; what they cannot see answers as if it
//! did not exist); a tenant is held to the quotas a server admin sets, and a spec that asks
//! for more is refused with the limit; many creates at once stay within the quota.

use std::thread;

use serde_json::{Value, json};

use crate::server::{ADMIN, PATIENCE, Server, count_sum_v1, spec};

/// A token of `tenant` with `scopes`, made by the server's admin; its secret.
fn token_of(server: &Server, name: &str, tenant: &str, scopes: &[&str]) -> String {
    let made = server.expect(
        "making a tenant's token",
        server.post_json(
            "/v1/tokens",
            Some(ADMIN),
            &json!({"name": name, "scopes": scopes, "tenant": tenant}),
        ),
        201,
    );
    made["token"].as_str().unwrap().to_owned()
}

/// A spec of pipeline `name` running operator `operator`.
fn spec_of(name: &str, operator: &str) -> Value {
    let mut spec = spec();
    spec["name"] = json!(name);
    spec["operators"][0]["name"] = json!(operator);
    spec
}

/// Uploads the count-sum as `name`@`version` with `token`.
fn upload(server: &Server, name: &str, version: &str, token: &str) -> (u16, String) {
    let bytes = std::fs::read(count_sum_v1()).unwrap();
    server.upload(name, version, &bytes, Some(token))
}

/// `team-a.clicks` and `team-b.clicks`, each running its tenant's count-sum; the two admins.
fn two_teams(server: &Server) -> (String, String) {
    let a = token_of(server, "team-a.admin", "team-a", &["admin"]);
    let b = token_of(server, "team-b.admin", "team-b", &["admin"]);
    for (team, token) in [("team-a", &a), ("team-b", &b)] {
        let operator = format!("{team}.count-sum");
        server.expect("upload", upload(server, &operator, "1.0.0", token), 201);
        let name = format!("{team}.clicks");
        server.expect(
            "create",
            server.post_json("/v1/pipelines", Some(token), &spec_of(&name, &operator)),
            201,
        );
        server.expect(
            "start",
            server.post(&format!("/v1/pipelines/{name}/start"), Some(token), b""),
            200,
        );
    }
    (a, b)
}

fn names(listing: &Value, field: &str) -> Vec<String> {
    let mut names: Vec<String> = (listing.as_array().unwrap().iter())
        .map(|item| item[field].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn two_tenants_see_and_reach_nothing_of_each_other_on_any_route() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (a, b) = two_teams(&server);
    // What each sees; the server's admin sees both.
    let listed = |token: &str| {
        let pipelines = server.expect("list", server.get("/v1/pipelines", Some(token)), 200);
        let operators = server.expect("ops", server.get("/v1/operators", Some(token)), 200);
        (names(&pipelines, "name"), names(&operators, "name"))
    };
    let ours = |t: &str| (vec![format!("{t}.clicks")], vec![format!("{t}.count-sum")]);
    assert_eq!(listed(&a), ours("team-a"));
    assert_eq!(listed(&b), ours("team-b"));
    assert_eq!(listed(ADMIN).0, ["team-a.clicks", "team-b.clicks"]);
    // Another tenant's pipeline or operator answers as one that does not exist.
    let hidden = server.expect_error("", server.get("/v1/pipelines/team-a.clicks", Some(&b)), 404);
    let absent = server.expect_error("", server.get("/v1/pipelines/team-a.none", Some(&a)), 404);
    assert_eq!(hidden, absent.replace("team-a.none", "team-a.clicks"));
    let op = "/v1/operators/team-a.count-sum/1.0.0";
    let hidden = server.expect_error("", server.get(op, Some(&b)), 404);
    let absent = server.expect_error("", server.get(&op.replace("1.0.0", "9.9.9"), Some(&a)), 404);
    assert_eq!(hidden, absent.replace("9.9.9", "1.0.0"));

    // Every route with team-b's admin, aimed at team-a's pipeline and operator.
    let openapi = server.expect("GET /openapi.json", server.get("/openapi.json", None), 200);
    let mut walked = 0;
    for (aimed, method) in every_route(&openapi) {
        let (status, body) = call(&server, &method, &aimed, &b);
        let what = format!("{method} {aimed}: {status} {body}");
        let upload = method == "post" && aimed.starts_with("/v1/operators/");
        if upload {
            assert_eq!(status, 400, "{what}");
        } else if aimed.starts_with("/v1/tenants/") {
            assert_eq!(status, 403, "{what}");
        } else if aimed.contains("team-a.") || aimed.starts_with("/v1/tokens/") {
            assert_eq!(status, 404, "{what}");
        } else {
            assert!(status != 401 && status != 403 && status < 500, "{what}");
            assert!(!body.contains("team-a"), "{what}");
        }
        walked += 1;
    }
    assert!(walked >= 30, "walked {walked}");
    // Every route again with team-b's other kinds of token: nothing of team-a's answers, or
    // changes, whatever the scope.
    for scopes in [["deploy"], ["read"], ["ingest"], ["metrics"]] {
        let token = token_of(&server, &format!("team-b.{}", scopes[0]), "team-b", &scopes);
        for (aimed, method) in every_route(&openapi) {
            let (status, body) = call(&server, &method, &aimed, &token);
            let what = format!("{scopes:?} {method} {aimed}: {status} {body}");
            assert!(
                !(200..300).contains(&status) || !aimed.contains("team-a."),
                "{what}"
            );
            assert!(status != 401 && status < 500, "{what}");
            if !aimed.contains("team-a.") {
                assert!(!body.contains("team-a"), "{what}");
            }
        }
    }
    // Nothing of team-a's changed.
    assert_eq!(server.status("team-a.clicks")["state"], "running");
    server.expect("its operator", server.get(op, Some(&a)), 200);
    server.expect(
        "a-admin still works",
        server.get("/v1/whoami", Some(&a)),
        200,
    );

    // A tenant names what it makes in its own tenant, and runs its own operators only.
    // Another tenant's operator answers the same whether it exists or not, and as a built-in.
    let mut native = spec_of("team-a.x", "team-b.count-sum");
    native["operators"][0] = json!({"name": "team-b.count-sum", "kind": "aggregate",
        "native": "count-sum"});
    let refusals = [
        (spec_of("clicks", "team-a.count-sum"), "team-a.<name>"),
        (
            spec_of("team-a.x", "team-b.count-sum"),
            "operator \"team-b.count-sum\"",
        ),
        (
            spec_of("team-a.x", "team-b.nothing"),
            "operator \"team-b.nothing\"",
        ),
        (native, "operator \"team-b.count-sum\""),
    ];
    for (spec, expected) in refusals {
        let message = server.expect_error(
            &spec.to_string(),
            server.post_json("/v1/pipelines", Some(&a), &spec),
            400,
        );
        assert!(message.contains(expected), "{message}");
    }
    let message = server.expect_error("", upload(&server, "count-sum", "1.0.0", &a), 400);
    assert!(message.contains("team-a.<name>"), "{message}");

    // Tokens: a tenant's admin makes its own tenant's, and sees and revokes those only.
    let made = server.expect(
        "a token of its own",
        server.post_json(
            "/v1/tokens",
            Some(&a),
            &json!({"name": "team-a.reader", "scopes": ["read"]}),
        ),
        201,
    );
    assert_eq!(made["tenant"], "team-a", "{made}");
    for (request, expected) in [
        (
            json!({"name": "team-b.x", "scopes": ["read"], "tenant": "team-b"}),
            "tenant",
        ),
        (json!({"name": "x", "scopes": ["read"]}), "team-a.<name>"),
        // A name another tenant holds answers as one of its own would: "exists".
        (
            json!({"name": "team-a.admin", "scopes": ["read"]}),
            "exists",
        ),
    ] {
        let status = if expected == "exists" { 409 } else { 400 };
        let message = server.expect_error(
            &request.to_string(),
            server.post_json("/v1/tokens", Some(&a), &request),
            status,
        );
        assert!(message.contains(expected), "{message}");
    }
    let tokens = server.expect("tokens", server.get("/v1/tokens", Some(&a)), 200);
    assert_eq!(
        names(&tokens["made"], "name"),
        ["team-a.admin", "team-a.reader"]
    );
    assert_eq!(tokens["set_at_start"], json!([]));
    server.expect_error(
        "revoking b's",
        server.delete("/v1/tokens/team-b.admin", Some(&a)),
        404,
    );
    server.expect_error(
        "revoking one set at start",
        server.delete("/v1/tokens/WEIR_ADMIN_TOKEN", Some(&a)),
        404,
    );

    // A server token making a name in a tenant is held to the tenant's rules too, and makes
    // no token of a tenant's form without binding it.
    let message = server.expect_error(
        "the server's admin in team-a",
        server.post_json(
            "/v1/pipelines",
            Some(ADMIN),
            &spec_of("team-a.y", "team-b.count-sum"),
        ),
        400,
    );
    assert!(message.contains("operator"), "{message}");
    let unbound = json!({"name": "team-a.x", "scopes": ["admin"]});
    let message = server.expect_error(
        "a server token in a tenant's form",
        server.post_json("/v1/tokens", Some(ADMIN), &unbound),
        400,
    );
    assert!(message.contains("tenant"), "{message}");
    // A tenant is not made over names made outside it: they would become its own unchecked.
    let outside = spec_of("orders.v2", "team-a.count-sum");
    server.expect(
        "a server pipeline",
        server.post_json("/v1/pipelines", Some(ADMIN), &outside),
        201,
    );
    for (what, answer) in [
        (
            "quotas",
            server.put_json("/v1/tenants/orders", Some(ADMIN), &json!({})),
        ),
        (
            "a token",
            server.post_json(
                "/v1/tokens",
                Some(ADMIN),
                &json!({"name": "orders.admin", "scopes": ["admin"], "tenant": "orders"}),
            ),
        ),
    ] {
        let message = server.expect_error(what, answer, 409);
        assert!(message.contains("orders.v2"), "{message}");
    }
    // A token with a life rotates no token that outlives it.
    let short = server.expect(
        "a short-lived admin of team-a",
        server.post_json(
            "/v1/tokens",
            Some(ADMIN),
            &json!({"name": "team-a.short", "scopes": ["admin"], "tenant": "team-a",
                "expires_in_s": 3600}),
        ),
        201,
    );
    let short = short["token"].as_str().unwrap();
    let message = server.expect_error(
        "rotating a longer-lived token",
        server.post("/v1/tokens/team-a.admin/rotate", Some(short), b""),
        400,
    );
    assert!(message.contains("expires"), "{message}");

    // A tenant stays when its tokens go: its names are not no one's.
    server.expect(
        "revoking team-a's short token",
        server.delete("/v1/tokens/team-a.short", Some(ADMIN)),
        204,
    );
    let listed = server.expect("tenants", server.get("/v1/tenants", Some(ADMIN)), 200);
    assert!(listed["tenants"]["team-a"].is_object(), "{listed}");

    // The audit log and the tenants: each its own.
    let records = server.expect("audit", server.get("/v1/audit?limit=1000", Some(&a)), 200);
    let records = records["records"].as_array().unwrap();
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|r| r["tenant"] == "team-a"),
        "{records:?}"
    );
    let all = server.expect(
        "audit",
        server.get("/v1/audit?limit=1000", Some(ADMIN)),
        200,
    );
    assert!((all["records"].as_array().unwrap().iter()).any(|r| r["tenant"] == "team-b"));
    let tenants = server.expect("tenants", server.get("/v1/tenants", Some(&a)), 200);
    let seen: Vec<&String> = tenants["tenants"].as_object().unwrap().keys().collect();
    assert_eq!(seen, ["team-a"]);
    assert_eq!(tenants["tenants"]["team-a"]["pipelines"], 1);
    let health = server.expect("health", server.get("/healthz", Some(&a)), 200);
    assert!(health["failed"].is_number(), "counts only: {health}");
}

#[test]
fn metrics_carry_the_tenant_and_a_tenants_token_sees_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_env(dir.path(), &[], &[("WEIR_METRICS_TOKEN", "metrics-secret")]);
    let (a, _) = two_teams(&server);
    server.expect(
        "ingest",
        server.post(
            "/v1/pipelines/team-a.clicks/events",
            Some(&a),
            crate::server::jsonl(&crate::server::clicks(20, 2)).as_bytes(),
        ),
        202,
    );
    let a_metrics = token_of(&server, "team-a.metrics", "team-a", &["metrics"]);
    let everything = server.wait_for("both tenants' samples", crate::server::PATIENCE, || {
        let (_, text) = server.get("/metrics", Some("metrics-secret"));
        match text.contains("tenant=\"team-a\"") && text.contains("tenant=\"team-b\"") {
            true => Ok(text),
            false => Err(text),
        }
    });
    assert!(everything.contains("tenant=\"team-a\",pipeline=\"team-a.clicks\""));
    let (status, own) = server.get("/metrics", Some(&a_metrics));
    assert_eq!(status, 200);
    assert!(own.contains("pipeline=\"team-a.clicks\""), "{own}");
    assert!(!own.contains("team-b"), "another tenant's samples: {own}");
    let samples = own.lines().filter(|line| !line.starts_with('#'));
    assert!(samples.clone().count() > 0);
    assert!(
        samples
            .into_iter()
            .all(|line| line.contains("tenant=\"team-a\""))
    );
}

#[test]
fn a_tenant_is_held_to_the_quotas_a_server_admin_sets() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let a = token_of(&server, "team-a.admin", "team-a", &["admin"]);
    let quota = json!({"max_pipelines": 1, "max_operators": 1, "cpu": 0.5,
        "total_memory": 64 << 20, "state_bytes": 1 << 20, "max_events_per_second": 1000});
    server.expect(
        "setting the quota",
        server.put_json("/v1/tenants/team-a", Some(ADMIN), &quota),
        200,
    );
    for (bad, expected) in [
        (json!({"cpu": 0}), "cpu"),
        (json!({"colour": 1}), "colour"),
        (json!({"total_memory": 1}), "total_memory"),
    ] {
        let message = server.expect_error(
            &bad.to_string(),
            server.put_json("/v1/tenants/team-a", Some(ADMIN), &bad),
            400,
        );
        assert!(message.contains(expected), "{message}");
    }
    server.expect_error(
        "a bad tenant name",
        server.put_json("/v1/tenants/a.b", Some(ADMIN), &quota),
        400,
    );
    server.expect_error(
        "a tenant setting its own",
        server.put_json(
            "/v1/tenants/team-a",
            Some(&a),
            &json!({"max_pipelines": 99}),
        ),
        403,
    );
    server.expect("upload", upload(&server, "team-a.op", "1.0.0", &a), 201);
    let message = server.expect_error("", upload(&server, "team-a.op", "2.0.0", &a), 409);
    assert!(message.contains("max_operators"), "{message}");
    // A spec asking for more than the tenant's is refused with the limit.
    let asking = [
        (json!({"sandbox": {"cpu": 2}}), "0.5"),
        (json!({"sandbox": {"total_memory": "1GiB"}}), "67108864"),
        (json!({"state": {"max_bytes": "1GiB"}}), "1048576"),
    ];
    for (extra, limit) in asking {
        let mut spec = spec_of("team-a.big", "team-a.op");
        for (table, fields) in extra.as_object().unwrap() {
            spec[table] = fields.clone();
        }
        let message = server.expect_error(
            &extra.to_string(),
            server.post_json("/v1/pipelines", Some(&a), &spec),
            400,
        );
        assert!(message.contains(limit), "{message}");
    }
    let mut spec = spec_of("team-a.wide", "team-a.op");
    spec["shards"] = json!(8);
    let message = server.expect_error("", server.post_json("/v1/pipelines", Some(&a), &spec), 400);
    assert!(message.contains("shards asks for 8"), "{message}");
    let mut spec = spec_of("team-a.fast", "team-a.op");
    spec["source"]["max_events_per_second"] = json!(5000);
    let message = server.expect_error("", server.post_json("/v1/pipelines", Some(&a), &spec), 400);
    assert!(message.contains("1000"), "{message}");
    // One that asks for nothing gets the tenant's limits written into its spec.
    server.expect(
        "create",
        server.post_json(
            "/v1/pipelines",
            Some(&a),
            &spec_of("team-a.one", "team-a.op"),
        ),
        201,
    );
    let stored = server.expect(
        "spec",
        server.get("/v1/pipelines/team-a.one/spec", Some(&a)),
        200,
    );
    assert_eq!(stored["sandbox"]["cpu"], 0.5, "{stored}");
    assert_eq!(stored["sandbox"]["total_memory"], 64 << 20);
    assert_eq!(stored["state"]["max_bytes"], 1 << 20);
    assert_eq!(stored["source"]["max_events_per_second"], 1000);
    assert_eq!(stored["shards"], 2, "the tenant's default shards: {stored}");
    let message = server.expect_error(
        "a second pipeline",
        server.post_json(
            "/v1/pipelines",
            Some(&a),
            &spec_of("team-a.two", "team-a.op"),
        ),
        409,
    );
    assert!(message.contains("max_pipelines"), "{message}");
    // After a SIGKILL the quota holds; raised to 3, four creates at once make exactly two.
    server.kill();
    drop(server);
    server = Server::start(dir.path());
    server.expect_error(
        "still at its quota",
        server.post_json(
            "/v1/pipelines",
            Some(&a),
            &spec_of("team-a.two", "team-a.op"),
        ),
        409,
    );
    let raised = json!({"max_pipelines": 3, "cpu": 0.5, "total_memory": 64 << 20,
        "state_bytes": 1 << 20, "max_events_per_second": 1000});
    server.expect(
        "raising",
        server.put_json("/v1/tenants/team-a", Some(ADMIN), &raised),
        200,
    );
    let creates: Vec<_> = (0..4)
        .map(|i| {
            let (client, token) = (server.client(), a.clone());
            let spec = spec_of(&format!("team-a.p{i}"), "team-a.op");
            thread::spawn(move || client.post_json("/v1/pipelines", Some(&token), &spec).0)
        })
        .collect();
    let statuses: Vec<u16> = creates.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        2,
        "{statuses:?}"
    );
}

/// Every route of the API document, aimed at team-a's pipeline, operator and admin token:
/// its path and method.
fn every_route(openapi: &Value) -> Vec<(String, String)> {
    let mut routes = Vec::new();
    for (template, operations) in openapi["paths"].as_object().unwrap() {
        let aimed = template
            .replace("/v1/pipelines/{name}", "/v1/pipelines/team-a.clicks")
            .replace("/v1/operators/{name}", "/v1/operators/team-a.count-sum")
            .replace("{version}", "1.0.0")
            .replace("{savepoint}", "nothing")
            .replace("{name}", "team-a.admin");
        for method in operations.as_object().unwrap().keys() {
            routes.push((aimed.clone(), method.clone()));
        }
    }
    routes
}

/// Calls `method path` with `token` (and `{}` for a body).
pub(crate) fn call(server: &Server, method: &str, path: &str, token: &str) -> (u16, String) {
    match method {
        "get" => server.get(path, Some(token)),
        "delete" => server.delete(path, Some(token)),
        "post" => server.post(path, Some(token), b"{}"),
        "put" => server.put_json(path, Some(token), &json!({})),
        other => panic!("a method the test does not know: {other}"),
    }
}

/// A tenant's stuck pipeline is listed by `/healthz` but does not make the server degraded
/// (one tenant cannot have a shared server restarted by its orchestrator); a stuck pipeline of
/// the server's own does.
#[test]
fn a_tenants_stuck_pipeline_does_not_make_the_server_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--stall-after", "2s"]);
    let a = token_of(&server, "team-a.admin", "team-a", &["admin"]);
    let spin = crate::support::guest("infinite-loop");
    let spin = std::fs::read(spin).unwrap();
    let spinning = |name: &str, operator: &str| {
        let mut spec = spec_of(name, operator);
        spec["sandbox"] = json!({"call_timeout": "60s"});
        spec
    };
    let events: Vec<_> = (0..50)
        .map(|i| crate::server::ev("spin-1", crate::server::BASE_TS + i, 1))
        .collect();
    let stuck = |token: &str, name: &str, operator: &str| {
        server.expect(
            "upload",
            server.upload(operator, "1.0.0", &spin, Some(token)),
            201,
        );
        let spec = spinning(name, operator);
        server.expect(
            "create",
            server.post_json("/v1/pipelines", Some(token), &spec),
            201,
        );
        let start = format!("/v1/pipelines/{name}/start");
        server.expect("start", server.post(&start, Some(token), b""), 200);
        let body = crate::server::jsonl(&events);
        let path = format!("/v1/pipelines/{name}/events");
        server.expect(
            "ingest",
            server.post(&path, Some(token), body.as_bytes()),
            202,
        );
    };
    stuck(&a, "team-a.stuck", "team-a.spin");
    let health = server.wait_for("team-a's stuck pipeline listed", PATIENCE, || {
        let (code, body) = server.get("/healthz", Some(ADMIN));
        let health: Value = serde_json::from_str(&body).unwrap();
        match health["stalled"] == json!(["team-a.stuck"]) {
            true => Ok((code, health)),
            false => Err(body),
        }
    });
    assert_eq!(health.0, 200, "{:?}", health.1);
    assert_eq!(health.1["status"], "ok");
    stuck(ADMIN, "stuck", "spin");
    server.wait_for(
        "the server's own stuck pipeline to degrade it",
        PATIENCE,
        || match server.get("/healthz", Some(ADMIN)) {
            (503, body) => Ok(body),
            (code, body) => Err(format!("{code} {body}")),
        },
    );
}
