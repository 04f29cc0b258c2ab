//! Request extractors whose rejections speak our JSON error shape instead of axum's text, and
//! the binary bodies of push and transaction (`Content-Type: application/x-queen-push`,
//! docs/wire.md §6 and §10.4): recognising them and parsing them off the async workers.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{self, CONTENT_LENGTH};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use bytes::BytesMut;
use http_body_util::BodyExt;
use queen_proto::push_bin::{announced_inflation, PushError};
use queen_proto::scalar::ObjectOr;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::budget::{BodyBudget, Charge};

/// The raw request body, bounded by `QUEEN_MAX_BODY_BYTES` (413 above it) and by
/// `QUEEN_BODY_READ_TIMEOUT_MS` (408 past it).
pub struct RawBody(pub Bytes);

impl FromRequest<Engine> for RawBody {
    type Rejection = Error;

    async fn from_request(req: Request, state: &Engine) -> Result<Self, Error> {
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
        let read = collect(req.into_body(), declared, limit);
        let Ok(read) = tokio::time::timeout(wait, read).await else {
            return Err(Error::BodyTimeout(state.cfg.body_read_timeout_ms));
        };
        read.map(RawBody)
    }
}

/// Reads a body of at most `limit` bytes into one buffer sized from its declared length. Each
/// chunk is released as soon as it is copied, so a body costs its own size plus one of
/// hyper's reads, not twice its size (docs/performance.md §7.2); a body that arrives in one
/// chunk is kept as it is.
async fn collect(mut body: Body, declared: Option<u64>, limit: usize) -> Result<Bytes, Error> {
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Error::bad(format!("bad body: {e}")))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        let held = first.as_ref().map_or(0, Bytes::len) + joined.as_ref().map_or(0, BytesMut::len);
        if held + chunk.len() > limit {
            return Err(Error::PayloadTooLarge(limit));
        }
        match (&mut joined, first.take()) {
            (Some(buf), _) => buf.extend_from_slice(&chunk),
            (None, None) => first = Some(chunk),
            (None, Some(head)) => {
                let expected = declared.map_or(0, |n| usize::try_from(n).unwrap_or(limit));
                let mut buf =
                    BytesMut::with_capacity(expected.clamp(head.len() + chunk.len(), limit));
                buf.extend_from_slice(&head);
                buf.extend_from_slice(&chunk);
                joined = Some(buf);
            }
        }
    }
    Ok(match (joined, first) {
        (Some(buf), _) => buf.freeze(),
        (None, head) => head.unwrap_or_default(),
    })
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

/// An optional integer query parameter of at least `min`: absent or empty is `None`, anything
/// else that is not such an integer a 400 naming the parameter.
pub fn count_param(name: &str, text: Option<&str>, min: i32) -> Result<Option<i32>, Error> {
    text.filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<i32>()
                .ok()
                .filter(|&n| n >= min)
                .ok_or_else(|| Error::bad(format!("{name} must be an integer >= {min}")))
        })
        .transpose()
}

/// The most rows one page of a listing may ask for (`limit` of `GET /api/v1/dlq`,
/// `partitionLimit` of a queue's detail; docs/wire.md §11, §14).
pub const MAX_PAGE_LIMIT: i32 = 1000;

/// An optional page size: absent or empty is `None`; anything but an integer from 1 to
/// [`MAX_PAGE_LIMIT`] is a 400 naming the parameter and the range.
pub fn limit_param(name: &str, text: Option<&str>) -> Result<Option<i32>, Error> {
    text.filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<i32>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_LIMIT).contains(n))
                .ok_or_else(|| {
                    Error::bad(format!(
                        "{name} must be an integer from 1 to {MAX_PAGE_LIMIT}"
                    ))
                })
        })
        .transpose()
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

/// Parses a JSON body, mapping failures to `400 {"error":"bad body: …"}`. `T` may borrow
/// strings from the body. The body is checked for UTF-8 once, vectorised, so the parser reads
/// text and does not check every string and raw payload again (it did, byte by byte).
pub fn json_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Error> {
    let text = simdutf8::compat::from_utf8(body).map_err(|e| {
        Error::bad(format!(
            "bad body: not UTF-8 (an invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    serde_json::from_str(text).map_err(|e| Error::bad(format!("bad body: {e}")))
}

/// Parses a JSON body that must be an object, read as `T`; anything else is a 400 that says so
/// (serde's own words would name `T`'s Rust type).
pub fn json_object<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Error> {
    match json_body(body)? {
        ObjectOr::Object(value) => Ok(value),
        ObjectOr::NotObject => Err(Error::bad("bad body: expected a JSON object")),
    }
}

/// The Content-Type of the binary push and transaction bodies.
pub const CONTENT_TYPE: &str = "application/x-queen-push";

/// Bodies that are, or announce they inflate to, more than this are parsed (decompressed and
/// validated) on the blocking pool.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// Whether a binary body of `wire` bytes announcing `announced` inflated bytes is parsed on
/// the blocking pool: by the larger of the two, so a small body announcing a large inflation
/// is not inflated on an async worker.
fn off_workers(wire: usize, announced: usize) -> bool {
    wire.max(announced) > INLINE_PARSE_BYTES
}

/// Whether the request carries a binary push or transaction body.
pub fn is_binary(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(CONTENT_TYPE))
}

/// Runs `parse` on `body`, off the async workers when the body is large or announces a large
/// inflation. A parse failure is a 400 `bad binary <what> body: <problem>`.
///
/// Decompression is bounded twice before anything is inflated, by what the body's headers
/// announce (`announced_inflation`: each zstd frame must announce its size, the flag-1
/// `raw_len`, a group's zstd content size): by the smaller of the configured body limit and
/// the whole in-flight budget for the body alone (413 above it), and by what is left of the
/// in-flight budget (503 with `Retry-After` when it does not fit now). A frame is inflated into
/// a buffer of exactly its announced size, so it cannot grow past it. The returned charge
/// holds the body's share of the budget: keep it until the request is answered.
pub async fn parse_binary<T: Send + 'static>(
    st: &Engine,
    budget: &BodyBudget,
    body: Bytes,
    what: &'static str,
    parse: fn(Bytes, usize) -> Result<T, PushError>,
) -> Result<(T, Charge)> {
    let max = st.cfg.max_body_bytes.min(budget.limit());
    let announced = announced_inflation(&body);
    // usize::MAX: the body's inner sizes are only known once inflated, and `parse` bounds the
    // total by `max`.
    if announced > max && announced != usize::MAX {
        return Err(Error::DecompressedTooLarge(max));
    }
    let charge = budget.charge(announced.min(max))?;
    let parsed = if off_workers(body.len(), announced) {
        tokio::task::spawn_blocking(move || parse(body, max))
            .await
            .map_err(|e| Error::internal(format!("binary body parse task failed: {e}")))?
    } else {
        parse(body, max)
    };
    let parsed = parsed.map_err(|e| {
        if e.exceeds_limit() {
            Error::DecompressedTooLarge(max)
        } else {
            Error::bad(format!("bad binary {what} body: {e}"))
        }
    })?;
    Ok((parsed, charge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_small_body_announcing_a_large_inflation_is_parsed_off_the_workers() {
        assert!(!off_workers(10 * 1024, 0));
        assert!(!off_workers(10 * 1024, INLINE_PARSE_BYTES));
        assert!(off_workers(10 * 1024, 64 << 20));
        assert!(off_workers(INLINE_PARSE_BYTES + 1, 0));
        assert!(off_workers(10, usize::MAX));
    }

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
