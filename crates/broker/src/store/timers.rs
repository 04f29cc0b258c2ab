//! Typed calls of `sql/functions/timers.sql` (docs/engine.md §16): the timer operations of a
//! route call (`queen.log_timers_apply_v1`; the transaction rider goes through
//! `store/transaction.rs`), the wheel's claim, next-due probe and back-off, and the reads.

use deadpool_postgres::GenericClient;
use serde::Deserialize;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// The timer operations of one route call.
    Apply<'a> = log_timers_apply_v1(p_ops: &'a serde_json::Value, p_tenant: &'a str);
    /// The wheel's claim of due timers.
    Claim = log_timers_claim_v1(p_limit: i32, p_claim_ms: i32) select "*";
    /// Milliseconds until the next timer is due.
    NextDue = log_timers_next_v1();
    /// Puts a claimed timer back for later.
    BackOff<'a> = log_timers_back_off_v1(
        p_tenant: &'a str,
        p_queue: &'a str,
        p_key: &'a str,
        p_token: Uuid,
        p_delay_ms: i32,
        p_error: &'a str,
    );
    /// One pending timer.
    Peek<'a> = log_timers_peek_v1(p_tenant: &'a str, p_queue: &'a str, p_key: &'a str)
        select "*";
    /// A page of a queue's pending timers.
    List<'a> = log_timers_list_v1(
        p_tenant: &'a str,
        p_queue: &'a str,
        p_after: Option<&'a str>,
        p_limit: i32,
    ) select "*";
}

/// What `log_timers_apply_v1` did with one operation.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerVerdict {
    /// `scheduled`, `rescheduled`, `cancelled`, `absent`, `too_late` or `fired`.
    pub status: String,
    pub deliver_at: Option<String>,
    pub txn: Option<String>,
    pub message_id: Option<String>,
}

/// What one call of `log_timers_apply_v1` came to.
pub enum Applied {
    /// One verdict per operation, in order.
    Done(Vec<TimerVerdict>),
    /// Nothing was written: a plaintext schedule names this queue (stored name), which
    /// encrypts.
    MustSeal(String),
}

/// Applies `ops` (the SQL's operation objects) for `tenant` in one statement.
pub async fn apply(
    db: &impl GenericClient,
    ops: &serde_json::Value,
    tenant: &str,
) -> Result<Applied> {
    let answered = Apply {
        p_ops: ops,
        p_tenant: tenant,
    }
    .json::<Vec<TimerVerdict>>(db)
    .await;
    let verdicts = match answered {
        Ok(verdicts) => verdicts,
        Err(Error::Db(e)) => match crate::store::db_error::must_seal(&e) {
            Some(queue) => return Ok(Applied::MustSeal(queue)),
            None => return Err(Error::Db(e)),
        },
        Err(e) => return Err(e),
    };
    let asked = ops.as_array().map_or(0, Vec::len);
    if verdicts.len() != asked {
        return Err(Error::internal(format!(
            "log_timers_apply_v1 answered {} results for {asked} operations",
            verdicts.len()
        )));
    }
    Ok(Applied::Done(verdicts))
}

/// A due timer this broker claimed: its fire must present `token`.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub tenant_id: String,
    pub queue: String,
    pub timer_key: String,
    pub partition: String,
    pub payload: StoredPayload,
    pub txn: String,
    pub message_id: Uuid,
    pub token: Uuid,
    pub attempts: i32,
}

/// A timer's payload as the row holds it.
#[derive(Debug, Clone)]
pub struct StoredPayload {
    pub bytes: Vec<u8>,
    /// `bytes` is an encryption envelope (sealed at schedule: the queue encrypts).
    pub encrypted: bool,
}

/// Claims up to `limit` due timers for `claim_ms` (committed at once).
pub async fn claim(db: &impl GenericClient, limit: i32, claim_ms: i32) -> Result<Vec<Claimed>> {
    let rows = Claim {
        p_limit: limit,
        p_claim_ms: claim_ms,
    }
    .query(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Claimed {
                tenant_id: r.try_get(0)?,
                queue: r.try_get(1)?,
                timer_key: r.try_get(2)?,
                partition: r.try_get(3)?,
                payload: StoredPayload {
                    bytes: r.try_get(4)?,
                    encrypted: r.try_get(9)?,
                },
                txn: r.try_get(5)?,
                message_id: r.try_get(6)?,
                token: r.try_get(7)?,
                attempts: r.try_get(8)?,
            })
        })
        .collect()
}

/// Milliseconds until the earliest timer is due (≤ 0: now); `None` when there is none.
pub async fn next_due_ms(db: &impl GenericClient) -> Result<Option<i64>> {
    Ok(NextDue {}.query_one(db).await?.try_get(0)?)
}

/// Drops `c`'s claim and hides it for `delay_ms`, recording `error`.
pub async fn back_off(
    db: &impl GenericClient,
    c: &Claimed,
    delay_ms: i32,
    error: &str,
) -> Result<()> {
    let call = BackOff {
        p_tenant: &c.tenant_id,
        p_queue: &c.queue,
        p_key: &c.timer_key,
        p_token: c.token,
        p_delay_ms: delay_ms,
        p_error: error,
    };
    let stmt = crate::store::prepare(db, BackOff::SQL).await?;
    db.execute(&stmt, &call.params()).await?;
    Ok(())
}

/// One pending timer as the reads show it.
#[derive(Debug, Clone)]
pub struct PendingTimer {
    pub timer_key: String,
    pub partition: String,
    /// The payload; only [`peek`] reads it.
    pub payload: Option<StoredPayload>,
    pub txn: String,
    pub message_id: Uuid,
    pub deliver_at: String,
    pub attempts: i32,
    /// A fire holds a live claim on it (a cancel now answers `too_late`).
    pub firing: bool,
}

/// The pending timer `key` of the tenant's `queue`, if any.
pub async fn peek(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    key: &str,
) -> Result<Option<PendingTimer>> {
    let call = Peek {
        p_tenant: tenant,
        p_queue: queue,
        p_key: key,
    };
    let Some(r) = call.query_opt(db).await? else {
        return Ok(None);
    };
    Ok(Some(PendingTimer {
        timer_key: r.try_get(0)?,
        partition: r.try_get(1)?,
        payload: Some(StoredPayload {
            bytes: r.try_get(2)?,
            encrypted: r.try_get(8)?,
        }),
        txn: r.try_get(3)?,
        message_id: r.try_get(4)?,
        deliver_at: r.try_get(5)?,
        attempts: r.try_get(6)?,
        firing: r.try_get(7)?,
    }))
}

/// Up to `limit` pending timers of the tenant's `queue` with keys after `after`, by key.
pub async fn list(
    db: &impl GenericClient,
    tenant: &str,
    queue: &str,
    after: Option<&str>,
    limit: i32,
) -> Result<Vec<PendingTimer>> {
    let rows = List {
        p_tenant: tenant,
        p_queue: queue,
        p_after: after,
        p_limit: limit,
    }
    .query(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(PendingTimer {
                timer_key: r.try_get(0)?,
                partition: r.try_get(1)?,
                payload: None,
                txn: r.try_get(2)?,
                message_id: r.try_get(3)?,
                deliver_at: r.try_get(4)?,
                attempts: r.try_get(5)?,
                firing: false,
            })
        })
        .collect()
}
