//! The typed call of `queen.log_ack_by_hash_v1` (sql/functions/ack.sql): one (partition,
//! group, lease) group of acknowledgements resolved by transactionId hash in one transaction.

use deadpool_postgres::GenericClient;
use serde::Deserialize;

use crate::error::Result;
use crate::store::json_verdict;

/// The verdict of `queen.log_ack_by_hash_v1` for one (partition, group, lease) group.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HashAckVerdict {
    pub ok: bool,
    /// Why the whole group was refused (`ok: false`).
    pub error: Option<String>,
    /// The new cursor, or the poison offset of a `dlq` verdict.
    pub off: Option<i64>,
    pub lease_released: bool,
    /// The broker must file the DLQ row for `off` under `lease_id` (the lease is still held).
    pub dlq: bool,
    /// The lease holder the DLQ hand-off must present.
    #[serde(rename = "worker")]
    pub lease_id: Option<String>,
    /// Hex hashes of acknowledgements that landed at or below the cursor.
    pub noop_hashes: Vec<String>,
    /// Hex hashes of failed/retry/dlq signals at or below the cursor.
    pub stale_hashes: Vec<String>,
    /// Hex hashes found nowhere in the ackable span.
    pub unresolved_hashes: Vec<String>,
    /// Set when the lease was released with data pending: parked pops of it should look.
    pub wake_queue: Option<String>,
    /// Milliseconds until the batch may be redelivered (the queue's retryDelay after a
    /// failed/retry signal): the wake is due then, not now. 0: now.
    pub wake_after_ms: u64,
}

/// One (partition, group, lease) group of acknowledgements, as `log_ack_by_hash_v1` takes it.
pub struct HashAck<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    pub lease_id: &'a str,
    pub hashes: &'a [&'a [u8]],
    pub statuses: &'a [&'a str],
    /// Hashes of the request's signals for this (partition, group) in other groups.
    pub fence: &'a [&'a [u8]],
    /// The caller's tenant: a partition of another tenant answers "consumer not found".
    pub tenant: &'a str,
}

/// `queen.log_ack_by_hash_v1`: one transaction, one consumer-row lock.
pub async fn ack_by_hash(db: &impl GenericClient, a: &HashAck<'_>) -> Result<HashAckVerdict> {
    json_verdict(
        db,
        "SELECT queen.log_ack_by_hash_v1($1, $2, $3, $4, $5, $6, $7)",
        &[
            &a.partition_id,
            &a.group,
            &a.lease_id,
            &a.hashes,
            &a.statuses,
            &a.fence,
            &a.tenant,
        ],
    )
    .await
}
