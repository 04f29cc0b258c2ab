//! Typed calls of the message-detail SQL (sql/functions/admin.sql): the covering segment and state of
//! one message, and the segments whose hash-sidecar rows were purged.

use tokio_postgres::Row;

use crate::error::{Error, Result};
use crate::store::sql_fn::sql_fns;
use crate::store::Store;

sql_fns! {
    /// The covering segment and state of one message.
    Message<'a> = admin_message_v1(
        p_pid: i64,
        p_hash: &'a [u8],
        p_off: Option<i64>,
        p_tenant: &'a str,
    ) select "*";
    /// Segments whose hash-sidecar rows were purged.
    Unindexed<'a> = admin_message_unindexed_v1(p_pid: i64, p_limit: i32, p_tenant: &'a str)
        select "r_base, r_blob";
}

/// A message's covering segment and its state.
pub struct MessageRow {
    pub offset: i64,
    pub base: i64,
    pub blob: Vec<u8>,
    pub state: MessageState,
}

/// Where a message lives and what became of it, as the database knows it.
#[derive(Debug, Clone)]
pub struct MessageState {
    /// The segment's timestamp, ISO-8601.
    pub created_at: Option<String>,
    pub partition_id: String,
    pub partition: String,
    pub queue: String,
    pub namespace: String,
    pub task: String,
    /// `pending`, `processing`, `completed` or `dead_letter`.
    pub status: String,
    /// The dead letter's reason, when it is one.
    pub error: Option<String>,
    pub retry_count: i32,
    pub lease_expires_at: Option<String>,
    pub lease_time: i32,
    pub retry_limit: i32,
    pub retry_delay: i32,
    pub ttl: i32,
    pub priority: i32,
    pub has_queue_mode: bool,
    /// Named consumer groups with a cursor on the partition.
    pub bus_groups: i32,
    /// `queue`, `bus` or `hybrid`.
    pub mode: String,
    /// One per cursor row, by group name.
    pub groups: Vec<GroupState>,
}

/// One consumer group's view of the message.
#[derive(Debug, Clone)]
pub struct GroupState {
    pub name: String,
    pub consumed: bool,
    pub lease_expires_at: Option<String>,
}

/// The message at `offset`, or (with `offset` None) at the newest occurrence of `hash` in the
/// partition's hash sidecar. `None`: unknown, its segment was retained away, or the partition
/// is not `tenant`'s (checked before anything is located or read).
pub async fn message(
    store: &Store,
    pid: i64,
    hash: &[u8; 16],
    offset: Option<i64>,
    tenant: &str,
) -> Result<Option<MessageRow>> {
    let found = Message {
        p_pid: pid,
        p_hash: hash.as_slice(),
        p_off: offset,
        p_tenant: tenant,
    }
    .query(&store.conn().await?)
    .await?;
    found.first().map(message_row).transpose()
}

fn message_row(r: &Row) -> Result<MessageRow> {
    let names: Vec<String> = r.try_get("r_groups")?;
    let consumed: Vec<bool> = r.try_get("r_consumed")?;
    let leases: Vec<Option<String>> = r.try_get("r_group_leases")?;
    if names.len() != consumed.len() || names.len() != leases.len() {
        return Err(Error::internal(
            "admin_message_v1 answered misaligned group arrays",
        ));
    }
    let groups = names
        .into_iter()
        .zip(consumed)
        .zip(leases)
        .map(|((name, consumed), lease_expires_at)| GroupState {
            name,
            consumed,
            lease_expires_at,
        })
        .collect();
    Ok(MessageRow {
        offset: r.try_get("r_offset")?,
        base: r.try_get("r_base")?,
        blob: r.try_get("r_blob")?,
        state: MessageState {
            created_at: r.try_get("r_created_at")?,
            partition_id: r.try_get("r_partition_id")?,
            partition: r.try_get("r_partition")?,
            queue: r.try_get("r_queue")?,
            namespace: r.try_get("r_namespace")?,
            task: r.try_get("r_task")?,
            status: r.try_get("r_status")?,
            error: r.try_get("r_error")?,
            retry_count: r.try_get("r_retry_count")?,
            lease_expires_at: r.try_get("r_lease_expires_at")?,
            lease_time: r.try_get("r_lease_time")?,
            retry_limit: r.try_get("r_retry_limit")?,
            retry_delay: r.try_get("r_retry_delay")?,
            ttl: r.try_get("r_ttl")?,
            priority: r.try_get("r_priority")?,
            has_queue_mode: r.try_get("r_has_queue_mode")?,
            bus_groups: r.try_get("r_bus_groups")?,
            mode: r.try_get("r_mode")?,
            groups,
        },
    })
}

/// A segment whose hash-sidecar row was purged.
pub struct UnindexedSegment {
    pub base: i64,
    pub blob: Vec<u8>,
}

/// Up to `limit` segments of the partition below its sidecar purge watermark, newest first;
/// none when the partition is not `tenant`'s.
pub async fn unindexed_segments(
    store: &Store,
    pid: i64,
    limit: i32,
    tenant: &str,
) -> Result<Vec<UnindexedSegment>> {
    let found = Unindexed {
        p_pid: pid,
        p_limit: limit,
        p_tenant: tenant,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(UnindexedSegment {
                base: r.try_get(0)?,
                blob: r.try_get(1)?,
            })
        })
        .collect()
}
