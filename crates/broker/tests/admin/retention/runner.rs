//! One retention runner per database (docs/engine.md §10.3): of two brokers sharing a database
//! exactly one runs the loop, and when it stops — shut down, or killed with SIGKILL — the
//! other takes over and deletes in its place.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::common::faults::QueenProcess;
use crate::common::{configure, partition_id, push_txns, txns};

/// Sessions holding the retention runner lock (advisory key 737001) in the database.
async fn lock_holders(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT count(*) FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = 737001
           AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        &[],
    )
    .await
    .expect("pg_locks")
    .get(0)
}

/// Whether `b` runs the loop, and how many runs it completed.
async fn runner(b: &TestBroker) -> (bool, u64) {
    let s = stats(b).await;
    (s["runner"] == true, s["runs"].as_u64().unwrap_or(0))
}

/// Pushes to a max-wait queue and waits until whoever runs the loop evicts it.
async fn eviction_happens(b: &TestBroker, queue: &str) {
    let db = b.sql().await;
    configure(b, queue, json!({ "maxWaitTimeSeconds": 1 })).await;
    push_txns(b, queue, "p", &txns("m", 1)).await;
    let pid = partition_id(&db, queue, "p").await;
    eventually("the eviction", || async {
        bases(&db, pid).await.is_empty()
    })
    .await;
}

#[tokio::test]
async fn one_of_two_brokers_runs_the_loop_and_the_other_takes_over_when_it_stops() {
    let a = broker(|_| {}).await;
    eventually("the first broker to run", || async { runner(&a).await.0 }).await;
    let b = a.sibling(fast).await;
    let db = a.sql().await;

    wait_runs(&a, 5).await;
    assert_eq!(runner(&b).await, (false, 0), "the second broker never ran");
    assert_eq!(stats(&b).await["takeovers"], 0);
    assert_eq!(lock_holders(&db).await, 1);
    eviction_happens(&b, "before").await;

    a.stop().await;
    eventually("the second broker to take over", || async {
        runner(&b).await.0
    })
    .await;
    assert_eq!(stats(&b).await["takeovers"], 1);
    assert_eq!(lock_holders(&db).await, 1);
    eviction_happens(&b, "after").await;
}

#[tokio::test]
async fn a_runner_killed_with_sigkill_is_replaced() {
    let pg = crate::common::fresh_database().await;
    let interval = [("RETENTION_INTERVAL", INTERVAL_MS.to_string())];
    let child = QueenProcess::start(env!("CARGO_BIN_EXE_queen"), &pg, &interval).await;
    let metrics = format!("{}/metrics", child.url);
    let http = reqwest::Client::new();
    let child_stats = || async {
        let r = http.get(&metrics).send().await.ok()?;
        let body: serde_json::Value = r.json().await.ok()?;
        Some(body["retention"].clone())
    };
    eventually("the spawned broker to run the loop", || async {
        child_stats()
            .await
            .is_some_and(|s| s["runner"] == true && s["runs"].as_u64() > Some(0))
    })
    .await;

    let b = crate::common::broker_on(pg, fast).await;
    wait_runs_of_child(&child_stats).await;
    assert_eq!(runner(&b).await, (false, 0), "the child holds the lock");

    child.kill9();
    eventually("the in-process broker to take over", || async {
        runner(&b).await.0
    })
    .await;
    eviction_happens(&b, "after-kill").await;
}

/// Waits until the child completed a few more runs (so the other broker tried meanwhile).
async fn wait_runs_of_child<F, Fut>(child_stats: &F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    let runs = |s: Option<serde_json::Value>| s.and_then(|s| s["runs"].as_u64()).unwrap_or(0);
    let from = runs(child_stats().await);
    eventually("more runs of the child", || async {
        runs(child_stats().await) >= from + 5
    })
    .await;
    tokio::time::sleep(Duration::from_millis(INTERVAL_MS)).await;
}
