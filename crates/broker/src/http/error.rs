//! The one mapping from the broker's [`Error`] to HTTP: 4xx for what the caller sent, 5xx (with
//! the cause logged, identical ones at most once per window: a 500 as an error, a 503 as a
//! warning) for what went wrong inside. A
//! database that cannot be reached is a 503 with `Retry-After`: nothing was done, and the same
//! request will work once it is back.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use queen_proto::tenant::local_text;
use serde_json::json;

use crate::error::Error;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};

/// The `Retry-After` of a 503: the official client's own first retry delay.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Server failures are logged per request: identical ones at most once per window.
static INTERNAL_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// The HTTP status of an error.
pub trait HttpStatus {
    fn status(&self) -> StatusCode;
}

impl HttpStatus for Error {
    fn status(&self) -> StatusCode {
        match self {
            _ if self.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            Error::TryLater(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::BadRequest(_) | Error::InvalidOption { .. } => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::PayloadTooLarge(_) | Error::DecompressedTooLarge(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Error::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Pool(_) | Error::Unavailable(_) | Error::Db(_) | Error::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            Error::InvalidOption { message, option } => {
                json!({ "error": message, "invalid": option })
            }
            e if status.is_server_error() => {
                let chain = e.chain();
                if let Some(suppressed) = INTERNAL_FAILURES.admit(&chain) {
                    // A 503 is an outage or a refusal to try now, not the broker's own failure.
                    if status == StatusCode::SERVICE_UNAVAILABLE {
                        tracing::warn!(error = %chain, sqlstate = e.sqlstate(), suppressed, "unavailable: answered 503");
                    } else {
                        tracing::error!(error = %chain, sqlstate = e.sqlstate(), suppressed, "internal failure");
                    }
                }
                json!({ "error": local_text(&e.to_string()) })
            }
            // A message naming a stored queue shows it as the tenant's client knows it.
            e => json!({ "error": local_text(&e.to_string()) }),
        };
        let retry_after = match &self {
            Error::Overloaded {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        };
        let mut response = (status, axum::Json(body)).into_response();
        match status {
            StatusCode::TOO_MANY_REQUESTS => {
                let secs = retry_after.unwrap_or(RETRY_AFTER_SECS);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, secs.into());
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
            }
            // RFC 6750 §3: a 401 names the scheme the credentials must use.
            StatusCode::UNAUTHORIZED => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}
