//! Turns claimed due timers into messages (docs/engine.md §16.2): one transaction per tenant
//! that pushes every message and deletes every timer row it still holds the claim of
//! (`engine/transaction.rs` with the `fire` timer op), so a timer is pushed exactly when its row
//! goes. A batch that fails is fired timer by timer, so one bad timer does not hold the others
//! back; a timer that fails alone backs off and is tried again later.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::engine::encryption::Encryption;
use crate::engine::push::PushItem;
use crate::engine::tenant::Tenant;
use crate::engine::timers::TimerOp;
use crate::engine::transaction::{self, RollbackReason, TxnOp, TxnOutcome, TxnRequest, Writers};
use crate::engine::Shared;
use crate::error::Result;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::failure_text;
use crate::store::timers::{self as store, Claimed};

/// Rate limit of the fire's failure logs.
static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// The longest a failing timer waits before its next try.
const MAX_BACK_OFF_MS: i32 = 60_000;

/// What became of one fire attempt.
enum Fired {
    Done,
    /// The push was refused as a duplicate: a message with the timer's transactionId is
    /// already in the partition, so the timer has been delivered.
    Duplicate,
    /// Another fire or a reschedule took the row: nothing to do.
    Lost,
    Failed(String),
}

/// Fires `claimed`: per tenant in one transaction, else one by one.
pub async fn fire(state: Writers<'_>, claimed: Vec<Claimed>) {
    let mut by_tenant: BTreeMap<String, Vec<Claimed>> = BTreeMap::new();
    for c in claimed {
        by_tenant.entry(c.tenant_id.clone()).or_default().push(c);
    }
    for (tenant_id, batch) in by_tenant {
        let tenant = match Tenant::parse((!tenant_id.is_empty()).then_some(tenant_id.as_str())) {
            Ok(t) => t,
            Err(e) => {
                for c in &batch {
                    back_off(&state, c, &e.to_string()).await;
                }
                continue;
            }
        };
        if batch.len() > 1 && matches!(attempt(state, &tenant, &batch).await, Fired::Done) {
            continue;
        }
        for c in &batch {
            match attempt(state, &tenant, std::slice::from_ref(c)).await {
                Fired::Done | Fired::Lost => {}
                Fired::Duplicate => {
                    if let Fired::Failed(e) = delivered(state, &tenant, c).await {
                        back_off(&state, c, &e).await;
                    }
                }
                Fired::Failed(e) => back_off(&state, c, &e).await,
            }
        }
    }
}

/// One transaction: push every timer's message and delete every row.
async fn attempt(state: Writers<'_>, tenant: &Tenant, batch: &[Claimed]) -> Fired {
    let items: std::result::Result<Vec<TxnOp>, String> = batch
        .iter()
        .map(|c| item(&state.encryption, c).map(TxnOp::Push))
        .collect();
    let ops = match items {
        Ok(ops) => ops,
        Err(e) => return Fired::Failed(e),
    };
    let req = TxnRequest {
        ops,
        timers: batch.iter().map(fire_op).collect(),
        ..TxnRequest::default()
    };
    settle(transaction::run(state, req, None, tenant).await)
}

/// Deletes the row of a timer whose message is already stored.
async fn delivered(state: Writers<'_>, tenant: &Tenant, c: &Claimed) -> Fired {
    let req = TxnRequest {
        timers: vec![fire_op(c)],
        ..TxnRequest::default()
    };
    settle(transaction::run(state, req, None, tenant).await)
}

fn settle(outcome: Result<TxnOutcome>) -> Fired {
    match outcome {
        Ok(TxnOutcome::Committed(_)) => Fired::Done,
        Ok(TxnOutcome::RolledBack { reason, error }) => match reason {
            RollbackReason::Duplicate => Fired::Duplicate,
            RollbackReason::TimerLost => Fired::Lost,
            RollbackReason::RejectedAck | RollbackReason::Full => Fired::Failed(error),
        },
        // A fire carries no kv rider; answered as the failure it would be.
        Ok(TxnOutcome::PreconditionLost { failed_index, .. }) => {
            Fired::Failed(format!("kv precondition lost at {failed_index}"))
        }
        // Only a streams cycle can be a replay; a fire carries none.
        Ok(TxnOutcome::Replayed(_)) => Fired::Failed("a fire was answered as a replay".into()),
        Err(e) => Fired::Failed(failure_text(&e)),
    }
}

/// The timer's message, with the id and transactionId promised at schedule time; a payload
/// sealed at schedule is opened here (the push seals it again for its queue).
fn item(encryption: &Encryption, c: &Claimed) -> std::result::Result<PushItem, String> {
    let payload = if c.payload.encrypted {
        encryption.open(&c.payload.bytes)?
    } else {
        c.payload.bytes.clone()
    };
    Ok(PushItem {
        queue: c.queue.clone(),
        partition: Some(c.partition.clone()),
        transaction_id: Some(c.txn.clone()),
        trace_id: None,
        payload: Bytes::from(payload),
        message_id: Some(c.message_id),
        producer_sub: None,
    })
}

fn fire_op(c: &Claimed) -> TimerOp {
    TimerOp::Fire {
        queue: c.queue.clone(),
        timer_key: c.timer_key.clone(),
        token: c.token,
    }
}

/// Drops the claim of a timer that failed to fire and hides it for a while (1 s, doubling
/// with each failed attempt, at most [`MAX_BACK_OFF_MS`]).
async fn back_off(state: &Shared, c: &Claimed, error: &str) {
    if let Some(suppressed) = FAILURES.admit(error) {
        tracing::warn!(queue = %c.queue, timer = %c.timer_key, attempts = c.attempts + 1,
                       error = %error, suppressed, "timer fire failed; backing off");
    }
    let delay = 1000_i32
        .saturating_mul(1 << c.attempts.clamp(0, 6))
        .min(MAX_BACK_OFF_MS);
    let done = match state.store.conn().await {
        Ok(db) => store::back_off(&db, c, delay, error).await,
        Err(e) => Err(e),
    };
    if let Err(e) = done {
        // The claim then simply runs out and the timer is tried again.
        if let Some(suppressed) = FAILURES.admit(&e.to_string()) {
            tracing::warn!(error = %e, suppressed, "timer back-off not recorded");
        }
    }
}
