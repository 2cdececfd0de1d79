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

/// `GET /v1/tokens`.
pub(super) async fn list(State(server): State<Arc<Server>>) -> Json<serde_json::Value> {
    let fixed: Vec<serde_json::Value> = (server.tokens.fixed())
        .map(|grant| {
            serde_json::json!({
                "name": grant.name,
                "scopes": grant.scopes,
                "max_pipelines": grant.quota.max_pipelines,
                "max_operators": grant.quota.max_operators,
                "set_at_start": true,
            })
        })
        .collect();
    let made = server.tokens.store().list();
    Json(serde_json::json!({ "set_at_start": fixed, "made": made }))
}

/// `POST /v1/tokens`: `{name, scopes, pipelines?, expires_in_s?, max_pipelines?,
/// max_operators?}`; answers the token with its secret (`token`), shown this once.
pub(super) async fn create(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let new: NewToken = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a token request ({{\"name\", \"scopes\", \"pipelines\", \
             \"expires_in_s\", \"max_pipelines\", \"max_operators\"}}): {e}"
        ))
    })?;
    let by = caller.map(|c| c.name.clone()).unwrap_or_default();
    let issued = blocking(move || {
        let tokens = &server.tokens;
        tokens
            .store()
            .create(&new, &by, |name| tokens.is_fixed(name))
    })
    .await?;
    tracing::info!(token = %issued.record.name, "token made");
    Ok((StatusCode::CREATED, Json(issued)))
}

/// `DELETE /v1/tokens/{name}`.
pub(super) async fn revoke(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    refuse_fixed(&server, &name)?;
    let revoked = name.clone();
    blocking(move || server.tokens.store().revoke(&revoked)).await?;
    tracing::info!(token = %name, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/tokens/{name}/rotate`: the token with its new secret.
pub(super) async fn rotate(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    refuse_fixed(&server, &name)?;
    let issued = blocking(move || server.tokens.store().rotate(&name)).await?;
    tracing::info!(token = %issued.record.name, "token rotated");
    Ok(Json(issued))
}

fn refuse_fixed(server: &Server, name: &str) -> Result<(), ApiError> {
    if server.tokens.is_fixed(name) {
        return Err(ApiError::conflict(format!(
            "token {name:?} is set when the server starts (environment or --tokens file): change \
             it there and restart"
        )));
    }
    Ok(())
}
