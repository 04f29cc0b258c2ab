//! Typed calls of the pop path (sql/functions/pop.sql): the claim shapes, which answer
//! `(meta jsonb, blobs bytea[])` (the hot-list's list claim also a verdict per candidate), and
//! the cheap probes a pop runs before them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};
use crate::store::buffers::Load;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// The wildcard claim: first-contact seed, candidate scan, claims.
    PopWildcard<'a> = log_pop_wildcard_bin_v1(
        p_queue: &'a str,
        p_group: &'a str,
        p_budget: i32,
        p_lease_seconds: Option<i32>,
        p_worker: &'a str,
        p_auto_ack: bool,
        p_max_partitions: i32,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
    ) select "meta, blobs";
    /// The claim of one named partition.
    PopSpecific<'a> = log_pop_specific_v1(
        p_queue: &'a str,
        p_partition: &'a str,
        p_group: &'a str,
        p_budget: i32,
        p_lease_seconds: Option<i32>,
        p_worker: &'a str,
        p_auto_ack: bool,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
    ) select "meta, blobs";
    /// The claim of hinted partitions, in order.
    PopHinted<'a> = log_pop_hinted_v1(
        p_queue: &'a str,
        p_group: &'a str,
        p_partitions: &'a [String],
        p_budget: i32,
        p_lease_seconds: Option<i32>,
        p_worker: &'a str,
        p_auto_ack: bool,
        p_max_partitions: i32,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
    ) select "meta, blobs";
    /// The hot-list's claim, with a verdict per candidate.
    PopList<'a> = log_pop_list_v1(
        p_queue: &'a str,
        p_group: &'a str,
        p_partitions: &'a [String],
        p_budget: i32,
        p_lease_seconds: Option<i32>,
        p_worker: &'a str,
        p_auto_ack: bool,
        p_max_partitions: i32,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
    ) select "meta, blobs, states";
    /// The claim of one partition by id, in columns, with the queue's minimum pop wait.
    PopClaim<'a> = log_pop_claim_v1(
        p_pid: i64,
        p_group: &'a str,
        p_budget: i32,
        p_lease_seconds: Option<i32>,
        p_worker: &'a str,
        p_auto_ack: bool,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
        p_skip_window: bool = false,
    ) select "c.r_state, c.r_until, c.r_attempt, c.r_last_off, c.r_partition, \
              c.r_queue, c.r_bases, c.r_starts, c.r_takes, c.r_counts, \
              c.r_created, c.r_blobs, \
              (SELECT q.min_pop_wait_time FROM queen.queues q WHERE q.name = c.r_queue)"
        then " c";
    /// The claim over every queue whose labels match.
    PopDiscover<'a> = log_pop_discover_wire_v1(
        p_namespace: &'a str,
        p_task: &'a str,
        p_group: &'a str,
        p_budget: i32,
        p_worker: &'a str,
        p_auto_ack: bool,
        p_max_partitions: i32,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
        p_lease_seconds: Option<i32>,
    ) select "meta, blobs";
    /// Whether a queue may have something for a group.
    HasPending<'a> = log_has_pending_v1(p_queue: &'a str, p_group: &'a str);
    /// Whether a partition may have something for a group.
    PartitionHasPending<'a> = log_partition_has_pending_v1(
        p_queue: &'a str,
        p_partition: &'a str,
        p_group: &'a str,
    );
    /// Whether a discovered queue may have something for a group.
    DiscoverHasPending<'a> = log_discover_has_pending_v1(
        p_namespace: &'a str,
        p_task: &'a str,
        p_group: &'a str,
    );
    /// Unleased pending messages, up to a cap.
    PendingEstimate<'a> = log_pending_estimate_v1(
        p_queue: &'a str,
        p_partition: Option<&'a str>,
        p_group: &'a str,
        p_cap: i64,
    );
}

