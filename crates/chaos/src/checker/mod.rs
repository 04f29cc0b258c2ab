//! The history checker: reads the final state PostgreSQL holds (dead letters, partition →
//! queue) and judges the recorded history against the broker's guarantees. Each property is
//! its own function; a [`Violation`] names the property and the evidence.
//!
//! Times in the history are client-side, so every check uses bounds that hold whatever the
//! network delay: a claim happened between a pop's send and its answer, a release no earlier
//! than the send of the ack that released it, an expiry no earlier than `pop sent + lease`.

mod acks;
mod delivery;
mod kv;
mod leases;
mod refusals;

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Result;

use crate::history::Log;

/// The properties, in report order.
pub const PROPERTIES: [&str; 13] = [
    "lost",
    "first deliveries out of offset order",
    "redelivered after a successful ack",
    "ack refused under a live lease",
    "two live leases",
    "nack skipped",
    "dlq row without cause",
    "dlq answer without row",
    "dlq ack not dead-lettered",
    "dlq budget",
    "5xx outside an outage",
    "fault not recovered",
    kv::PROPERTY,
];

#[derive(Debug, Clone)]
pub struct Violation {
    pub property: &'static str,
    pub detail: String,
}

/// A dead letter as PostgreSQL holds it, keyed by transactionId: an ack names a
/// transactionId, and when one is stored at two offsets the broker resolves it to either
/// copy (the same message to the client), so offsets cannot tie acks to rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DlqKey {
    pub partition_id: String,
    pub group: String,
    pub txn: String,
}

pub struct DbState {
    pub dlq: HashSet<DlqKey>,
    /// (queue, transactionId, group) of every dead letter.
    pub dlq_by_txn: HashSet<(String, String, String)>,
}

/// Reads what the checker needs from PostgreSQL (the authority) after the run. Rows of
/// partitions that no longer exist (an external database's earlier runs) are not ours.
pub async fn read_db(pg: &tokio_postgres::Client) -> Result<DbState> {
    let rows = pg
        .query(
            "SELECT d.partition_id::text, d.consumer_group, \
                    coalesce(d.transaction_id, ''), coalesce(q.name, '') \
             FROM queen.log_dlq d \
             JOIN queen.log_partitions p ON p.id = d.partition_id \
             JOIN queen.queues q ON q.id = p.queue_id",
            &[],
        )
        .await?;
    let mut dlq = HashSet::new();
    let mut dlq_by_txn = HashSet::new();
    for r in rows {
        let group: String = r.get(1);
        dlq.insert(DlqKey {
            partition_id: r.get(0),
            group: group.clone(),
            txn: r.get(2),
        });
        dlq_by_txn.insert((r.get(3), r.get(2), group));
    }
    Ok(DbState { dlq, dlq_by_txn })
}

/// What the run amounted to, for the report.
#[derive(Debug, Default)]
pub struct Stats {
    pub messages_stored: usize,
    pub messages_unknown_only: usize,
    pub push_items_failed: usize,
    pub deliveries: usize,
    pub redeliveries: BTreeMap<&'static str, usize>,
    pub stored_twice: usize,
    pub acks: BTreeMap<&'static str, usize>,
    pub dlq_rows: usize,
    pub nacks_superseded: usize,
    pub http: BTreeMap<String, usize>,
    pub tolerated_5xx: usize,
    /// Key-value operations by outcome.
    pub kv: BTreeMap<&'static str, usize>,
}

pub struct Verdict {
    pub violations: Vec<Violation>,
    pub stats: Stats,
}

/// Judges the whole history. `groups` are the groups every message must reach.
pub fn check(log: &Log, db: &DbState, groups: &[&str], retry_limit: u32) -> Verdict {
    let mut v = Vec::new();
    let mut stats = Stats {
        deliveries: log.deliveries.len(),
        dlq_rows: db.dlq.len(),
        ..Stats::default()
    };
    delivery::lost(log, db, groups, &mut v, &mut stats);
    delivery::first_delivery_order(log, &mut v);
    delivery::redeliveries(log, &mut v, &mut stats);
    leases::overlapping(log, &mut v);
    refusals::refused_under_live_lease(log, &mut v);
    acks::nacks_not_skipped(log, db, &mut v, &mut stats);
    acks::dead_letters(log, db, retry_limit, &mut v);
    acks::server_errors(log, &mut v, &mut stats);
    kv::linearizable(log, &mut v, &mut stats);
    for a in &log.acks {
        *stats.acks.entry(a.status).or_default() += 1;
    }
    Verdict {
        violations: v,
        stats,
    }
}

/// (partition, group, offset) → indexes into `log.deliveries`, in recording order.
fn deliveries_by_key(log: &Log) -> HashMap<(&str, &str, i64), Vec<usize>> {
    let mut map: HashMap<(&str, &str, i64), Vec<usize>> = HashMap::new();
    for (i, d) in log.deliveries.iter().enumerate() {
        map.entry((&d.partition_id, &d.group, d.offset))
            .or_default()
            .push(i);
    }
    map
}

#[cfg(test)]
mod kv_tests;
#[cfg(test)]
mod tests;
