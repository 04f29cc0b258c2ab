//! The ack accelerators change nothing but cost: one seeded workload — full, partial,
//! shuffled and repeated acks, nacks, dead letters, retries, lease-less and forged-lease acks,
//! transactions, lease expiries and renewals, over several partitions and groups, targeted,
//! wildcard and autopilot pops — runs on two brokers with the ack registry and ack fusion on
//! and on two with both off (each pair on its own database). Pops go to the first broker of
//! a pair; any ack, renewal or transaction may go to the second, whose registry never saw the
//! lease. Every pop, every per-item answer, the final cursors and the dead letters must be
//! identical.
//!
//! Wildcard pops are served by the hot-list ring, which may miss a claimable partition until
//! its next reseed (docs/engine.md §7: a took parks it up to a second, a lease expired behind
//! its back or released through the other broker is seen at the reseed floor, 30 s). Which
//! side reseeds before which step would then depend on the wall clock, so both pairs reseed
//! on every wildcard pop ([`RESEED_MS`]): the ring still serves and sizes each one, and its
//! answer is PostgreSQL's.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::common::{self, TestBroker};
use crate::support::*;

/// The last queue has one partition and is popped through the wildcard route (with or
/// without `autopilot`), so which partition a pop claims never depends on the broker.
const QUEUES: [(&str, &[&str]); 3] = [
    ("dq.a", &["p0", "p1", "p2"]),
    ("dq.b", &["p0", "p1"]),
    ("dq.w", &["p0"]),
];
const WILDCARD: &str = "dq.w";
const GROUPS: [Option<&str>; 3] = [Some("g1"), Some("g2"), None];
const PER_PARTITION: usize = 16;
const STEPS: usize = 70;
/// The hot-list reseed floor of both pairs; every wildcard pop waits longer than this first.
const RESEED_MS: u64 = 1;

/// Everything a run observed, in order, with no lease ids or message ids in it.
#[derive(Debug, PartialEq)]
struct Observed {
    events: Vec<String>,
    cursors: Vec<String>,
    dead_letters: Vec<String>,
}

fn item_answer(r: &Value) -> String {
    format!(
        "{} {} released={} dlq={} noop={}",
        r["success"], r["error"], r["leaseReleased"], r["dlq"], r["noop"]
    )
}

async fn expire(db: &tokio_postgres::Client, pid: i64, group: Option<&str>) {
    db.execute(
        "UPDATE queen.log_consumers SET lease_expires_at = clock_timestamp() - interval '1 second'
         WHERE partition_id = $1 AND consumer_group = $2 AND worker_id IS NOT NULL",
        &[&pid, &group.unwrap_or("__QUEUE_MODE__")],
    )
    .await
    .expect("expire the lease");
}

/// Acks and records the per-item answers.
async fn ack(b: &TestBroker, group: Option<&str>, items: Vec<Value>, events: &mut Vec<String>) {
    let answer = ack_batch(b, group, items).await;
    events.push(
        answer
            .iter()
            .map(item_answer)
            .collect::<Vec<_>>()
            .join(" | "),
    );
}

