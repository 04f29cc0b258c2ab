//! Ephemeral queues (docs/engine.md §17, docs/wire.md §25): the verbs of
//! `/api/v1/ephemeral/*` and the decisions around them. Contents live in UNLOGGED PostgreSQL
//! tables (no WAL; shared by every broker; kept across broker restarts; emptied by a
//! PostgreSQL crash, absent on a promoted standby), declarations in a logged one
//! (sql/migrations/0010_ephemeral.sql); each verb is one SQL function (store/ephemeral.rs).
//! This module owns the limits of a call, the ack status vocabulary, the message ids
//! ([`id`]), the options ([`options`]), the long poll ([`pop`]) and the wake of parked pops.

pub mod id;
pub mod options;
mod pop;

use serde_json::Value;

use crate::accel::admission::Lane;
use crate::engine::tenant::Tenant;
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::ephemeral as store;
pub use crate::store::ephemeral::{Deleted, PushAnswer};
pub use id::MessageId;
pub use pop::{pop, Delivered, PopRequest};

/// The partition of a push or pop that names none.
pub const DEFAULT_PARTITION: &str = "Default";
/// Most messages one push carries.
pub const MAX_PUSH_MESSAGES: usize = 10_000;
/// Most acks one call carries.
pub const MAX_ACKS: usize = 1000;
/// Most queues `GET /api/v1/ephemeral/queues` lists (then `truncated`).
pub const MAX_QUEUES_LISTED: usize = 1000;

/// An ack's answer for one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Retired (also a nack whose deliveries were spent: the message was dropped and counted).
    Acked,
    /// A nack: the message is ready again, its attempts to grow on the next delivery.
    Redelivered,
    /// The id belongs to an incarnation of the ring that is gone (a PostgreSQL crash, a
    /// reset, a delete): an answer, not an error.
    Stale,
    /// The ring is live but the group holds no live lease on that message.
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acked => "acked",
            Outcome::Redelivered => "redelivered",
            Outcome::Stale => "stale",
            Outcome::Unknown => "unknown",
        }
    }

    fn parse(text: &str) -> Result<Outcome> {
        match text {
            "acked" => Ok(Outcome::Acked),
            "redelivered" => Ok(Outcome::Redelivered),
            "stale" => Ok(Outcome::Stale),
            "unknown" => Ok(Outcome::Unknown),
            other => Err(Error::internal(format!(
                "eph_ack_v1 answered the outcome {other:?}"
            ))),
        }
    }
}

/// One ack: the message and whether it asks for redelivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub id: MessageId,
    pub nack: bool,
}

/// Whether an ack `status` is a nack. Absent, `completed`, `success`, `acked` and `ok` retire
/// the message; every other string (`failed`, `retry`, a typo) asks for redelivery, so a
/// misspelt status can never retire a message by accident.
pub fn is_nack(status: Option<&str>) -> bool {
    !matches!(
        status,
        None | Some("completed") | Some("success") | Some("acked") | Some("ok")
    )
}

/// The wake gate of a queue's parked pops. The control characters keep it apart from every
/// durable queue's gate (a client name holds none) and from other tenants' queues.
fn gate_key(tenant: &Tenant, queue: &str) -> String {
    format!("\u{2}eph\u{2}{}\u{2}{queue}", tenant.id())
}

/// Declares `queue` with `options` (checked by [`options::parse`]): whether it was new, and
/// the options now in force.
pub async fn configure(
    st: &Shared,
    tenant: &Tenant,
    queue: &str,
    options: &Value,
) -> Result<(bool, Value)> {
    let _permit = st.admission.acquire(Lane::Ack).await;
    let db = st.store.conn().await?;
    let created = store::configure(&db, tenant.id(), queue, options).await?;
    let mut effective = options::defaults();
    if let (Some(all), Some(given)) = (effective.as_object_mut(), options.as_object()) {
        all.extend(given.clone());
    }
    Ok((created, effective))
}

