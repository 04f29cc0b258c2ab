//! Admission (docs/engine.md §9) under a storm of empty re-polls: with a pool of two
//! connections, fifty consumers re-polling an empty queue as fast as they can must not keep a
//! hundred acks and a hundred pushes from completing. With the hot-list ring (the default) an
//! empty re-poll takes no permit and no connection at all; on the SQL path its has-pending
//! probe takes a connection but never a permit, so the permits stay with real work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queen_broker::config::Config;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, TestBroker};
use crate::support::{self, configure, push_txns, txns, Handle};

const PARTITIONS: usize = 10;
const PER_PARTITION: usize = 10;
const REPOLLERS: usize = 50;

/// The `admission.pop.granted` and `hotlist.emptyPolls` counters of `/metrics`.
async fn counters(b: &TestBroker) -> (u64, u64) {
    let (status, m) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK, "{m}");
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("/metrics: {m}"));
    (
        n(&m["admission"]["pop"]["granted"]),
        n(&m["hotlist"]["emptyPolls"]),
    )
}

/// Leases 100 messages, then acks them one request each (per partition in order) and pushes
/// 100 messages one request each, while fifty consumers re-poll an empty queue. Answers how
/// many re-polls ran meanwhile.
async fn acks_and_pushes_under_a_repoll_storm(b: &TestBroker) -> u64 {
    configure(b, "idle", json!({})).await;
    for p in 0..PARTITIONS {
        push_txns(
            b,
            "work",
            &format!("p{p}"),
            &txns(&format!("p{p}"), PER_PARTITION),
        )
        .await;
    }
    let leased = support::pop(b, "work", "batch=100&partitions=10").await;
    leased.assert_delivered();
    assert_eq!(leased.messages().len(), PARTITIONS * PER_PARTITION);

    let stop = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicU64::new(0));
    let mut storm = Vec::new();
    for _ in 0..REPOLLERS {
        let (h, stop, polls) = (Handle::of(b), stop.clone(), polls.clone());
        storm.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                h.get("/api/v1/pop/queue/idle?batch=10")
                    .await
                    .assert_empty();
                polls.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Let the storm reach full speed before the real work starts.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut work = Vec::new();
    for p in 0..PARTITIONS {
        let partition = format!("p{p}");
        let mine: Vec<Value> = leased
            .messages()
            .into_iter()
            .filter(|m| m["partition"] == partition.as_str())
            .collect();
        let h = Handle::of(b);
        work.push(tokio::spawn(async move {
            for m in mine {
                let body = json!({ "messages": [m] });
                h.ack_all("__QUEUE_MODE__", &body).await;
            }
        }));
    }
    let h = Handle::of(b);
    work.push(tokio::spawn(async move {
        for i in 0..100 {
            let item = json!({ "queue": "sink", "partition": "p", "payload": i });
            let r = h
                .http
                .post(format!("{}/api/v1/push", h.url))
                .json(&json!({ "items": [item] }))
                .send()
                .await
                .expect("push");
            assert_eq!(r.status(), StatusCode::CREATED);
        }
    }));
    // A hang guard only: the assertion is that every ack and push completed.
    for w in work {
        tokio::time::timeout(Duration::from_secs(300), w)
            .await
            .expect("acks and pushes completed under the storm")
            .expect("an ack or a push failed");
    }
    stop.store(true, Ordering::Relaxed);
    for s in storm {
        s.await.expect("a re-poller failed");
    }
    let db = b.sql().await;
    let (committed, last): (i64, i64) = {
        let r = db
            .query_one(
                "SELECT sum(c.committed)::bigint, sum(p.last_offset)::bigint FROM queen.log_consumers c
                 JOIN queen.log_partitions p ON p.id = c.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'work'",
                &[],
            )
            .await
            .expect("cursors");
        (
            r.get::<_, Option<i64>>(0).unwrap_or(0),
            r.get::<_, Option<i64>>(1).unwrap_or(-1),
        )
    };
    assert_eq!(committed, last, "every ack landed");
    polls.load(Ordering::Relaxed)
}

fn small_pool(hotlist: bool) -> impl FnOnce(&mut Config) {
    move |cfg: &mut Config| {
        cfg.db_pool_size = 2;
        cfg.hotlist = hotlist;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_repolls_take_no_permit_and_never_starve_acks_and_pushes() {
    let b = common::broker_with(small_pool(true)).await;
    let (granted, empty) = counters(&b).await;
    let polls = acks_and_pushes_under_a_repoll_storm(&b).await;
    let (granted_after, empty_after) = counters(&b).await;
    println!(
        "{polls} empty re-polls beside 100 acks and 100 pushes on a pool of 2; \
         pop permits granted meanwhile: {}",
        granted_after - granted
    );
    assert!(
        empty_after - empty >= polls,
        "every re-poll was answered by the ring"
    );
    // The one leasing pop and the idle ring's first reseed; none for the re-polls.
    assert!(
        granted_after - granted <= 3,
        "{} pop permits for {polls} empty re-polls",
        granted_after - granted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_the_sql_path_the_probe_spends_no_permit_and_acks_still_complete() {
    let b = common::broker_with(small_pool(false)).await;
    let (granted, _) = counters(&b).await;
    let polls = acks_and_pushes_under_a_repoll_storm(&b).await;
    let (granted_after, _) = counters(&b).await;
    println!("SQL path: {polls} empty re-polls beside 100 acks and 100 pushes on a pool of 2");
    assert!(
        granted_after - granted <= 3,
        "{} pop permits for {polls} probed re-polls",
        granted_after - granted
    );
}
