//! Sixteen concurrent consumers of one group on a sixteen-partition queue, acking every batch
//! in one call with random nacks, retries, dead letters and replays of already committed
//! acks. Every cursor value anyone sees is recorded: a sampler polls all cursors on its own
//! connection, and each consumer reads its partition's cursor on its own connection right
//! after each ack. Proves: no message is lost (each one was either finished by a consumer or
//! dead-lettered after an explicit signal), no observer ever sees a cursor move backwards, an
//! answered ack is already visible, and replayed acks below the cursor are harmless no-ops.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const PARTITIONS: usize = 16;
const PER_PARTITION: usize = 200;
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

/// Cursor values in the order one observer (one connection) saw them, per partition.
type Observed = HashMap<i64, Vec<i64>>;

/// Appends `committed` unless it repeats the last value seen.
fn observe(seen: &mut Observed, pid: i64, committed: i64) {
    let values = seen.entry(pid).or_default();
    if values.last() != Some(&committed) {
        values.push(committed);
    }
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
    let r = ack_batch(&b, Some(GROUP), vec![ack_item(&first.messages[0], "retry")]).await;
    assert_ok(&r[0]);

    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, pg) = (done.clone(), b.pg.clone());
        tokio::spawn(async move {
            let db = common::connect(&pg).await;
            let stmt = db
                .prepare("SELECT partition_id, committed FROM queen.log_consumers WHERE consumer_group = $1")
                .await
                .expect("prepare");
            let (mut seen, mut samples) = (Observed::new(), 0u64);
            while !done.load(Ordering::Relaxed) {
                for row in db.query(&stmt, &[&GROUP]).await.expect("sample cursors") {
                    observe(&mut seen, row.get(0), row.get(1));
                }
                samples += 1;
            }
            (seen, samples)
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
    let mut observers = Vec::new();
    for w in workers {
        observers.push(w.await.expect("worker"));
    }
    let (sampled, samples) = sampler.await.expect("sampler");
    let elapsed = started.elapsed();

    let ledger = std::mem::take(&mut *ledger.lock().expect("ledger"));
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

    assert_eq!(sampled.len(), PARTITIONS);
    for seen in sampled.values() {
        assert_eq!(seen.last(), Some(&last));
    }
    let mut readings = 0;
    for (observer, seen) in std::iter::once(&sampled).chain(&observers).enumerate() {
        for (pid, values) in seen {
            readings += values.len();
            assert!(
                values.windows(2).all(|w| w[0] <= w[1]),
                "observer {observer} saw the cursor of partition {pid} move backwards: {values:?}"
            );
        }
    }
    println!(
        "{} messages over {PARTITIONS} partitions by {WORKERS} consumers in {:.2?} ({:.0} msg/s); \
         {} ack calls, {} replays, {} dead letters; {samples} sampler sweeps, {readings} cursor readings",
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
async fn consume(
    w: usize,
    b: &common::TestBroker,
    ledger: &Mutex<Ledger>,
    done: &AtomicBool,
) -> Observed {
    let db = b.sql().await;
    let read = db
        .prepare("SELECT committed FROM queen.log_consumers WHERE partition_id = $1 AND consumer_group = $2")
        .await
        .expect("prepare");
    let mut seen = Observed::new();
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
                    let mut i = ack_item(m, s);
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

        // The answer means the cursor is durable: it already covers the finished prefix (and
        // a dead letter filed by this call).
        let pid = popped.partition_id();
        let committed: i64 = db
            .query_one(&read, &[&pid, &GROUP])
            .await
            .expect("read cursor")
            .get(0);
        observe(&mut seen, pid, committed);
        let covered = match signal_at {
            Some(k) if answer[k]["dlq"] == true => Some(k),
            Some(k) => k.checked_sub(1),
            None => Some(popped.messages.len() - 1),
        };
        if let Some(k) = covered {
            let offset = popped.messages[k]["offset"].as_i64().expect("offset");
            assert!(
                committed >= offset,
                "answered ack not visible: cursor {committed} < {offset}"
            );
        }
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
    seen
}
