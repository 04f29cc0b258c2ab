//! The in-flight budget of inflated bodies (`QUEEN_BODY_BUDGET_MB`): a compressed binary body
//! is charged what it announces it inflates to before anything is inflated, and holds the
//! charge until it is answered. While one body waits (here: behind a lock on the segment
//! table), a second that does not fit what is left is refused at once with a 503 and
//! `Retry-After`, writing nothing; a body announcing more than the whole budget is a 413.

use std::time::Duration;

use queen_proto::push_bin::{encode_push_plain, encode_txn};
use reqwest::StatusCode;
use serde_json::Value;

use crate::common;
use crate::wire::{batch, item, post_bin, PUSH_CONTENT_TYPE};

/// The budget of these tests, in MiB.
const BUDGET_MB: u64 = 1;
/// Each held body inflates to this: two do not fit the budget together.
const INFLATED: usize = 700 * 1024;
/// Far above anything the broker needs to refuse: reaching it means it waited instead.
const PROMPT: Duration = Duration::from_secs(10);

/// A JSON string payload of `len` bytes: compresses to almost nothing.
fn payload(len: usize) -> Vec<u8> {
    let mut p = vec![b'a'; len];
    p[0] = b'"';
    p[len - 1] = b'"';
    p
}

/// A compressed `QPB1` body of one message inflating to about `len` bytes.
fn small_body(queue: &str, txn: &str, len: usize) -> Vec<u8> {
    let p = payload(len);
    let body = encode_push_plain(&[batch(queue, "p", vec![item(Some(txn), &p)])], true, false)
        .expect("encode");
    assert!(body.len() < 16 * 1024, "small on the wire: {}", body.len());
    body
}

async fn post(b: &common::TestBroker, path: &str, body: Vec<u8>) -> (StatusCode, String, Value) {
    let r = b
        .http
        .post(b.at(path))
        .header("content-type", PUSH_CONTENT_TYPE)
        .body(body)
        .send()
        .await
        .expect("POST");
    let status = r.status();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let out = r.json().await.unwrap_or(Value::Null);
    (status, retry, out)
}

/// Sends a binary push in the background; answers its status.
fn spawn_push(b: &common::TestBroker, body: Vec<u8>) -> tokio::task::JoinHandle<StatusCode> {
    let (url, http) = (b.at("/api/v1/push"), b.http.clone());
    tokio::spawn(async move {
        http.post(url)
            .header("content-type", PUSH_CONTENT_TYPE)
            .body(body)
            .send()
            .await
            .expect("POST")
            .status()
    })
}

/// Holds every segment write (a push's insert) until the returned transaction ends.
pub async fn hold_segment_writes(
    locker: &mut tokio_postgres::Client,
) -> tokio_postgres::Transaction<'_> {
    let lock = locker.transaction().await.expect("begin");
    lock.batch_execute("LOCK TABLE queen.log_segments IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    lock
}

/// Waits until some backend of the test database waits for a lock.
pub async fn until_blocked(db: &tokio_postgres::Client) {
    for _ in 0..500 {
        let row = db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .expect("pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the first push never blocked on the lock");
}

#[tokio::test]
async fn a_body_that_does_not_fit_the_budget_in_flight_gets_503() {
    let b = common::broker_with(|cfg| cfg.body_budget_mb = BUDGET_MB).await;
    // The queue and partition exist, so the held push only waits for its segment insert.
    let (status, out) = post_bin(&b, "/api/v1/push", small_body("budget", "warm", 16)).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");

    let mut locker = common::connect(&b.pg).await;
    let lock = hold_segment_writes(&mut locker).await;
    let held = spawn_push(&b, small_body("budget", "held", INFLATED));
    let db = b.sql().await;
    until_blocked(&db).await;

    // The held body's charge leaves less than INFLATED: refused at once, nothing inflated.
    let refused = tokio::time::timeout(
        PROMPT,
        post(&b, "/api/v1/push", small_body("budget", "second", INFLATED)),
    )
    .await
    .expect("the second body waited instead of being refused");
    let (status, retry, out) = refused;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{out}");
    assert_eq!(retry, "1", "{out}");
    let error = out["error"].as_str().unwrap_or_default();
    assert!(error.contains("inflated bodies in flight"), "{out}");
    // The transaction body is charged from the same budget.
    let p = payload(INFLATED);
    let txn = encode_txn(
        b"",
        &[batch("budget", "p", vec![item(Some("tx"), &p)])],
        false,
    )
    .expect("encode");
    let (status, _, out) = tokio::time::timeout(PROMPT, post(&b, "/api/v1/transaction", txn))
        .await
        .expect("the transaction waited instead of being refused");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{out}");
    // A small body still fits beside the held one.
    let small = spawn_push(&b, small_body("budget", "small", 1024));

    lock.rollback().await.expect("unlock");
    assert_eq!(held.await.expect("held push"), StatusCode::CREATED);
    assert_eq!(small.await.expect("small push"), StatusCode::CREATED);
    // Once the held body is answered its charge is back: the refused one now fits.
    let (status, _, out) = post(&b, "/api/v1/push", small_body("budget", "second", INFLATED)).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(out[0]["status"], "queued", "{out}");
}

#[tokio::test]
async fn a_body_announcing_more_than_the_whole_budget_is_413() {
    let b = common::broker_with(|cfg| cfg.body_budget_mb = BUDGET_MB).await;
    let (status, retry, out) = post(&b, "/api/v1/push", small_body("budget", "big", 2 << 20)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{out}");
    assert_eq!(retry, "", "{out}");
    let error = out["error"].as_str().unwrap_or_default();
    assert!(error.contains(&(1usize << 20).to_string()), "{out}");
}
