//! Ack fusion (docs/engine.md §6.5): covers of concurrent requests commit together through
//! `log_ack_multi_v1`, each request gets its own verdict, and a flush that fails answers
//! every request honestly — a refusal sends each down its own hash path, a lost connection
//! is a 503 (outcome unknown).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

/// Many consumers pop and ack concurrently, some acks sent twice at once: every request is
/// answered for itself (a duplicate pair has exactly one winner, as without fusion), every
/// message is delivered once, and every cursor ends at its partition's last offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acks_fuse_and_each_request_gets_its_own_verdict() {
    const PARTITIONS: usize = 16;
    const PER_PARTITION: usize = 30;
    const CONSUMERS: usize = 12;
    let b = Arc::new(common::broker().await);
    let db = b.sql().await;
    for p in 0..PARTITIONS {
        push_txns(
            &b,
            "race",
            &format!("p{p}"),
            &txns(&format!("race{p}"), PER_PARTITION),
        )
        .await;
    }
    let delivered = Arc::new(Mutex::new(Vec::<String>::new()));
    let pairs = Arc::new(Mutex::new(0usize));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let (b, delivered, pairs) = (b.clone(), delivered.clone(), pairs.clone());
            tokio::spawn(async move {
                let mut round = 0;
                while let Some(popped) = pop(&b, "race", None, G, 3, "").await {
                    round += 1;
                    delivered.lock().unwrap().extend(popped.txns());
                    let items = ack_all(&popped, "completed");
                    if (round + c) % 4 != 0 {
                        let answer = ack_batch(&b, G, items).await;
                        answer.iter().for_each(assert_ok);
                        assert!(answer.iter().all(|r| r["leaseReleased"] == true));
                        continue;
                    }
                    // The same ack twice at once: exactly one request lands it.
                    let (x, y) =
                        tokio::join!(ack_batch(&b, G, items.clone()), ack_batch(&b, G, items));
                    let won = |answer: &[Value]| answer.iter().all(|r| r["success"] == true);
                    assert!(won(&x) != won(&y), "one winner: {x:?} {y:?}");
                    let loser = if won(&x) { &y } else { &x };
                    loser
                        .iter()
                        .for_each(|r| assert_refused(r, "invalid or expired lease"));
                    *pairs.lock().unwrap() += 1;
                }
            })
        })
        .collect();
    for c in consumers {
        c.await.expect("consumer");
    }
    let delivered = delivered.lock().unwrap().clone();
    let distinct: HashSet<&String> = delivered.iter().collect();
    assert_eq!(delivered.len(), PARTITIONS * PER_PARTITION, "no redelivery");
    assert_eq!(distinct.len(), PARTITIONS * PER_PARTITION);
    let rows = db
        .query(
            "SELECT committed, worker_id IS NULL, total_consumed FROM queen.log_consumers",
            &[],
        )
        .await
        .expect("cursors");
    assert_eq!(rows.len(), PARTITIONS);
    for row in rows {
        let state: (i64, bool, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            state,
            (PER_PARTITION as i64 - 1, true, PER_PARTITION as i64)
        );
    }
    let (registry, fusion) = (registry_metrics(&b).await, fusion_metrics(&b).await);
    let multi = flushes(&db).await;
    let by_hash = calls(&db, "log_ack_by_hash_v1").await;
    let pairs = *pairs.lock().unwrap() as i64;
    println!(
        "fusion: {} acks in {} commits of {} rows ({multi} positional statements), {} hits, \
         {by_hash} hash resolutions for {pairs} duplicate pairs",
        fusion["acks"], fusion["commits"], fusion["rows"], registry["hits"]
    );
    assert_eq!(
        fusion["acks"], registry["hits"],
        "every hit went through fusion"
    );
    assert_eq!(fusion["commits"].as_i64(), Some(multi));
    assert!(fusion["commits"].as_u64() <= fusion["acks"].as_u64());
    assert!(
        pairs > 0 && by_hash >= pairs && by_hash <= 2 * pairs,
        "{by_hash} {pairs}"
    );
}

