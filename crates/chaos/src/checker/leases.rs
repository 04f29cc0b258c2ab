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

/// Whether `a` may have ended a lease it names (or, lease-less, any lease of its (partition,
/// group)) claimed before `a` was sent: unanswered, or accepted — a refused one changed
/// nothing.
fn may_release(a: &AckRec) -> bool {
    match &a.answer {
        None => true,
        Some(x) => x.success || x.lease_released || x.dlq,
    }
}

/// The first of the sorted `times` at or after `t` (`Micros::MAX` if none).
fn first_at_or_after(times: Option<&Vec<Micros>>, t: Micros) -> Micros {
    let Some(times) = times else {
        return Micros::MAX;
    };
    times
        .get(times.partition_point(|&x| x < t))
        .copied()
        .unwrap_or(Micros::MAX)
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
    // The send times of the acks that may end a lease, sorted: those under each lease, and
    // the lease-less ones of each (partition, group) (which may end any lease of the row).
    let mut own: HashMap<(&str, &str, &str), Vec<Micros>> = HashMap::new();
    let mut lease_less: HashMap<(&str, &str), Vec<Micros>> = HashMap::new();
    for a in log.acks.iter().filter(|a| may_release(a)) {
        match &a.lease {
            Some(l) => own
                .entry((&a.partition_id, &a.group, l))
                .or_default()
                .push(a.sent),
            None => lease_less
                .entry((&a.partition_id, &a.group))
                .or_default()
                .push(a.sent),
        }
    }
    own.values_mut().for_each(|t| t.sort_unstable());
    lease_less.values_mut().for_each(|t| t.sort_unstable());
    let mut renewed: HashMap<&str, Micros> = HashMap::new();
    for e in log.extends.iter().filter(|e| e.renewed) {
        let until = renewed.entry(&e.lease).or_default();
        *until = (*until).max(e.sent + e.seconds * 1_000_000);
    }
    let mut per_row: HashMap<(&str, &str), Vec<Lease<'_>>> = HashMap::new();
    for (&(partition, group, id), &(pop_sent, received, secs)) in &claims {
        let expiry = (pop_sent + secs * 1_000_000).max(renewed.get(id).copied().unwrap_or(0));
        let release = first_at_or_after(own.get(&(partition, group, id)), pop_sent).min(
            first_at_or_after(lease_less.get(&(partition, group)), pop_sent),
        );
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
