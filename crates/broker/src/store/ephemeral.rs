//! The typed calls of sql/functions/ephemeral.sql: one function per verb of the ephemeral
//! queues (docs/engine.md §17), each one PostgreSQL transaction on the unlogged tables of
//! migration 0010. `defaults` is every option's default as JSON (engine/ephemeral/options.rs);
//! a declared queue's own options override it inside the SQL.

use deadpool_postgres::GenericClient;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use tokio_postgres::types::{Json, ToSql};

use crate::error::Result;

/// What a push came to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PushAnswer {
    /// Stored; `dropped` older messages made room (policy `dropOldest`).
    Pushed { pushed: i64, dropped: i64 },
    /// Refused by the queue's bounds (policy `reject`): what it holds and may hold.
    #[serde(rename_all = "camelCase")]
    Full {
        length: i64,
        bytes: i64,
        max_length: i64,
        max_bytes: i64,
    },
    /// The batch alone breaks the bounds: refused whatever the policy.
    #[serde(rename_all = "camelCase")]
    TooLarge {
        length: i64,
        bytes: i64,
        max_length: i64,
        max_bytes: i64,
    },
}

/// One message a pop delivered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PoppedRow {
    pub seq: i64,
    pub attempts: i32,
    /// The JSON text the push stored.
    pub payload: String,
}

/// What a pop came to: messages of one ring, or none (`held`: some are ready but fewer than
/// the queue's window asks for).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PopAnswer {
    pub partition: Option<String>,
    pub epoch: Option<i64>,
    pub messages: Vec<PoppedRow>,
    pub lease_seconds: Option<i64>,
    #[serde(default)]
    pub held: bool,
    pub window_ms: Option<i64>,
}

/// What a delete removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Deleted {
    pub deleted: bool,
    pub declared: bool,
}

/// Runs `sql` with `params`; its one jsonb answer as `T`.
async fn call<T: DeserializeOwned>(
    db: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<T> {
    let stmt = crate::store::prepare(db, sql).await?;
    let row = db.query_one(&stmt, params).await?;
    let Json(answer): Json<T> = row.try_get(0)?;
    Ok(answer)
}

/// `queen.eph_configure_v1`: declares `queue` with `options`; whether it was new.
pub async fn configure(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    options: &Value,
) -> Result<bool> {
    #[derive(Deserialize)]
    struct Created {
        created: bool,
    }
    let options = Json(options);
    let answer: Created = call(
        db,
        "SELECT queen.eph_configure_v1($1, $2, $3)",
        &[&tenant, &queue, &options],
    )
    .await?;
    Ok(answer.created)
}

/// `queen.eph_push_v1`: appends `payloads` (JSON texts) to the ring (`queue`, `partition`).
pub async fn push(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    partition: &str,
    payloads: &[&str],
    defaults: &Value,
) -> Result<PushAnswer> {
    let defaults = Json(defaults);
    call(
        db,
        "SELECT queen.eph_push_v1($1, $2, $3, $4, $5)",
        &[&tenant, &queue, &partition, &payloads, &defaults],
    )
    .await
}

/// The arguments of one pop call.
pub struct PopCall<'a> {
    pub tenant: &'a str,
    pub queue: &'a str,
    /// `None`: the ring with the oldest ready message.
    pub partition: Option<&'a str>,
    pub group: &'a str,
    pub batch: i32,
    pub auto_ack: bool,
    /// Honour the queue's windowBuffer count.
    pub window: bool,
}

/// `queen.eph_pop_v1`: one claim.
pub async fn pop(db: &impl GenericClient, c: &PopCall<'_>, defaults: &Value) -> Result<PopAnswer> {
    let defaults = Json(defaults);
    call(
        db,
        "SELECT queen.eph_pop_v1($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &c.tenant,
            &c.queue,
            &c.partition,
            &c.group,
            &c.batch,
            &c.auto_ack,
            &c.window,
            &defaults,
        ],
    )
    .await
}

/// `queen.eph_ack_v1`: `acks` = `[{partition,epoch,seq,retry}]`; their outcomes, in order.
pub async fn ack(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    group: &str,
    acks: &Value,
    defaults: &Value,
) -> Result<Vec<String>> {
    let (acks, defaults) = (Json(acks), Json(defaults));
    call(
        db,
        "SELECT queen.eph_ack_v1($1, $2, $3, $4, $5)",
        &[&tenant, &queue, &group, &acks, &defaults],
    )
    .await
}

/// `queen.eph_reset_v1`: how many messages were dropped.
pub async fn reset(db: &impl GenericClient, tenant: &str, queue: &str) -> Result<i64> {
    let stmt = crate::store::prepare(db, "SELECT queen.eph_reset_v1($1, $2)").await?;
    Ok(db.query_one(&stmt, &[&tenant, &queue]).await?.try_get(0)?)
}

/// `queen.eph_delete_v1`.
pub async fn delete(db: &impl GenericClient, tenant: &str, queue: &str) -> Result<Deleted> {
    call(db, "SELECT queen.eph_delete_v1($1, $2)", &[&tenant, &queue]).await
}

/// `queen.eph_queues_v1`: the tenant's queues' gauges, at most `limit`.
pub async fn queues(
    db: &impl GenericClient,
    tenant: &str,
    defaults: &Value,
    limit: i32,
) -> Result<Vec<Value>> {
    let defaults = Json(defaults);
    call(
        db,
        "SELECT queen.eph_queues_v1($1, $2, $3)",
        &[&tenant, &defaults, &limit],
    )
    .await
}

/// `queen.eph_depth_v1`: one queue's gauges, rings and cursors; `None` when it is not there.
pub async fn depth(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    defaults: &Value,
) -> Result<Option<Value>> {
    let stmt = crate::store::prepare(db, "SELECT queen.eph_depth_v1($1, $2, $3)").await?;
    let defaults = Json(defaults);
    let row = db.query_opt(&stmt, &[&tenant, &queue, &defaults]).await?;
    let answer: Option<Json<Value>> = match row {
        Some(row) => row.try_get(0)?,
        None => None,
    };
    Ok(answer.map(|Json(v)| v))
}

/// `queen.eph_sweep_step_v1`: drops expired messages of up to `max_queues` queues; how many
/// queues it swept.
pub async fn sweep_step(db: &impl GenericClient, defaults: &Value, max_queues: i32) -> Result<i64> {
    let stmt = crate::store::prepare(db, "SELECT queen.eph_sweep_step_v1($1, $2)").await?;
    let defaults = Json(defaults);
    let n: i32 = db
        .query_one(&stmt, &[&defaults, &max_queues])
        .await?
        .try_get(0)?;
    Ok(i64::from(n))
}