/// What one pop asks PostgreSQL to claim; shared by every shape.
#[derive(Clone, Copy)]
pub struct ClaimArgs<'a> {
    pub group: &'a str,
    /// Global message budget across the claimed partitions.
    pub budget: i32,
    /// `None` = the queue's lease_time (60 without one).
    pub lease_seconds: Option<i32>,
    /// The leaseId of a leased pop (`p_worker` in SQL); one per request, shared by every
    /// claimed partition.
    pub lease_id: &'a str,
    pub auto_ack: bool,
    /// Wildcard and discovery only: how many partitions may deliver.
    pub max_partitions: i32,
    /// `new` or `all` (first-contact seeding).
    pub sub_mode: &'a str,
    /// `""`, `now` or an RFC 3339 timestamp (first-contact seeding).
    pub sub_from: &'a str,
}

/// The claims of one call, with the blobs in segment order.
#[derive(Debug, Default)]
pub struct PopAnswer {
    pub partitions: Vec<ClaimedPartition>,
    /// The queue's `min_pop_wait_time` (ms), when the call resolved one queue.
    pub min_pop_wait_ms: Option<i64>,
    pub blobs: Vec<Vec<u8>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedPartition {
    pub partition: String,
    pub partition_id: i64,
    pub queue: String,
    pub delivery_attempt: i32,
    /// When the claim's lease runs out (µs since the Unix epoch, database clock); `None` for
    /// autoAck. The ack registry's entries live until then plus a margin.
    #[serde(default)]
    pub lease_expires_at: Option<i64>,
    pub segments: Vec<ClaimedSegment>,
}

impl PopAnswer {
    /// The payload bytes the answer read: what the connection's read buffer keeps after it
    /// (store/buffers.rs).
    pub fn load(&self) -> Load {
        Load::received(self.blobs.iter().map(Vec::len).sum())
    }
}

/// Frames `[start_idx, start_idx + take)` of a segment of `msg_count` frames based at `base`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedSegment {
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
    pub msg_count: i32,
    /// Segment timestamp, µs since the Unix epoch.
    pub created_at: i64,
}

impl ClaimedSegment {
    /// The claimed frame indexes, `start_idx..start_idx + take`; `None` when SQL answered
    /// something no index range can be.
    pub fn claimed_range(&self) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(self.start_idx).ok()?;
        let take = usize::try_from(self.take).ok()?;
        Some(start..start.checked_add(take)?)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    partitions: Vec<ClaimedPartition>,
    min_pop_wait_ms: Option<i64>,
}

/// The `(meta, blobs)` columns of a claim's row.
fn answer(function: &str, row: &tokio_postgres::Row) -> Result<PopAnswer> {
    let meta: serde_json::Value = row.try_get(0)?;
    let blobs: Vec<Vec<u8>> = row.try_get(1)?;
    let meta: Meta = serde_json::from_value(meta)
        .map_err(|e| Error::internal(format!("{function} answered an unexpected shape: {e}")))?;
    let segments: usize = meta.partitions.iter().map(|p| p.segments.len()).sum();
    if segments != blobs.len() {
        return Err(Error::internal(format!(
            "{function} answered {segments} segments but {} blobs",
            blobs.len()
        )));
    }
    Ok(PopAnswer {
        partitions: meta.partitions,
        min_pop_wait_ms: meta.min_pop_wait_ms,
        blobs,
    })
}

/// The SQL wildcard procedure: first-contact seed, candidate scan, claims.
pub async fn pop_wildcard(
    db: &impl GenericClient,
    queue: &str,
    a: &ClaimArgs<'_>,
) -> Result<PopAnswer> {
    let call = PopWildcard {
        p_queue: queue,
        p_group: a.group,
        p_budget: a.budget,
        p_lease_seconds: a.lease_seconds,
        p_worker: a.lease_id,
        p_auto_ack: a.auto_ack,
        p_max_partitions: a.max_partitions,
        p_sub_mode: a.sub_mode,
        p_sub_from: a.sub_from,
    };
    answer(PopWildcard::FUNCTION, &call.query_one(db).await?)
}

/// One named partition; never registers the group's subscription.
pub async fn pop_specific(
    db: &impl GenericClient,
    queue: &str,
    partition: &str,
    a: &ClaimArgs<'_>,
) -> Result<PopAnswer> {
    let call = PopSpecific {
        p_queue: queue,
        p_partition: partition,
        p_group: a.group,
        p_budget: a.budget,
        p_lease_seconds: a.lease_seconds,
        p_worker: a.lease_id,
        p_auto_ack: a.auto_ack,
        p_sub_mode: a.sub_mode,
        p_sub_from: a.sub_from,
    };
    answer(PopSpecific::FUNCTION, &call.query_one(db).await?)
}

