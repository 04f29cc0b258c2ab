//! The differential test (issue 11): one randomized workload (several queues, partitions and
//! groups, random batch sizes and partition counts, autopilot pops, nacks, lease expiries,
//! lease-less acks, autoAck, pushes and acks in transactions) runs against a broker with every
//! accelerator switch on (hot-list ring, dedup cache, pending gate, ack registry, ack fusion,
//! autopilot) acting for a non-default tenant, and against one with every switch off acting
//! for the default tenant without auth. The deliveries per group (as sets), the final cursors
//! and the DLQ contents (by the client's queue names) must be identical, per-partition order
//! must hold in both, and nothing pushed may go undelivered. One queue's `delayedProcessing`
//! is lifted halfway through, which the rings must learn from `/configure` alone.
//!
//! The schedule of requests is drawn from the seed alone; what a consumer does with a message
//! (complete, fail, retry, let the lease expire, ack without the lease) depends only on the
//! message's transactionId and on what it did to that message before, never on which
//! partition a broker happened to hand out, so both brokers must converge on one outcome.
//! The seed is printed; `QUEEN_DIFF_SEED` replays another.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use queen_broker::config::Config;
use queen_proto::tenant::{local, tenant_of, Tenant};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, TestBroker};
use crate::support::{self, configure, Reply};

const QUEUES: [(&str, usize); 3] = [("dq-a", 1), ("dq-b", 3), ("dq-c", 5)];
/// The last group pops with autoAck only.
const GROUPS: [&str; 4] = ["__QUEUE_MODE__", "ga", "gb", "gauto"];
const OPS: usize = 160;

/// One request of the schedule.
#[derive(Debug, Clone)]
enum Op {
    Push {
        queue: usize,
        partition: usize,
        count: usize,
        in_txn: bool,
    },
    Pop {
        queue: usize,
        group: usize,
        batch: u32,
        partitions: u32,
        /// A one-second lease: the consumer may let it expire.
        short_lease: bool,
        /// Push one message to this (queue, partition): in the ack's transaction when the pop
        /// delivered a batch to ack, else plainly.
        txn_push: Option<(usize, usize)>,
        /// `autopilot=true` with `batch` and `partitions` left to the broker.
        autopilot: bool,
    },
}

fn schedule(seed: u64) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ops = Vec::with_capacity(OPS);
    for _ in 0..OPS {
        let queue = rng.gen_range(0..QUEUES.len());
        let partition = rng.gen_range(0..QUEUES[queue].1);
        ops.push(if rng.gen_bool(0.45) {
            Op::Push {
                queue,
                partition,
                count: rng.gen_range(1..=6),
                in_txn: rng.gen_bool(0.2),
            }
        } else {
            let short_lease = rng.gen_bool(0.25);
            Op::Pop {
                queue,
                group: rng.gen_range(0..GROUPS.len()),
                batch: rng.gen_range(1..=8),
                partitions: rng.gen_range(1..=3),
                short_lease,
                txn_push: (!short_lease && rng.gen_bool(0.25)).then_some((queue, partition)),
                autopilot: rng.gen_bool(0.3),
            }
        });
    }
    ops
}

/// What a consumer does with a message, from its transactionId alone.
fn kind(txn: &str) -> u64 {
    txn.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
fn poison(txn: &str) -> bool {
    kind(txn).is_multiple_of(23)
}
fn expires_once(txn: &str) -> bool {
    kind(txn) % 11 == 1
}
fn retried_once(txn: &str) -> bool {
    kind(txn) % 13 == 3
}
fn lease_less(txn: &str) -> bool {
    kind(txn) % 7 == 2
}

/// What one broker did with the workload.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    delivered: BTreeMap<String, BTreeSet<String>>,
    /// (queue, partition, group) → committed.
    cursors: BTreeMap<(String, String, String), i64>,
    /// (queue, partition, group, transactionId).
    dlq: BTreeSet<(String, String, String, String)>,
}

