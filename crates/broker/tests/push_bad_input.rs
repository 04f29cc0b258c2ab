//! Every malformed push gets its 4xx with a JSON `{"error"}` naming the problem, and leaves
//! every table exactly as it was — including the good items that came before the bad one.

mod common;

use reqwest::StatusCode;
use serde_json::{json, Value};

const TABLES: [&str; 4] = [
    "queen.queues",
    "queen.log_partitions",
    "queen.log_segments",
    "queen.log_txns",
];

async fn row_counts(db: &tokio_postgres::Client) -> Vec<i64> {
    let mut out = Vec::new();
    for t in TABLES {
        out.push(common::count(db, t).await);
    }
    out
}

/// Posts `body` raw and checks the status, the error text, and that nothing was written.
async fn refused(
    b: &common::TestBroker,
    db: &tokio_postgres::Client,
    body: Vec<u8>,
    status: StatusCode,
    needle: &str,
) {
    let before = row_counts(db).await;
    let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
    let (got, out) = b.post_raw("/api/v1/push", "application/json", body).await;
    assert_eq!(got, status, "{shown} -> {out}");
    let error = out["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{shown}: no error text in {out}"));
    assert!(
        error.contains(needle),
        "{shown}: error {error:?} does not mention {needle:?}"
    );
    assert_eq!(row_counts(db).await, before, "{shown} wrote rows");
}

fn good(n: i64) -> Value {
    json!({ "queue": "bad.input", "partition": "p", "transactionId": format!("ok-{n}"), "payload": { "n": n } })
}

/// `{"items":[good, good, bad]}`: the bad item is last so any early write would show.
fn after_good(bad: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({ "items": [good(1), good(2), bad] })).expect("json")
}

#[tokio::test]
async fn malformed_bodies_and_items_are_refused_whole() {
    let b = common::broker().await;
    let db = b.sql().await;
    // One good push first, so "unchanged" is checked against non-empty tables too.
    b.push("bad.input", "p", &[json!(0)]).await;

    let bad = StatusCode::BAD_REQUEST;
    refused(&b, &db, b"{\"items\":[".to_vec(), bad, "bad body").await;
    refused(&b, &db, b"not json".to_vec(), bad, "bad body").await;
    refused(&b, &db, b"".to_vec(), bad, "bad body").await;
    refused(
        &b,
        &db,
        b"[{\"queue\":\"q\",\"payload\":1}]".to_vec(),
        bad,
        "bad body",
    )
    .await;
    refused(&b, &db, b"{}".to_vec(), bad, "items").await;
    refused(&b, &db, b"{\"items\":null}".to_vec(), bad, "items").await;
    refused(
        &b,
        &db,
        b"{\"items\":{\"queue\":\"q\"}}".to_vec(),
        bad,
        "items must be an array",
    )
    .await;
    refused(
        &b,
        &db,
        b"{\"items\":\"q\"}".to_vec(),
        bad,
        "items must be an array",
    )
    .await;

    refused(&b, &db, after_good(json!(7)), bad, "item 2").await;
    refused(
        &b,
        &db,
        after_good(json!({ "payload": 1 })),
        bad,
        "queue is required",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": null, "payload": 1 })),
        bad,
        "queue is required",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": 42, "payload": 1 })),
        bad,
        "queue must be a string",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "", "payload": 1 })),
        bad,
        "queue must not be empty",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q" })),
        bad,
        "payload is required",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "partition": 3, "payload": 1 })),
        bad,
        "partition must be a string",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "transactionId": 3, "payload": 1 })),
        bad,
        "transactionId must be a string",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q\u{0}x", "payload": 1 })),
        bad,
        "control characters",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "partition": "a\u{1f}b", "payload": 1 })),
        bad,
        "control characters",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "partition": "line\nbreak", "payload": 1 })),
        bad,
        "control characters",
    )
    .await;

    let long = "x".repeat(65_536);
    refused(
        &b,
        &db,
        after_good(json!({ "queue": long, "payload": 1 })),
        bad,
        "65535",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "partition": long, "payload": 1 })),
        bad,
        "65535",
    )
    .await;
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "transactionId": long, "payload": 1 })),
        bad,
        "65535",
    )
    .await;
    // Multi-byte characters count in bytes, not characters.
    let wide = "é".repeat(32_768);
    refused(
        &b,
        &db,
        after_good(json!({ "queue": "q", "transactionId": wide, "payload": 1 })),
        bad,
        "transactionId",
    )
    .await;

    // After all that, a good push still works and lands right after the first one.
    let out = b.push("bad.input", "p", &[json!(1)]).await;
    assert_eq!(
        out[0]["offset"], 1,
        "no refused request left an allocator bump behind"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413() {
    let b = common::broker_with(|cfg| cfg.max_body_bytes = 4096).await;
    let db = b.sql().await;
    let payload = "y".repeat(8192);
    let body = serde_json::to_vec(&json!({ "items": [{ "queue": "big", "payload": payload }] }))
        .expect("json");
    refused(&b, &db, body, StatusCode::PAYLOAD_TOO_LARGE, "limit").await;
    // Just under the limit is fine.
    let body = json!({ "items": [{ "queue": "big", "payload": "y".repeat(3000) }] });
    let (status, out) = b.post("/api/v1/push", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
}
