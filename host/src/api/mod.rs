//! The HTTP API of `weir serve` (axum): routes, auth, request and response shapes, statuses,
//! the listener and the process's signals. See `docs/api.md`. The domain is `serve`.
//!
//! Auth runs as middleware before any body is read, deciding from the route table (`routes`)
//! by the matched route and from the caller's tenant and narrowing, so an unauthenticated or
//! unauthorised request is refused with 401 or 403 (404 for a pipeline or operator it may not
//! see) whatever it carries, and changes nothing.
//!
//! Depends on `serve` (the domain), and on `operator`, `checkpoint` and `names` for request and
//! response shapes.

mod audit;
mod bodies;
mod console;
mod error;
mod listener;
mod openapi;
mod operators;
mod pipelines;
pub mod routes;
mod savepoints;
mod tenants;
mod tls;
mod tokens;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::trace::TraceLayer;
use tracing::{info, warn};

pub use bodies::{BodyPolicy, DEFAULT_MIN_BODY_RATE};
pub use error::ApiError;
pub use listener::{ConnectionLimits, GuardedListener};
pub use openapi::build as openapi_document;
pub use tls::{Tls, TlsError};

use crate::serve::{PipelineLimits, Reach, Scope, ServeError, Server, Tokens, Verdict};
use routes::Access;

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The data directory.
    pub data: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where to serve `/metrics` without a token, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Who may call the API.
    pub tokens: Tokens,
    /// The largest request body (uploads, ingest), in bytes.
    pub max_upload: usize,
    /// How request bodies are received: how many bytes at once, how slowly.
    pub bodies: BodyPolicy,
    /// Connection limits.
    pub connections: ConnectionLimits,
    /// How pipelines are treated.
    pub pipelines: PipelineLimits,
    /// The NATS servers and Kafka clusters pipelines may read from and write to, by name
    /// (`--nats`, `--kafka`).
    pub nats: crate::serve::ExternalServers,
    /// How long a shutdown waits for the pipelines' final checkpoints.
    pub shutdown_timeout: Duration,
    /// HTTPS with this certificate (`--tls-cert`, `--tls-key`; reloaded on SIGHUP), or plain
    /// HTTP.
    pub tls: Option<Arc<Tls>>,
}

/// The default request body limit: 32 MiB.
pub const DEFAULT_MAX_UPLOAD: usize = 32 << 20;

/// The default budget of request bodies being received at once, over all requests: 256 MiB.
pub const DEFAULT_MAX_INFLIGHT: usize = 256 << 20;

/// What the auth middleware needs: the server (its tokens) and the budgets of request body
/// bytes being received at once, so that many large or slow requests together cannot exhaust
/// memory or starve other callers.
#[derive(Clone)]
struct Gate {
    server: Arc<Server>,
    bodies: Arc<bodies::Bodies>,
}

/// The API's router over a server, with the default body policy.
pub fn router(server: Arc<Server>) -> Router {
    router_with(server, BodyPolicy::default())
}