/// With one shard, a flush held up by a row lock makes every ack behind it wait, and the
/// next flush commits them all at once.
#[tokio::test]
async fn acks_behind_a_flush_in_flight_commit_together() {
    const BEHIND: usize = 6;
    let b = Arc::new(common::broker_with(|cfg| cfg.ack_fusion_shards = 1).await);
    let mut db = b.sql().await;
    let mut batches = Vec::new();
    for p in 0..=BEHIND {
        let partition = format!("p{p}");
        push_txns(&b, "held", &partition, &txns(&partition, 2)).await;
        batches.push(
            pop(&b, "held", Some(&partition), G, 2, "")
                .await
                .expect("two messages"),
        );
    }
    let blocker = db.transaction().await.expect("begin");
    blocker
        .execute(
            "SELECT 1 FROM queen.log_consumers WHERE partition_id = $1 FOR UPDATE",
            &[&batches[0].partition_id()],
        )
        .await
        .expect("hold the first cursor row");
    let ack = |popped: Popped| {
        let b = b.clone();
        tokio::spawn(async move { ack_batch(&b, G, ack_all(&popped, "completed")).await })
    };
    let first = ack(batches[0].clone());
    // The first flush is now waiting on the lock; everything else queues behind it.
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let behind: Vec<_> = batches[1..].iter().cloned().map(ack).collect();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    blocker.rollback().await.expect("release");
    for answer in std::iter::once(first).chain(behind) {
        answer.await.expect("ack").iter().for_each(assert_ok);
    }
    let fusion = fusion_metrics(&b).await;
    assert_eq!(
        (fusion["commits"].clone(), fusion["acks"].clone()),
        (json!(2), json!(BEHIND + 1)),
        "one flush alone, then all the others in one"
    );
    let db = b.sql().await;
    assert_eq!(flushes(&db).await, 2);
}

/// Installs a trigger that runs `action` inside a fused flush (and nowhere else).
async fn sabotage_flushes(db: &tokio_postgres::Client, action: &str) {
    db.batch_execute(&format!(
        "CREATE FUNCTION queen.test_sabotage() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF current_query() LIKE '%log_ack_multi_v1%'
              OR current_query() LIKE '%log_ack_at_v1%' THEN {action}; END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER test_sabotage BEFORE UPDATE ON queen.log_consumers
           FOR EACH ROW EXECUTE FUNCTION queen.test_sabotage();"
    ))
    .await
    .expect("trigger");
}

#[tokio::test]
async fn a_refused_flush_sends_each_request_down_its_own_hash_path() {
    let b = common::broker().await;
    let db = b.sql().await;
    sabotage_flushes(&db, "RAISE EXCEPTION 'flush refused for the test'").await;
    let mut popped = Vec::new();
    for p in ["a", "b", "c"] {
        push_txns(&b, "refused", p, &txns(&format!("refused-{p}"), 2)).await;
        popped.push(pop(&b, "refused", Some(p), G, 2, "").await.expect("two"));
    }
    let answers = futures::future::join_all(
        popped
            .iter()
            .map(|batch| ack_batch(&b, G, ack_all(batch, "completed"))),
    )
    .await;
    for (batch, answer) in popped.iter().zip(answers) {
        answer.iter().for_each(assert_ok);
        let c = cursor(&db, batch.partition_id(), "g").await;
        assert_eq!((c.committed, c.worker), (1, None));
    }
    assert!(fusion_metrics(&b).await["failures"].as_u64() >= Some(1));
    assert_eq!(
        calls(&db, "log_ack_by_hash_v1").await,
        3,
        "each request's own"
    );
}

#[tokio::test]
async fn a_flush_that_loses_its_connection_answers_503_to_every_request() {
    let b = common::broker().await;
    let db = b.sql().await;
    sabotage_flushes(&db, "PERFORM pg_terminate_backend(pg_backend_pid())").await;
    let mut popped = Vec::new();
    for p in ["a", "b"] {
        push_txns(&b, "lost", p, &txns(&format!("lost-{p}"), 2)).await;
        popped.push(pop(&b, "lost", Some(p), G, 2, "").await.expect("two"));
    }
    let body = |batch: &Popped| json!({ "acknowledgments": ack_all(batch, "completed"), "consumerGroup": "g" });
    let bodies: Vec<Value> = popped.iter().map(body).collect();
    let answers =
        futures::future::join_all(bodies.iter().map(|body| b.post("/api/v1/ack/batch", body)))
            .await;
    for (status, answer) in &answers {
        assert_eq!(
            *status,
            StatusCode::SERVICE_UNAVAILABLE,
            "the flush may or may not have committed: {answer}"
        );
    }
    db.batch_execute("DROP TRIGGER test_sabotage ON queen.log_consumers")
        .await
        .expect("drop trigger");
    // The clients retry (after Retry-After; a pooled connection may still be the dead one):
    // nothing had committed, and the retry lands by hash.
    for batch in &popped {
        let answer = retry_on_503(&b, &body(batch)).await;
        answer
            .as_array()
            .expect("answer")
            .iter()
            .for_each(assert_ok);
        let c = cursor(&db, batch.partition_id(), "g").await;
        assert_eq!((c.committed, c.worker), (1, None));
    }
}

/// Posts an ack batch until it is not a 503, as the official client does.
async fn retry_on_503(b: &common::TestBroker, body: &Value) -> Value {
    for _ in 0..5 {
        let (status, answer) = b.post("/api/v1/ack/batch", body).await;
        if status != StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(status, StatusCode::OK, "{answer}");
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("still 503 after five tries");
}
