//! The broker's error type and its one mapping to HTTP: 4xx for what the caller sent, 5xx
//! (with the cause logged) for what went wrong inside.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

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
            Error::Pool(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Db(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

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
                tracing::error!(error = %e.chain(), sqlstate = e.sqlstate(), "internal failure");
                json!({ "error": e.to_string() })
            }
            e => json!({ "error": e.to_string() }),
        };
        (status, axum::Json(body)).into_response()
    }
}