/// The API's router over a server, receiving request bodies as `bodies` says (beyond its
/// budgets: `503` with `Retry-After`; too slow: `408`).
pub fn router_with(server: Arc<Server>, bodies: BodyPolicy) -> Router {
    let gate = Gate {
        server: server.clone(),
        bodies: bodies::Bodies::new(bodies),
    };
    let routes = Router::new()
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi::document))
        .route("/", get(console::index))
        .route("/console/{file}", get(console::asset))
        .route("/v1/whoami", get(whoami))
        .route("/v1/operators", get(operators::list))
        .route(
            "/v1/operators/{name}/{version}",
            post(operators::upload)
                .get(operators::get)
                .delete(operators::delete),
        )
        .route(
            "/v1/pipelines",
            get(pipelines::list).post(pipelines::create),
        )
        .route(
            "/v1/pipelines/{name}",
            get(pipelines::status).delete(pipelines::delete),
        )
        .route("/v1/audit", get(audit::list))
        .route("/v1/tokens", get(tokens::list).post(tokens::create))
        .route("/v1/tokens/{name}", axum::routing::delete(tokens::revoke))
        .route("/v1/tokens/{name}/rotate", post(tokens::rotate))
        .route("/v1/tenants", get(tenants::list))
        .route("/v1/tenants/{name}", axum::routing::put(tenants::set))
        .route("/v1/pipelines/{name}/start", post(pipelines::start))
        .route("/v1/pipelines/{name}/stop", post(pipelines::stop))
        .route("/v1/pipelines/{name}/events", post(pipelines::ingest))
        .route("/v1/pipelines/{name}/results", get(pipelines::results))
        .route("/v1/pipelines/{name}/spec", get(pipelines::spec))
        .route(
            "/v1/pipelines/{name}/dead-letters",
            get(pipelines::dead_letters),
        )
        .route("/v1/pipelines/{name}/rollout", post(pipelines::rollout))
        .route("/v1/pipelines/{name}/rollback", post(pipelines::rollback))
        .route("/v1/pipelines/{name}/promote", post(pipelines::promote))
        .route(
            "/v1/pipelines/{name}/savepoints",
            get(savepoints::list).post(savepoints::take),
        )
        .route(
            "/v1/pipelines/{name}/savepoints/{savepoint}",
            axum::routing::delete(savepoints::delete),
        )
        .route(
            "/v1/pipelines/{name}/savepoints/{savepoint}/fork",
            post(savepoints::fork),
        )
        .route("/v1/pipelines/{name}/replay", post(savepoints::replay))
        .route("/v1/pipelines/{name}/repro", post(savepoints::repro))
        .route(
            "/v1/pipelines/{name}/quarantine/redrive",
            post(savepoints::redrive),
        )
        .route_layer(middleware::from_fn_with_state(gate, authorize));
    routes
        .fallback(|| async { ApiError::not_found("no such route; GET /openapi.json lists them") })
        .layer(middleware::from_fn_with_state(server.clone(), json_errors))
        .layer(DefaultBodyLimit::max(server.max_upload))
        .layer(TraceLayer::new_for_http())
        .with_state(server)
}

/// `GET /v1/whoami`: the token's name, scopes, tenant and pipelines, for the console to show
/// what it may.
async fn whoami(
    caller: Option<axum::Extension<crate::serve::Caller>>,
) -> axum::Json<serde_json::Value> {
    let Some(axum::Extension(caller)) = caller else {
        return axum::Json(serde_json::json!({"name": null, "scopes": []}));
    };
    axum::Json(serde_json::json!({
        "name": caller.name,
        "scopes": caller.scopes,
        "tenant": caller.tenant,
        "pipelines": caller.pipelines,
    }))
}

/// `/metrics` alone, without a token, for `--metrics-listen`.
fn metrics_router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(server)
}

