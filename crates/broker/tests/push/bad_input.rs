//! Every malformed push gets its 4xx with a JSON `{"error"}` naming the problem, and leaves
//! every table exactly as it was — including the good items that came before the bad one.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;

const TABLES: [&str; 4] = [
    "queen.queues",
    "queen.log_partitions",
    "queen.log_segments",
    "queen.log_txns",
];

/// Posts `body` raw and checks the status, the error text, and that nothing was written.
async fn refused(
    b: &common::TestBroker,
    db: &tokio_postgres::Client,
    body: Vec<u8>,
    status: StatusCode,
    needle: &str,
) {
    let before = common::counts(db, &TABLES).await;
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
    assert_eq!(
        common::counts(db, &TABLES).await,
        before,
        "{shown} wrote rows"
    );
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

    let long = "x".repeat(65_536);
    // Multi-byte characters count in bytes, not characters.
    let wide = "é".repeat(32_768);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"items\":[".to_vec(), "bad body"),
        (b"not json".to_vec(), "bad body"),
        (b"".to_vec(), "bad body"),
        (b"[{\"queue\":\"q\",\"payload\":1}]".to_vec(), "bad body"),
        (b"{}".to_vec(), "items"),
        (b"{\"items\":null}".to_vec(), "items"),
        (
            b"{\"items\":{\"queue\":\"q\"}}".to_vec(),
            "items must be an array",
        ),
        (b"{\"items\":\"q\"}".to_vec(), "items must be an array"),
        (after_good(json!(7)), "item 2"),
        (after_good(json!({ "payload": 1 })), "queue is required"),
        (
            after_good(json!({ "queue": null, "payload": 1 })),
            "queue is required",
        ),
        (
            after_good(json!({ "queue": 42, "payload": 1 })),
            "queue must be a string",
        ),
        (
            after_good(json!({ "queue": "", "payload": 1 })),
            "queue must not be empty",
        ),
        (after_good(json!({ "queue": "q" })), "payload is required"),
        (
            after_good(json!({ "queue": "q", "partition": 3, "payload": 1 })),
            "partition must be a string",
        ),
        (
            after_good(json!({ "queue": "q", "transactionId": 3, "payload": 1 })),
            "transactionId must be a string",
        ),
        (
            after_good(json!({ "queue": "q\u{0}x", "payload": 1 })),
            "control characters",
        ),
        (
            after_good(json!({ "queue": "q", "partition": "a\u{1f}b", "payload": 1 })),
            "control characters",
        ),
        (
            after_good(json!({ "queue": "q", "partition": "line\nbreak", "payload": 1 })),
            "control characters",
        ),
        (after_good(json!({ "queue": long, "payload": 1 })), "65535"),
        (
            after_good(json!({ "queue": "q", "partition": long, "payload": 1 })),
            "65535",
        ),
        (
            after_good(json!({ "queue": "q", "transactionId": long, "payload": 1 })),
            "65535",
        ),
        (
            after_good(json!({ "queue": "q", "transactionId": wide, "payload": 1 })),
            "transactionId",
        ),
    ];
    for (body, needle) in cases {
        refused(&b, &db, body, StatusCode::BAD_REQUEST, needle).await;
    }

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
