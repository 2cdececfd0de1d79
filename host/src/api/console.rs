//! The web console: `GET /` and its two assets (`console/`: HTML, JavaScript, CSS), embedded
//! in the binary, served without a token (they hold no data; every figure on the page comes
//! from the API with the token the person signs in with). A strict content security policy
//! allows only these files and requests to this server: no inline script, nothing from
//! elsewhere.
//!
//! Depends on nothing outside `api`.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::ApiError;

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// What every console file is sent with.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

fn page(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the console's page.
pub(super) async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

/// `GET /console/{file}`: its script and style sheet.
pub(super) async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    match file.as_str() {
        "console.js" => Ok(page("text/javascript; charset=utf-8", SCRIPT)),
        "console.css" => Ok(page("text/css; charset=utf-8", STYLE)),
        _ => Err(ApiError::not_found("no such console file")),
    }
}
