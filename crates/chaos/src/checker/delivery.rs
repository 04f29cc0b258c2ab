//! Delivery properties: nothing stored is lost, first deliveries follow offsets, and an ack
//! that reported success is never followed by a redelivery (duplicates are classified by
//! cause instead).

use std::collections::{HashMap, HashSet};

use super::{deliveries_by_key, DbState, Stats, Violation};
use crate::history::{AckRec, Log, PushOutcome};

/// Every message answered `queued`/`duplicate` reaches every group or its DLQ.
pub fn lost(log: &Log, db: &DbState, groups: &[&str], v: &mut Vec<Violation>, stats: &mut Stats) {
    let mut stored = HashSet::new();
    let mut unknown = HashSet::new();
    for p in &log.pushes {
        match &p.outcome {
            PushOutcome::Stored(_) => {
                stored.insert((p.queue.as_str(), p.txn.as_str()));
            }
            PushOutcome::Unknown => {
                unknown.insert((p.queue.as_str(), p.txn.as_str()));
            }
            PushOutcome::Failed(_) => stats.push_items_failed += 1,
        }
    }
    stats.messages_stored = stored.len();
    stats.messages_unknown_only = unknown.difference(&stored).count();
    let delivered: HashSet<(&str, &str, &str)> = log
        .deliveries
        .iter()
        .map(|d| (d.queue.as_str(), d.txn.as_str(), d.group.as_str()))
        .collect();
    let mut missing: Vec<_> = stored
        .iter()
        .flat_map(|&(q, t)| groups.iter().map(move |&g| (q, t, g)))
        .filter(|&(q, t, g)| {
            !delivered.contains(&(q, t, g))
                && !db
                    .dlq_by_txn
                    .contains(&(q.to_string(), t.to_string(), g.to_string()))
        })
        .collect();
    missing.sort();
    // The push answers of the missing messages, indexed once (a scan per message is
    // quadratic when a long run leaves many undelivered).
    let wanted: HashSet<(&str, &str)> = missing.iter().map(|&(q, t, _)| (q, t)).collect();
    let mut answers_of: HashMap<(&str, &str), Vec<String>> = HashMap::new();
    for p in &log.pushes {
        let key = (p.queue.as_str(), p.txn.as_str());
        if wanted.contains(&key) {
            let answer = format!("{}:{:?}", p.partition, p.outcome);
            answers_of.entry(key).or_default().push(answer);
        }
    }
    for (q, t, g) in missing {
        let answers = answers_of.get(&(q, t)).cloned().unwrap_or_default();
        v.push(Violation {
            property: "lost",
            detail: format!(
                "queue {q} transactionId {t} group {g}: push answered {answers:?}, never delivered, not dead-lettered"
            ),
        });
    }
}

/// Per (partition, group), the first delivery of each offset comes in increasing offset order.
pub fn first_delivery_order(log: &Log, v: &mut Vec<Violation>) {
    let mut seen: HashMap<(&str, &str), (HashSet<i64>, i64)> = HashMap::new();
    for d in &log.deliveries {
        let (offsets, max) = seen
            .entry((&d.partition_id, &d.group))
            .or_insert_with(|| (HashSet::new(), -1));
        if offsets.insert(d.offset) {
            if d.offset < *max {
                v.push(Violation {
                    property: "first deliveries out of offset order",
                    detail: format!(
                        "partition {} group {}: offset {} first delivered after offset {} (delivery #{})",
                        d.partition_id, d.group, d.offset, max, d.seq
                    ),
                });
            }
            *max = (*max).max(d.offset);
        }
    }
}

fn is_nack(a: &AckRec) -> bool {
    a.status != "completed"
}

/// Classifies every repeated delivery of one (partition, group, offset) by what happened to
/// the previous one; a repeat after an ack that reported a commit is a violation.
pub fn redeliveries(log: &Log, v: &mut Vec<Violation>, stats: &mut Stats) {
    let mut calls: HashMap<u64, Vec<&AckRec>> = HashMap::new();
    let mut acks_by_key: HashMap<(&str, &str, i64), Vec<&AckRec>> = HashMap::new();
    for a in &log.acks {
        calls.entry(a.call).or_default().push(a);
        acks_by_key
            .entry((&a.partition_id, &a.group, a.offset))
            .or_default()
            .push(a);
    }
    // Same transactionId stored at two offsets (a resent push without dedup): an ack naming
    // it may apply to either copy, so its effect is tied to the lowest one it could reach.
    let mut copies: HashMap<(&str, &str), HashSet<i64>> = HashMap::new();
    for d in &log.deliveries {
        copies
            .entry((&d.partition_id, &d.txn))
            .or_default()
            .insert(d.offset);
    }
    stats.stored_twice = copies.values().filter(|o| o.len() > 1).count();
    let lowest = |a: &AckRec| {
        copies
            .get(&(a.partition_id.as_str(), a.txn.as_str()))
            .and_then(|o| o.iter().min().copied())
            .unwrap_or(a.offset)
    };
    let twice = |a: &AckRec| {
        copies
            .get(&(a.partition_id.as_str(), a.txn.as_str()))
            .is_some_and(|o| o.len() > 1)
    };

    for (key, idx) in deliveries_by_key(log) {
        for pair in idx.windows(2) {
            let (prev, next) = (&log.deliveries[pair[0]], &log.deliveries[pair[1]]);
            let acks: Vec<&AckRec> = acks_by_key
                .get(&key)
                .map(|all| {
                    all.iter()
                        .copied()
                        .filter(|a| a.sent >= prev.received && a.sent <= next.received)
                        .collect()
                })
                .unwrap_or_default();
            let ok = |a: &&AckRec| a.answer.as_ref().is_some_and(|x| x.success);
            let clamped = |a: &&AckRec| {
                calls[&a.call]
                    .iter()
                    .any(|o| is_nack(o) && o.partition_id == a.partition_id && lowest(o) < a.offset)
            };
            let cause = if acks.iter().any(|a| is_nack(a) && ok(a)) {
                "nacked"
            } else if acks.iter().any(|a| ok(a) && clamped(a)) {
                "behind a nack in the same call"
            } else if acks.iter().any(|a| ok(a) && twice(a)) {
                "acked transactionId stored twice (the other copy took the ack)"
            } else if let Some(a) = acks.iter().find(|a| ok(a) && next.pop_sent >= a.answered) {
                v.push(Violation {
                    property: "redelivered after a successful ack",
                    detail: format!(
                        "partition {} group {} offset {} ({}): ack {} (lease {:?}, call {}) answered success at {} µs, delivered again at {} µs",
                        key.0, key.1, key.2, next.txn, a.status, a.lease, a.call, a.sent, next.received
                    ),
                });
                "after a successful ack (violation)"
            } else if acks.iter().any(ok) {
                "raced an ack in flight"
            } else if acks.iter().any(|a| a.answer.is_none()) {
                "ack answer lost"
            } else if !acks.is_empty() {
                "ack refused (lease expired)"
            } else {
                "lease expired before any ack"
            };
            *stats.redeliveries.entry(cause).or_default() += 1;
        }
    }
}