/// One broker's run: its outcome's inputs and the order check.
struct Run<'a> {
    b: &'a TestBroker,
    /// The tenant `b` acts for (none: the default tenant): stored queue names carry it.
    tenant: Tenant,
    db: tokio_postgres::Client,
    seq: HashMap<(usize, usize), usize>,
    pushed: BTreeSet<String>,
    outcome: Outcome,
    /// (group, queue, partition) → the next offset never delivered before.
    next: HashMap<(String, String, String), i64>,
    /// (group, transactionId) a consumer already let expire / retried once.
    expired: HashSet<(String, String)>,
    retried: HashSet<(String, String)>,
    violations: Vec<String>,
    /// What the workload exercised: lease-less acks, acks in transactions, pushes in
    /// transactions, autoAck deliveries.
    lease_less_acks: usize,
    txn_acks: usize,
    txn_pushes: usize,
    auto_acked: usize,
    autopilot_pops: usize,
    /// Delivered answers that echoed the autopilot's sizes.
    autopilot_echoes: usize,
}

impl<'a> Run<'a> {
    async fn new(b: &'a TestBroker, tenant: Tenant) -> Self {
        Run {
            b,
            tenant,
            db: b.sql().await,
            seq: HashMap::new(),
            pushed: BTreeSet::new(),
            outcome: Outcome::default(),
            next: HashMap::new(),
            expired: HashSet::new(),
            retried: HashSet::new(),
            violations: Vec::new(),
            lease_less_acks: 0,
            txn_acks: 0,
            txn_pushes: 0,
            auto_acked: 0,
            autopilot_pops: 0,
            autopilot_echoes: 0,
        }
    }

    /// The stored name of the client's queue `name`.
    fn stored(&self, name: &str) -> String {
        self.tenant.qualified("queue", name).expect("a valid name")
    }

    /// The push items of `count` new messages to (queue, partition), in order.
    fn items(&mut self, queue: usize, partition: usize, count: usize) -> Vec<Value> {
        let (q, p) = (QUEUES[queue].0, format!("p{partition}"));
        (0..count)
            .map(|_| {
                let seq = self.seq.entry((queue, partition)).or_insert(0);
                let txn = format!("{q}.{p}.{seq}");
                *seq += 1;
                self.pushed.insert(txn.clone());
                json!({ "queue": q, "partition": p, "transactionId": txn, "payload": { "txn": txn } })
            })
            .collect()
    }

    async fn push(&mut self, queue: usize, partition: usize, count: usize, in_txn: bool) {
        let items = self.items(queue, partition, count);
        if in_txn {
            self.transaction(vec![json!({ "type": "push", "items": items })])
                .await
                .expect("a push-only transaction commits");
            self.txn_pushes += 1;
        } else {
            let (status, body) = self
                .b
                .post("/api/v1/push", &json!({ "items": items }))
                .await;
            assert_eq!(status, StatusCode::CREATED, "push: {body}");
        }
    }

    /// Sends a transaction; `Err` with the answer when it rolled back.
    async fn transaction(&self, operations: Vec<Value>) -> Result<(), Value> {
        let (status, body) = self
            .b
            .post("/api/v1/transaction", &json!({ "operations": operations }))
            .await;
        assert_eq!(status, StatusCode::OK, "transaction: {body}");
        if body["success"] == true {
            Ok(())
        } else {
            Err(body)
        }
    }

