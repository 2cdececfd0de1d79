//! `GET /openapi.json`: the API described for tools (OpenAPI 3.1). Kept next to the routes;
//! `docs/api.md` is the prose version.

use axum::Json;

fn op(summary: &str, scope: &str, responses: &[(&str, &str)]) -> serde_json::Value {
    let responses: serde_json::Map<String, serde_json::Value> = responses
        .iter()
        .map(|(code, text)| {
            (
                (*code).to_owned(),
                serde_json::json!({ "description": text }),
            )
        })
        .collect();
    let security = match scope {
        "" => serde_json::json!([]),
        scope => serde_json::json!([{ "bearer": [scope] }]),
    };
    serde_json::json!({ "summary": summary, "security": security, "responses": responses })
}

pub(super) async fn document() -> Json<serde_json::Value> {
    let err = |code: &'static str, text: &'static str| (code, text);
    Json(serde_json::json!({
        "openapi": "3.1.0",
        "info": { "title": "Weir", "version": env!("CARGO_PKG_VERSION"),
                  "description": "Operator registry, live pipelines and gradual rollout. Errors are {\"error\": message}." },
        "components": { "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer",
            "description": "Scopes: admin (everything), ingest (POST /v1/pipelines/{name}/events)." } } },
        "paths": {
            "/healthz": { "get": op("Liveness", "", &[("200", "ok")]) },
            "/metrics": { "get": op("Prometheus metrics", "", &[("200", "text exposition format")]) },
            "/openapi.json": { "get": op("This document", "", &[("200", "OpenAPI 3.1")]) },
            "/v1/operators": { "get": op("List operator versions", "admin", &[("200", "versions")]) },
            "/v1/operators/{name}/{version}": {
                "post": op("Upload a component (body: its bytes)", "admin", &[("201", "the version"), err("400", "not a Weir component"), err("409", "version exists"), err("413", "too large")]),
                "get": op("One version", "admin", &[("200", "the version"), err("404", "unknown")]),
                "delete": op("Delete a version", "admin", &[("204", "deleted"), err("409", "in use")])
            },
            "/v1/pipelines": {
                "get": op("List pipelines with status", "admin", &[("200", "statuses")]),
                "post": op("Create a pipeline from a JSON spec", "admin", &[("201", "status"), err("400", "invalid spec"), err("409", "name taken")])
            },
            "/v1/pipelines/{name}": {
                "get": op("Pipeline status", "admin", &[("200", "status"), err("404", "unknown")]),
                "delete": op("Stop and delete a pipeline", "admin", &[("204", "deleted")])
            },
            "/v1/pipelines/{name}/start": { "post": op("Start (resumes from the last checkpoint)", "admin", &[("200", "status")]) },
            "/v1/pipelines/{name}/stop": { "post": op("Stop after a final checkpoint", "admin", &[("200", "status")]) },
            "/v1/pipelines/{name}/events": { "post": op("Send events: JSON Lines or a JSON array", "ingest", &[("202", "{\"accepted\": n}"), err("409", "not running")]) },
            "/v1/pipelines/{name}/results": { "get": op("Result records as Server-Sent Events", "admin", &[("200", "text/event-stream")]) },
            "/v1/pipelines/{name}/rollout": { "post": op("Roll out a version: {version, percent | steps+every, shadow, policy}", "admin", &[("200", "status"), err("400", "invalid")]) },
            "/v1/pipelines/{name}/rollback": { "post": op("Roll back: every key to the live version", "admin", &[("200", "status"), err("409", "no rollout")]) }
        }
    }))
}
