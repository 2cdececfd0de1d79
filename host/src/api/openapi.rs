//! `GET /openapi.json`: the API described for tools (OpenAPI 3.1), generated from the route
//! table (`routes`), so every route and every status it can answer is in it. `docs/api.md` is
//! the prose version. Depends on `serve`.

use axum::Json;
use serde_json::{Map, Value, json};

use super::routes::{AUTH_RESPONSES, Access, ROUTES};
use crate::serve::Scope;

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Admin => "admin",
        Scope::Deploy => "deploy",
        Scope::Ingest => "ingest",
        Scope::Metrics => "metrics",
        Scope::Read => "read",
    }
}

/// The document.
pub fn build() -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        let mut responses = Map::new();
        let extra = match route.access {
            Access::Public => &[][..],
            Access::Token(_) => AUTH_RESPONSES,
        };
        for (code, text) in route.responses.iter().chain(extra) {
            responses
                .entry(code.to_string())
                .or_insert_with(|| json!({ "description": text }));
        }
        let security = match route.access {
            Access::Public => json!([]),
            Access::Token(scope) => json!([{ "bearer": [scope_name(scope)] }]),
        };
        let operation = json!({
            "summary": route.summary,
            "security": security,
            "responses": responses,
        });
        paths
            .entry(route.path.to_owned())
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("a path item is an object")
            .insert(route.method.as_str().to_ascii_lowercase(), operation);
    }
    json!({
        "openapi": "3.1.0",
        "info": { "title": "Weir", "version": env!("CARGO_PKG_VERSION"),
                  "description": "Operator registry, live pipelines and gradual rollout. Errors are {\"error\": message}." },
        "components": { "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer",
            "description": "Scopes: admin (everything), ingest (POST /v1/pipelines/{name}/events), metrics (GET /metrics)." } } },
        "paths": paths,
    })
}

pub(super) async fn document() -> Json<Value> {
    Json(build())
}
