//! Ack-side properties: an accepted nack is followed by a redelivery or a dead letter (or
//! superseded by a lease-less commit, which the wire allows); dead letters match the acks
//! that caused them and the retry budget; 5xx only inside a database outage.

use std::collections::HashMap;

use super::{deliveries_by_key, DbState, DlqKey, Stats, Violation};
use crate::faults::OUTAGE_GRACE_US;
use crate::history::{AckRec, Log};

fn key(a: &AckRec) -> DlqKey {
    DlqKey {
        partition_id: a.partition_id.clone(),
        group: a.group.clone(),
        txn: a.txn.clone(),
    }
}

fn accepted(a: &AckRec) -> bool {
    a.answer.as_ref().is_some_and(|x| x.success)
}

pub fn nacks_not_skipped(log: &Log, db: &DbState, v: &mut Vec<Violation>, stats: &mut Stats) {
    let deliveries = deliveries_by_key(log);
    let mut lease_less: HashMap<(&str, &str), Vec<&AckRec>> = HashMap::new();
    for b in log.acks.iter().filter(|b| b.lease.is_none()) {
        lease_less
            .entry((&b.partition_id, &b.group))
            .or_default()
            .push(b);
    }
    for a in log.acks.iter().filter(|a| {
        (a.status == "failed" || a.status == "retry")
            && accepted(a)
            && !a.answer.as_ref().is_some_and(|x| x.dlq)
    }) {
        let redelivered = deliveries
            .get(&(a.partition_id.as_str(), a.group.as_str(), a.offset))
            .is_some_and(|ds| ds.iter().any(|&i| log.deliveries[i].received > a.sent));
        if redelivered || db.dlq.contains(&key(a)) {
            continue;
        }
        let row = lease_less.get(&(a.partition_id.as_str(), a.group.as_str()));
        let superseded = row.into_iter().flatten().any(|b| {
            b.offset >= a.offset && b.sent > a.sent && (b.answer.is_none() || accepted(b))
        });
        if superseded {
            stats.nacks_superseded += 1;
            continue;
        }
        v.push(Violation {
            property: "nack skipped",
            detail: format!(
                "partition {} group {} offset {} ({}): `{}` accepted at {} µs (call {}), never delivered again, not dead-lettered",
                a.partition_id, a.group, a.offset, a.txn, a.status, a.sent, a.call
            ),
        });
    }
}

/// Dead letters and the acks that explain them; a `failed` head is dead-lettered exactly
/// when the budget is spent: never more than `retry_limit` accepted `failed` acks of one
/// message without a dead letter, never a dead letter by `failed` before `retry_limit`
/// charges of that (partition, group) since its previous dead letter by `failed`.
pub fn dead_letters(log: &Log, db: &DbState, retry_limit: u32, v: &mut Vec<Violation>) {
    let mut by_key: HashMap<DlqKey, Vec<&AckRec>> = HashMap::new();
    for a in log.acks.iter().filter(|a| a.status != "completed") {
        by_key.entry(key(a)).or_default().push(a);
    }
    let checked: std::collections::HashSet<&str> =
        log.deliveries.iter().map(|d| d.group.as_str()).collect();
    for row in db.dlq.iter().filter(|r| checked.contains(r.group.as_str())) {
        let acks = by_key.get(row).map(Vec::as_slice).unwrap_or_default();
        let cause = acks.iter().any(|a| {
            (a.status == "dlq" && (a.answer.is_none() || accepted(a)))
                || (a.status == "failed" && a.answer.as_ref().is_none_or(|x| x.dlq))
        });
        if !cause {
            v.push(Violation {
                property: "dlq row without cause",
                detail: format!(
                    "partition {} group {} transactionId {}: dead-lettered, but no dlq ack and no failed ack answered dlq",
                    row.partition_id, row.group, row.txn
                ),
            });
        }
    }
    // `dlq` bypasses the budget: accepted under the live lease, the message is filed now.
    for a in log.acks.iter().filter(|a| {
        a.status == "dlq"
            && a.lease.is_some()
            && a.answer.as_ref().is_some_and(|x| x.success && !x.dlq)
    }) {
        v.push(Violation {
            property: "dlq ack not dead-lettered",
            detail: format!(
                "partition {} group {} offset {} ({}): `dlq` accepted at {} µs with dlq:false",
                a.partition_id, a.group, a.offset, a.txn, a.sent
            ),
        });
    }
    for a in log
        .acks
        .iter()
        .filter(|a| a.answer.as_ref().is_some_and(|x| x.dlq))
    {
        if !db.dlq.contains(&key(a)) {
            v.push(Violation {
                property: "dlq answer without row",
                detail: format!(
                    "partition {} group {} offset {} ({}): `{}` answered dlq:true at {} µs, no DLQ row",
                    a.partition_id, a.group, a.offset, a.txn, a.status, a.sent
                ),
            });
        }
    }
    budget(log, retry_limit, v);
}

fn budget(log: &Log, retry_limit: u32, v: &mut Vec<Violation>) {
    let mut failed: Vec<&AckRec> = log.acks.iter().filter(|a| a.status == "failed").collect();
    failed.sort_by_key(|a| a.sent);
    // Charges per (partition, group) since its last dead letter by `failed`, and per message.
    // A message is an offset: a transactionId stored twice (dedup off, or a retry after the
    // window) is two messages with a budget each, so after the first copy is dead-lettered
    // or acked, the second may be nacked `retry_limit` times again.
    let mut since_dlq: HashMap<(&str, &str), (u32, u32)> = HashMap::new();
    let mut per_msg: HashMap<(&str, &str, i64), u32> = HashMap::new();
    for a in failed {
        let row = since_dlq.entry((&a.partition_id, &a.group)).or_default();
        match &a.answer {
            None => row.1 += 1,
            Some(x) if x.dlq => {
                if row.0 + row.1 < retry_limit {
                    v.push(Violation {
                        property: "dlq budget",
                        detail: format!(
                            "partition {} group {} offset {}: dead-lettered by `failed` after {} accepted charges (+{} unknown), retryLimit {retry_limit}",
                            a.partition_id, a.group, a.offset, row.0, row.1
                        ),
                    });
                }
                *row = (0, 0);
            }
            Some(x) if x.success => {
                row.0 += 1;
                let n = per_msg
                    .entry((&a.partition_id, &a.group, a.offset))
                    .or_default();
                *n += 1;
                if *n > retry_limit {
                    v.push(Violation {
                        property: "dlq budget",
                        detail: format!(
                            "partition {} group {} offset {}: `failed` accepted without dead letter {} times, retryLimit {retry_limit}",
                            a.partition_id, a.group, a.offset, n
                        ),
                    });
                }
            }
            Some(_) => {}
        }
    }
}

/// 5xx is allowed only while the database is away (plus a grace for requests in flight).
pub fn server_errors(log: &Log, v: &mut Vec<Violation>, stats: &mut Stats) {
    for h in &log.http {
        let class = match h.status {
            0 => "no answer".to_string(),
            s => format!("{}xx", s / 100),
        };
        *stats
            .http
            .entry(format!("{} {class}", h.route))
            .or_default() += 1;
        if h.status < 500 {
            continue;
        }
        let in_outage = log
            .faults
            .iter()
            .any(|f| f.outage && h.at >= f.start && h.at <= f.end + OUTAGE_GRACE_US);
        if in_outage {
            stats.tolerated_5xx += 1;
        } else {
            v.push(Violation {
                property: "5xx outside an outage",
                detail: format!(
                    "{} answered {} at {} µs: {}",
                    h.route, h.status, h.at, h.detail
                ),
            });
        }
    }
}
