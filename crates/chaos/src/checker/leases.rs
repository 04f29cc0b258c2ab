//! At most one live lease per (partition, group). A lease is certainly live from its claim
//! (no later than the pop's answer) until the earliest moment it could have ended: the send
//! of an ack that may have released it, or `pop sent + leaseTime` (pushed further by extends
//! the broker confirmed). Two leases overlap for certain when both claims precede both ends.

use std::collections::HashMap;

use super::Violation;
use crate::history::{AckRec, Log, Micros};

/// Client/server clock slack (same host, one monotonic clock on our side).
const TOLERANCE_US: Micros = 50_000;

struct Lease<'a> {
    id: &'a str,
    received: Micros,
    end_lb: Micros,
}

/// Whether `a` may have ended a lease of its (partition, group) claimed before `a` was sent.
fn may_release(a: &AckRec, lease: &str) -> bool {
    let own = a.lease.as_deref() == Some(lease);
    let lease_less = a.lease.is_none();
    match &a.answer {
        None => own || lease_less,
        // Any accepted ack may have completed the batch; a refused one changed nothing.
        Some(x) => (own || lease_less) && (x.success || x.lease_released || x.dlq),
    }
}

pub fn overlapping(log: &Log, v: &mut Vec<Violation>) {
    let mut claims: HashMap<(&str, &str, &str), (Micros, Micros, u64)> = HashMap::new();
    for d in log.deliveries.iter().filter(|d| !d.lease.is_empty()) {
        let e = claims
            .entry((&d.partition_id, &d.group, &d.lease))
            .or_insert((d.pop_sent, d.received, d.lease_secs));
        e.0 = e.0.min(d.pop_sent);
        e.1 = e.1.min(d.received);
    }
    let mut acks: HashMap<(&str, &str), Vec<&AckRec>> = HashMap::new();
    for a in &log.acks {
        acks.entry((&a.partition_id, &a.group)).or_default().push(a);
    }
    let mut renewed: HashMap<&str, Micros> = HashMap::new();
    for e in log.extends.iter().filter(|e| e.renewed) {
        let until = renewed.entry(&e.lease).or_default();
        *until = (*until).max(e.sent + e.seconds * 1_000_000);
    }
    let mut per_row: HashMap<(&str, &str), Vec<Lease<'_>>> = HashMap::new();
    for (&(partition, group, id), &(pop_sent, received, secs)) in &claims {
        let expiry = (pop_sent + secs * 1_000_000).max(renewed.get(id).copied().unwrap_or(0));
        let release = acks
            .get(&(partition, group))
            .into_iter()
            .flatten()
            .filter(|a| a.sent >= pop_sent && may_release(a, id))
            .map(|a| a.sent)
            .min()
            .unwrap_or(Micros::MAX);
        per_row.entry((partition, group)).or_default().push(Lease {
            id,
            received,
            end_lb: expiry.min(release),
        });
    }
    for ((partition, group), mut leases) in per_row {
        leases.sort_by_key(|l| l.received);
        for (i, a) in leases.iter().enumerate() {
            for b in leases[i + 1..].iter().take_while(|b| b.received < a.end_lb) {
                if b.received + TOLERANCE_US < a.end_lb.min(b.end_lb) {
                    v.push(Violation {
                        property: "two live leases",
                        detail: format!(
                            "partition {partition} group {group}: lease {} (answered at {} µs, live until ≥ {} µs) and lease {} (answered at {} µs)",
                            a.id, a.received, a.end_lb, b.id, b.received
                        ),
                    });
                }
            }
        }
    }
}