    async fn pop(&mut self, op: &Op, wait: bool) -> bool {
        let Op::Pop {
            queue,
            group,
            batch,
            partitions,
            short_lease,
            txn_push,
            autopilot,
        } = op
        else {
            unreachable!("pop of a push op")
        };
        let (q, g) = (QUEUES[*queue].0, GROUPS[*group]);
        let auto = g == "gauto";
        let mut query = if *autopilot {
            self.autopilot_pops += 1;
            format!("consumerGroup={g}&autopilot=true")
        } else {
            format!("consumerGroup={g}&batch={batch}&partitions={partitions}")
        };
        if auto {
            query.push_str("&autoAck=true");
        }
        if *short_lease {
            query.push_str("&leaseSeconds=1");
        }
        if wait {
            query.push_str("&wait=true&timeout=2500");
        }
        let r = support::pop(self.b, q, &query).await;
        let delivered = r.status != StatusCode::NO_CONTENT;
        let mut txn_push = *txn_push;
        if delivered {
            r.assert_delivered();
            if *autopilot && r.body["autopilot"].is_object() {
                self.autopilot_echoes += 1;
            }
            self.record(q, g, &r);
            if auto {
                self.auto_acked += r.messages().len();
            } else {
                self.settle(g, &r, *short_lease, &mut txn_push).await;
            }
        }
        if let Some((queue, partition)) = txn_push {
            self.push(queue, partition, 1, false).await;
        }
        delivered
    }

    /// Records deliveries and checks per-partition order: within a batch the offsets of a
    /// partition run contiguously, and no offset is delivered before every lower one was.
    fn record(&mut self, queue: &str, group: &str, r: &Reply) {
        let mut last: HashMap<String, i64> = HashMap::new();
        for m in r.messages() {
            let txn = m["transactionId"].as_str().expect("txn").to_string();
            let partition = m["partition"].as_str().expect("partition").to_string();
            let offset = m["offset"].as_i64().expect("offset");
            self.outcome
                .delivered
                .entry(group.to_string())
                .or_default()
                .insert(txn);
            if let Some(prev) = last.insert(partition.clone(), offset) {
                if offset != prev + 1 {
                    self.violations
                        .push(format!("{group} {queue}/{partition}: {prev} then {offset}"));
                }
            }
            let next = self
                .next
                .entry((group.to_string(), queue.to_string(), partition.clone()))
                .or_insert(0);
            if offset > *next {
                self.violations.push(format!(
                    "{group} {queue}/{partition}: offset {offset} before {next}"
                ));
            }
            *next = (*next).max(offset + 1);
        }
    }

    /// Acts on a leased batch by the messages' rules; takes `txn_push` when it pushes that
    /// message in its ack's transaction.
    async fn settle(
        &mut self,
        group: &str,
        r: &Reply,
        short_lease: bool,
        txn_push: &mut Option<(usize, usize)>,
    ) {
        let messages = r.messages();
        let key = |m: &Value| {
            let txn = m["transactionId"].as_str().unwrap_or_default();
            (group.to_string(), txn.to_string())
        };
        if short_lease {
            let expiring: Vec<_> = messages
                .iter()
                .filter(|m| expires_once(&key(m).1) && !self.expired.contains(&key(m)))
                .map(key)
                .collect();
            if !expiring.is_empty() {
                self.expired.extend(expiring);
                return; // the lease runs out; the batch comes again
            }
        }
        let mut acks = Vec::new();
        for m in &messages {
            let (g, txn) = key(m);
            let status = if poison(&txn) {
                "failed"
            } else if retried_once(&txn) && self.retried.insert((g, txn.clone())) {
                "retry"
            } else {
                "completed"
            };
            let mut item = common::ack_item(m, status);
            if status == "completed" && lease_less(&txn) {
                item.as_object_mut().expect("item").remove("leaseId");
                self.lease_less_acks += 1;
            }
            acks.push(item);
        }
        if let Some((queue, partition)) = txn_push.take() {
            let mut ops: Vec<Value> = acks
                .iter()
                .map(|a| {
                    let mut op = a.clone();
                    op["type"] = json!("ack");
                    op["consumerGroup"] = json!(group);
                    op
                })
                .collect();
            let items = self.items(queue, partition, 1);
            ops.push(json!({ "type": "push", "items": items.clone() }));
            if self.transaction(ops).await.is_ok() {
                self.txn_acks += 1;
                return;
            }
            // Rolled back (a lease ran out): the push is made plainly, the batch redelivers.
            let (status, body) = self
                .b
                .post("/api/v1/push", &json!({ "items": items }))
                .await;
            assert_eq!(status, StatusCode::CREATED, "push: {body}");
            return;
        }
        common::ack_batch(self.b, Some(group), acks).await;
    }

