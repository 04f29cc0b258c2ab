//! Resource listings (docs/wire.md §14), the stats refresh and the metrics sample (§15). Every count is computed live
//! in SQL from partition and cursor watermarks (docs/engine.md §10.4), never by scanning segments;
//! so there is no stale cache to refresh, and a refresh reads the live overview. The answers are
//! rows; `http/resources.rs` renders them.

use std::sync::Arc;

use crate::accel::admission::Lane;
use crate::accel::one_flight::OneFlight;
use crate::engine::tenant::{self, Tenant};
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::queues::QueueRow;
use crate::store::resources as store;

pub use crate::store::resources::{
    Counts, DepthRow, GroupLag, MetricsSample, Overview, PartitionPage, PartitionStats, QueueGroup,
    QueueLoad, QueueSummary,
};

/// One queue in full: its summary, its options, a page of its partitions and its member
/// groups.
pub struct QueueDetail {
    pub summary: QueueSummary,
    pub options: QueueRow,
    pub partitions: Vec<PartitionStats>,
    /// The cursor of the next page (the last name of this one) when more partitions follow.
    pub next_partition: Option<String>,
    pub groups: Vec<QueueGroup>,
}

/// Every queue of `tenant`, by name, with the names its client knows.
pub async fn queues(st: &Shared, tenant: &Tenant) -> Result<Vec<QueueSummary>> {
    let mut queues = store::queues(&st.store, None, tenant.id()).await?;
    queues.iter_mut().for_each(local_summary);
    Ok(queues)
}

/// `tenant`'s queue `name` with the partitions of `page`; 404 when it has none of that name.
pub async fn queue(
    st: &Shared,
    name: &str,
    page: PartitionPage<'_>,
    tenant: &Tenant,
) -> Result<QueueDetail> {
    let name: &str = &tenant::qualify(tenant, "queue", name)?;
    let mut summary = store::queues(&st.store, Some(name), tenant.id())
        .await?
        .into_iter()
        .next()
        .ok_or_else(queue_not_found)?;
    local_summary(&mut summary);
    let mut options = store::queue_row(&st.store, name)
        .await?
        .ok_or_else(queue_not_found)?;
    for label in [&mut options.name, &mut options.namespace, &mut options.task] {
        *label = tenant::local(label).to_string();
    }
    // One row past the page tells whether another page follows.
    let probe = PartitionPage {
        limit: page.limit.map(|n| n.saturating_add(1)),
        ..page
    };
    let mut partitions = store::partitions(&st.store, summary.id, probe).await?;
    let next_partition = match page.limit.and_then(|n| usize::try_from(n).ok()) {
        Some(n) if partitions.len() > n => {
            partitions.truncate(n);
            partitions.last().map(|p| p.name.clone())
        }
        _ => None,
    };
    let groups = store::queue_groups(&st.store, summary.id).await?;
    Ok(QueueDetail {
        summary,
        options,
        partitions,
        next_partition,
        groups,
    })
}

/// Pending messages of one group on one of `tenant`'s queues, per partition (default group: queue mode).
pub async fn depth(st: &Shared, name: &str, group: &str, tenant: &Tenant) -> Result<Vec<DepthRow>> {
    let name = tenant::qualify(tenant, "queue", name)?;
    let rows = store::queue_depth(&st.store, &name, group).await?;
    if rows.is_empty() {
        return Err(queue_not_found());
    }
    Ok(rows)
}

/// The counts over `tenant`'s queues.
pub async fn overview(st: &Shared, tenant: &Tenant) -> Result<Overview> {
    store::overview(&st.store, tenant.id()).await
}

/// A summary's names as the tenant's client knows them.
fn local_summary(q: &mut QueueSummary) {
    for label in [&mut q.name, &mut q.namespace, &mut q.task] {
        *label = tenant::local(label).to_string();
    }
}

/// The queue samples of `/metrics/prometheus`, one flight per tenant, each serving
/// `QUEEN_METRICS_CACHE_MS`; a failed read keeps its cause.
pub type MetricsSamples = OneFlight<Tenant, Result<Arc<MetricsSample>, Arc<str>>>;

/// The queue sample of a Prometheus scrape over `tenant`'s queues, capped at
/// `QUEEN_METRICS_MAX_QUEUES` queues and as many (queue, group) pairs; `Err` is the cause of a
/// failed read. Its cost grows with the database, so it is one flight per tenant, its answer
/// serves every scrape for `QUEEN_METRICS_CACHE_MS`, and the read takes an admission permit
/// of the pop lane (a read of the log, like a pop) before its connection.
pub async fn metrics_sample(
    st: &Shared,
    samples: &MetricsSamples,
    tenant: &Tenant,
) -> Result<Arc<MetricsSample>, Arc<str>> {
    let limit = i32::try_from(st.cfg.metrics_max_queues).unwrap_or(i32::MAX);
    let read = || async {
        let _permit = st.admission.acquire(Lane::Pop).await;
        store::metrics_sample(&st.store, limit, tenant.id())
            .await
            .map(Arc::new)
            .map_err(|e| Arc::from(e.chain()))
    };
    samples.get(tenant, read).await
}

fn queue_not_found() -> Error {
    Error::NotFound("Queue not found".into())
}