/// `/healthz`: anyone gets the status and counts; an admin token also gets the names and
/// reasons (which other routes keep behind a token). It takes no blocking thread, so a
/// saturated blocking pool cannot silence it.
async fn health(State(server): State<Arc<Server>>, request: Request) -> Response {
    // Names and reasons are for an admin of the whole server, not one narrowed to pipelines or
    // bound to a tenant.
    let admin = bearer(request.headers()).is_some_and(|token| {
        let (verdict, caller) = server.tokens.judge(token, Scope::Admin);
        verdict == Verdict::Allowed
            && caller.is_some_and(|c| c.pipelines.is_none() && c.tenant.is_none())
    });
    let health = server.health();
    let status = match health.status {
        "ok" => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = if admin {
        serde_json::to_value(&health).expect("health serialises")
    } else {
        serde_json::json!({
            "status": health.status,
            "stalled": health.stalled.len(),
            "failed": health.failed.len(),
            "damaged_pipelines": health.damaged_pipelines.len(),
            "damaged_operators": health.damaged_operators.len(),
        })
    };
    (status, axum::Json(body)).into_response()
}

/// `/metrics`: every sample of a tenant's pipeline labelled with its `tenant`; a tenant's
/// token gets its own tenant's samples only.
async fn metrics(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<crate::serve::Caller>>,
) -> Response {
    let only = caller.and_then(|axum::Extension(caller)| caller.tenant);
    let tenants = server.tenants.list();
    let known = |tenant: &str| tenants.contains_key(tenant);
    let text = crate::serve::label_metrics(&server.metrics.render(), only.as_deref(), known);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `weir run --metrics-listen`: serves `GET /metrics` (Prometheus, no token: bind it where
/// only the scraper can reach it) on `address` from a thread of its own, for the life of the
/// process, over HTTPS with `tls` (read again at every SIGHUP). Returns the address it listens
/// on.
pub fn spawn_metrics_endpoint(
    address: SocketAddr,
    tls: Option<Arc<Tls>>,
) -> Result<SocketAddr, std::io::Error> {
    let handle = crate::serve::metrics_handle();
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if tls.is_some() {
        // A renewed certificate without a restart, as for `weir serve`; listened for before
        // the address is returned (and printed), so no SIGHUP finds the default (exit).
        let _inside = runtime.enter();
        reload_on_sighup(tls.clone());
    }
    std::thread::Builder::new()
        .name("weir-metrics".into())
        .spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = Router::new().route(
                    "/metrics",
                    get(move || async move {
                        let body = handle.render();
                        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
                    }),
                );
                // A few connections are plenty for a scraper; the guard keeps a flood of them
                // from taking the process's file descriptors.
                let limits = ConnectionLimits {
                    max_connections: 64,
                    ..ConnectionLimits::default()
                };
                let listener = GuardedListener::new(listener, limits);
                serve_connections(listener, app, (limits, tls), std::future::pending()).await;
            })
        })?;
    Ok(bound)
}

