//! Request extractors whose rejections speak our JSON error shape instead of axum's text.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_LENGTH;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::state::AppState;

/// The raw request body, bounded by `QUEEN_MAX_BODY_BYTES` (413 above it) and by
/// `QUEEN_BODY_READ_TIMEOUT_MS` (408 past it).
pub struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Error> {
        let limit = state.cfg.max_body_bytes;
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(Error::PayloadTooLarge(limit));
        }
        // A body that trickles in is bounded in time as well as in size; on a timeout the
        // unread body is dropped, which makes hyper close the connection after the 408.
        let wait = Duration::from_millis(state.cfg.body_read_timeout_ms);
        let read = axum::body::to_bytes(req.into_body(), limit);
        let Ok(read) = tokio::time::timeout(wait, read).await else {
            return Err(Error::BodyTimeout(state.cfg.body_read_timeout_ms));
        };
        match read {
            Ok(b) => Ok(RawBody(b)),
            Err(e) if is_length_limit(&e) => Err(Error::PayloadTooLarge(limit)),
            Err(e) => Err(Error::bad(format!("bad body: {e}"))),
        }
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        src = s.source();
    }
    false
}

/// Query string parsed into `T`, with a 400 that names the problem.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Error> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|e| Error::bad(format!("bad query: {}", e.body_text())))
    }
}

/// Path parameters parsed into `T`, with a JSON 400 that names the problem (axum's own
/// rejection, e.g. for a segment that is not UTF-8 once percent-decoded, is plain text).
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Path(v))
            .map_err(|e| Error::bad(format!("bad path: {}", e.body_text())))
    }
}

/// Parses a JSON body, mapping failures to `400 {"error":"bad body: …"}`.
pub fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::bad(format!("bad body: {e}")))
}
