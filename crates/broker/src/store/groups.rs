//! Typed calls of the consumer-group admin SQL (sql/functions/admin.sql): listings, lag, seeks,
//! deletes and the subscription update. Every answer is rows; the HTTP floor renders them.

use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::store::sql_fn::sql_fns;
use crate::store::Store;

sql_fns! {
    /// Every (group, queue) pair of a tenant.
    Groups<'a> = admin_groups_v1(p_tenant: &'a str) select "*";
    /// One group's partitions.
    Group<'a> = admin_group_v1(p_group: &'a str, p_tenant: &'a str) select "*";
    /// Partitions whose group lags by at least so many seconds.
    Lagging<'a> = admin_lagging_v1(p_min_lag_seconds: i64, p_tenant: &'a str) select "*";
    /// Moves a group's cursor to the end or to a time.
    Seek<'a> = admin_seek_v1(
        p_group: &'a str,
        p_queue: &'a str,
        p_partition: Option<&'a str>,
        p_to_end: bool,
        p_ts: Option<DateTime<Utc>>,
    ) select "*";
    /// Deletes a group's cursors (and its metadata).
    DeleteGroup<'a> = admin_delete_group_v1(
        p_group: &'a str,
        p_queue: Option<&'a str>,
        p_delete_metadata: bool,
        p_tenant: &'a str,
    ) select "*";
    /// Moves a group's subscription time.
    SetSubscription<'a> = admin_set_subscription_v1(
        p_group: &'a str,
        p_ts: DateTime<Utc>,
        p_tenant: &'a str,
    );
}

/// One (group, queue) of the group listing.
#[derive(Debug, Clone)]
pub struct GroupQueueRow {
    pub group: String,
    pub queue: String,
    pub partitions: i64,
    pub pending: i64,
    pub active_leases: i64,
    pub time_lag_seconds: i64,
    pub subscription_mode: Option<String>,
    /// ISO-8601, milliseconds, Z.
    pub subscription_timestamp: Option<String>,
}

/// Every (group, queue) pair of `tenant`'s queues, by group then queue.
pub async fn groups(store: &Store, tenant: &str) -> Result<Vec<GroupQueueRow>> {
    let found = Groups { p_tenant: tenant }
        .query(&store.conn().await?)
        .await?;
    found
        .iter()
        .map(|r| {
            Ok(GroupQueueRow {
                group: r.try_get("consumer_group")?,
                queue: r.try_get("queue_name")?,
                partitions: r.try_get("partitions")?,
                pending: r.try_get("pending")?,
                active_leases: r.try_get("active_leases")?,
                time_lag_seconds: r.try_get("time_lag_seconds")?,
                subscription_mode: r.try_get("subscription_mode")?,
                subscription_timestamp: r.try_get("subscription_timestamp")?,
            })
        })
        .collect()
}

/// One partition of a group's detail.
#[derive(Debug, Clone)]
pub struct GroupPartitionRow {
    pub queue: String,
    pub conflation: bool,
    pub subscription_mode: Option<String>,
    pub subscription_timestamp: Option<String>,
    pub partition: String,
    pub partition_id: String,
    /// The lease held on the partition (`worker_id` in SQL).
    pub lease_id: Option<String>,
    pub last_consumed_at: Option<String>,
    pub total_consumed: i64,
    pub offset_lag: i64,
    pub time_lag_seconds: i64,
    pub lease_active: bool,
}

/// Every partition of every queue of `tenant` that `group` is on, by queue then partition
/// (empty: on none).
pub async fn group(store: &Store, group: &str, tenant: &str) -> Result<Vec<GroupPartitionRow>> {
    let found = Group {
        p_group: group,
        p_tenant: tenant,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(GroupPartitionRow {
                queue: r.try_get("queue_name")?,
                conflation: r.try_get("conflation")?,
                subscription_mode: r.try_get("subscription_mode")?,
                subscription_timestamp: r.try_get("subscription_timestamp")?,
                partition: r.try_get("partition_name")?,
                partition_id: r.try_get("partition_id")?,
                lease_id: r.try_get("worker_id")?,
                last_consumed_at: r.try_get("last_consumed_at")?,
                total_consumed: r.try_get("total_consumed")?,
                offset_lag: r.try_get("offset_lag")?,
                time_lag_seconds: r.try_get("time_lag_seconds")?,
                lease_active: r.try_get("lease_active")?,
            })
        })
        .collect()
}