    /// Pops every (queue, group) until nothing is pending or leased for it.
    async fn drain(&mut self) {
        for queue in 0..QUEUES.len() {
            for group in 0..GROUPS.len() {
                let op = Op::Pop {
                    queue,
                    group,
                    batch: 10,
                    partitions: 3,
                    short_lease: false,
                    txn_push: None,
                    autopilot: false,
                };
                let deadline = Instant::now() + Duration::from_secs(120);
                while !self.done(queue, group).await {
                    assert!(Instant::now() < deadline, "{queue}/{group} never drained");
                    self.pop(&op, true).await;
                }
            }
        }
    }

    async fn done(&self, queue: usize, group: usize) -> bool {
        let open: i64 = self
            .db
            .query_one(
                "SELECT count(*) FROM queen.log_partitions p
                 JOIN queen.queues q ON q.id = p.queue_id
                 LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $2
                 WHERE q.name = $1
                   AND (c.partition_id IS NULL OR c.committed < p.last_offset OR c.worker_id IS NOT NULL)",
                &[&self.stored(QUEUES[queue].0), &GROUPS[group]],
            )
            .await
            .expect("open partitions")
            .get(0);
        open == 0
    }

    /// What the run exercised, for the report and the check that it did.
    fn exercised(&self) -> [(&'static str, usize); 7] {
        [
            ("autopilot pops", self.autopilot_pops),
            ("lease expiries", self.expired.len()),
            ("retries", self.retried.len()),
            ("lease-less acks", self.lease_less_acks),
            ("acks in transactions", self.txn_acks),
            ("pushes in transactions", self.txn_pushes),
            ("autoAck deliveries", self.auto_acked),
        ]
    }

    async fn finish(mut self) -> (Outcome, BTreeSet<String>, Vec<String>, usize) {
        let exercised = self.exercised();
        println!("{exercised:?}");
        for (what, n) in exercised {
            assert!(n > 0, "the workload exercised no {what}");
        }
        for r in self
            .db
            .query(
                "SELECT q.name, p.name, c.consumer_group, c.committed
                 FROM queen.log_consumers c
                 JOIN queen.log_partitions p ON p.id = c.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id",
                &[],
            )
            .await
            .expect("cursors")
        {
            let queue: String = r.get(0);
            assert_eq!(tenant_of(&queue), self.tenant.id(), "{queue:?}");
            self.outcome
                .cursors
                .insert((local(&queue).to_string(), r.get(1), r.get(2)), r.get(3));
        }
        for r in self
            .db
            .query(
                "SELECT q.name, p.name, d.consumer_group, d.transaction_id
                 FROM queen.log_dlq d
                 JOIN queen.log_partitions p ON p.id = d.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id",
                &[],
            )
            .await
            .expect("dlq")
        {
            let queue: String = r.get(0);
            self.outcome
                .dlq
                .insert((local(&queue).to_string(), r.get(1), r.get(2), r.get(3)));
        }
        let echoes = self.autopilot_echoes;
        (self.outcome, self.pushed, self.violations, echoes)
    }
}

async fn run(
    b: &TestBroker,
    tenant: Tenant,
    ops: &[Op],
) -> (Outcome, BTreeSet<String>, Vec<String>, usize) {
    for (q, _) in QUEUES {
        configure(b, q, json!({ "retryLimit": 1, "leaseTime": 30 })).await;
    }
    // The first queue holds its messages back for an hour until halfway through, when the
    // hold is lifted: the rings that parked them must learn it from the configure (the
    // accelerated broker's reseed floor is far beyond the drain's deadline).
    let held = QUEUES[0].0;
    configure(b, held, json!({ "delayedProcessing": 3600 })).await;
    let mut run = Run::new(b, tenant).await;
    for (i, op) in ops.iter().enumerate() {
        if i == ops.len() / 2 {
            configure(b, held, json!({ "delayedProcessing": 0 })).await;
        }
        match op {
            Op::Push {
                queue,
                partition,
                count,
                in_txn,
            } => run.push(*queue, *partition, *count, *in_txn).await,
            Op::Pop { .. } => {
                run.pop(op, false).await;
            }
        }
    }
    run.drain().await;
    run.finish().await
}

/// Every accelerator switch `on` or off; on, auth is on too, so callers act for tenants.
fn every_switch(on: bool) -> impl FnOnce(&mut Config) {
    move |cfg: &mut Config| {
        cfg.hotlist = on;
        cfg.dedup_cache = on;
        cfg.pop_pending_gate = on;
        cfg.ack_registry = on;
        cfg.ack_fusion = on;
        cfg.pop_autopilot = on;
        if !on {
            cfg.segment_cache_mb = 0;
        }
        if on {
            support::with_tenants(cfg);
            cfg.hotlist_reseed_ms = 600_000;
        }
    }
}

#[tokio::test]
async fn every_accelerator_on_and_off_reach_the_same_outcome() {
    let seed = std::env::var("QUEEN_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x11_5eed);
    println!("differential workload seed: {seed} (QUEEN_DIFF_SEED replays another)");
    let ops = schedule(seed);
    let on = common::broker_with(every_switch(true)).await;
    let off = common::broker_with(every_switch(false)).await;
    let acme = Tenant::parse(Some("acme")).expect("a tenant");
    let as_acme = support::act_as(&on, Some("acme"));
    let (with, pushed, with_violations, echoes) = run(&as_acme, acme, &ops).await;
    let (without, pushed_off, without_violations, echoes_off) =
        run(&off, Tenant::default(), &ops).await;
    assert!(pushed == pushed_off, "the same messages were pushed");
    assert!(echoes > 0, "the autopilot sized pops");
    assert_eq!(echoes_off, 0, "QUEEN_POP_AUTOPILOT=false echoes nothing");
    let (hits, kept) = (
        "queen_accelerator_hits_total",
        r#"accelerator="segment_cache""#,
    );
    assert!(
        on.series(hits, kept).await > Some(0.0),
        "pops rendered kept frames"
    );
    assert_eq!(
        off.series(hits, kept).await,
        Some(0.0),
        "QUEEN_SEGMENT_CACHE_MB=0 keeps none"
    );
    assert!(
        with_violations.is_empty(),
        "accelerators on: {with_violations:?}"
    );
    assert!(
        without_violations.is_empty(),
        "accelerators off: {without_violations:?}"
    );
    for g in GROUPS {
        let got = with.delivered.get(g).cloned().unwrap_or_default();
        let lost: Vec<_> = pushed.difference(&got).collect();
        assert!(
            lost.is_empty(),
            "accelerators on: {g} never received {lost:?}"
        );
    }
    let poisoned = pushed.iter().filter(|t| poison(t)).count();
    println!(
        "{} messages, {} ops; {poisoned} poison messages, {} dead letters, {} cursors",
        pushed.len(),
        ops.len(),
        with.dlq.len(),
        with.cursors.len()
    );
    assert!(
        poisoned > 0 && !with.dlq.is_empty(),
        "the workload dead-letters"
    );
    for g in GROUPS {
        let (on, off) = (&with.delivered[g], &without.delivered[g]);
        let differ: Vec<_> = on.symmetric_difference(off).collect();
        assert!(
            differ.is_empty(),
            "{g}: delivered on one side only: {differ:?}"
        );
    }
    let differ: Vec<_> = with.dlq.symmetric_difference(&without.dlq).collect();
    assert!(
        differ.is_empty(),
        "dead letters on one side only: {differ:?}"
    );
    let differ: Vec<_> = with
        .cursors
        .iter()
        .filter(|(k, v)| without.cursors.get(*k) != Some(*v))
        .chain(
            without
                .cursors
                .iter()
                .filter(|(k, v)| with.cursors.get(*k) != Some(*v)),
        )
        .collect();
    assert!(differ.is_empty(), "cursors that differ: {differ:?}");
}
