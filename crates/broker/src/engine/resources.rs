//! Resource listings (docs/wire.md §14) and the stats refresh (§15). Every count is computed live
//! in SQL from partition and cursor watermarks (docs/engine.md §10.4), never by scanning segments;
//! so there is no stale cache to refresh, and a refresh reads the live overview. The answers are
//! rows; `http/resources.rs` renders them.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store::queues::QueueRow;
use crate::store::resources as store;

pub use crate::store::resources::{
    Counts, DepthRow, Overview, PartitionStats, QueueGroup, QueueSummary,
};

/// One queue in full: its summary, its options, its partitions and its member groups.
pub struct QueueDetail {
    pub summary: QueueSummary,
    pub options: QueueRow,
    pub partitions: Vec<PartitionStats>,
    pub groups: Vec<QueueGroup>,
}

pub async fn queues(st: &Engine) -> Result<Vec<QueueSummary>> {
    store::queues(&st.store, None).await
}

pub async fn queue(st: &Engine, name: &str) -> Result<QueueDetail> {
    let summary = store::queues(&st.store, Some(name))
        .await?
        .into_iter()
        .next()
        .ok_or_else(queue_not_found)?;
    let options = store::queue_row(&st.store, name)
        .await?
        .ok_or_else(queue_not_found)?;
    let partitions = store::partitions(&st.store, summary.id).await?;
    let groups = store::queue_groups(&st.store, summary.id).await?;
    Ok(QueueDetail {
        summary,
        options,
        partitions,
        groups,
    })
}

/// Pending messages of one group on one queue, per partition (default group: queue mode).
pub async fn depth(st: &Engine, name: &str, group: &str) -> Result<Vec<DepthRow>> {
    let rows = store::queue_depth(&st.store, name, group).await?;
    if rows.is_empty() {
        return Err(queue_not_found());
    }
    Ok(rows)
}

pub async fn overview(st: &Engine) -> Result<Overview> {
    store::overview(&st.store).await
}

fn queue_not_found() -> Error {
    Error::NotFound("Queue not found".into())
}
