//! Tokens over HTTP: `GET /v1/tokens` lists every token (those set at start and those made
//! here, never a secret or digest), `POST /v1/tokens` makes one and shows its secret once,
//! `DELETE /v1/tokens/{name}` revokes one and `POST /v1/tokens/{name}/rotate` gives it a new
//! secret, both effective before the answer leaves. Only an admin token not narrowed to
//! pipelines reaches these routes (`serve::Caller::reach`). The store is `serve::TokenStore`.
//!
//! Depends on `serve`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::ApiError;
use super::pipelines::blocking;
use crate::serve::{Caller, NewToken, Server};

/// `GET /v1/tokens`: those the caller's tenant sees (a server admin sees all).
pub(super) async fn list(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
) -> Json<serde_json::Value> {
    let sees = |tenant: Option<&str>| caller.as_ref().is_none_or(|c| c.sees_tenant(tenant));
    let fixed: Vec<serde_json::Value> = (server.tokens.fixed())
        .filter(|grant| sees(grant.tenant.as_deref()))
        .map(|grant| {
            serde_json::json!({
                "name": grant.name,
                "scopes": grant.scopes,
                "tenant": grant.tenant,
                "max_pipelines": grant.quota.max_pipelines,
                "max_operators": grant.quota.max_operators,
            })
        })
        .collect();
    let made: Vec<_> = (server.tokens.store().list().into_iter())
        .filter(|record| sees(record.tenant.as_deref()))
        .collect();
    Json(serde_json::json!({ "set_at_start": fixed, "made": made }))
}

/// `POST /v1/tokens`: `{name, scopes, tenant?, pipelines?, expires_in_s?, max_pipelines?,
/// max_operators?}`; answers the token with its secret (`token`), shown this once.
pub(super) async fn create(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let new: NewToken = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a token request ({{\"name\", \"scopes\", \"tenant\", \
             \"pipelines\", \"expires_in_s\", \"max_pipelines\", \"max_operators\"}}): {e}"
        ))
    })?;
    let issued = blocking(move || {
        let tokens = &server.tokens;
        let maker = caller.as_deref();
        // Everything the caller sent is checked before a tenant is made for it.
        tokens
            .store()
            .check(&new, maker, |name| tokens.is_fixed(name))?;
        let server_maker = maker.is_none_or(|m| m.tenant.is_none());
        if let (true, Some(tenant)) = (server_maker, &new.tenant) {
            // The first token bound to a tenant makes it (a tenant's own admin makes its
            // tenant's only: that is checked with the rest).
            server.make_tenant(tenant, None)?;
        } else if server_maker && let Some(tenant) = server.tenant_of(&new.name) {
            return Err(crate::serve::RequestError::Invalid(format!(
                "name: \"{tenant}.<name>\" is tenant {tenant:?}'s: give \"tenant\": \"{tenant}\", \
                 or another name"
            )));
        }
        let tenant = (maker.and_then(|m| m.tenant.as_deref())).or(new.tenant.as_deref());
        let cap = tenant.map(|tenant| server.tenants.quota(tenant).max_tokens);
        tokens
            .store()
            .create(&new, maker, |name| tokens.is_fixed(name), cap)
    })
    .await?;
    tracing::info!(token = %issued.record.name, "token made");
    Ok((StatusCode::CREATED, Json(issued)))
}

/// `DELETE /v1/tokens/{name}`.
pub(super) async fn revoke(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    refuse_fixed(&server, caller.as_deref(), &name)?;
    let revoked = name.clone();
    blocking(move || {
        let visible = |tenant: Option<&str>| caller.as_ref().is_none_or(|c| c.sees_tenant(tenant));
        server.tokens.store().revoke(&revoked, visible)
    })
    .await?;
    tracing::info!(token = %name, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/tokens/{name}/rotate`: the token with its new secret.
pub(super) async fn rotate(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    refuse_fixed(&server, caller.as_deref(), &name)?;
    let issued = blocking(move || {
        let visible = |tenant: Option<&str>| caller.as_ref().is_none_or(|c| c.sees_tenant(tenant));
        server
            .tokens
            .store()
            .rotate(&name, visible, caller.as_deref())
    })
    .await?;
    tracing::info!(token = %issued.record.name, "token rotated");
    Ok(Json(issued))
}

/// Refuses a change of a token set at start (`409`), or answers one the caller's tenant
/// cannot see as unknown.
fn refuse_fixed(server: &Server, caller: Option<&Caller>, name: &str) -> Result<(), ApiError> {
    let Some(grant) = server.tokens.fixed().find(|grant| grant.name == name) else {
        return Ok(());
    };
    if caller.is_some_and(|c| !c.sees_tenant(grant.tenant.as_deref())) {
        return Err(crate::serve::unknown_token(name).into());
    }
    Err(ApiError::conflict(format!(
        "token {name:?} is set when the server starts (environment or --tokens file): change \
         it there and restart"
    )))
}
