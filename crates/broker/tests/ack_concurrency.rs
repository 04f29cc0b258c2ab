//! Sixteen concurrent consumers of one group on a sixteen-partition queue, acking every batch
//! in one call with random nacks, retries, dead letters and replays of already committed
//! acks. A sampler records every cursor value it sees. Proves: no message is lost (each one
//! was either finished by a consumer or dead-lettered after an explicit signal), no cursor
//! ever moves backwards, and replayed acks below the cursor are harmless no-ops.

mod ack_common;
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ack_common::*;
use rand::Rng;
use serde_json::{json, Value};

const PARTITIONS: usize = 16;
const PER_PARTITION: usize = 120;
const WORKERS: usize = 16;
const GROUP: &str = "racers";

/// What the consumers observed.
#[derive(Default)]
struct Ledger {
    /// Messages a consumer handled and whose completed ack the cursor reached: the prefix of
    /// each ack call below its first signal.
    finished: HashSet<String>,
    /// The first signal of each ack call: the only messages allowed to be dead-lettered.
    first_signals: HashSet<String>,
    /// Items the broker reported as dead-lettered.
    reported_dlq: Vec<String>,
    ack_calls: usize,
    replays: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_ackers_with_random_nacks_lose_nothing_and_never_move_a_cursor_back() {
    let b = Arc::new(common::broker().await);
    let db = b.sql().await;
    configure(&b, "race", json!({ "retryLimit": 2, "leaseTime": 60 })).await;
    let mut all = HashSet::new();
    for p in 0..PARTITIONS {
        let txns = txns(&format!("race-p{p}"), PER_PARTITION);
        for chunk in txns.chunks(40) {
            push_txns(&b, "race", &format!("p{p}"), chunk).await;
        }
        all.extend(txns);
    }

    // Seed the group's cursors with one pop that acks nothing, so the sampler sees every row.
    let first = pop(&b, "race", None, Some(GROUP), 1, "")
        .await
        .expect("work");
    let r = ack_batch(&b, Some(GROUP), vec![item(&first.messages[0], "retry")]).await;
    assert_ok(&r[0]);

    let done = Arc::new(AtomicBool::new(false));
    let history: Arc<Mutex<HashMap<i64, Vec<i64>>>> = Arc::default();
    let sampler = {
        let (done, history, pg) = (done.clone(), history.clone(), b.pg.clone());
        tokio::spawn(async move {
            let db = common::connect(&pg).await;
            let mut samples = 0u64;
            while !done.load(Ordering::Relaxed) {
                let rows = db
                    .query("SELECT partition_id, committed FROM queen.log_consumers WHERE consumer_group = $1", &[&GROUP])
                    .await
                    .expect("sample cursors");
                let mut h = history.lock().expect("history");
                for row in rows {
                    let seen = h.entry(row.get(0)).or_default();
                    let committed: i64 = row.get(1);
                    if seen.last() != Some(&committed) {
                        seen.push(committed);
                    }
                }
                samples += 1;
            }
            samples
        })
    };

    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (b, ledger, done) = (b.clone(), ledger.clone(), done.clone());
            tokio::spawn(async move { consume(w, &b, &ledger, &done).await })
        })
        .collect();

    // Done when every cursor reached the end of its partition.
    let last = (PER_PARTITION - 1) as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let behind: i64 = db
            .query_one("SELECT count(*) FROM queen.log_consumers WHERE consumer_group = $1 AND committed < $2", &[&GROUP, &last])
            .await
            .expect("progress")
            .get(0);
        let rows: i64 = db
            .query_one(
                "SELECT count(*) FROM queen.log_consumers WHERE consumer_group = $1",
                &[&GROUP],
            )
            .await
            .expect("rows")
            .get(0);
        if behind == 0 && rows == PARTITIONS as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "consumers stalled: {behind} partitions behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("worker");
    }
    let samples = sampler.await.expect("sampler");
    let elapsed = started.elapsed();

    let ledger = ledger.lock().expect("ledger");
    let dead: Vec<String> = db
        .query(
            "SELECT transaction_id FROM queen.log_dlq WHERE consumer_group = $1",
            &[&GROUP],
        )
        .await
        .expect("dlq rows")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let dead_set: HashSet<String> = dead.iter().cloned().collect();
    assert_eq!(
        dead.len(),
        dead_set.len(),
        "a message was dead-lettered twice"
    );
    assert!(
        dead_set.is_subset(&ledger.first_signals),
        "a message was dead-lettered without a signal"
    );
    assert_eq!(
        dead_set,
        ledger.reported_dlq.iter().cloned().collect(),
        "every filed letter was reported"
    );

    let lost: Vec<&String> = all
        .iter()
        .filter(|t| !ledger.finished.contains(*t) && !dead_set.contains(*t))
        .collect();
    assert!(
        lost.is_empty(),
        "{} messages lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );

    let history = history.lock().expect("history");
    assert_eq!(history.len(), PARTITIONS);
    for (pid, seen) in history.iter() {
        assert!(
            seen.windows(2).all(|w| w[0] <= w[1]),
            "cursor of partition {pid} moved backwards: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&last));
    }
    let moves: usize = history.values().map(Vec::len).sum();
    println!(
        "{} messages over {PARTITIONS} partitions by {WORKERS} consumers in {:.2?} ({:.0} msg/s); \
         {} ack calls, {} replays, {} dead letters; {samples} cursor samples, {moves} distinct cursor values",
        all.len(),
        elapsed,
        all.len() as f64 / elapsed.as_secs_f64(),
        ledger.ack_calls,
        ledger.replays,
        dead_set.len(),
    );
}

/// One consumer: wildcard pops of up to 8 messages, one ack call per batch with random
/// statuses (sometimes lease-less), and now and then a replay of an old, committed ack.
async fn consume(w: usize, b: &common::TestBroker, ledger: &Mutex<Ledger>, done: &AtomicBool) {
    let mut committed_before: Vec<Value> = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let batch = rand::thread_rng().gen_range(1..=8);
        let Some(popped) = pop(b, "race", None, Some(GROUP), batch, "").await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let (items, statuses, replay) = {
            let mut rng = rand::thread_rng();
            let statuses: Vec<&str> = popped
                .messages
                .iter()
                .map(|_| match rng.gen_range(0..100) {
                    0..=79 => "completed",
                    80..=89 => "failed",
                    90..=94 => "retry",
                    _ => "dlq",
                })
                .collect();
            let lease_less = rng.gen_bool(0.1);
            let replay = !committed_before.is_empty() && rng.gen_bool(0.1);
            let items: Vec<Value> = popped
                .messages
                .iter()
                .zip(&statuses)
                .map(|(m, s)| {
                    let mut i = item(m, s);
                    i["error"] = json!(format!("worker {w} says {s}"));
                    if lease_less {
                        i.as_object_mut().map(|o| o.remove("leaseId"));
                    }
                    i
                })
                .collect();
            (items, statuses, replay)
        };

        if replay {
            // Completed acks of messages this worker already committed: below the cursor now.
            let answer = ack_batch(b, Some(GROUP), committed_before.clone()).await;
            for r in &answer {
                assert_ok(r);
                assert_eq!(
                    r["noop"], true,
                    "a replayed ack below the cursor must be a noop: {r}"
                );
            }
            ledger.lock().expect("ledger").replays += 1;
        }

        let answer = ack_batch(b, Some(GROUP), items.clone()).await;
        let signal_at = statuses.iter().position(|s| *s != "completed");
        let mut l = ledger.lock().expect("ledger");
        l.ack_calls += 1;
        for (k, (r, msg)) in answer.iter().zip(&popped.messages).enumerate() {
            assert_ok(r);
            let txn = msg["transactionId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if signal_at.is_none_or(|s| k < s) {
                l.finished.insert(txn.clone());
            }
            if signal_at == Some(k) {
                l.first_signals.insert(txn.clone());
            }
            if r["dlq"] == true {
                assert_eq!(
                    Some(k),
                    signal_at,
                    "only the head signal is dead-lettered: {r}"
                );
                l.reported_dlq.push(txn);
            }
        }
        drop(l);
        let prefix = signal_at.unwrap_or(items.len());
        committed_before = items[..prefix]
            .iter()
            .map(|i| {
                let mut i = i.clone();
                i.as_object_mut().map(|o| o.remove("leaseId"));
                i["status"] = json!("completed");
                i
            })
            .collect();
    }
}
