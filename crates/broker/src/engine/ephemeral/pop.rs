//! The ephemeral pop (docs/wire.md §25.3): one claim (`queen.eph_pop_v1`), or with `wait` a
//! long poll parked on the queue's wake gate with the durable pop's parking and backoff
//! (engine/pop/longpoll.rs) — a push or a nack through any broker opens it — and the queue's
//! `windowBuffer`: while fewer than its `count` messages are ready, a waiting pop claims
//! nothing until `ms` have passed since it first saw one ready, or its own deadline.

use std::time::Duration;

use tokio::time::Instant;

use super::{gate_key, options, MessageId};
use crate::accel::admission::Lane;
use crate::engine::pop::longpoll::{claim_cutoff, Armed, Backoff, Woke};
use crate::engine::tenant::Tenant;
use crate::engine::Shared;
use crate::error::Result;
use crate::store::ephemeral::{self as store, PopAnswer, PopCall};

/// A checked pop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopRequest {
    pub queue: String,
    /// `None`: the partition whose oldest ready message is the oldest of the queue.
    pub partition: Option<String>,
    /// The consumer group (`__QUEUE_MODE__` for a groupless pop).
    pub group: String,
    pub batch: i32,
    /// Long-poll for up to this long when nothing is ready.
    pub wait: Option<Duration>,
    /// Retire at delivery (at most once): no lease, nothing to ack.
    pub auto_ack: bool,
}

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub id: String,
    pub partition: String,
    pub attempts: i32,
    /// The JSON text the push stored.
    pub payload: String,
}

/// Pops for `tenant`: the delivered messages, oldest first (none when the poll timed out).
pub async fn pop(st: &Shared, tenant: &Tenant, req: &PopRequest) -> Result<Vec<Delivered>> {
    let Some(wait) = req.wait else {
        return claim(st, tenant, req, false).await.map(delivered);
    };
    let cutoff = claim_cutoff(Instant::now() + wait);
    let gate = st.wake.gate(&gate_key(tenant, &req.queue));
    let mut closing = st.closing.subscribe();
    let mut backoff = Backoff::new(&st.cfg);
    let mut window_end: Option<Instant> = None;
    loop {
        let armed = Armed::on_gate(&gate);
        let now = Instant::now();
        let last = now >= cutoff || *closing.borrow();
        let honour_window = !last && window_end.is_none_or(|end| now < end);
        let answer = claim(st, tenant, req, honour_window).await?;
        if !answer.messages.is_empty() || last {
            return Ok(delivered(answer));
        }
        window_end = match (answer.held, window_end) {
            (false, _) => None,
            (true, Some(end)) => Some(end),
            (true, None) => Some(match answer.window_ms.filter(|ms| *ms > 0) {
                Some(ms) => now + Duration::from_millis(ms.unsigned_abs()),
                None => cutoff,
            }),
        };
        let until = window_end.map_or(cutoff, |end| end.min(cutoff));
        if armed
            .park(backoff.next_interval(), until, &mut closing)
            .await
            == Woke::Gate
        {
            backoff.reset();
        }
    }
}

/// One call of `queen.eph_pop_v1`.
async fn claim(st: &Shared, tenant: &Tenant, req: &PopRequest, window: bool) -> Result<PopAnswer> {
    let _permit = st.admission.acquire(Lane::Pop).await;
    let db = st.store.conn().await?;
    let call = PopCall {
        tenant: tenant.id(),
        queue: &req.queue,
        partition: req.partition.as_deref(),
        group: &req.group,
        batch: req.batch,
        auto_ack: req.auto_ack,
        window,
    };
    store::pop(&db, &call, &options::defaults()).await
}

/// The messages of an answer with their ids.
fn delivered(answer: PopAnswer) -> Vec<Delivered> {
    let (Some(partition), Some(epoch)) = (answer.partition, answer.epoch) else {
        return Vec::new();
    };
    answer
        .messages
        .into_iter()
        .map(|m| Delivered {
            id: MessageId {
                epoch,
                partition: partition.clone(),
                seq: m.seq,
            }
            .render(),
            partition: partition.clone(),
            attempts: m.attempts,
            payload: m.payload,
        })
        .collect()
}
