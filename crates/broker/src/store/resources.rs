//! Typed calls of the resource SQL (sql/functions/admin.sql): queue listings, one queue with its
//! partitions and member groups, a group's depth on a queue, the overview and the metrics
//! sample, all computed live from watermarks. Every answer is rows; the HTTP floor renders them.

use tokio_postgres::Row;

use crate::error::Result;
use crate::store::queues::QueueRow;
use crate::store::sql_fn::sql_fns;
use crate::store::Store;

sql_fns! {
    /// Queue summaries of a tenant (or one queue).
    Queues<'a> = admin_queues_v1(p_queue: Option<&'a str>, p_tenant: &'a str) select "*";
    /// One queue's row.
    QueueRowOf<'a> = admin_queue_row_v1(p_queue: &'a str) select "*";
    /// One page of a queue's partitions.
    QueuePartitions<'a> = admin_queue_partitions_v1(
        p_queue_id: i64,
        p_after: Option<&'a str>,
        p_limit: Option<i32>,
    ) select "*";
    /// The groups on a queue.
    QueueGroups = admin_queue_groups_v1(p_queue_id: i64) select "*";
    /// A group's pending messages per partition of a queue.
    QueueDepth<'a> = admin_queue_depth_v1(p_queue: &'a str, p_group: &'a str) select "*";
    /// The overview's one row.
    OverviewOf<'a> = admin_overview_v1(p_tenant: &'a str) select "*";
    /// The metrics sample.
    Metrics<'a> = admin_metrics_v1(p_limit: i32, p_tenant: &'a str) select "*";
}

/// Message counts of a queue, a partition or everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub total: i64,
    pub pending: i64,
    pub processing: i64,
    pub dead_letter: i64,
}

impl Counts {
    fn of(r: &Row) -> Result<Self> {
        Ok(Counts {
            total: r.try_get("total")?,
            pending: r.try_get("pending")?,
            processing: r.try_get("processing")?,
            dead_letter: r.try_get("dead_letter")?,
        })
    }
}

/// One queue of the listing.
#[derive(Debug, Clone)]
pub struct QueueSummary {
    pub id: i64,
    pub name: String,
    pub namespace: String,
    pub task: String,
    pub priority: i32,
    pub created_at: Option<String>,
    pub partitions: i64,
    pub messages: Counts,
}

/// Every queue of `tenant` (`None`), or its named one (empty when unknown), by name; only
/// that tenant's partitions are counted.
pub async fn queues(store: &Store, only: Option<&str>, tenant: &str) -> Result<Vec<QueueSummary>> {
    let found = Queues {
        p_queue: only,
        p_tenant: tenant,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(QueueSummary {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                namespace: r.try_get("namespace")?,
                task: r.try_get("task")?,
                priority: r.try_get("priority")?,
                created_at: r.try_get("created_at")?,
                partitions: r.try_get("partitions")?,
                messages: Counts::of(r)?,
            })
        })
        .collect()
}

/// The options of the named queue.
pub async fn queue_row(store: &Store, queue: &str) -> Result<Option<QueueRow>> {
    let found = QueueRowOf { p_queue: queue }
        .query(&store.conn().await?)
        .await?;
    found.first().map(QueueRow::from_row).transpose()
}

/// One partition of a queue's detail.
#[derive(Debug, Clone)]
pub struct PartitionStats {
    pub id: i64,
    pub name: String,
    pub created_at: Option<String>,
    pub last_activity: Option<String>,
    pub last_offset: i64,
    pub log_start: i64,
    pub messages: Counts,
}

/// Which partitions of a queue to list, by name: those after `after` (all when `None`), at
/// most `limit` of them (all when `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionPage<'a> {
    pub after: Option<&'a str>,
    pub limit: Option<i32>,
}

/// The partitions of a queue in `page`, by name.
pub async fn partitions(
    store: &Store,
    queue_id: i64,
    page: PartitionPage<'_>,
) -> Result<Vec<PartitionStats>> {
    let found = QueuePartitions {
        p_queue_id: queue_id,
        p_after: page.after,
        p_limit: page.limit,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(PartitionStats {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                created_at: r.try_get("created_at")?,
                last_activity: r.try_get("last_activity")?,
                last_offset: r.try_get("last_offset")?,
                log_start: r.try_get("log_start")?,
                messages: Counts::of(r)?,
            })
        })
        .collect()
}

