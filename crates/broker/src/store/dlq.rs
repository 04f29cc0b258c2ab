//! Typed calls of the dead-letter SQL (sql/functions/dlq.sql): `queen.log_dlq_head_v1` files one dead
//! letter (the hand-off after a `dlq` ack verdict), `queen.log_dlq_list_v1` lists them, and the
//! operations on filed rows: purge, delete by address, and replay (`queen.log_dlq_replay_v1`).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::store::push::SegmentResult;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Files one dead letter.
    DlqHead<'a> = log_dlq_head_v1(
        p_partition_id: i64,
        p_group: &'a str,
        p_worker: &'a str,
        p_off: i64,
        p_message_id: Uuid,
        p_txn: &'a str,
        p_payload: Option<Json<&'a RawValue>>,
        p_error: &'a str,
        p_encrypted: bool,
        p_producer_sub: Option<&'a str>,
    );
    /// One page of dead letters, read as text.
    DlqList<'a> = log_dlq_list_v1(
        p_queue: Option<&'a str>,
        p_group: Option<&'a str>,
        p_partition: Option<&'a str>,
        p_from: Option<DateTime<Utc>>,
        p_to: Option<DateTime<Utc>>,
        p_limit: i32,
        p_offset: i32,
        p_tenant: &'a str,
    ) then "::text";
    /// Deletes a queue's dead letters (of one group).
    DlqPurge<'a> = log_dlq_purge_v1(p_queue: &'a str, p_group: Option<&'a str>);
    /// Deletes one dead letter by address.
    DlqDelete<'a> = log_dlq_delete_v1(p_pid: i64, p_txn: &'a str, p_tenant: &'a str);
    /// One dead letter's payload copy.
    DlqPayload<'a> = log_dlq_payload_v1(p_pid: i64, p_txn: &'a str, p_tenant: &'a str)
        select "r_payload, r_encrypted, r_queue_encrypts, r_producer_sub";
    /// Pushes a dead letter back and deletes it.
    DlqReplay<'a> = log_dlq_replay_v1(
        p_pid: i64,
        p_txn: &'a str,
        p_hashes: &'a [u8],
        p_blob: &'a [u8],
        p_encrypted: bool,
        p_tenant: &'a str,
    );
}

/// What `queen.log_dlq_head_v1` needs to file one dead letter.
pub struct DeadLetter<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    pub lease_id: &'a str,
    pub off: i64,
    pub message_id: Uuid,
    pub transaction_id: &'a str,
    /// The stored payload as JSON text (`None` stores JSON null).
    pub payload: Option<&'a RawValue>,
    pub error: &'a str,
    /// `payload` is the frame's encryption envelope, as stored.
    pub encrypted: bool,
    /// The poison frame's producerSub (`None`: pushed with auth off).
    pub producer_sub: Option<&'a str>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DlqHeadVerdict {
    pub ok: bool,
    pub error: Option<String>,
    pub wake_queue: Option<String>,
}

/// `queen.log_dlq_head_v1`: files the row, moves the cursor past it, releases the lease.
pub async fn dlq_head(db: &impl GenericClient, letter: &DeadLetter<'_>) -> Result<DlqHeadVerdict> {
    DlqHead {
        p_partition_id: letter.partition_id,
        p_group: letter.group,
        p_worker: letter.lease_id,
        p_off: letter.off,
        p_message_id: letter.message_id,
        p_txn: letter.transaction_id,
        p_payload: letter.payload.map(Json),
        p_error: letter.error,
        p_encrypted: letter.encrypted,
        p_producer_sub: letter.producer_sub,
    }
    .json(db)
    .await
}

/// Filters of a DLQ listing; `None` matches everything.
#[derive(Debug, Default)]
pub struct DlqFilter<'a> {
    pub queue: Option<&'a str>,
    pub group: Option<&'a str>,
    pub partition: Option<&'a str>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub limit: i32,
    pub offset: i32,
}

/// One dead letter as `queen.log_dlq_list_v1` renders it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqRow {
    pub id: String,
    pub partition_id: String,
    pub queue: Option<String>,
    pub partition: Option<String>,
    pub consumer_group: String,
    pub offset: i64,
    pub message_id: Option<String>,
    pub transaction_id: Option<String>,
    pub data: Option<Box<RawValue>>,
    /// `data` is an encryption envelope; the engine opens it before it is rendered.
    #[serde(default)]
    pub encrypted: bool,
    /// Why `data` could not be opened (it is then JSON null), set by the engine.
    #[serde(skip)]
    pub payload_error: Option<String>,
    pub producer_sub: Option<String>,
    pub error_message: Option<String>,
    pub retry_count: i64,
    pub failed_at: String,
}

