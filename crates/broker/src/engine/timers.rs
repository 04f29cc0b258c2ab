//! Timers (docs/engine.md §16, docs/wire.md §22): a message scheduled for later under a key
//! of its queue. This module owns the operations (schedule, reschedule, cancel, and the
//! wheel's own fire), their rules, and the reads; `engine/timer_wheel/` fires the due ones. The rows live in `queen.log_timers`
//! (sql/functions/timers.sql), keyed by the caller's tenant, the queue as the client names it
//! and the timer key.

use std::collections::HashSet;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::engine::encryption::Encryption;
use crate::engine::tenant::{self, Tenant};
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::timers::{self as store, Applied, TimerVerdict};

pub use crate::store::timers::{Claimed, PendingTimer, StoredPayload};

/// Most operations in one call (route or transaction rider).
pub const MAX_OPS: usize = 256;
/// Most bytes of one timer's payload (after `payloadZstd` is undone).
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// Longest delay a timer may be scheduled with: 90 days.
pub const MAX_DELAY_MS: i64 = 90 * 24 * 3600 * 1000;
/// Longest timer key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Rows of a list page when the caller names no limit, and the most it may ask for.
pub const LIST_DEFAULT: i32 = 100;
pub const LIST_MAX: i32 = 1000;
/// The timer wheel's longest sleep (engine/timer_wheel/): how late it may see a timer
/// scheduled through another broker. A schedule here due sooner wakes it.
pub const WHEEL_MAX_SLEEP_MS: i64 = 1000;

/// A schedule (or reschedule: the same upsert, named by intent).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub reschedule: bool,
    pub queue: String,
    pub timer_key: String,
    pub partition: String,
    /// The message's JSON bytes, as it will be pushed.
    pub payload: Vec<u8>,
    /// The fired message's transactionId (minted by the client).
    pub txn: String,
    /// The fired message's id, promised at schedule time.
    pub message_id: Uuid,
    /// Relative to the database clock; may be negative (due at once).
    pub delay_ms: i64,
}

/// One timer operation.
#[derive(Debug, Clone)]
pub enum TimerOp {
    Schedule(Schedule),
    Cancel {
        queue: String,
        timer_key: String,
        /// Echoed back when nothing is pending.
        txn: Option<String>,
    },
    /// The wheel's fire: delete the row this token still claims (never parsed from a client).
    Fire {
        queue: String,
        timer_key: String,
        token: Uuid,
    },
}

impl TimerOp {
    pub fn queue(&self) -> &str {
        match self {
            TimerOp::Schedule(s) => &s.queue,
            TimerOp::Cancel { queue, .. } | TimerOp::Fire { queue, .. } => queue,
        }
    }

    pub fn timer_key(&self) -> &str {
        match self {
            TimerOp::Schedule(s) => &s.timer_key,
            TimerOp::Cancel { timer_key, .. } | TimerOp::Fire { timer_key, .. } => timer_key,
        }
    }

    /// The operation as `queen.log_timers_apply_v1` takes it. A schedule's payload is sealed
    /// when its queue encrypts, as this broker last learned; the SQL refuses plaintext for a
    /// queue that encrypts (`QENC`), so a stale answer costs a call, never a plaintext row.
    fn to_sql(&self, tenant: &Tenant, encryption: &Encryption) -> Result<Value> {
        use base64::Engine as _;
        Ok(match self {
            TimerOp::Schedule(s) => {
                let stored = tenant::qualify(tenant, "queue", &s.queue)?;
                let sealed = encryption
                    .wants(&stored)
                    .then(|| encryption.seal(&stored, &s.payload))
                    .transpose()?;
                let payload = sealed.as_deref().unwrap_or(&s.payload);
                json!({
                    "op": if s.reschedule { "reschedule" } else { "schedule" },
                    "queue": s.queue, "timerKey": s.timer_key, "partition": s.partition,
                    "payload": base64::engine::general_purpose::STANDARD.encode(payload),
                    "sealed": sealed.is_some(), "storedQueue": stored,
                    "txn": s.txn, "messageId": s.message_id.to_string(), "delayMs": s.delay_ms,
                })
            }
            TimerOp::Cancel {
                queue, timer_key, ..
            } => json!({ "op": "cancel", "queue": queue, "timerKey": timer_key }),
            TimerOp::Fire {
                queue,
                timer_key,
                token,
            } => json!({
                "op": "fire", "queue": queue, "timerKey": timer_key, "token": token.to_string(),
            }),
        })
    }
}

