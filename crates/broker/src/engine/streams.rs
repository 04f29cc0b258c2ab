//! The streams runtime's server side (docs/wire.md §24): registered
//! queries, their per-partition state, and the cycle commit. A cycle — state writes, sink
//! pushes and the source ack — is a transaction bundle (engine/transaction.rs) carrying a
//! stream part, so all three commit in ONE PostgreSQL transaction; sql/functions/streams.sql
//! serializes the cycles of one (query, partition) and remembers each committed cycle by its
//! identity, so a retried cycle (its answer lost) is answered again instead of applied twice.

use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::engine::ack::{Ack, AckStatus};
use crate::engine::push::PushItem;
use crate::engine::tenant::Tenant;
use crate::engine::transaction::{
    self, OpResult, RollbackReason, TxnOp, TxnOutcome, TxnRequest, Writers,
};
use crate::engine::Shared;
use crate::error::{Error, Result};
pub use crate::store::streams::{Registration, StateFilter};

/// Most state operations one cycle carries.
pub const MAX_STATE_OPS: usize = 4096;
/// Most sink pushes one cycle carries.
pub const MAX_PUSH_ITEMS: usize = 10_000;
/// Most keys one state read names.
pub const MAX_STATE_KEYS: usize = 4096;
/// Longest state key, in UTF-8 bytes.
pub const MAX_STATE_KEY_BYTES: usize = 1024;
/// How long a committed cycle is remembered for its retries: far past the official client's
/// whole retry horizon (4 attempts of at most 30 s each, backoff at most 5 s between).
pub const CYCLE_MEMORY_SECS: u64 = 3600;

/// A registration's outcome.
pub enum Registered {
    /// `{"query_id","name","fresh","reset"}`.
    Query(Value),
    /// The query exists with another config hash (the stored one) and no reset was asked.
    Conflict(String),
}

/// Registers (or finds) a query of `tenant`.
pub async fn register(state: &Shared, tenant: &Tenant, r: &Registration<'_>) -> Result<Registered> {
    let db = state.store.conn().await?;
    let answer = crate::store::streams::register(&db, tenant.id(), r).await?;
    if answer["conflict"] == true {
        let stored = answer["config_hash"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        return Ok(Registered::Conflict(stored));
    }
    Ok(Registered::Query(answer))
}

/// The state rows of `query`'s `partition` matching `filter`; 404 for a query that is not
/// `tenant`'s.
pub async fn state_get(
    state: &Shared,
    tenant: &Tenant,
    query: Uuid,
    partition: &str,
    filter: &StateFilter<'_>,
) -> Result<Value> {
    let db = state.store.conn().await?;
    require_owned(&db, tenant, query).await?;
    crate::store::streams::state_get(&db, query, partition, filter).await
}

/// The source queue of `query` (qualified for `tenant`); 404 for a query not `tenant`'s.
async fn require_owned(
    db: &impl deadpool_postgres::GenericClient,
    tenant: &Tenant,
    query: Uuid,
) -> Result<String> {
    match crate::store::streams::source_of(db, tenant.id(), query).await? {
        Some(source) => crate::engine::tenant::qualify(tenant, "source_queue", &source),
        None => Err(Error::NotFound(format!("no stream query {query}"))),
    }
}

/// One state operation, checked.
#[derive(Debug, Clone)]
pub enum StateOp {
    Upsert { key: String, value: Value },
    Delete { key: String },
}

/// A checked cycle (http/streams/parse.rs).
pub struct Cycle {
    pub query: Uuid,
    /// The source partition's id, as text: the shard of the query's state.
    pub partition: String,
    pub state_ops: Vec<StateOp>,
    pub pushes: Vec<PushItem>,
    /// The source ack: cumulative up to its transactionId, under its lease.
    pub ack: Option<Ack>,
    /// With a completed ack: the cycle consumed its whole leased batch (the rest of it is
    /// acked too, the lease released); without: the un-acked tail stays leased.
    pub release_lease: bool,
    /// xxh3_128 of the canonical request: two requests with one identity are one cycle.
    pub identity: [u8; 16],
}

/// What became of a cycle.
pub enum CycleOutcome {
    /// Applied now; the answer.
    Committed(Value),
    /// Applied before (this is a retry); the answer it was given then, marked `replayed`.
    Replayed(Value),
    /// Nothing was applied (the ack was refused: lease lost or expired; a push refused).
    RolledBack {
        reason: RollbackReason,
        error: String,
    },
}

/// Commits `cycle` for `tenant`: its state ops, sink pushes and source ack in one PostgreSQL
/// transaction, once.
pub async fn commit(
    state: Writers<'_>,
    tenant: &Tenant,
    producer: Option<Arc<str>>,
    cycle: Cycle,
) -> Result<CycleOutcome> {
    let source = {
        let db = state.store.conn().await?;
        require_owned(&db, tenant, cycle.query).await?
    };
    let answer = json!({
        "success": true, "query_id": cycle.query.to_string(), "partition_id": cycle.partition,
        "state_ops_applied": cycle.state_ops.len(), "pushed": cycle.pushes.len(),
        "acked": cycle.ack.is_some(),
    });
    let state_ops: Vec<Value> = cycle
        .state_ops
        .iter()
        .map(|op| match op {
            StateOp::Upsert { key, value } => json!({"type": "upsert", "key": key, "value": value}),
            StateOp::Delete { key } => json!({"type": "delete", "key": key}),
        })
        .collect();
    // A DLQ hand-off after the commit needs the lease, so only a completed ack releases it.
    let release = cycle.release_lease
        && cycle
            .ack
            .as_ref()
            .is_some_and(|a| a.status == AckStatus::Completed);
    let ack_spec = cycle.ack.as_ref().map_or(Value::Null, |a| {
        json!({"partitionId": a.partition_id.get(), "group": a.group, "worker": a.lease_id.as_str()})
    });
    let stream = json!({
        "query": cycle.query.to_string(), "partition": cycle.partition,
        "cycle": queen_proto::hash::to_hex(&cycle.identity), "answer": answer,
        "memorySecs": CYCLE_MEMORY_SECS, "stateOps": state_ops, "release": release,
        "ack": ack_spec,
    });
    let mut ops: Vec<TxnOp> = cycle.pushes.into_iter().map(TxnOp::Push).collect();
    ops.extend(cycle.ack.clone().map(TxnOp::Ack));
    let req = TxnRequest {
        ops,
        stream: Some(stream),
        ..TxnRequest::default()
    };
    Ok(
        match transaction::run(state, req, producer, tenant).await? {
            TxnOutcome::Committed(results) => {
                let acked = results.iter().find_map(|r| match r {
                    OpResult::Ack { outcome, .. } => Some(outcome.lease_released),
                    _ => None,
                });
                // The ack stopped short of its batch's end and the SQL completed the batch
                // (streams.sql), releasing the lease: the partition ring learns it and parked pops
                // wake. Whether data is pending behind the batch is not known here, so it is
                // assumed: a partition the ring dropped as drained would not be served again.
                if let (true, Some(false), Some(ack)) = (release, acked, &cycle.ack) {
                    crate::engine::ack::released(state.ack, ack, Some(&source));
                }
                CycleOutcome::Committed(answer)
            }
            TxnOutcome::Replayed(mut earlier) => {
                earlier["replayed"] = Value::Bool(true);
                CycleOutcome::Replayed(earlier)
            }
            TxnOutcome::RolledBack { reason, error } => CycleOutcome::RolledBack { reason, error },
            TxnOutcome::PreconditionLost { .. } => {
                return Err(Error::internal("a stream cycle has no kv rider to lose"))
            }
        },
    )
}