/// One member group of a queue with what it has pending.
#[derive(Debug, Clone)]
pub struct QueueGroup {
    pub name: String,
    pub pending: i64,
    pub active_leases: i64,
}

/// The member groups of a queue, by name.
pub async fn queue_groups(store: &Store, queue_id: i64) -> Result<Vec<QueueGroup>> {
    let found = QueueGroups {
        p_queue_id: queue_id,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(QueueGroup {
                name: r.try_get("name")?,
                pending: r.try_get("pending")?,
                active_leases: r.try_get("active_leases")?,
            })
        })
        .collect()
}

/// One partition's pending count for a group (`partition` `None`: the queue has none).
#[derive(Debug, Clone)]
pub struct DepthRow {
    pub partition: Option<String>,
    pub pending: i64,
    pub conflation: bool,
}

/// The group's pending count per partition of the queue, by name; empty when the queue is
/// unknown.
pub async fn queue_depth(store: &Store, queue: &str, group: &str) -> Result<Vec<DepthRow>> {
    let found = QueueDepth {
        p_queue: queue,
        p_group: group,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(DepthRow {
                partition: r.try_get("partition_name")?,
                pending: r.try_get("pending")?,
                conflation: r.try_get("conflation")?,
            })
        })
        .collect()
}

/// The whole broker's numbers.
#[derive(Debug, Clone)]
pub struct Overview {
    pub queues: i64,
    pub partitions: i64,
    pub namespaces: i64,
    pub tasks: i64,
    pub consumer_groups: i64,
    pub messages: Counts,
    pub completed: i64,
    /// The database clock, ISO-8601.
    pub at: Option<String>,
}

/// The overview over the queues of `tenant`.
pub async fn overview(store: &Store, tenant: &str) -> Result<Overview> {
    let found = OverviewOf { p_tenant: tenant }
        .query(&store.conn().await?)
        .await?;
    let r = found
        .first()
        .ok_or_else(|| crate::error::Error::internal("admin_overview_v1 answered no row"))?;
    Ok(Overview {
        queues: r.try_get("queues")?,
        partitions: r.try_get("partitions")?,
        namespaces: r.try_get("namespaces")?,
        tasks: r.try_get("tasks")?,
        consumer_groups: r.try_get("consumer_groups")?,
        messages: Counts::of(r)?,
        completed: r.try_get("completed")?,
        at: r.try_get("at")?,
    })
}

/// What a queue holds, in the metrics sample.
#[derive(Debug, Clone)]
pub struct QueueLoad {
    pub queue: String,
    pub pending: i64,
    pub dead_letter: i64,
}

/// What a consumer group has left on a queue, in the metrics sample.
#[derive(Debug, Clone)]
pub struct GroupLag {
    pub queue: String,
    pub group: String,
    pub pending: i64,
}

/// The bounded sample `/metrics/prometheus` reads over one tenant's queues: totals over them,
/// the `limit` queues with the most pending messages, and the `limit` (queue, group) pairs
/// furthest behind.
#[derive(Debug, Clone, Default)]
pub struct MetricsSample {
    pub total: Counts,
    pub queues: Vec<QueueLoad>,
    pub groups: Vec<GroupLag>,
}

pub async fn metrics_sample(store: &Store, limit: i32, tenant: &str) -> Result<MetricsSample> {
    let found = Metrics {
        p_limit: limit,
        p_tenant: tenant,
    }
    .query(&store.conn().await?)
    .await?;
    let mut sample = MetricsSample::default();
    for r in &found {
        let queue: Option<String> = r.try_get("queue_name")?;
        let group: Option<String> = r.try_get("consumer_group")?;
        let pending: i64 = r.try_get("pending")?;
        match (queue, group) {
            (None, _) => {
                sample.total.pending = pending;
                sample.total.dead_letter = r.try_get("dead_letter")?;
            }
            (Some(queue), None) => sample.queues.push(QueueLoad {
                queue,
                pending,
                dead_letter: r.try_get("dead_letter")?,
            }),
            (Some(queue), Some(group)) => sample.groups.push(GroupLag {
                queue,
                group,
                pending,
            }),
        }
    }
    Ok(sample)
}