/// What one operation did.
#[derive(Debug, Clone)]
pub struct TimerOutcome {
    pub queue: String,
    pub timer_key: String,
    /// `scheduled`, `rescheduled`, `cancelled`, `absent`, `too_late` or `fired`.
    pub status: String,
    pub txn: Option<String>,
    pub message_id: Option<String>,
    pub deliver_at: Option<String>,
}

impl TimerOutcome {
    /// Whether the operation did what it asked (`absent` and `too_late` did not).
    pub fn ok(&self) -> bool {
        matches!(
            self.status.as_str(),
            "scheduled" | "rescheduled" | "cancelled" | "fired"
        )
    }
}

/// Refuses a call whose operations cannot all apply: too many, or one key twice (the rule
/// that keeps one call's row locks in one order).
pub fn check(ops: &[TimerOp]) -> Result<()> {
    if ops.len() > MAX_OPS {
        return Err(Error::bad(format!(
            "at most {MAX_OPS} timer operations per call, got {}",
            ops.len()
        )));
    }
    let mut seen = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        if !seen.insert((op.queue(), op.timer_key())) {
            return Err(Error::bad(format!(
                "operation {i}: timer {}/{} appears more than once in one call",
                op.queue(),
                op.timer_key()
            )));
        }
    }
    Ok(())
}

/// The operations as the SQL takes them (see [`TimerOp::to_sql`]).
pub fn to_sql(ops: &[TimerOp], tenant: &Tenant, encryption: &Encryption) -> Result<Vec<Value>> {
    ops.iter().map(|op| op.to_sql(tenant, encryption)).collect()
}

/// Pairs each operation with its verdict.
pub fn outcomes(ops: &[TimerOp], verdicts: Vec<TimerVerdict>) -> Vec<TimerOutcome> {
    ops.iter()
        .zip(verdicts)
        .map(|(op, v)| {
            let asked = match op {
                TimerOp::Cancel { txn, .. } => txn.clone(),
                _ => None,
            };
            TimerOutcome {
                queue: op.queue().to_string(),
                timer_key: op.timer_key().to_string(),
                status: v.status,
                txn: v.txn.or(asked),
                message_id: v.message_id,
                deliver_at: v.deliver_at,
            }
        })
        .collect()
}

/// Tells this broker's wheel about timers it may have to fire before its next look.
pub fn committed(state: &Shared, ops: &[TimerOp]) {
    let soon = ops.iter().any(|op| match op {
        TimerOp::Schedule(s) => s.delay_ms < WHEEL_MAX_SLEEP_MS,
        _ => false,
    });
    if soon {
        state.timer_wheel.notify_one();
    }
}

/// `POST /api/v1/timers` and the cancel route: the operations in one statement.
pub async fn apply(
    state: &Shared,
    ops: Vec<TimerOp>,
    tenant: &Tenant,
) -> Result<Vec<TimerOutcome>> {
    check(&ops)?;
    // Sealed before a connection is taken. A queue that turned out to encrypt is learned and
    // the call, which wrote nothing, runs again; once per queue, so this ends.
    let mut sql = Value::from(to_sql(&ops, tenant, &state.encryption)?);
    let db = state.store.conn().await?;
    let mut learned = HashSet::new();
    loop {
        match store::apply(&db, &sql, tenant.id()).await? {
            Applied::Done(verdicts) => {
                committed(state, &ops);
                return Ok(outcomes(&ops, verdicts));
            }
            Applied::MustSeal(queue) if learned.insert(queue.clone()) => {
                state.encryption.learn(&queue, true);
                sql = Value::from(to_sql(&ops, tenant, &state.encryption)?);
            }
            Applied::MustSeal(queue) => {
                return Err(Error::internal(format!(
                    "queue {queue} refused a sealed timer"
                )))
            }
        }
    }
}

/// The pending timer `key` of `queue`.
pub async fn peek(
    state: &Shared,
    tenant: &Tenant,
    queue: &str,
    key: &str,
) -> Result<Option<PendingTimer>> {
    let db = state.store.conn().await?;
    store::peek(&db, tenant.id(), queue, key).await
}

/// A page of `queue`'s pending timers after `after`: the rows and whether more follow.
pub async fn list(
    state: &Shared,
    tenant: &Tenant,
    queue: &str,
    after: Option<&str>,
    limit: i32,
) -> Result<(Vec<PendingTimer>, bool)> {
    let limit = limit.clamp(1, LIST_MAX);
    let db = state.store.conn().await?;
    let mut rows = store::list(&db, tenant.id(), queue, after, limit + 1).await?;
    let truncated = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((rows, truncated))
}
