//! A compressed binary body is bounded by the configured body limit once inflated, not only
//! on the wire: a small zstd "bomb" announcing more is a 413 before it is inflated, and
//! writes nothing.

use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed, encode_txn};
use reqwest::StatusCode;

use crate::common;
use crate::wire::{batch, item, post_bin, written};

/// The configured body limit of these tests.
const LIMIT: usize = 64 * 1024;

/// A JSON string payload of `len` bytes: compresses to almost nothing.
fn payload(len: usize) -> Vec<u8> {
    let mut p = vec![b'a'; len];
    p[0] = b'"';
    p[len - 1] = b'"';
    p
}

#[tokio::test]
async fn a_zstd_bomb_is_refused_with_413_before_inflating() {
    let b = common::broker_with(|cfg| cfg.max_body_bytes = LIMIT).await;
    let db = b.sql().await;
    // Five times the limit once inflated, well under the old allowance of eight times.
    let bomb = payload(5 * LIMIT);
    let batches = [batch("bomb", "p", vec![item(Some("t1"), &bomb)])];
    let bodies = [
        ("/api/v1/push", encode_push_plain(&batches, true, false)),
        ("/api/v1/push", encode_push_precompressed(&batches, false)),
        ("/api/v1/transaction", encode_txn(b"", &batches, false)),
    ];
    let before = written(&db).await;
    for (path, body) in bodies {
        let body = body.expect("encode");
        assert!(body.len() < LIMIT / 10, "the bomb is small on the wire");
        let (status, out) = post_bin(&b, path, body).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {out}");
        let error = out["error"].as_str().unwrap_or_default();
        assert!(error.contains(&LIMIT.to_string()), "{path}: {out}");
        assert_eq!(written(&db).await, before, "{path} wrote rows");
    }

    // Just under the limit once inflated is still accepted.
    let fits = payload(LIMIT / 2);
    let batches = [batch("bomb", "p", vec![item(Some("t2"), &fits)])];
    let body = encode_push_plain(&batches, true, false).expect("encode");
    let (status, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
}
