//! Tenants over HTTP: `GET /v1/tenants` lists their quotas and what each has, and
//! `PUT /v1/tenants/{name}` sets one's quotas (a server admin only: a tenant's token is refused
//! by `serve::Caller::reach`). The rules are `serve::tenants`.
//!
//! Depends on `serve`.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};

use super::ApiError;
use super::pipelines::blocking;
use crate::serve::{Caller, Server, TenantQuota, tenant_holds};

/// `GET /v1/tenants`: the defaults, and every tenant with its quota and how many pipelines
/// and operator versions it has; a tenant's token sees its own.
pub(super) async fn list(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
) -> Json<serde_json::Value> {
    let mut names: BTreeSet<String> = server.tenants.list().into_keys().collect();
    if let Some(own) = caller.as_ref().and_then(|c| c.tenant.clone()) {
        names.retain(|name| *name == own);
    }
    let pipelines: Vec<String> = server.slots().iter().map(|s| s.name.clone()).collect();
    let operators: Vec<String> = (server.registry.list().into_iter())
        .map(|info| info.name)
        .collect();
    let count =
        |tenant: &str, names: &[String]| names.iter().filter(|n| tenant_holds(tenant, n)).count();
    let tenants: serde_json::Map<String, serde_json::Value> = (names.into_iter())
        .map(|name| {
            let entry = serde_json::json!({
                "quota": server.tenants.quota(&name),
                "pipelines": count(&name, &pipelines),
                "operators": count(&name, &operators),
            });
            (name, entry)
        })
        .collect();
    Json(serde_json::json!({ "defaults": TenantQuota::default(), "tenants": tenants }))
}

/// `PUT /v1/tenants/{name}`: sets the tenant's quota; fields left out take their defaults.
pub(super) async fn set(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<TenantQuota>, ApiError> {
    let quota: TenantQuota = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a tenant's quota ({{\"max_pipelines\", \"max_operators\", \
             \"max_tokens\", \"shards\", \"cpu\", \"total_memory\", \"state_bytes\", \
             \"max_events_per_second\"}}): {e}"
        ))
    })?;
    blocking(move || server.make_tenant(&name, Some(quota))).await?;
    Ok(Json(quota))
}
