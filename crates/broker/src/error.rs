//! The broker's error type and its one mapping to HTTP: 4xx for what the caller sent, 5xx
//! (with the cause logged) for what went wrong inside. A database that cannot be reached is
//! a 503 with `Retry-After`: nothing was done, and the same request will work once it is back.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::log_limit::{LogLimit, DEFAULT_WINDOW};

/// The `Retry-After` of a 503: the official client's own first retry delay.
pub const RETRY_AFTER_SECS: u64 = 1;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed or invalid request: 400 `{"error"}`.
    #[error("{0}")]
    BadRequest(String),
    /// An invalid option value on /configure: 400 `{"error","invalid"}`.
    #[error("{message}")]
    InvalidOption { message: String, option: String },
    #[error("{0}")]
    NotFound(String),
    #[error("request body exceeds the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// The request body did not arrive within the configured time: 408.
    #[error("request body not received within {0} ms")]
    BodyTimeout(u64),
    /// A compressed body announcing more than the body limit once inflated: 413.
    #[error("decompressed request body exceeds the limit of {0} bytes")]
    DecompressedTooLarge(usize),
    #[error("database unavailable: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// The database could not be reached and nothing was stored: 503 with `Retry-After`.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn bad(msg: impl Into<String>) -> Self {
        Error::BadRequest(msg.into())
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        Error::Internal(msg.into())
    }

    /// This error and every source under it, `": "`-joined. `tokio_postgres::Error` says only
    /// "db error" itself; PostgreSQL's message and detail live in its source.
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(s) = src {
            let text = s.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            src = s.source();
        }
        out
    }

    /// The SQLSTATE of a database error, when PostgreSQL reported one.
    fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) | Error::InvalidOption { .. } => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::PayloadTooLarge(_) | Error::DecompressedTooLarge(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Error::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Pool(_) | Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Db(e) if connection_lost(e) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Db(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether the failure is the database being unreachable (an outage, a restart), not a
    /// refusal of what was asked.
    pub fn is_unavailable(&self) -> bool {
        self.status() == StatusCode::SERVICE_UNAVAILABLE
    }
}

/// A connection that broke or could not be made: closed, an I/O error, or a SQLSTATE of class
/// 08 (connection exception) or 57P01-57P03 (the server shutting down or starting up).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// Server failures are logged per request: identical ones at most once per window.
static INTERNAL_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

impl From<queen_proto::NameError> for Error {
    fn from(e: queen_proto::NameError) -> Self {
        Error::BadRequest(e.to_string())
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
                    tracing::error!(error = %chain, sqlstate = e.sqlstate(), suppressed, "internal failure");
                }
                json!({ "error": e.to_string() })
            }
            e => json!({ "error": e.to_string() }),
        };
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
        }
        response
    }
}
