//! [`ApiError`]: what a client is told when a request fails. Internal details are logged once,
//! never sent. Depends on `serve`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tracing::{debug, error};

/// An HTTP error answer: a status and a message saying what was wrong and what to do.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// Whether to add `Retry-After: 1`.
    retry_after: bool,
}

impl ApiError {
    /// An error with a status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after: false,
        }
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 500, with the details logged and a generic message sent.
    pub fn internal(details: impl std::fmt::Display) -> Self {
        error!(error = %details, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; the server log has the details",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        debug!(status = self.status.as_u16(), message = %self.message, "request refused");
        let mut response = (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response();
        if self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

impl From<crate::serve::RequestError> for ApiError {
    /// The one place where the domain's errors become statuses.
    fn from(error: crate::serve::RequestError) -> Self {
        use crate::serve::RequestError as E;
        match error {
            E::Invalid(message) => ApiError::bad_request(message),
            E::NotFound(message) => ApiError::not_found(message),
            E::Conflict(message) => ApiError::conflict(message),
            E::TooLarge(message) => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message),
            E::DiskFull(message) => ApiError::new(StatusCode::INSUFFICIENT_STORAGE, message),
            E::Internal(details) => ApiError::internal(details),
            E::Busy(message) => ApiError {
                retry_after: true,
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, message)
            },
            E::Unavailable(message) => ApiError {
                retry_after: true,
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
            },
        }
    }
}
