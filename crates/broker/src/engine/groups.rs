//! Consumer-group administration (docs/wire.md §12): listings, lag, seek, delete and the
//! subscription update. The cursor rules themselves (what a seek does to leases and retry
//! state, what a delete removes) are SQL in `sql/functions/admin.sql`; this module validates the
//! request, turns "nothing matched" into 404s, and wakes parked pops of every queue where old
//! data became pending again, so a rewind is served promptly instead of at the next backoff.
//! The answers are rows; `http/groups.rs` renders them.

use crate::engine::tenant::{self, Tenant};
use chrono::{DateTime, Utc};

use crate::engine::pop::PopState;
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::groups as store;

pub use crate::store::groups::{GroupPartitionRow, GroupQueueRow, LaggingRow};

/// Where a seek moves a group's cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTarget {
    /// `committed = last_offset`: only messages pushed later are delivered.
    End,
    /// Just before the first segment created at or after the instant (future-only if none).
    Timestamp(DateTime<Utc>),
}

impl SeekTarget {
    /// From the seek body's `toEnd` and `timestamp`; `toEnd:true` wins over a timestamp.
    pub fn from_request(to_end: Option<bool>, timestamp: Option<&str>) -> Result<Self> {
        if to_end == Some(true) {
            return Ok(SeekTarget::End);
        }
        match timestamp {
            Some(text) => parse_timestamp("timestamp", text).map(SeekTarget::Timestamp),
            None => Err(Error::bad("Must specify toEnd=true or a timestamp")),
        }
    }
}

/// Parses an ISO-8601 instant, naming the field in the 400.
pub fn parse_timestamp(field: &str, text: &str) -> Result<DateTime<Utc>> {
    queen_proto::time::parse_iso(text)
        .ok_or_else(|| Error::bad(format!("{field} is not an ISO-8601 timestamp: {text:?}")))
}

/// Every (group, queue) pair of `tenant`'s queues, by group then queue.
pub async fn list(st: &Shared, tenant: &Tenant) -> Result<Vec<GroupQueueRow>> {
    let mut rows = store::groups(&st.store, tenant.id()).await?;
    local_rows(&mut rows, |r| &mut r.queue);
    Ok(rows)
}

/// Every partition of every queue of `tenant` that `group` is on; 404 when it is on none.
pub async fn detail(st: &Shared, group: &str, tenant: &Tenant) -> Result<Vec<GroupPartitionRow>> {
    let mut partitions = store::group(&st.store, group, tenant.id()).await?;
    local_rows(&mut partitions, |r| &mut r.queue);
    if partitions.is_empty() {
        return Err(Error::NotFound("Consumer group not found".into()));
    }
    Ok(partitions)
}

pub async fn lagging(
    st: &Shared,
    min_lag_seconds: i64,
    tenant: &Tenant,
) -> Result<Vec<LaggingRow>> {
    let mut rows = store::lagging(&st.store, min_lag_seconds, tenant.id()).await?;
    local_rows(&mut rows, |r| &mut r.queue);
    Ok(rows)
}

/// The rows' queue names as the tenant's client knows them (SQL kept to the tenant's queues).
fn local_rows<R>(rows: &mut [R], queue: impl Fn(&mut R) -> &mut String) {
    for r in rows.iter_mut() {
        let name = queue(r);
        *name = tenant::local(name).to_string();
    }
}

/// Seeks `group` on `tenant`'s `queue` (one partition, or all of them); answers how many cursors moved.
pub async fn seek(
    st: &Shared,
    pop: &PopState,
    group: &str,
    queue: &str,
    partition: Option<&str>,
    target: SeekTarget,
    tenant: &Tenant,
) -> Result<i32> {
    let queue: &str = &tenant::qualify(tenant, "queue", queue)?;
    let (to_end, ts) = match target {
        SeekTarget::End => (true, None),
        SeekTarget::Timestamp(t) => (false, Some(t)),
    };
    let verdict = store::seek(&st.store, group, queue, partition, to_end, ts).await?;
    if !verdict.found {
        return Err(Error::NotFound(
            "Queue not found or has no partitions".into(),
        ));
    }
    // A cursor may have moved backwards, which no mark describes: the ring starts cold.
    pop.cursors_moved(queue, group);
    if verdict.rewound {
        match partition {
            Some(p) => st.wake.wake_partitions([(queue, p)]),
            None => st.wake.wake_queue(queue),
        }
    }
    Ok(verdict.partitions_updated)
}

/// Deletes `group`'s cursors (on `queue`, or on every queue of `tenant`) and, with `delete_metadata`, its
/// registrations, so the same name starts fresh on its next pop. Answers the cursors deleted.
pub async fn delete(
    st: &Shared,
    pop: &PopState,
    group: &str,
    queue: Option<&str>,
    delete_metadata: bool,
    tenant: &Tenant,
) -> Result<i32> {
    let queue = queue
        .map(|q| tenant::qualify(tenant, "queue", q))
        .transpose()?;
    let verdict = store::delete_group(
        &st.store,
        group,
        queue.as_deref(),
        delete_metadata,
        tenant.id(),
    )
    .await?;
    if !verdict.found {
        return Err(Error::NotFound("Queue not found".into()));
    }
    // Recreated cursors may start below the deleted ones: parked pops must look again, and
    // the rings (which also remember the registration) start cold.
    for name in &verdict.queues {
        pop.cursors_moved(name, group);
        st.wake.wake_queue(name);
    }
    Ok(verdict.deleted_partitions)
}

/// Moves the stored subscription timestamp of every registration of `group` with `tenant`; answers how
/// many were updated (404 when none).
pub async fn set_subscription(
    st: &Shared,
    group: &str,
    timestamp: DateTime<Utc>,
    tenant: &Tenant,
) -> Result<i32> {
    let updated = store::set_subscription(&st.store, group, timestamp, tenant.id()).await?;
    if updated == 0 {
        return Err(Error::NotFound("Consumer group not found".into()));
    }
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_target_needs_to_end_or_a_timestamp() {
        assert_eq!(
            SeekTarget::from_request(Some(true), None).unwrap(),
            SeekTarget::End
        );
        assert_eq!(
            SeekTarget::from_request(Some(true), Some("garbage")).unwrap(),
            SeekTarget::End
        );
        let ts = SeekTarget::from_request(Some(false), Some("2026-01-02T03:04:05.678Z")).unwrap();
        assert_eq!(
            ts,
            SeekTarget::Timestamp(
                queen_proto::time::parse_iso("2026-01-02T03:04:05.678Z").unwrap()
            )
        );
        for (to_end, ts) in [(None, None), (Some(false), None)] {
            let e = SeekTarget::from_request(to_end, ts).unwrap_err();
            assert_eq!(e.to_string(), "Must specify toEnd=true or a timestamp");
        }
        let e = SeekTarget::from_request(None, Some("yesterday")).unwrap_err();
        assert!(
            matches!(e, Error::BadRequest(ref m) if m.contains("timestamp")),
            "{e}"
        );
    }
}
