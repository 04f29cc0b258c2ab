//! Resource listings (docs/wire.md §14) and the stats refresh (§15). Every count is computed live
//! in SQL from partition and cursor watermarks (docs/engine.md §10.4), never by scanning segments;
//! so there is no stale cache to refresh, and `refresh` answers the live overview.

use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store::resources as store;

pub async fn queues(st: &Engine) -> Result<Value> {
    store::queues(&st.store).await
}

pub async fn queue(st: &Engine, name: &str) -> Result<Value> {
    store::queue(&st.store, name)
        .await?
        .ok_or_else(queue_not_found)
}

/// Pending messages of one group on one queue (default group: queue mode).
pub async fn depth(st: &Engine, name: &str, group: Option<&str>) -> Result<Value> {
    let group = group
        .filter(|g| !g.is_empty())
        .unwrap_or(queen_proto::wire::QUEUE_MODE);
    store::queue_depth(&st.store, name, group)
        .await?
        .ok_or_else(queue_not_found)
}

pub async fn overview(st: &Engine) -> Result<Value> {
    store::overview(&st.store).await
}

/// The overview, stamped as refreshed: the numbers are computed at read time anyway.
pub async fn refresh(st: &Engine) -> Result<Value> {
    let overview = store::overview(&st.store).await?;
    Ok(json!({ "success": true, "message": "Statistics are computed live", "stats": overview }))
}

fn queue_not_found() -> Error {
    Error::NotFound("Queue not found".into())
}
