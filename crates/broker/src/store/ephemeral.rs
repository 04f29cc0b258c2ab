//! The typed calls of sql/functions/ephemeral.sql: one function per verb of the ephemeral
//! queues (docs/engine.md §17), each one PostgreSQL transaction on the unlogged tables of
//! migration 0010. `defaults` is every option's default as JSON (engine/ephemeral/options.rs);
//! a declared queue's own options override it inside the SQL.

use deadpool_postgres::GenericClient;
use serde::Deserialize;
use serde_json::Value;
use tokio_postgres::types::Json;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Declares a queue with its options.
    Configure<'a> = eph_configure_v1(p_tenant: &'a str, p_queue: &'a str, p_options: &'a Value);
    /// Appends payloads to one ring.
    Push<'a> = eph_push_v1(
        p_tenant: &'a str,
        p_queue: &'a str,
        p_partition: &'a str,
        p_payloads: &'a [&'a str],
        p_defaults: &'a Value,
    );
    /// One claim.
    Pop<'a> = eph_pop_v1(
        p_tenant: &'a str,
        p_queue: &'a str,
        p_partition: Option<&'a str>,
        p_group: &'a str,
        p_batch: i32,
        p_auto_ack: bool,
        p_window: bool,
        p_defaults: &'a Value,
    );
    /// Acknowledgements, in order.
    Ack<'a> = eph_ack_v1(
        p_tenant: &'a str,
        p_queue: &'a str,
        p_group: &'a str,
        p_acks: &'a Value,
        p_defaults: &'a Value,
    );
    /// Drops every message of a queue.
    Reset<'a> = eph_reset_v1(p_tenant: &'a str, p_queue: &'a str);
    /// Deletes a queue.
    Delete<'a> = eph_delete_v1(p_tenant: &'a str, p_queue: &'a str);
    /// The tenant's queues' gauges.
    Queues<'a> = eph_queues_v1(p_tenant: &'a str, p_defaults: &'a Value, p_limit: i32);
    /// One queue's gauges, rings and cursors.
    Depth<'a> = eph_depth_v1(p_tenant: &'a str, p_queue: &'a str, p_defaults: &'a Value);
    /// Drops expired messages of a batch of queues.
    SweepStep<'a> = eph_sweep_step_v1(p_defaults: &'a Value, p_max: i32);
}

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
    let answer: Created = Configure {
        p_tenant: tenant,
        p_queue: queue,
        p_options: options,
    }
    .json(db)
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
    Push {
        p_tenant: tenant,
        p_queue: queue,
        p_partition: partition,
        p_payloads: payloads,
        p_defaults: defaults,
    }
    .json(db)
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
    Pop {
        p_tenant: c.tenant,
        p_queue: c.queue,
        p_partition: c.partition,
        p_group: c.group,
        p_batch: c.batch,
        p_auto_ack: c.auto_ack,
        p_window: c.window,
        p_defaults: defaults,
    }
    .json(db)
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
    Ack {
        p_tenant: tenant,
        p_queue: queue,
        p_group: group,
        p_acks: acks,
        p_defaults: defaults,
    }
    .json(db)
    .await
}

/// `queen.eph_reset_v1`: how many messages were dropped.
pub async fn reset(db: &impl GenericClient, tenant: &str, queue: &str) -> Result<i64> {
    let call = Reset {
        p_tenant: tenant,
        p_queue: queue,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
}

/// `queen.eph_delete_v1`.
pub async fn delete(db: &impl GenericClient, tenant: &str, queue: &str) -> Result<Deleted> {
    Delete {
        p_tenant: tenant,
        p_queue: queue,
    }
    .json(db)
    .await
}

/// `queen.eph_queues_v1`: the tenant's queues' gauges, at most `limit`.
pub async fn queues(
    db: &impl GenericClient,
    tenant: &str,
    defaults: &Value,
    limit: i32,
) -> Result<Vec<Value>> {
    Queues {
        p_tenant: tenant,
        p_defaults: defaults,
        p_limit: limit,
    }
    .json(db)
    .await
}

/// `queen.eph_depth_v1`: one queue's gauges, rings and cursors; `None` when it is not there.
pub async fn depth(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    defaults: &Value,
) -> Result<Option<Value>> {
    let row = Depth {
        p_tenant: tenant,
        p_queue: queue,
        p_defaults: defaults,
    }
    .query_opt(db)
    .await?;
    let answer: Option<Json<Value>> = match row {
        Some(row) => row.try_get(0)?,
        None => None,
    };
    Ok(answer.map(|Json(v)| v))
}

/// `queen.eph_sweep_step_v1`: drops expired messages of up to `max_queues` queues; how many
/// queues it swept.
pub async fn sweep_step(db: &impl GenericClient, defaults: &Value, max_queues: i32) -> Result<i64> {
    let call = SweepStep {
        p_defaults: defaults,
        p_max: max_queues,
    };
    let n: i32 = call.query_one(db).await?.try_get(0)?;
    Ok(i64::from(n))
}