/// One lagging partition of one group.
#[derive(Debug, Clone)]
pub struct LaggingRow {
    pub group: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: String,
    /// The lease held on the partition (`worker_id` in SQL).
    pub lease_id: Option<String>,
    pub offset_lag: i64,
    pub time_lag_seconds: i64,
    pub oldest_unconsumed_at: Option<String>,
    pub last_consumed_at: Option<String>,
}

/// Partitions of `tenant`'s queues whose oldest unconsumed message is at least
/// `min_lag_seconds` old, most lagging first.
pub async fn lagging(store: &Store, min_lag_seconds: i64, tenant: &str) -> Result<Vec<LaggingRow>> {
    let found = Lagging {
        p_min_lag_seconds: min_lag_seconds,
        p_tenant: tenant,
    }
    .query(&store.conn().await?)
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(LaggingRow {
                group: r.try_get("consumer_group")?,
                queue: r.try_get("queue_name")?,
                partition: r.try_get("partition_name")?,
                partition_id: r.try_get("partition_id")?,
                lease_id: r.try_get("worker_id")?,
                offset_lag: r.try_get("offset_lag")?,
                time_lag_seconds: r.try_get("time_lag_seconds")?,
                oldest_unconsumed_at: r.try_get("oldest_unconsumed_at")?,
                last_consumed_at: r.try_get("last_consumed_at")?,
            })
        })
        .collect()
}

/// What a seek did: nothing matched (`found: false`), or how many cursors moved and whether
/// anything became pending again.
#[derive(Debug, Clone, Copy)]
pub struct SeekVerdict {
    pub found: bool,
    pub partitions_updated: i32,
    pub rewound: bool,
}

pub async fn seek(
    store: &Store,
    group: &str,
    queue: &str,
    partition: Option<&str>,
    to_end: bool,
    timestamp: Option<DateTime<Utc>>,
) -> Result<SeekVerdict> {
    let r = Seek {
        p_group: group,
        p_queue: queue,
        p_partition: partition,
        p_to_end: to_end,
        p_ts: timestamp,
    }
    .query_one(&store.conn().await?)
    .await?;
    Ok(SeekVerdict {
        found: r.try_get("r_found")?,
        partitions_updated: r.try_get("r_partitions_updated")?,
        rewound: r.try_get("r_rewound")?,
    })
}

/// What a group delete did: an unknown queue (`found: false`), or the cursors deleted and the
/// queues the group was on.
#[derive(Debug, Clone)]
pub struct DeleteVerdict {
    pub found: bool,
    pub deleted_partitions: i32,
    pub queues: Vec<String>,
}

pub async fn delete_group(
    store: &Store,
    group: &str,
    queue: Option<&str>,
    delete_metadata: bool,
    tenant: &str,
) -> Result<DeleteVerdict> {
    let r = DeleteGroup {
        p_group: group,
        p_queue: queue,
        p_delete_metadata: delete_metadata,
        p_tenant: tenant,
    }
    .query_one(&store.conn().await?)
    .await?;
    Ok(DeleteVerdict {
        found: r.try_get("r_found")?,
        deleted_partitions: r.try_get("r_deleted_partitions")?,
        queues: r.try_get("r_queues")?,
    })
}

/// Registrations updated.
pub async fn set_subscription(
    store: &Store,
    group: &str,
    timestamp: DateTime<Utc>,
    tenant: &str,
) -> Result<i32> {
    let call = SetSubscription {
        p_group: group,
        p_ts: timestamp,
        p_tenant: tenant,
    };
    Ok(call.query_one(&store.conn().await?).await?.try_get(0)?)
}