/// The token of an `Authorization` header: the scheme `Bearer` in any case, one space, the
/// token (RFC 9110).
pub(super) fn bearer(headers: &header::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// The `{name}` and `{version}` of the route's path, as its handler will read them.
async fn path_names(request: Request) -> (Request, Option<String>, Option<String>) {
    use axum::extract::FromRequestParts;
    let (mut parts, body) = request.into_parts();
    let params = axum::extract::Path::<Vec<(String, String)>>::from_request_parts(&mut parts, &())
        .await
        .map(|axum::extract::Path(params)| params)
        .unwrap_or_default();
    let param = |key: &str| {
        (params.iter())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let (name, version) = (param("name"), param("version"));
    (Request::from_parts(parts, body), name, version)
}

/// The pipeline a route names (`/v1/pipelines/{name}/...`), as its handler will read it.
async fn named_pipeline(request: Request) -> (Request, Option<String>) {
    let is_pipeline = (request.extensions().get::<MatchedPath>())
        .is_some_and(|path| path.as_str().starts_with("/v1/pipelines/{name}"));
    let (request, name, _) = path_names(request).await;
    (request, name.filter(|_| is_pipeline))
}

/// Receives the request's body within the budgets and at the minimum rate (see `bodies`),
/// then runs the handler; the body's charge is held until the answer is ready.
async fn receive(gate: &Gate, request: Request, caller: Option<String>, next: Next) -> Response {
    let server = &gate.server;
    // Refuse an announced oversized body before reading any of it (and before a client that
    // sent `Expect: 100-continue` is told to go on).
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if length.is_some_and(|length| length > server.max_upload) {
        let message = format!(
            "the request body is larger than the server's limit of {} bytes (--max-upload)",
            server.max_upload
        );
        let response = ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
        return unread_body(&request, response);
    }
    let chunked = request.headers().contains_key(header::TRANSFER_ENCODING);
    if length.unwrap_or(0) == 0 && !chunked {
        return next.run(request).await;
    }
    let (request, pipeline) = named_pipeline(request).await;
    let admission = match gate.bodies.admit(caller.as_deref(), pipeline.as_deref()) {
        Ok(admission) => Arc::new(std::sync::Mutex::new(admission)),
        Err(refusal) => return unread_body(&request, refused_body(refusal)),
    };
    let refused = Arc::new(std::sync::Mutex::new(None));
    let (parts, body) = request.into_parts();
    let body = gate.bodies.paced(body, admission.clone(), refused.clone());
    metrics::gauge!("weir_request_bodies_in_flight").increment(1.0);
    let response = next.run(Request::from_parts(parts, body)).await;
    metrics::gauge!("weir_request_bodies_in_flight").decrement(1.0);
    drop(admission);
    let refusal = *refused.lock().expect("refusal lock");
    match refusal {
        Some(refusal) => refused_body(refusal),
        None => response,
    }
}

/// The answer to a body cut off: `408` (too slow; the connection is closed) or `503` with
/// `Retry-After` (a budget is spent).
fn refused_body(refusal: bodies::Refusal) -> Response {
    let labels = [("budget", refusal.label())];
    metrics::counter!("weir_request_bodies_refused_total", &labels).increment(1);
    let (status, header) = match refusal {
        bodies::Refusal::TooSlow => (
            StatusCode::REQUEST_TIMEOUT,
            (
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            ),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            (header::RETRY_AFTER, header::HeaderValue::from_static("1")),
        ),
    };
    let mut response = ApiError::new(status, refusal.message()).into_response();
    response.headers_mut().insert(header.0, header.1);
    response
}

/// `response` to a request answered without reading its body: with `Connection: close` if the
/// request has one, so that the client does not send its next request down a connection the
/// server will close (HTTP/1.1 section 9.6: a server that does not read a body closes).
fn unread_body(request: &Request, mut response: Response) -> Response {
    let headers = request.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0");
    if has_body {
        (response.headers_mut()).insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn authorize(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let refused = |request: &Request, status, message: &'static str| {
        unread_body(request, ApiError::new(status, message).into_response())
    };
    let server = &gate.server;
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    // Deny by default: a route missing from the table is refused, never let through.
    let Some(route) = template.and_then(|path| routes::find(request.method(), &path)) else {
        return refused(
            &request,
            StatusCode::FORBIDDEN,
            "this route has no access rule",
        );
    };
    let scope = match route.access {
        Access::Public => return next.run(request).await,
        Access::Token(scope) => scope,
    };
    let Some(token) = bearer(request.headers()) else {
        return refused(
            &request,
            StatusCode::UNAUTHORIZED,
            "missing or malformed `Authorization: Bearer <token>`",
        );
    };
    let (verdict, caller) = server.tokens.judge(token, scope);
    let (mut request, target, version) = path_names(request).await;
    let reach = match (&caller, verdict) {
        (Some(caller), Verdict::Allowed) => {
            caller.reach(request.method().as_str(), route.path, target.as_deref())
        }
        _ => Reach::Allowed,
    };
    let name = caller.as_ref().map(|caller| caller.name.clone());
    let tenant = caller.as_ref().and_then(|caller| caller.tenant.clone());
    if let Some(caller) = caller {
        // Handlers that create something record it under the caller, within its quota.
        request.extensions_mut().insert(caller);
    }
    match (verdict, reach) {
        (Verdict::Unknown, _) => refused(
            &request,
            StatusCode::UNAUTHORIZED,
            "unknown token (or expired, or revoked)",
        ),
        (Verdict::Forbidden, _) | (_, Reach::Refused | Reach::Hidden) => {
            let response = refusal(&request, route.path, reach, (target, version));
            // A known token trying a change it may not make is on record too.
            if audit::is_audited(request.method(), route.path) {
                let mut call = audit::call(&request, route.path, name, response.status());
                call.tenant = tenant;
                audit::record(server, call).await;
            }
            response
        }
        (Verdict::Allowed, _) if audit::is_audited(request.method(), route.path) => {
            let mut call = audit::call(&request, route.path, name.clone(), StatusCode::OK);
            call.tenant = tenant;
            // In a task of its own: a caller that hangs up mid-call does not keep the change
            // it made off the record.
            let (gate, server) = (gate.clone(), server.clone());
            let answered = tokio::spawn(async move {
                let response = receive(&gate, request, name, next).await;
                call.status = response.status().as_u16();
                audit::record(&server, call).await;
                response
            });
            answered.await.unwrap_or_else(|error| {
                ApiError::internal(format!("the call failed: {error}")).into_response()
            })
        }
        (Verdict::Allowed, _) => receive(&gate, request, name, next).await,
    }
}

/// The answer to a known token that may not make this call: beyond its scope (`403`), beyond
/// its narrowing or tenant (`403`), or naming `(target, version)` it may not see (`404`).
fn refusal(
    request: &Request,
    route: &str,
    reach: Reach,
    (target, version): (Option<String>, Option<String>),
) -> Response {
    let message = match reach {
        Reach::Hidden => {
            return unread_body(request, hidden(route, target.unwrap_or_default(), version));
        }
        Reach::Refused => {
            "this token is narrowed to pipelines (their routes and the list only) or bound to a \
             tenant (no tenant's quotas): this route is not one it may use; ask a server admin"
        }
        Reach::Allowed => "this token's scope does not allow this request",
    };
    unread_body(
        request,
        ApiError::new(StatusCode::FORBIDDEN, message).into_response(),
    )
}

/// The answer to a token naming a pipeline (or operator `name` `version`) it may not see:
/// the one a pipeline (or version) that does not exist gets, so that it learns no names.
fn hidden(route: &str, name: String, version: Option<String>) -> Response {
    let what = match route.starts_with("/v1/operators/") {
        true => "operator name",
        false => "pipeline name",
    };
    let error = match crate::names::check(what, &name) {
        Err(e) => e.into(),
        Ok(()) if what == "operator name" => {
            let version = version.unwrap_or_default();
            crate::operator::RegistryError::Unknown { name, version }.into()
        }
        Ok(()) => crate::serve::unknown_pipeline(&name),
    };
    ApiError::from(error).into_response()
}

/// Turns axum's own plain-text rejections (body too large, bad JSON, ...) into JSON errors,
/// and keeps the server's own directory out of every error message: a path inside the data
/// directory is said relative to it (the caller learns which file, not where the server keeps
/// its data).
async fn json_errors(State(server): State<Arc<Server>>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if status.is_success() || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let (mut parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, 4 << 20)
        .await
        .unwrap_or_default();
    let error = (serde_json::from_slice::<serde_json::Value>(&body).ok())
        .and_then(|v| v["error"].as_str().map(str::to_owned));
    let message = match (is_json, status) {
        (true, _) => match error {
            Some(message) => message,
            // A JSON answer of another shape (`/healthz` when degraded) goes as it is.
            None => return Response::from_parts(parts, axum::body::Body::from(body)),
        },
        (false, StatusCode::PAYLOAD_TOO_LARGE) => {
            "the request body is larger than the server's limit (--max-upload)".to_owned()
        }
        _ => match String::from_utf8_lossy(&body).trim() {
            "" => status.canonical_reason().unwrap_or("error").to_owned(),
            text => text.to_owned(),
        },
    };
    let body = serde_json::json!({ "error": server.redact(&message) }).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}

fn io_error(what: &str, e: std::io::Error) -> ServeError {
    ServeError::Io {
        path: PathBuf::from(what),
        message: e.to_string(),
    }
}

/// Waits for the next SIGINT or SIGTERM.
async fn next_signal(terminate: &mut Option<tokio::signal::unix::Signal>) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match terminate.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// Reads the TLS certificate and key again at every SIGHUP (a renewed certificate without a
/// restart); one that cannot be read leaves the one in use. Without TLS a SIGHUP is noted and
/// does nothing (its default would end the process without final checkpoints).
fn reload_on_sighup(tls: Option<Arc<Tls>>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: the TLS certificate is not reloaded");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(tls) = &tls else {
                info!("SIGHUP: nothing to reload (no --tls-cert)");
                continue;
            };
            match tls.reload() {
                Ok(()) => info!("SIGHUP: the TLS certificate and key were read again"),
                Err(error) => {
                    tracing::warn!(%error, "SIGHUP: the TLS certificate was not reloaded; the one in use stays")
                }
            }
        }
    });
}

