//! Issue 38 §2 against a real pg_auto_failover formation (crates/formation: a monitor, a
//! primary and two synchronous standbys on loopback ports): the broker is given the multi-host
//! URL with `target_session_attrs=read-write`, and one producer pushes throughout a planned
//! switchover and then a `kill -9` of the new primary's postmaster. Every push is answered
//! 201, each item `queued` or (while no server takes writes) `buffered`; afterwards the
//! partition delivers every message answered, in push order, under its answered id, nothing
//! is quarantined, and `/health` names the primary the broker writes to now.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queen_broker::spool::QUARANTINE_FILE;
use queen_formation::Formation;
use serde_json::{json, Value};

use super::{drain, wait_no_spool_files, wait_stored};
use crate::common;

const QUEUE: &str = "ha";

/// Pushes one message per request to (`ha`, `p`) until `stop`; returns (transactionId, id)
/// of every answered item in push order, and the count of items answered `buffered`.
async fn produce(
    http: reqwest::Client,
    url: String,
    stop: Arc<AtomicBool>,
) -> (Vec<(String, String)>, usize) {
    let mut answered = Vec::new();
    let mut buffered = 0;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let txn = format!("m-{n}");
        n += 1;
        let body = json!({ "items": [{ "queue": QUEUE, "partition": "p", "transactionId": txn, "payload": { "n": n } }] });
        let r = http
            .post(format!("{url}/api/v1/push"))
            .json(&body)
            .send()
            .await
            .expect("the broker answers every push");
        let status = r.status();
        let answer: Value = r.json().await.expect("a JSON answer");
        assert_eq!(status, 201, "push {txn} during the failover: {answer}");
        let item = &answer[0];
        match item["status"].as_str() {
            Some("queued") => {}
            Some("buffered") => buffered += 1,
            other => panic!("push {txn} answered {other:?}: {answer}"),
        }
        let id = item["message_id"].as_str().unwrap_or_default().to_string();
        answered.push((txn, id));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (answered, buffered)
}

#[tokio::test]
async fn a_switchover_and_a_killed_primary_lose_nothing_answered() {
    let dir = PathBuf::from(format!(
        "/tmp/queen-test/formation-push-{}",
        std::process::id()
    ));
    let f = Formation::start(&dir, 3)
        .await
        .expect("the pg_auto_failover formation");
    let spool_dir = common::scratch_spool_dir();
    let spool = spool_dir.clone();
    let b = common::broker_on(f.config().expect("URL"), move |cfg| {
        cfg.db_pool_size = 4;
        cfg.file_buffer_flush_ms = 50;
        cfg.file_buffer_dir = Some(spool);
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(b.http.clone(), b.url.clone(), stop.clone()));

    tokio::time::sleep(Duration::from_secs(1)).await;
    let primary = f.switchover().await.expect("a planned switchover");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let primary = f
        .kill9_postmaster(primary)
        .await
        .expect("kill -9 of the new primary's postmaster; the formation settles again");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (answered, buffered) = producer.await.expect("producer");
    eprintln!(
        "{} pushes answered, {buffered} of them buffered",
        answered.len()
    );

    let admin = common::connect(&f.config().expect("URL")).await;
    wait_stored(
        &admin,
        QUEUE,
        answered.len() as i64,
        Duration::from_secs(60),
    )
    .await;
    let got = drain(&b.http, &b.url, QUEUE, "p").await;
    assert_eq!(
        got, answered,
        "every push answered, in order, under its answered id"
    );
    assert!(
        !spool_dir.join(QUARANTINE_FILE).exists(),
        "nothing quarantined"
    );
    wait_no_spool_files(&spool_dir).await;

    let (_, health) = b.get("/health").await;
    assert_eq!(health["server"]["port"], f.ports()[primary], "{health}");
    assert_eq!(health["server"]["writable"], true, "{health}");
    assert!(health["server"]["switches"].as_u64() >= Some(1), "{health}");
    b.stop().await;
}