/// The hinted partitions of `queue`, in the given order, under the wildcard's budget and
/// partition cap; empty while the group has not registered on the queue.
pub async fn pop_hinted(
    db: &impl GenericClient,
    queue: &str,
    partitions: &[String],
    a: &ClaimArgs<'_>,
) -> Result<PopAnswer> {
    let call = PopHinted {
        p_queue: queue,
        p_group: a.group,
        p_partitions: partitions,
        p_budget: a.budget,
        p_lease_seconds: a.lease_seconds,
        p_worker: a.lease_id,
        p_auto_ack: a.auto_ack,
        p_max_partitions: a.max_partitions,
        p_sub_mode: a.sub_mode,
        p_sub_from: a.sub_from,
    };
    answer(PopHinted::FUNCTION, &call.query_one(db).await?)
}

/// What a list claim found on one candidate (`states` of `log_pop_list_v1`).
#[derive(Debug, Deserialize)]
pub struct ListVerdict {
    #[serde(rename = "p")]
    pub partition: String,
    /// `took`, `empty`, `leased` or `gone`.
    #[serde(rename = "s")]
    pub state: String,
    /// `leased`: until when; `took`: the lease's end (absent for autoAck).
    #[serde(default, deserialize_with = "iso")]
    pub until: Option<DateTime<Utc>>,
    /// The partition's last offset as the claim read it.
    #[serde(rename = "lastOff")]
    pub last_offset: Option<i64>,
}

/// A timestamp as `to_jsonb` renders it; one that does not parse counts as absent.
fn iso<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<DateTime<Utc>>, D::Error> {
    Ok(Option::<String>::deserialize(d)?
        .as_deref()
        .and_then(queen_proto::time::parse_iso))
}

/// The hot-list's claim: the named partitions of `queue`, in the given order, under the
/// wildcard's budget and partition cap, with a verdict per candidate it evaluated.
pub async fn pop_list(
    db: &impl GenericClient,
    queue: &str,
    partitions: &[String],
    a: &ClaimArgs<'_>,
) -> Result<(PopAnswer, Vec<ListVerdict>)> {
    const FUNCTION: &str = PopList::FUNCTION;
    let row = PopList {
        p_queue: queue,
        p_group: a.group,
        p_partitions: partitions,
        p_budget: a.budget,
        p_lease_seconds: a.lease_seconds,
        p_worker: a.lease_id,
        p_auto_ack: a.auto_ack,
        p_max_partitions: a.max_partitions,
        p_sub_mode: a.sub_mode,
        p_sub_from: a.sub_from,
    }
    .query_one(db)
    .await?;
    let answer = answer(FUNCTION, &row)?;
    let states: serde_json::Value = row.try_get(2)?;
    let states = serde_json::from_value(states)
        .map_err(|e| Error::internal(format!("{FUNCTION} answered unexpected states: {e}")))?;
    Ok((answer, states))
}