#[derive(Debug, Deserialize)]
pub struct DlqPage {
    pub total: i64,
    pub rows: Vec<DlqRow>,
}

/// One page of dead letters, newest first, plus the number of matching rows.
pub async fn dlq_list(db: &impl GenericClient, f: &DlqFilter<'_>, tenant: &str) -> Result<DlqPage> {
    let row = DlqList {
        p_queue: f.queue,
        p_group: f.group,
        p_partition: f.partition,
        p_from: f.from,
        p_to: f.to,
        p_limit: f.limit,
        p_offset: f.offset,
        p_tenant: tenant,
    }
    .query_one(db)
    .await?;
    // Read as text: the payload copies are spliced into the answer without re-parsing.
    let text: String = row.try_get(0)?;
    serde_json::from_str(&text).map_err(|e| Error::internal(format!("log_dlq_list_v1 answer: {e}")))
}

/// `queen.log_dlq_purge_v1`: deletes the queue's dead letters (of `group` only, if given).
pub async fn dlq_purge(db: &impl GenericClient, queue: &str, group: Option<&str>) -> Result<i64> {
    let call = DlqPurge {
        p_queue: queue,
        p_group: group,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}

/// `queen.log_dlq_delete_v1`: deletes the dead letters of one address, every group.
pub async fn dlq_delete(
    db: &impl GenericClient,
    partition_id: i64,
    txn: &str,
    tenant: &str,
) -> Result<i64> {
    let call = DlqDelete {
        p_pid: partition_id,
        p_txn: txn,
        p_tenant: tenant,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}

/// The payload copy a replay pushes back, and who pushed it.
pub struct PayloadCopy {
    /// JSON text; `None`: the copy is NULL, an empty payload.
    pub payload: Option<String>,
    /// The copy is an encryption envelope.
    pub encrypted: bool,
    /// The partition's queue encrypts now.
    pub queue_encrypts: bool,
    /// The producerSub it was pushed with; `None`: pushed with auth off.
    pub producer_sub: Option<String>,
}

/// `queen.log_dlq_payload_v1`: `None` when the address has no dead letter, else the newest
/// one's payload copy.
pub async fn dlq_payload(
    db: &impl GenericClient,
    partition_id: i64,
    txn: &str,
    tenant: &str,
) -> Result<Option<PayloadCopy>> {
    let call = DlqPayload {
        p_pid: partition_id,
        p_txn: txn,
        p_tenant: tenant,
    };
    let row = call.query_opt(db).await?;
    row.map(|r| {
        Ok(PayloadCopy {
            payload: r.try_get(0)?,
            encrypted: r.try_get(1)?,
            queue_encrypts: r.try_get(2)?,
            producer_sub: r.try_get(3)?,
        })
    })
    .transpose()
}

/// The one-frame segment a replay appends, built by the engine.
pub struct ReplayWrite<'a> {
    pub partition_id: i64,
    pub transaction_id: &'a str,
    pub hashes: &'a [u8],
    pub blob: &'a [u8],
    /// The frame's payload is an encryption envelope.
    pub encrypted: bool,
    /// The caller's tenant: another tenant's partition answers `None`.
    pub tenant: &'a str,
}

/// What `queen.log_dlq_replay_v1` did.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ReplayVerdict {
    /// The address had no dead letter (any more): nothing written.
    None,
    /// The dead letters' partition was deleted: nothing written.
    Gone,
    Replayed {
        replayed: i64,
        queue: String,
        partition: String,
        push: SegmentResult,
    },
    /// The append was refused (`push` says why); everything rolled back, the dead letter
    /// stays.
    #[serde(skip)]
    Refused { push: SegmentResult },
}

/// `queen.log_dlq_replay_v1`: deletes the address's dead letters and appends the segment, in
/// one call (one transaction).
pub async fn dlq_replay(db: &impl GenericClient, w: &ReplayWrite<'_>) -> Result<ReplayVerdict> {
    let verdict = DlqReplay {
        p_pid: w.partition_id,
        p_txn: w.transaction_id,
        p_hashes: w.hashes,
        p_blob: w.blob,
        p_encrypted: w.encrypted,
        p_tenant: w.tenant,
    }
    .json(db)
    .await;
    match verdict {
        Err(Error::Db(e)) => match refused(&e) {
            Some(push) => Ok(ReplayVerdict::Refused { push }),
            None => Err(Error::Db(e)),
        },
        other => other,
    }
}

/// The refused append a `QREFUSED` exception carries in its detail.
fn refused(e: &tokio_postgres::Error) -> Option<SegmentResult> {
    let db = e.as_db_error()?;
    if !db.message().starts_with("QREFUSED ") {
        return None;
    }
    serde_json::from_str(db.detail()?).ok()
}