/// One step: a pop (targeted, or wildcard on [`WILDCARD`]) through the first broker of
/// `pair` and what is done with its batch, through either broker.
async fn step(
    pair: &(TestBroker, TestBroker),
    db: &tokio_postgres::Client,
    rng: &mut StdRng,
    events: &mut Vec<String>,
) {
    let (queue, partitions) = QUEUES[rng.gen_range(0..QUEUES.len())];
    let partition = partitions[rng.gen_range(0..partitions.len())];
    let group = GROUPS[rng.gen_range(0..GROUPS.len())];
    let batch = rng.gen_range(1..=4);
    let autopilot = rng.gen_bool(0.5);
    // The broker every settling call of this step goes to.
    let b = if rng.gen_bool(0.4) { &pair.1 } else { &pair.0 };
    let popped = if queue == WILDCARD {
        tokio::time::sleep(std::time::Duration::from_millis(RESEED_MS + 1)).await;
        let extra = if autopilot { "&autopilot=true" } else { "" };
        pop(&pair.0, queue, None, group, batch, extra).await
    } else {
        pop(&pair.0, queue, Some(partition), group, batch, "").await
    };
    let Some(popped) = popped else {
        events.push(format!("{queue}/{partition} {group:?}: empty"));
        return;
    };
    if !std::ptr::eq(b, &pair.0) {
        events.push("settled through the second broker".into());
    }
    let offsets: Vec<&Value> = popped.messages.iter().map(|m| &m["offset"]).collect();
    let attempts: Vec<&Value> = popped
        .messages
        .iter()
        .map(|m| &m["deliveryAttempt"])
        .collect();
    events.push(format!(
        "{queue}/{partition} {group:?}: {:?} at {offsets:?} attempts {attempts:?}",
        popped.txns()
    ));
    let pid = popped.partition_id();
    let n = popped.messages.len();
    let mut items = ack_all(&popped, "completed");
    match rng.gen_range(0..12) {
        0 | 1 => {
            items.shuffle(rng);
            items.push(items[0].clone());
            ack(b, group, items, events).await;
        }
        2 if n > 1 => {
            let k = rng.gen_range(1..n);
            ack(b, group, items[..k].to_vec(), events).await;
            ack(b, group, items[k..].to_vec(), events).await;
        }
        3..=5 => {
            let status = ["failed", "dlq", "retry"][rng.gen_range(0..3)];
            items[rng.gen_range(0..n)]["status"] = json!(status);
            ack(b, group, items, events).await;
        }
        6 => {
            let lease_less: Vec<Value> = popped
                .messages
                .iter()
                .map(|m| lease_less(m, "completed"))
                .collect();
            ack(
                b,
                group,
                lease_less[..rng.gen_range(1..=n)].to_vec(),
                events,
            )
            .await;
            ack(b, group, items, events).await;
        }
        7 => {
            let forged: Vec<Value> = items
                .iter()
                .map(|i| {
                    let mut i = i.clone();
                    i["leaseId"] = json!("forged");
                    i
                })
                .collect();
            ack(b, group, forged, events).await;
            ack(b, group, items, events).await;
        }
        8 => {
            let mut ops: Vec<Value> = popped
                .messages
                .iter()
                .map(|m| ack_op(m, "completed", group))
                .collect();
            ops.push(
                json!({ "type": "push", "items": [{ "queue": "dq.out", "payload": { "n": n } }] }),
            );
            let (status, answer) = b
                .post("/api/v1/transaction", &json!({ "operations": ops }))
                .await;
            let acks: Vec<String> = answer["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["type"] == "ack")
                .map(item_answer)
                .collect();
            events.push(format!(
                "txn {status} {} {} {acks:?}",
                answer["success"], answer["error"]
            ));
        }
        9 => {
            expire(db, pid, group).await;
            ack(b, group, items, events).await;
        }
        10 => {
            expire(db, pid, group).await;
            events.push("left to expire".into());
        }
        _ => {
            let path = format!("/api/v1/lease/{}/extend", popped.lease_id);
            let (_, renewal) = b.post(&path, &json!({ "seconds": 120 })).await;
            events.push(format!("renewed {}", renewal["renewed"]));
            ack(b, group, items, events).await;
        }
    }
}

async fn run(pair: &(TestBroker, TestBroker), seed: u64) -> Observed {
    let b = &pair.0;
    let db = b.sql().await;
    configure(b, "dq.b", json!({ "retryLimit": 1 })).await;
    for (queue, partitions) in QUEUES {
        for p in partitions {
            push_txns(b, queue, p, &txns(&format!("{queue}-{p}"), PER_PARTITION)).await;
        }
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = Vec::new();
    for _ in 0..STEPS {
        step(pair, &db, &mut rng, &mut events).await;
    }
    let cursors = db
        .query(
            "SELECT q.name, lp.name, c.consumer_group, c.committed, c.batch_end,
                    c.worker_id IS NOT NULL, c.batch_retry_count, c.attempt_count, c.total_consumed
             FROM queen.log_consumers c JOIN queen.log_partitions lp ON lp.id = c.partition_id
             JOIN queen.queues q ON q.id = lp.queue_id ORDER BY 1, 2, 3",
            &[],
        )
        .await
        .expect("cursors")
        .iter()
        .map(|r| {
            let cols: (
                String,
                String,
                String,
                i64,
                Option<i64>,
                bool,
                i32,
                i32,
                i64,
            ) = (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
                r.get(8),
            );
            format!("{cols:?}")
        })
        .collect();
    let dead_letters = db
        .query(
            "SELECT lp.name, d.consumer_group, d.\"offset\", d.transaction_id, d.error, d.retry_count
             FROM queen.log_dlq d JOIN queen.log_partitions lp ON lp.id = d.partition_id
             ORDER BY 1, 2, 3",
            &[],
        )
        .await
        .expect("dead letters")
        .iter()
        .map(|r| {
            let cols: (String, String, i64, Option<String>, Option<String>, Option<i32>) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
            format!("{cols:?}")
        })
        .collect();
    Observed {
        events,
        cursors,
        dead_letters,
    }
}

fn switched(on: bool) -> impl Fn(&mut queen_broker::config::Config) + Copy {
    move |cfg: &mut queen_broker::config::Config| {
        cfg.ack_registry = on;
        cfg.ack_fusion = on;
        cfg.hotlist_reseed_ms = RESEED_MS;
    }
}

/// Two brokers on one fresh database, both ack accelerators `on` or off.
async fn pair(on: bool) -> (TestBroker, TestBroker) {
    let first = common::broker_with(switched(on)).await;
    let second = first.sibling(switched(on)).await;
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_workload_answers_the_same_with_the_accelerators_on_and_off() {
    for seed in [11, 4242] {
        let (on, off) = tokio::join!(pair(true), pair(false));
        let (with, without) = tokio::join!(run(&on, seed), run(&off, seed));
        assert_eq!(with.events, without.events, "seed {seed}: pops and answers");
        assert_eq!(with.cursors, without.cursors, "seed {seed}: final cursors");
        assert_eq!(
            with.dead_letters, without.dead_letters,
            "seed {seed}: dead letters"
        );
        let (m_on, m_off) = (
            registry_metrics(&on.0).await,
            registry_metrics(&off.0).await,
        );
        println!(
            "seed {seed}: {} events, {} dead letters; registry on: {m_on}",
            with.events.len(),
            with.dead_letters.len()
        );
        assert!(m_on["hits"].as_u64() > Some(0), "the fast path ran: {m_on}");
        assert!(!with.dead_letters.is_empty(), "the workload dead-lettered");
        assert_eq!(m_off["born"], 0, "off means off: {m_off}");
        assert_eq!(fusion_metrics(&off.0).await["enabled"], false);
        let seconds = with
            .events
            .iter()
            .filter(|e| e.as_str() == "settled through the second broker")
            .count();
        let wildcard =
            |e: &&String| e.starts_with(&format!("{WILDCARD}/")) && !e.ends_with("empty");
        let wildcard_pops = with.events.iter().filter(wildcard).count();
        println!("seed {seed}: {seconds} batches settled through the second broker, {wildcard_pops} wildcard pops");
        assert!(seconds > 0 && wildcard_pops > 0, "the workload used both");
    }
}