/// The claim of one partition by id (`log_pop_claim_v1`): what `log_pop_list_v1` runs for a
/// lone candidate, without resolving names or rendering JSON in PostgreSQL. `None` when `pid`
/// no longer names (queue, partition): the caller claims by name.
pub async fn pop_by_id(
    db: &impl GenericClient,
    pid: i64,
    queue: &str,
    partition: &str,
    a: &ClaimArgs<'_>,
) -> Result<Option<(PopAnswer, ListVerdict)>> {
    let row = PopClaim {
        p_pid: pid,
        p_group: a.group,
        p_budget: a.budget,
        p_lease_seconds: a.lease_seconds,
        p_worker: a.lease_id,
        p_auto_ack: a.auto_ack,
        p_sub_mode: a.sub_mode,
        p_sub_from: a.sub_from,
    }
    .query_one(db)
    .await?;
    let named: (Option<String>, Option<String>) = (row.try_get(4)?, row.try_get(5)?);
    if named != (Some(partition.to_string()), Some(queue.to_string())) {
        return Ok(None);
    }
    let verdict = ListVerdict {
        partition: partition.to_string(),
        state: row.try_get(0)?,
        until: row.try_get(1)?,
        last_offset: row.try_get(3)?,
    };
    let min_wait: Option<i32> = row.try_get(12)?;
    let mut answer = PopAnswer {
        partitions: Vec::new(),
        min_pop_wait_ms: min_wait.map(i64::from),
        blobs: Vec::new(),
    };
    if verdict.state == "took" {
        let segments = claimed_segments(&row)?;
        answer.blobs = row.try_get(11)?;
        if segments.len() != answer.blobs.len() {
            return Err(Error::internal(format!(
                "log_pop_claim_v1 answered {} segments but {} blobs",
                segments.len(),
                answer.blobs.len()
            )));
        }
        answer.partitions.push(ClaimedPartition {
            partition: verdict.partition.clone(),
            partition_id: pid,
            queue: queue.to_string(),
            delivery_attempt: row.try_get::<_, Option<i32>>(2)?.unwrap_or(1),
            lease_expires_at: (!a.auto_ack)
                .then_some(verdict.until)
                .flatten()
                .map(|t| t.timestamp_micros()),
            segments,
        });
    }
    Ok(Some((answer, verdict)))
}

/// The segment descriptors of a `log_pop_claim_v1` row (its aligned arrays, columns 6–10).
fn claimed_segments(row: &tokio_postgres::Row) -> Result<Vec<ClaimedSegment>> {
    let bases: Vec<i64> = row.try_get(6)?;
    let starts: Vec<i32> = row.try_get(7)?;
    let takes: Vec<i32> = row.try_get(8)?;
    let counts: Vec<i32> = row.try_get(9)?;
    let created: Vec<DateTime<Utc>> = row.try_get(10)?;
    let n = bases.len();
    if [starts.len(), takes.len(), counts.len(), created.len()] != [n; 4] {
        return Err(Error::internal(
            "log_pop_claim_v1 answered segment arrays of different lengths",
        ));
    }
    Ok((0..n)
        .map(|i| ClaimedSegment {
            base: bases[i],
            start_idx: starts[i],
            take: takes[i],
            msg_count: counts[i],
            created_at: created[i].timestamp_micros(),
        })
        .collect())
}

/// Every queue whose labels match (`""` matches any).
pub async fn pop_discover(
    db: &impl GenericClient,
    namespace: &str,
    task: &str,
    a: &ClaimArgs<'_>,
) -> Result<PopAnswer> {
    let call = PopDiscover {
        p_namespace: namespace,
        p_task: task,
        p_group: a.group,
        p_budget: a.budget,
        p_worker: a.lease_id,
        p_auto_ack: a.auto_ack,
        p_max_partitions: a.max_partitions,
        p_sub_mode: a.sub_mode,
        p_sub_from: a.sub_from,
        p_lease_seconds: a.lease_seconds,
    };
    answer(PopDiscover::FUNCTION, &call.query_one(db).await?)
}

/// False means the queue definitively has nothing for the group; true may be stale.
pub async fn has_pending(db: &impl GenericClient, queue: &str, group: &str) -> Result<bool> {
    let call = HasPending {
        p_queue: queue,
        p_group: group,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}

pub async fn partition_has_pending(
    db: &impl GenericClient,
    queue: &str,
    partition: &str,
    group: &str,
) -> Result<bool> {
    let call = PartitionHasPending {
        p_queue: queue,
        p_partition: partition,
        p_group: group,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}

pub async fn discover_has_pending(
    db: &impl GenericClient,
    namespace: &str,
    task: &str,
    group: &str,
) -> Result<bool> {
    let call = DiscoverHasPending {
        p_namespace: namespace,
        p_task: task,
        p_group: group,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}

/// Unleased pending messages of the queue (or one partition) for the group, up to `cap`.
pub async fn pending_estimate(
    db: &impl GenericClient,
    queue: &str,
    partition: Option<&str>,
    group: &str,
    cap: i64,
) -> Result<i64> {
    let call = PendingEstimate {
        p_queue: queue,
        p_partition: partition,
        p_group: group,
        p_cap: cap,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}
