//! The retention loop (docs/engine.md §10) against real PostgreSQL, with its interval set short
//! through the configuration: the deletion rules and what they leave behind (`rules.rs`), the
//! hash-sidecar purge and the bound it puts on acks and dedup probes (`sidecar.rs`), partition
//! cleanup and its vetoes (`cleanup.rs`), and the election of one runner among brokers sharing
//! a database, with its handover (`runner.rs`).

mod cleanup;
mod rules;
mod runner;
mod sidecar;

use std::future::Future;
use std::time::{Duration, Instant};

use queen_broker::config::Config;
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::{self, TestBroker};

/// The retention interval of these tests, in milliseconds.
pub const INTERVAL_MS: u64 = 150;

/// A short retention interval and a cleanup that never runs unless a test asks for it.
pub fn fast(cfg: &mut Config) {
    cfg.retention_interval_ms = INTERVAL_MS;
    cfg.partition_cleanup_enabled = false;
}

/// A broker on a fresh database with [`fast`] and then `tweak` applied.
pub async fn broker(tweak: impl FnOnce(&mut Config)) -> TestBroker {
    common::broker_with(|cfg| {
        fast(cfg);
        tweak(cfg);
    })
    .await
}

/// The `retention` section of the broker's `/metrics`.
pub async fn stats(b: &TestBroker) -> Value {
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["retention"].clone()
}

/// Waits until the broker has completed `n` more retention runs than now.
pub async fn wait_runs(b: &TestBroker, n: u64) {
    let from = stats(b).await["runs"].as_u64().unwrap_or(0);
    eventually(&format!("{n} more retention runs"), || async {
        stats(b).await["runs"].as_u64().unwrap_or(0) >= from + n
    })
    .await;
}

/// Polls `check` until it holds; fails the test after 20 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The base offsets of a partition's segments, ascending.
pub async fn bases(db: &tokio_postgres::Client, pid: i64) -> Vec<i64> {
    db.query(
        "SELECT base_offset FROM queen.log_segments WHERE partition_id = $1 ORDER BY 1",
        &[&pid],
    )
    .await
    .expect("segments")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// A partition's watermarks: `(log_start, txns_start, last_offset)`.
pub async fn marks(db: &tokio_postgres::Client, pid: i64) -> (i64, i64, i64) {
    let r = db
        .query_one(
            "SELECT log_start, txns_start, last_offset FROM queen.log_partitions WHERE id = $1",
            &[&pid],
        )
        .await
        .expect("partition row");
    (r.get(0), r.get(1), r.get(2))
}

/// The committed offset of (partition, group), `None` without a cursor row.
pub async fn committed(db: &tokio_postgres::Client, pid: i64, group: &str) -> Option<i64> {
    db.query_opt(
        "SELECT committed FROM queen.log_consumers WHERE partition_id = $1 AND consumer_group = $2",
        &[&pid, &group],
    )
    .await
    .expect("cursor row")
    .map(|r| r.get(0))
}

/// A `wait=false` pop of up to `batch` messages (targeted when `partition` is given); the
/// messages, none on 204.
pub async fn pop(
    b: &TestBroker,
    queue: &str,
    partition: Option<&str>,
    group: Option<&str>,
    batch: usize,
    extra: &str,
) -> Vec<Value> {
    common::pop(b, queue, partition, group, batch, extra)
        .await
        .map(|p| p.messages)
        .unwrap_or_default()
}

/// The transactionIds of popped messages.
pub fn txn_ids(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["transactionId"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Pops and acks (completed) everything pending for `group` on (queue, partition); returns
/// the transactionIds it consumed.
pub async fn consume(
    b: &TestBroker,
    queue: &str,
    partition: &str,
    group: Option<&str>,
) -> Vec<String> {
    let messages = pop(b, queue, Some(partition), group, 1000, "").await;
    if !messages.is_empty() {
        let items = messages
            .iter()
            .map(|m| common::ack_item(m, "completed"))
            .collect();
        for answer in common::ack_batch(b, group, items).await {
            assert_eq!(answer["success"], true, "{answer}");
        }
    }
    txn_ids(&messages)
}
