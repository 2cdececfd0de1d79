//! The HTTP API of `weir serve` (axum): routes, auth, errors. See `docs/api.md`.
//!
//! Auth runs as middleware before any body is read, so an unauthenticated or unauthorised
//! request is refused with 401 or 403 whatever it carries, and changes nothing.

mod error;
mod openapi;
mod operators;
mod pipelines;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::serve::{Scope, Server};

/// The API's router over a server.
pub fn router(server: Arc<Server>) -> Router {
    let v1 = Router::new()
        .route("/operators", get(operators::list))
        .route(
            "/operators/{name}/{version}",
            post(operators::upload)
                .get(operators::get)
                .delete(operators::delete),
        )
        .route("/pipelines", get(pipelines::list).post(pipelines::create))
        .route(
            "/pipelines/{name}",
            get(pipelines::status).delete(pipelines::delete),
        )
        .route("/pipelines/{name}/start", post(pipelines::start))
        .route("/pipelines/{name}/stop", post(pipelines::stop))
        .route("/pipelines/{name}/events", post(pipelines::ingest))
        .route("/pipelines/{name}/results", get(pipelines::results))
        .route("/pipelines/{name}/rollout", post(pipelines::rollout))
        .route("/pipelines/{name}/rollback", post(pipelines::rollback))
        .route_layer(middleware::from_fn_with_state(server.clone(), authorize));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi::document))
        .nest("/v1", v1)
        .fallback(|| async { ApiError::not_found("no such route; GET /openapi.json lists them") })
        .layer(middleware::from_fn(json_errors))
        .layer(DefaultBodyLimit::max(server.max_upload))
        .layer(TraceLayer::new_for_http())
        .with_state(server)
}

async fn metrics(State(server): State<Arc<Server>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        server.metrics.render(),
    )
        .into_response()
}

/// Which scope a request needs: sending events needs `ingest`; everything else `admin`.
fn needed(method: &Method, path: &str) -> Scope {
    if method == Method::POST && path.ends_with("/events") {
        Scope::Ingest
    } else {
        Scope::Admin
    }
}

async fn authorize(State(server): State<Arc<Server>>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = token else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing `Authorization: Bearer <token>`",
        )
        .into_response();
    };
    match server
        .tokens
        .allows(token, needed(request.method(), request.uri().path()))
    {
        None => ApiError::new(StatusCode::UNAUTHORIZED, "unknown token").into_response(),
        Some(false) => ApiError::new(
            StatusCode::FORBIDDEN,
            "this token's scope does not allow this request",
        )
        .into_response(),
        Some(true) => {
            // Refuse an announced oversized body before reading any of it (and before a client
            // that sent `Expect: 100-continue` is told to go on).
            let length = request
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok());
            if length.is_some_and(|length| length > server.max_upload) {
                return ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body is larger than the server's limit of {} bytes (--max-upload)", server.max_upload),
                )
                .into_response();
            }
            next.run(request).await
        }
    }
}

/// Turns axum's own plain-text rejections (body too large, bad JSON, ...) into JSON errors.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if status.is_success() || is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 64 << 10)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            "the request body is larger than the server's limit (--max-upload)".to_owned()
        }
        _ if text.trim().is_empty() => status.canonical_reason().unwrap_or("error").to_owned(),
        _ => text.trim().to_owned(),
    };
    ApiError::new(status, message).into_response()
}
