//! The API's router driven in process with `tower::ServiceExt::oneshot`: no port, no binary,
//! one request at a time against a `weir::serve::Server` on a temporary data directory. Fast
//! checks of what each route answers by itself (tokens and scopes, names that are paths,
//! malformed bodies); the rest of the API is driven over HTTP by `serve.rs` and its
//! neighbours.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

const ADMIN: &str = "routes-admin-token";
const READ: &str = "routes-read-token";

/// A router over a fresh server, and the directory it keeps its data in.
fn router() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    let entries = serde_json::json!([
        { "name": "admin", "token": ADMIN, "scopes": ["admin"] },
        { "name": "reader", "token": READ, "scopes": ["read"] },
    ]);
    std::fs::write(&tokens, entries.to_string()).unwrap();
    let server = weir::serve::Server::open(
        dir.path().join("data"),
        weir::serve::Tokens::load(Some(&tokens)).unwrap(),
        weir::api::DEFAULT_MAX_UPLOAD,
        Default::default(),
        Default::default(),
    )
    .unwrap();
    (weir::api::router(server), dir)
}

/// Sends one request and answers its status and body (JSON, or `Null` if it is not JSON).
fn call(
    router: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let (status, _, body) = call_with_headers(router, method, path, token, body);
    (status, body)
}

/// [`call`], with the response's headers.
fn call_with_headers(
    router: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-length", body.len());
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let response = router.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, body)
    })
}

#[test]
fn health_needs_no_token_and_the_api_needs_one_of_the_right_scope() {
    let (router, _dir) = router();
    assert_eq!(
        call(&router, Method::GET, "/healthz", None, "").0,
        StatusCode::OK
    );
    let (status, body) = call(&router, Method::GET, "/v1/pipelines", None, "");
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body["error"].is_string(), "an error says why: {body}");
    let wrong = call(
        &router,
        Method::GET,
        "/v1/pipelines",
        Some("no-such-token"),
        "",
    );
    assert_eq!(wrong.0, StatusCode::UNAUTHORIZED);
    let (status, body) = call(&router, Method::GET, "/v1/pipelines", Some(READ), "");
    assert_eq!(status, StatusCode::OK, "{body}");
    // A reader may list, not create.
    let (status, body) = call(&router, Method::POST, "/v1/pipelines", Some(READ), "{}");
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

#[test]
fn a_body_refused_unread_closes_its_connection() {
    // The client must not send its next request down a connection the server closes after
    // refusing a body it did not read (a pooled client would lose that request).
    let (router, _dir) = router();
    for token in [None, Some("no-such-token"), Some(READ)] {
        let (status, headers, _) = call_with_headers(
            &router,
            Method::POST,
            "/v1/pipelines",
            token,
            "{\"name\":1}",
        );
        assert!(status.is_client_error(), "{status}");
        assert_eq!(
            headers.get("connection").unwrap(),
            "close",
            "{token:?}: {status}"
        );
    }
    // Without a body there is nothing unread: the connection stays.
    let (status, headers, _) = call_with_headers(&router, Method::GET, "/v1/pipelines", None, "");
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.get("connection").is_none());
}

#[test]
fn malformed_bodies_and_names_that_are_paths_are_refused_with_a_reason() {
    let (router, dir) = router();
    let (status, body) = call(
        &router,
        Method::POST,
        "/v1/pipelines",
        Some(ADMIN),
        "{not json",
    );
    assert!(status.is_client_error(), "{status}: {body}");
    let (status, body) = call(&router, Method::POST, "/v1/pipelines", Some(ADMIN), "{}");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].is_string(), "{body}");
    for name in ["..", "%2e%2e", "a%2Fb", "-dash", "x".repeat(300).as_str()] {
        let path = format!("/v1/pipelines/{name}");
        let (status, body) = call(&router, Method::GET, &path, Some(ADMIN), "");
        assert!(
            status == StatusCode::BAD_REQUEST || status == StatusCode::NOT_FOUND,
            "{name}: {status} {body}"
        );
    }
    // Nothing was made outside the data directory, nor inside it for the refused names.
    let pipelines = dir.path().join("data").join("pipelines");
    let made = std::fs::read_dir(&pipelines).map_or(0, |entries| {
        (entries.flatten())
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    });
    assert_eq!(made, 0, "no pipeline directory for a refused request");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "only tokens.json and data/"
    );
}

#[test]
fn two_routers_over_one_server_answer_alike() {
    // A router is a value over a shared server: clones (one per connection) see one registry.
    let (router, _dir) = router();
    let twin = router.clone();
    let one = call(&router, Method::GET, "/v1/operators", Some(READ), "");
    let two = call(&twin, Method::GET, "/v1/operators", Some(READ), "");
    assert_eq!(one.0, StatusCode::OK);
    assert_eq!(one, two);
    // What one clone stores, the other lists.
    let component = std::fs::read(crate::server::count_sum_v1()).unwrap();
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/operators/count-sum/1.0.0")
        .header("authorization", format!("Bearer {ADMIN}"))
        .header("content-type", "application/wasm")
        .header("content-length", component.len())
        .body(Body::from(component))
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let uploaded = runtime.block_on(router.clone().oneshot(request)).unwrap();
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    let (status, listed) = call(&twin, Method::GET, "/v1/operators", Some(READ), "");
    assert_eq!(status, StatusCode::OK);
    assert!(listed.to_string().contains("count-sum"), "{listed}");
}
