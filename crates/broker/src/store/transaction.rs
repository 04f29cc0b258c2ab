//! The typed call of `queen.log_transaction_wire_v1` (sql/functions/transaction.sql): one bundle of
//! pushes and acks in one PostgreSQL transaction, with its refusals told apart from faults.

use deadpool_postgres::GenericClient;
use serde::Deserialize;
use tokio_postgres::types::Json;

use crate::error::{Error, Result};
use crate::store::ack::{AckVerdict, Span};
use crate::store::kv::KvLost;
use crate::store::push::{SegmentResult, SegmentWrite};
use crate::store::sql_fn::sql_fns;
use crate::store::timers::TimerVerdict;

sql_fns! {
    /// One bundle of pushes, acks, kv operations, timers and a stream cycle: its spec `p`, and
    /// the pushes' hashes and blobs.
    TransactionWire<'a> = log_transaction_wire_v1(
        p: &'a serde_json::Value,
        p_hashes: &'a [&'a [u8]],
        p_blobs: &'a [&'a [u8]],
    );
}

/// One ack group of a bundle: hash-resolved (`hashes[k]` acked with `statuses[k]`), or
/// positional when `cover` is set.
pub struct WireAck<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    /// The lease (`worker` in SQL).
    pub lease_id: &'a str,
    pub hashes: Vec<[u8; 16]>,
    pub statuses: Vec<&'static str>,
    /// The bundle's signals for this (partition, group) in its other ack groups.
    pub fence: Vec<[u8; 16]>,
    /// The ack registry proved the group acks its whole batch, all completed: the group is
    /// sent in the positional form (`log_ack_at_v1`'s cover) instead of by hash.
    pub cover: Option<WireCover>,
    /// The leased batch's purged part resolved by position (after a `QSPAN` refusal).
    pub span: Option<Span>,
}

/// The purged part of a hash-form ack group's leased batch (SQL `QSPAN`'s detail).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpanNeeded {
    pub partition_id: i64,
    pub group: String,
    pub worker: String,
    pub from: i64,
    pub to: i64,
}

/// A positional ack: the batch ending at `batch_end`, of `frames` frames, acked in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireCover {
    pub batch_end: i64,
    pub frames: i32,
}

/// What a committed bundle did, in input order.
#[derive(Debug, Deserialize)]
pub struct WireCommitted {
    pub pushes: Vec<SegmentResult>,
    pub acks: Vec<AckVerdict>,
    /// The `kv` rider's verdicts, in rider order.
    #[serde(default)]
    pub kv: Vec<serde_json::Value>,
    /// The `timers` rider's verdicts (store/timers.rs).
    #[serde(default)]
    pub timers: Vec<TimerVerdict>,
}

/// Why a bundle was rolled back. The texts end in "transaction rolled back".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireRefusal {
    /// A push duplicates data already stored (SQL `QDUP`).
    Duplicate(String),
    /// An ack was refused or resolved nowhere (SQL `QTXN`).
    RejectedAck(String),
    /// A plaintext push to this queue, which encrypts (SQL `QENC`): seal and rerun.
    Encrypt(String),
    /// A push past its queue's `maxSize` (SQL `QFULL`).
    Full(String),
    /// A hash-form ack's leased batch lost its hash rows (SQL `QSPAN`): read the span and
    /// rerun with it.
    PurgedSpan(SpanNeeded),
    /// A `required` operation of the `kv` rider lost its precondition (SQL `QKV`).
    KvPrecondition(KvLost),
    /// A timer fire's claim was lost (SQL `QTIMER`): another fire or a reschedule has it.
    TimerLost(String),
    /// The stream cycle riding along was committed before (SQL `QREPLAY`): nothing was
    /// applied; this is the answer it was given then.
    Replayed(serde_json::Value),
}