/// Waits for SIGINT or SIGTERM; a second one ends the process at once.
async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    next_signal(&mut terminate).await;
    eprintln!("weir: stopping (a second SIGTERM or Ctrl-C exits at once)");
    tokio::spawn(async move {
        next_signal(&mut terminate).await;
        eprintln!("weir: exiting at once; pipelines resume from their last checkpoints");
        std::process::exit(130);
    });
}

/// Serves HTTP/1 connections from `listener` until `shutdown`, then lets open ones finish for
/// up to two seconds. Each connection must send a request's headers within the header timeout
/// (however slowly it trickles them), and its read buffer is bounded.
async fn serve_connections(
    mut listener: GuardedListener,
    app: Router,
    (limits, tls): (ConnectionLimits, Option<Arc<Tls>>),
    shutdown: impl std::future::Future<Output = ()>,
) {
    use axum::serve::Listener;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_READ_BUFFER);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            (io, _address) = listener.accept() => {
                let service = listener::CountInFlight::new(
                    hyper_util::service::TowerToHyperService::new(app.clone()),
                    io.in_flight(),
                );
                let Some(tls) = &tls else {
                    let connection =
                        http.serve_connection(hyper_util::rt::TokioIo::new(io), service);
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    continue;
                };
                // The handshake in the connection's own task, within the header timeout.
                let (acceptor, http, watcher) = (tls.acceptor(), http.clone(), graceful.watcher());
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(io));
                    let Ok(Ok(stream)) = handshake.await else {
                        return;
                    };
                    let connection =
                        http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    let _ = watcher.watch(connection).await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
}