/// Appends `payloads` (checked JSON texts) to the ring (`queue`, `partition`), all or nothing,
/// and wakes the queue's parked pops when they were stored.
pub async fn push(
    st: &Shared,
    tenant: &Tenant,
    queue: &str,
    partition: &str,
    payloads: &[&str],
) -> Result<PushAnswer> {
    let answer = {
        let _permit = st.admission.acquire(Lane::Push).await;
        let db = st.store.conn().await?;
        store::push(
            &db,
            tenant.id(),
            queue,
            partition,
            payloads,
            &options::defaults(),
        )
        .await?
    };
    if matches!(answer, PushAnswer::Pushed { .. }) {
        st.wake.wake_queue(&gate_key(tenant, queue));
    }
    Ok(answer)
}

/// Applies `acks` for `group`: their outcomes, in order. A nack wakes the queue's parked pops.
pub async fn ack(
    st: &Shared,
    tenant: &Tenant,
    queue: &str,
    group: &str,
    acks: &[Ack],
) -> Result<Vec<Outcome>> {
    let body: Vec<Value> = acks
        .iter()
        .map(|a| {
            serde_json::json!({
                "partition": a.id.partition, "epoch": a.id.epoch, "seq": a.id.seq, "retry": a.nack,
            })
        })
        .collect();
    let answers = {
        let _permit = st.admission.acquire(Lane::Ack).await;
        let db = st.store.conn().await?;
        store::ack(
            &db,
            tenant.id(),
            queue,
            group,
            &Value::Array(body),
            &options::defaults(),
        )
        .await?
    };
    if answers.len() != acks.len() {
        return Err(Error::internal(format!(
            "eph_ack_v1 answered {} outcomes for {} acks",
            answers.len(),
            acks.len()
        )));
    }
    let outcomes = answers
        .iter()
        .map(|a| Outcome::parse(a))
        .collect::<Result<Vec<_>>>()?;
    if outcomes.contains(&Outcome::Redelivered) {
        st.wake.wake_queue(&gate_key(tenant, queue));
    }
    Ok(outcomes)
}

/// Drops every message, lease and cursor of `queue` (the declaration stays): how many messages.
pub async fn reset(st: &Shared, tenant: &Tenant, queue: &str) -> Result<i64> {
    let _permit = st.admission.acquire(Lane::Ack).await;
    let db = st.store.conn().await?;
    store::reset(&db, tenant.id(), queue).await
}

/// Deletes `queue`'s contents and declaration.
pub async fn delete(st: &Shared, tenant: &Tenant, queue: &str) -> Result<Deleted> {
    let _permit = st.admission.acquire(Lane::Ack).await;
    let db = st.store.conn().await?;
    store::delete(&db, tenant.id(), queue).await
}

/// The tenant's queues' gauges (at most [`MAX_QUEUES_LISTED`]) and whether more exist.
pub async fn queues(st: &Shared, tenant: &Tenant) -> Result<(Vec<Value>, bool)> {
    let db = st.store.conn().await?;
    let most = i32::try_from(MAX_QUEUES_LISTED + 1).unwrap_or(i32::MAX);
    let mut rows = store::queues(&db, tenant.id(), &options::defaults(), most).await?;
    let truncated = rows.len() > MAX_QUEUES_LISTED;
    rows.truncate(MAX_QUEUES_LISTED);
    Ok((rows, truncated))
}

/// The retention loop's ttl sweep (docs/engine.md §17.4): queues holding messages past their
/// `ttlSeconds`, swept in batches of `batch` queues until one comes back short, so an idle
/// queue's expired messages are dropped too.
pub async fn sweep_expired(
    st: &Shared,
    batch: i32,
    closing: &tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let db = st.store.conn().await?;
    let defaults = options::defaults();
    while !*closing.borrow() {
        if store::sweep_step(&db, &defaults, batch).await? < i64::from(batch) {
            break;
        }
    }
    Ok(())
}

/// One queue's gauges, rings and cursors; `None` when it is neither declared nor live.
pub async fn depth(st: &Shared, tenant: &Tenant, queue: &str) -> Result<Option<Value>> {
    let db = st.store.conn().await?;
    store::depth(&db, tenant.id(), queue, &options::defaults()).await
}
