//! Typed calls of `sql/functions/reads.sql` (docs/wire.md §23): the segments a fetch reads,
//! the partitions a change listing answers, and the safe time.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// The segments a fetch reads, per ask.
    Fetch<'a> = log_fetch_v1(
        p_queues: &'a [&'a str],
        p_partitions: &'a [&'a str],
        p_offsets: &'a [i64],
        p_max_bytes: i64,
        p_max_segments: i32,
    ) select "*";
    /// One page of a queue's partitions changed since a time.
    Changed<'a> = log_partitions_changed_v1(
        p_queue: &'a str,
        p_since: Option<DateTime<Utc>>,
        p_after_at: Option<DateTime<Utc>>,
        p_after_name: Option<&'a str>,
        p_limit: i32,
    ) select "*";
    /// The safe time.
    SafeTime = log_safe_time_v1();
}

/// What a fetch asks of one partition.
pub struct FetchAsk<'a> {
    /// The stored (tenant-qualified) queue name.
    pub queue: &'a str,
    pub partition: &'a str,
    pub offset: i64,
}

/// One asked partition as stored, and the segments read for it.
#[derive(Debug, Default)]
pub struct FetchRows {
    /// `None`: no such queue or partition.
    pub partition: Option<PartitionEnds>,
    /// (base offset, created at, blob), in offset order.
    pub segments: Vec<(i64, String, Vec<u8>)>,
}

/// A partition's offsets: the last written and the first kept.
#[derive(Debug, Clone, Copy)]
pub struct PartitionEnds {
    pub last_offset: i64,
    pub log_start: i64,
}

/// Reads, for each ask, at most `max_segments` segments from its offset on, stopping once
/// their stored bytes reach `max_bytes`. One answer per ask, in ask order.
pub async fn fetch(
    db: &impl GenericClient,
    asks: &[FetchAsk<'_>],
    max_bytes: i64,
    max_segments: i32,
) -> Result<Vec<FetchRows>> {
    let queues: Vec<&str> = asks.iter().map(|a| a.queue).collect();
    let partitions: Vec<&str> = asks.iter().map(|a| a.partition).collect();
    let offsets: Vec<i64> = asks.iter().map(|a| a.offset).collect();
    let rows = Fetch {
        p_queues: &queues,
        p_partitions: &partitions,
        p_offsets: &offsets,
        p_max_bytes: max_bytes,
        p_max_segments: max_segments,
    }
    .query(db)
    .await?;
    let mut out: Vec<FetchRows> = asks.iter().map(|_| FetchRows::default()).collect();
    for r in rows {
        let i: i32 = r.try_get(0)?;
        let Some(slot) = usize::try_from(i - 1).ok().and_then(|k| out.get_mut(k)) else {
            continue;
        };
        let last_offset: Option<i64> = r.try_get(2)?;
        let log_start: Option<i64> = r.try_get(3)?;
        if let (Some(last_offset), Some(log_start)) = (last_offset, log_start) {
            slot.partition = Some(PartitionEnds {
                last_offset,
                log_start,
            });
        }
        let base: Option<i64> = r.try_get(4)?;
        if let Some(base) = base {
            slot.segments.push((base, r.try_get(5)?, r.try_get(6)?));
        }
    }
    Ok(out)
}

/// One partition of a change listing.
#[derive(Debug, Clone)]
pub struct ChangedRow {
    pub name: String,
    pub id: i64,
    pub last_offset: i64,
    pub log_start: i64,
    pub last_write_at: DateTime<Utc>,
}

/// The page after the cursor; `None` when the queue does not exist.
pub async fn changed(
    db: &impl GenericClient,
    queue: &str,
    since: Option<DateTime<Utc>>,
    after: Option<(Option<DateTime<Utc>>, &str)>,
    limit: i32,
) -> Result<Option<Vec<ChangedRow>>> {
    let rows = Changed {
        p_queue: queue,
        p_since: since,
        p_after_at: after.and_then(|(at, _)| at),
        p_after_name: after.map(|(_, name)| name),
        p_limit: limit,
    }
    .query(db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let known: bool = r.try_get(0)?;
        if !known {
            return Ok(None);
        }
        out.push(ChangedRow {
            name: r.try_get(1)?,
            id: r.try_get(2)?,
            last_offset: r.try_get(3)?,
            log_start: r.try_get(4)?,
            last_write_at: r.try_get(5)?,
        });
    }
    Ok(Some(out))
}

/// The time up to which every write is counted by a read that starts after this call.
pub async fn safe_time(db: &impl GenericClient) -> Result<DateTime<Utc>> {
    Ok(SafeTime {}.query_one(db).await?.try_get(0)?)
}