/// The most a connection buffers while reading a request's head.
const MAX_READ_BUFFER: usize = 64 << 10;

/// Runs the server until SIGINT or SIGTERM, then stops the pipelines, each with a final
/// checkpoint, within the shutdown timeout.
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    reload_on_sighup(options.tls.clone());
    let open = {
        let options = options.clone();
        tokio::task::spawn_blocking(move || {
            Server::open(
                options.data,
                options.tokens,
                options.max_upload,
                options.pipelines,
                options.nats,
            )
        })
    };
    let server = open.await.map_err(|e| io_error("server", e.into()))??;
    let app = router_with(server.clone(), options.bodies);
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| io_error(&options.listen.to_string(), e))?;
    let address = listener.local_addr().map_err(|e| io_error("listener", e))?;
    if let Some(metrics_listen) = options.metrics_listen {
        let metrics = tokio::net::TcpListener::bind(metrics_listen)
            .await
            .map_err(|e| io_error(&metrics_listen.to_string(), e))?;
        let address = metrics.local_addr().map_err(|e| io_error("listener", e))?;
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        eprintln!("weir: metrics on {scheme}://{address}/metrics");
        let listener = GuardedListener::new(metrics, options.connections);
        let app = metrics_router(server.clone());
        // The same certificate as the API's, when it has one.
        let connections = (options.connections, options.tls.clone());
        tokio::spawn(serve_connections(
            listener,
            app,
            connections,
            std::future::pending(),
        ));
    }
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!("weir: listening on {scheme}://{address}");
    info!(%address, data = %options.data.display(), "serving");
    let ticker = server.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(200));
        loop {
            interval.tick().await;
            let server = ticker.clone();
            let _ = tokio::task::spawn_blocking(move || server.tick()).await;
        }
    });
    let listener = GuardedListener::new(listener, options.connections);
    let (stop_serving, stopped) = tokio::sync::oneshot::channel::<()>();
    let connections = (options.connections, options.tls.clone());
    let serving = tokio::spawn(serve_connections(listener, app, connections, async {
        let _ = stopped.await;
    }));
    shutdown_signal().await;
    // Stop the pipelines first (new requests are still answered, and refused where they need a
    // running pipeline), then the listener: open result streams would hold a graceful stop.
    let stopping = server.clone();
    let timeout = options.shutdown_timeout;
    let late = tokio::task::spawn_blocking(move || stopping.shutdown(timeout))
        .await
        .unwrap_or_default();
    if !late.is_empty() {
        warn!(pipelines = ?late, "not stopped within the shutdown timeout; they resume from their last checkpoints");
    }
    let _ = stop_serving.send(());
    let _ = tokio::time::timeout(Duration::from_secs(3), serving).await;
    Ok(())
}
