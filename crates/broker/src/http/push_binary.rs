//! The binary bodies of `POST /api/v1/push` and `POST /api/v1/transaction`
//! (`Content-Type: application/x-queen-push`, docs/wire.md §6 and §10.4): recognising them and
//! parsing them off the async workers. A body that does not parse is a 400 naming the
//! problem, before anything is written.

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_proto::push_bin::{parse_push, PushError};

use crate::engine::push::require_stored;
use crate::engine::push_binary::{counts, push_envelope};
use crate::error::{Error, Result};
use crate::http::push::created;
use crate::state::AppState;

/// The Content-Type of the binary push and transaction bodies.
pub const CONTENT_TYPE: &str = "application/x-queen-push";

/// Bodies above this size are parsed (decompressed and validated) on the blocking pool.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// Whether the request carries a binary push or transaction body.
pub fn is_binary(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(CONTENT_TYPE))
}

/// Runs `parse` on `body`, off the async workers when the body is large. A parse failure is a
/// 400 `bad binary <what> body: <problem>`.
///
/// Decompression is bounded by the same configured body limit as the bytes on the wire, all
/// zstd frames of the body together: each frame must announce its size (the flag-1 `raw_len`,
/// a group's zstd content size), an announcement past what is left of the limit is a 413
/// before anything is inflated, and a frame is inflated into a buffer of exactly its
/// announced size, so it cannot grow past it.
pub async fn parse_binary<T: Send + 'static>(
    st: &AppState,
    body: Bytes,
    what: &'static str,
    parse: fn(Bytes, usize) -> Result<T, PushError>,
) -> Result<T> {
    let max = st.cfg.max_body_bytes;
    let parsed = if body.len() > INLINE_PARSE_BYTES {
        tokio::task::spawn_blocking(move || parse(body, max))
            .await
            .map_err(|e| Error::internal(format!("binary body parse task failed: {e}")))?
    } else {
        parse(body, max)
    };
    parsed.map_err(|e| {
        if e.exceeds_limit() {
            Error::DecompressedTooLarge(max)
        } else {
            Error::bad(format!("bad binary {what} body: {e}"))
        }
    })
}

/// `POST /api/v1/push` with a `QPB1` body: 201 with one result per message in wire order,
/// or with flag 2 the counts object; 503/500 when nothing was stored.
pub async fn push(st: &AppState, body: Bytes) -> Result<Response> {
    let env = parse_binary(st, body, "push", parse_push).await?;
    let counts_only = env.counts_only();
    let results = push_envelope(st, env).await?;
    require_stored(&results)?;
    if counts_only {
        return Ok((StatusCode::CREATED, Json(counts(&results))).into_response());
    }
    Ok(created(&results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn recognises_the_content_type_with_parameters_and_any_case() {
        let mut h = HeaderMap::new();
        assert!(!is_binary(&h));
        for (value, binary) in [
            ("application/x-queen-push", true),
            ("Application/X-Queen-Push; charset=binary", true),
            ("application/json", false),
            ("application/x-queen-pushy", false),
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_binary(&h), binary, "{value}");
        }
    }
}
