//! The audit trail over HTTP: which calls are put on record (every state-changing call but
//! ingest), putting them there once answered, and `GET /v1/audit` for admins. The log itself
//! is `serve::AuditLog`.
//!
//! Depends on `serve`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};

use super::ApiError;
use super::pipelines::blocking;
use crate::serve::{AuditRecord, RequestError, Server};

/// Whether a call of `method` on route `route` changes the server's state and goes on record:
/// everything but reads, and ingest (data, not configuration; it has its own metrics).
pub(super) fn is_audited(method: &Method, route: &str) -> bool {
    !matches!(*method, Method::GET | Method::HEAD) && route != "/v1/pipelines/{name}/events"
}

/// The record of a call of `request` on `route` by the token named `who`, answered `status`
/// (the time and, for a call let through, the status are set when it is answered).
pub(super) fn call(
    request: &axum::extract::Request,
    route: &str,
    who: Option<String>,
    status: StatusCode,
) -> AuditRecord {
    AuditRecord {
        at_ms: crate::time::wall_clock_ms(),
        who: who.unwrap_or_default(),
        method: request.method().to_string(),
        route: route.to_owned(),
        path: request.uri().path().to_owned(),
        status: status.as_u16(),
        tenant: None,
    }
}

/// Puts the answered call on record before the answer leaves (synced when it was let through;
/// a refusal is not synced). A failure to write is logged and counted
/// (`weir_audit_failures_total`); the call itself was made.
pub(super) async fn record(server: &Arc<Server>, mut call: AuditRecord) {
    call.at_ms = crate::time::wall_clock_ms();
    let durable = call.status != 403;
    let server = server.clone();
    let written = tokio::task::spawn_blocking(move || server.audit.append(&call, durable)).await;
    if let Ok(Err(error)) | Err(error) = written.map_err(std::io::Error::other) {
        tracing::error!(%error, "the audit log could not be written");
        metrics::counter!("weir_audit_failures_total").increment(1);
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    limit: Option<usize>,
}

/// `GET /v1/audit[?limit=N]`: the latest N calls on record (default 100, at most 10,000),
/// oldest first.
/// A tenant's token gets its own tenant's records among the latest N.
pub(super) async fn list(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<crate::serve::Caller>>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > crate::serve::AUDIT_MAX_READ {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "limit is 1 to 10000 records",
        ));
    }
    let mut records =
        blocking(move || (server.audit.latest(limit)).map_err(RequestError::from_io)).await?;
    if let Some(caller) = caller {
        records.retain(|record| caller.sees_tenant(record.tenant.as_deref()));
    }
    Ok(Json(serde_json::json!({ "records": records })))
}
