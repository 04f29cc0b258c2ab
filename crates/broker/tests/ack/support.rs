//! Helpers of the ack-path tests (ack, dlq, lease, transaction): push with chosen
//! transactionIds, pop over real HTTP, ack, and read a cursor row straight from PostgreSQL.
//! The helpers shared with the other feature tests are re-exported from `common`, so
//! `use crate::support::*;` is the one import a test needs.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::TestBroker;
pub use crate::common::{ack_batch, ack_item, configure, pop, push_txns, txns, Popped};

/// An ack item without a leaseId (a lease-less ack).
pub fn lease_less(msg: &Value, status: &str) -> Value {
    let mut item = ack_item(msg, status);
    item.as_object_mut().map(|o| o.remove("leaseId"));
    item
}

/// One `ack` operation of a `POST /api/v1/transaction` body.
pub fn ack_op(msg: &Value, status: &str, group: Option<&str>) -> Value {
    let mut op = ack_item(msg, status);
    op["type"] = json!("ack");
    if let Some(g) = group {
        op["consumerGroup"] = json!(g);
    }
    op
}

/// The `type` of each element of a transaction answer's `results`.
pub fn result_kinds(answer: &Value) -> Vec<&str> {
    answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["type"].as_str().unwrap_or_default())
        .collect()
}

/// `POST /api/v1/ack` with one item; returns its answer element (asserting HTTP 200).
pub async fn ack_one(b: &TestBroker, group: Option<&str>, mut item: Value) -> Value {
    item["consumerGroup"] = json!(group);
    let (status, body) = b.post("/api/v1/ack", &item).await;
    assert_eq!(status, StatusCode::OK, "ack: {body}");
    let arr = body.as_array().expect("ack answer is an array");
    assert_eq!(arr.len(), 1, "single ack answers one element: {body}");
    arr[0].clone()
}

/// A `queen.log_consumers` row.
#[derive(Debug, Clone)]
pub struct Cursor {
    pub committed: i64,
    pub batch_end: Option<i64>,
    pub worker: Option<String>,
    /// Seconds from now until the lease expires (negative: expired).
    pub expires_in: Option<f64>,
    pub retries: i32,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Cursor {
    /// Everything but the time left, which changes while you look at it.
    pub fn state(
        &self,
    ) -> (
        i64,
        Option<i64>,
        Option<String>,
        i32,
        Option<chrono::DateTime<chrono::Utc>>,
    ) {
        (
            self.committed,
            self.batch_end,
            self.worker.clone(),
            self.retries,
            self.expires_at,
        )
    }
}

pub async fn cursor(db: &tokio_postgres::Client, pid: i64, group: &str) -> Cursor {
    let row = db
        .query_one(
            "SELECT committed, batch_end, worker_id,
                    EXTRACT(EPOCH FROM lease_expires_at - clock_timestamp())::float8,
                    batch_retry_count, lease_expires_at
             FROM queen.log_consumers WHERE partition_id = $1 AND consumer_group = $2",
            &[&pid, &group],
        )
        .await
        .expect("cursor row");
    Cursor {
        committed: row.get(0),
        batch_end: row.get(1),
        worker: row.get(2),
        expires_in: row.get(3),
        retries: row.get(4),
        expires_at: row.get(5),
    }
}

/// `GET /api/v1/dlq?{query}`: the answer body.
pub async fn dlq(b: &TestBroker, query: &str) -> Value {
    let (status, body) = b.get(&format!("/api/v1/dlq?{query}")).await;
    assert_eq!(status, StatusCode::OK, "dlq listing: {body}");
    body
}

/// Asserts an answer element succeeded with no error text.
pub fn assert_ok(r: &Value) {
    assert_eq!(r["success"], true, "item refused: {r}");
    assert!(
        r["error"].is_null(),
        "a successful item carries no error: {r}"
    );
}

/// Asserts an answer element was refused with an error containing `needle`.
pub fn assert_refused(r: &Value, needle: &str) {
    assert_eq!(r["success"], false, "item accepted: {r}");
    let error = r["error"].as_str().unwrap_or_default().to_lowercase();
    assert!(error.contains(needle), "error {error:?} lacks {needle:?}");
}

/// A broker whose parked pops never re-check on their own within a test's lifetime: only a
/// wake-up brings them back, so a parked pop that answers 200 proves it was woken.
pub async fn broker_without_backoff_rechecks() -> TestBroker {
    crate::common::broker_with(|cfg| {
        cfg.pop_wait_initial_ms = 600_000;
        cfg.pop_wait_max_ms = 600_000;
    })
    .await
}

/// Starts a `wait=true` pop that parks up to 20 s; resolves to (status, body, elapsed).
pub fn parked_pop(
    b: &TestBroker,
    path_and_query: &str,
) -> tokio::task::JoinHandle<(StatusCode, Value, std::time::Duration)> {
    let url = b.at(&format!("{path_and_query}&wait=true&timeout=20000"));
    let http = b.http.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let r = http.get(url).send().await.expect("parked pop");
        let status = r.status();
        let text = r.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, body, started.elapsed())
    })
}

/// A JSON-answering SQL function call, decoded.
pub async fn call(
    db: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Value {
    let row = db.query_one(sql, params).await.expect(sql);
    serde_json::from_str(row.get::<_, &str>(0)).expect("jsonb answer")
}

/// The `ackRegistry` section of `/metrics`.
pub async fn registry_metrics(b: &TestBroker) -> Value {
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK, "metrics: {body}");
    body["ackRegistry"].clone()
}

/// The `ackFusion` section of `/metrics`.
pub async fn fusion_metrics(b: &TestBroker) -> Value {
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK, "metrics: {body}");
    body["ackFusion"].clone()
}

/// Top-level calls, in this test's database, of `SELECT queen.<function>(…)`: what the broker
/// asked PostgreSQL, read from `pg_stat_statements`.
pub async fn calls(db: &tokio_postgres::Client, function: &str) -> i64 {
    crate::common::statement_calls(db, &format!("SELECT queen.{function}(%")).await
}

/// Positional commits of ack fusion sent as top-level statements: one per flush, a lone row's
/// as `log_ack_at_v1`, a larger flush's as `log_ack_multi_v1` (with fusion on, every cover
/// goes through fusion, so these count its flushes).
pub async fn flushes(db: &tokio_postgres::Client) -> i64 {
    calls(db, "log_ack_multi_v1").await + calls(db, "log_ack_at_v1").await
}

/// Every popped message of `popped` acked with `status`.
pub fn ack_all(popped: &Popped, status: &str) -> Vec<Value> {
    popped
        .messages
        .iter()
        .map(|m| ack_item(m, status))
        .collect()
}