/// Runs the bundle: `Ok(Ok(_))` committed, `Ok(Err(_))` rolled back by a refusal, `Err(_)` a
/// fault (the bundle rolled back too).
pub async fn transaction_wire(
    db: &impl GenericClient,
    pushes: &[SegmentWrite<'_>],
    acks: &[WireAck<'_>],
    kv: &[serde_json::Value],
    timers: &[serde_json::Value],
    stream: Option<&serde_json::Value>,
    tenant: &str,
) -> Result<std::result::Result<WireCommitted, WireRefusal>> {
    let push_specs: Vec<serde_json::Value> = pushes
        .iter()
        .map(|p| {
            serde_json::json!({
                "queue": p.queue, "partition": p.partition, "count": p.msg_count,
                "encrypted": p.encrypted,
            })
        })
        .collect();
    let ack_specs: Vec<serde_json::Value> = acks
        .iter()
        .map(|a| {
            if let Some(c) = &a.cover {
                return serde_json::json!({
                    "partitionId": a.partition_id, "group": a.group, "worker": a.lease_id,
                    "uptoOff": c.batch_end, "ok": true, "count": c.frames, "cover": true,
                });
            }
            let items: Vec<serde_json::Value> = a
                .hashes
                .iter()
                .zip(&a.statuses)
                .map(|(h, s)| serde_json::json!({ "h": queen_proto::hash::to_hex(h), "status": s }))
                .collect();
            let fence: Vec<String> = a.fence.iter().map(queen_proto::hash::to_hex).collect();
            let mut spec = serde_json::json!({
                "partitionId": a.partition_id, "group": a.group, "worker": a.lease_id, "acks": items,
                "fence": fence,
            });
            if let Some(span) = &a.span {
                let hashes: Vec<String> = span.hashes.iter().map(queen_proto::hash::to_hex).collect();
                spec["span"] = serde_json::json!({ "offs": span.offsets, "hashes": hashes });
            }
            spec
        })
        .collect();
    let mut spec = serde_json::json!({ "pushes": push_specs, "acks": ack_specs, "tenant": tenant });
    if !kv.is_empty() {
        spec["kv"] = serde_json::Value::from(kv.to_vec());
        spec["kvReadBudget"] = crate::store::kv::READ_BUDGET_BYTES.into();
    }
    if !timers.is_empty() {
        spec["timers"] = serde_json::Value::from(timers.to_vec());
    }
    if let Some(stream) = stream {
        spec["stream"] = stream.clone();
    }
    let hashes: Vec<&[u8]> = pushes.iter().map(|p| p.hashes).collect();
    let blobs: Vec<&[u8]> = pushes.iter().map(|p| &p.blob[..]).collect();

    let call = TransactionWire {
        p: &spec,
        p_hashes: &hashes,
        p_blobs: &blobs,
    };
    let stmt = crate::store::prepare(db, TransactionWire::SQL).await?;
    let params = call.params();
    let row = match crate::store::retry_conflicts(|| db.query_one(&stmt, &params)).await {
        Ok(row) => row,
        Err(e) => return refusal(&e).map(Err).ok_or_else(|| Error::from(e)),
    };
    let Json(committed): Json<WireCommitted> = row.try_get(0)?;
    if committed.pushes.len() != pushes.len()
        || committed.acks.len() != acks.len()
        || committed.kv.len() != kv.len()
        || committed.timers.len() != timers.len()
    {
        return Err(Error::internal(format!(
            "log_transaction_wire_v1 answered {} pushes, {} acks, {} kv verdicts and {} timers \
             for {}, {}, {} and {}",
            committed.pushes.len(),
            committed.acks.len(),
            committed.kv.len(),
            committed.timers.len(),
            pushes.len(),
            acks.len(),
            kv.len(),
            timers.len()
        )));
    }
    Ok(Ok(committed))
}

/// The refusal a `QDUP`/`QTXN`/`QTIMER`/`QSPAN`/`QENC`/`QFULL`/`QREPLAY` exception carries, with its marker stripped
/// (`QENC` carries the queue in its detail).
fn refusal(e: &tokio_postgres::Error) -> Option<WireRefusal> {
    if let Some(lost) = crate::store::kv::lost(e) {
        return Some(WireRefusal::KvPrecondition(lost));
    }
    let db = e.as_db_error()?;
    let message = db.message();
    if let Some(text) = message.strip_prefix("QDUP ") {
        Some(WireRefusal::Duplicate(text.to_string()))
    } else if let Some(text) = message.strip_prefix("QTIMER ") {
        Some(WireRefusal::TimerLost(text.to_string()))
    } else if let Some(text) = message.strip_prefix("QTXN ") {
        Some(WireRefusal::RejectedAck(text.to_string()))
    } else if message.starts_with("QSPAN ") {
        serde_json::from_str(db.detail().unwrap_or_default())
            .ok()
            .map(WireRefusal::PurgedSpan)
    } else if message.starts_with("QREPLAY ") {
        serde_json::from_str(db.detail().unwrap_or_default())
            .ok()
            .map(WireRefusal::Replayed)
    } else if let Some(queue) = crate::store::db_error::must_seal(e) {
        Some(WireRefusal::Encrypt(queue))
    } else {
        message
            .strip_prefix("QFULL ")
            .map(|text| WireRefusal::Full(text.to_string()))
    }
}
