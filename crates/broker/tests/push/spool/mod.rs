//! The maintenance routes and the disk spool (docs/engine.md §4.6, docs/wire.md §19) against real
//! PostgreSQL: [`maintenance`] (the routes, toggles reaching a sibling broker within a second,
//! pushes buffered under push maintenance and replayed in order when it ends, pop maintenance,
//! a full or absent spool) and [`outage`] (pushes spooled while PostgreSQL is unreachable or
//! stopped, a broker killed with a full spool, a torn tail, replays that lose and duplicate
//! nothing). The helpers both use are here.

mod at_rest;
mod failover;
mod maintenance;
mod outage;
mod proxy;
mod read_only;
mod rescue;
mod resume;
mod standby;

use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::statuses;
use crate::common::TestBroker;

/// `POST /api/v1/system/maintenance[/pop]` with `{"enabled": on}` at `url`.
async fn toggle(http: &reqwest::Client, url: &str, path: &str, on: bool) -> Value {
    let r = http
        .post(format!("{url}/api/v1/system/maintenance{path}"))
        .json(&json!({ "enabled": on }))
        .send()
        .await
        .expect("POST maintenance");
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.expect("JSON answer")
}

async fn maintenance(b: &TestBroker, on: bool) -> Value {
    toggle(&b.http, &b.url, "", on).await
}

/// One JSON push request of `(partition, transactionId)` items to `queue` at `url`.
async fn push_at(http: &reqwest::Client, url: &str, queue: &str, items: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, t)| json!({ "queue": queue, "partition": p, "transactionId": t, "payload": { "t": t } }))
        .collect();
    let r = http
        .post(format!("{url}/api/v1/push"))
        .json(&json!({ "items": items }))
        .send()
        .await
        .expect("POST push");
    let status = r.status();
    let body: Value = r.json().await.expect("JSON answer");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

async fn push(b: &TestBroker, queue: &str, items: &[(&str, &str)]) -> Value {
    push_at(&b.http, &b.url, queue, items).await
}

/// (transactionId → message_id) of an answer.
fn ids(answer: &Value) -> Vec<(String, String)> {
    answer
        .as_array()
        .expect("array answer")
        .iter()
        .map(|r| {
            (
                r["transaction_id"].as_str().unwrap_or_default().to_string(),
                r["message_id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Messages of `queue` PostgreSQL holds (from the hash sidecar, one row per segment).
async fn stored(db: &tokio_postgres::Client, queue: &str) -> i64 {
    db.query_one(
        "SELECT COALESCE(sum(t.end_offset - t.base_offset + 1), 0)::bigint
         FROM queen.log_txns t
         JOIN queen.log_partitions p ON p.id = t.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = $1",
        &[&queue],
    )
    .await
    .expect("count stored")
    .get(0)
}

/// Waits until `queue` holds `n` messages; fails after `within`.
async fn wait_stored(db: &tokio_postgres::Client, queue: &str, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let have = stored(db, queue).await;
        if have >= n {
            assert_eq!(have, n, "{queue}: no more than what was pushed");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{queue}: {have} of {n} messages stored after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Everything of (queue, partition), in delivery order: (transactionId, id).
async fn drain(
    http: &reqwest::Client,
    url: &str,
    queue: &str,
    partition: &str,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        let r = http
            .get(format!(
                "{url}/api/v1/pop/queue/{queue}/partition/{partition}?batch=1000&autoAck=true"
            ))
            .send()
            .await
            .expect("pop");
        if r.status() == StatusCode::NO_CONTENT {
            return out;
        }
        assert_eq!(r.status(), StatusCode::OK);
        let body: Value = r.json().await.expect("pop body");
        for m in body["messages"].as_array().expect("messages") {
            out.push((
                m["transactionId"].as_str().unwrap_or_default().to_string(),
                m["id"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
}

/// What (queue, partition) delivers is exactly `want`, in that order: nothing lost, nothing
/// twice, each under the id its push was answered with.
async fn assert_delivers(b: &TestBroker, queue: &str, partition: &str, want: &[(String, String)]) {
    let got = drain(&b.http, &b.url, queue, partition).await;
    assert_eq!(got, want, "{queue}/{partition}");
}

/// Spool files left in `dir`.
fn spool_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("spool-"))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_no_spool_files(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !spool_files(dir).is_empty() {
        assert!(
            Instant::now() < deadline,
            "spool files stay: {:?}",
            spool_files(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
