//! Every delivered message can be acked (issue 36 §2): an ack under a lease the broker judged
//! while that lease was certainly live must not be refused. The broker judged it before its
//! answer came back, and the lease lives at least until `pop sent + leaseTime`, so an ack
//! answered before then met a live lease — unless something else may have ended it first: a
//! lease-less ack of the same (partition, group) (it may advance the cursor through the batch
//! and release the lease), or a database outage (a failed DLQ hand-off is answered as
//! refused). A refusal otherwise means the broker delivered a message it could not take back:
//! the "unresolvable" answer for a batch whose hash-sidecar rows were purged was one.

use std::collections::HashMap;

use super::Violation;
use crate::faults::OUTAGE_GRACE_US;
use crate::history::{Log, Micros};

/// Client/server clock slack (same host), as in `leases.rs`.
const TOLERANCE_US: Micros = 50_000;

pub fn refused_under_live_lease(log: &Log, v: &mut Vec<Violation>) {
    // The earliest pop send and the lease length of every lease.
    let mut leases: HashMap<&str, (Micros, u64)> = HashMap::new();
    for d in log.deliveries.iter().filter(|d| !d.lease.is_empty()) {
        let e = leases.entry(&d.lease).or_insert((d.pop_sent, d.lease_secs));
        e.0 = e.0.min(d.pop_sent);
    }
    let mut lease_less: HashMap<(&str, &str), Vec<Micros>> = HashMap::new();
    for a in log.acks.iter().filter(|a| a.lease.is_none()) {
        lease_less
            .entry((&a.partition_id, &a.group))
            .or_default()
            .push(a.sent);
    }
    for a in &log.acks {
        let (Some(lease), Some(answer)) = (&a.lease, &a.answer) else {
            continue;
        };
        if answer.success {
            continue;
        }
        let Some(&(pop_sent, secs)) = leases.get(lease.as_str()) else {
            continue;
        };
        let live_until = pop_sent + secs * 1_000_000;
        if a.answered + TOLERANCE_US >= live_until {
            continue;
        }
        let interfered = lease_less
            .get(&(a.partition_id.as_str(), a.group.as_str()))
            .is_some_and(|sent| sent.iter().any(|&t| t >= pop_sent && t <= a.answered));
        let in_outage = log
            .faults
            .iter()
            .any(|f| f.outage && a.answered >= f.start && a.sent <= f.end + OUTAGE_GRACE_US);
        if interfered || in_outage {
            continue;
        }
        v.push(Violation {
            property: "ack refused under a live lease",
            detail: format!(
                "partition {} group {} offset {} ({}): `{}` under lease {lease} answered success:false at {} µs{}, the lease live until at least {live_until} µs",
                a.partition_id,
                a.group,
                a.offset,
                a.txn,
                a.status,
                a.answered,
                if a.via_transaction { " (transaction)" } else { "" },
            ),
        });
    }
}
