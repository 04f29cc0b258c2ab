//! One pop request from parameters to the claimed answer (docs/spec/life-of-a-pop.md,
//! docs/engine.md §5.1), read top to bottom: pop maintenance mode, the minimum pop wait
//! ([`min_wait`]), candidate selection and the claim in SQL, and long-poll parking with no
//! connection held ([`longpoll`]). The claim's outcome is decided here — what it counts as
//! popped and delivered, whether an empty claim keeps a long-poll waiting — and the answer is
//! handed up as a [`Claim`] for the HTTP floor to render (`http/pop/render.rs`); the engine
//! never calls up into it.
//!
//! Candidates come from one of two paths: a wildcard pop with the hot-list on asks its ring
//! ([`hotlist`]): nothing ready answers without a permit, a connection or a statement; every
//! other pop runs the SQL candidate path ([`scan`]): the has-pending probe, then the claim of
//! its shape (docs/engine.md §5.2). Both take their permit and connection, and map a failed
//! statement, through [`admit`]; what a pop asks for is [`request`], what it hands up is
//! [`answer`]. What the pop path remembers between requests lives in `accel/`
//! (`pop_cache.rs` and the files it gathers, `hotlist/`).

mod admit;
mod answer;
pub mod autopilot;
mod hotlist;
pub mod longpoll;
mod min_wait;
mod request;
mod scan;
mod state;

pub use answer::{
    Claim, ClaimedPartition, ClaimedSegment, Decoded, Envelope, PopAnswer, SegmentCache,
};
pub use request::{Ask, PopRequest, PopShape, Subscription};
pub use state::PopState;

use std::sync::atomic::Ordering::Relaxed;

use chrono::{DateTime, SecondsFormat, Utc};
use queen_proto::LeaseId;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::accel::deliveries::Delivered;
use crate::engine::maintenance;
use crate::engine::pop::admit::{pop_failed, Claimed};
use crate::engine::pop::autopilot::{Pilot, Sizing};
use crate::engine::pop::longpoll::{claim_cutoff, Armed, Backoff, Woke};
use crate::error::Result;
use crate::store::pop::ClaimArgs;

/// What a pop came to.
pub enum PopOutcome {
    /// Nothing delivered: 204 with no body.
    Empty,
    /// A claim of at least one message, for the HTTP floor to render.
    Claimed(Claim),
}

/// What one claim attempt came to.
enum Tried {
    Claimed(Claim),
    /// Nothing claimable now, or a claim that took no message.
    Nothing,
    /// No connection (or no maintenance answer) came before the attempt's start-by instant:
    /// nothing was claimed, and nothing may be any more.
    OutOfTime,
}

/// Serves one pop: claims now, or parks (with `wait`) until something is claimed or the
/// deadline passes. Every wait (pool, maintenance refresh, park) ends by the deadline, and
/// no claim starts after it.
pub async fn pop(st: &PopState, req: &PopRequest) -> Result<PopOutcome> {
    let deadline = Instant::now() + req.timeout;
    let lease_id = LeaseId::mint();
    // `new` means "after this request arrived", however long its first contact waits (a
    // long-poll on a queue nobody created yet registers only once a push creates it).
    let subscription = subscription_args(&req.subscription, Utc::now());
    let pilot = Pilot::new(st, req);
    let fixed = Fixed {
        lease_id: &lease_id,
        subscription: &subscription,
        pilot: &pilot,
    };
    let gate = req.wait.then(|| match &req.shape {
        PopShape::Discovery { .. } => st.wake.any_gate(),
        PopShape::Wildcard { queue } | PopShape::Targeted { queue, .. } => st.wake.gate(queue),
    });
    let mut closing = st.closing.subscribe();
    let mut backoff = Backoff::new(&st.cfg);
    // The pushed-partition hints taken on the last wake (wildcard pops only).
    let mut hints: Vec<String> = Vec::new();
    let mut first = true;
    loop {
        // The first attempt is what the client asked for and always runs (if a connection
        // frees before the deadline). A waiting pop's later attempts stop at the claim
        // cutoff: a claim whose answer cannot reach the client in time would strand its lease.
        let start_by = if first {
            deadline
        } else {
            claim_cutoff(deadline)
        };
        if !first && Instant::now() >= start_by {
            st.cache.stats.deadline_margin_skips.fetch_add(1, Relaxed);
            return Ok(PopOutcome::Empty);
        }
        first = false;
        if maintenance_on(st, start_by).await? != Some(false) {
            return Ok(PopOutcome::Empty);
        }
        // Armed before the attempt: a push landing between the attempt and the park is kept.
        let armed = gate.as_deref().map(Armed::on_gate);
        let tried = std::mem::take(&mut hints);
        let bounds = (start_by, deadline);
        match attempt(st, req, &fixed, &tried, bounds, &mut closing).await? {
            Tried::Claimed(claim) => return Ok(PopOutcome::Claimed(claim)),
            Tried::OutOfTime => return Ok(PopOutcome::Empty),
            Tried::Nothing => {}
        }
        let Some(armed) = armed else {
            return Ok(PopOutcome::Empty);
        };
        match armed
            .park(backoff.next_interval(), deadline, &mut closing)
            .await
        {
            Woke::Gate => {
                backoff.reset();
                // The hints serve the SQL candidate path; the ring learns pushes itself.
                if let (Some(gate), PopShape::Wildcard { .. }, false) =
                    (&gate, &req.shape, st.cfg.hotlist)
                {
                    hints = gate.take_hints();
                }
            }
            Woke::Interval => {}
            Woke::Done => return Ok(PopOutcome::Empty),
        }
    }
}

/// What every attempt of one pop shares.
struct Fixed<'a> {
    lease_id: &'a LeaseId,
    /// `(p_sub_mode, p_sub_from)`.
    subscription: &'a (&'static str, String),
    pilot: &'a Pilot,
}

/// One claim attempt: the minimum pop wait, then the candidate path of the request (the ring
/// of a wildcard pop with the hot-list on, else the SQL candidate path with the hinted
/// partitions first). It claims only with a permit and a connection taken before `start_by`
/// (`bounds.0`); `bounds.1` is the pop's deadline. Every permit and connection it takes is
/// given back when it returns, before the answer is rendered.
async fn attempt(
    st: &PopState,
    req: &PopRequest,
    fixed: &Fixed<'_>,
    hints: &[String],
    (start_by, deadline): (Instant, Instant),
    closing: &mut watch::Receiver<bool>,
) -> Result<Tried> {
    if let Some((queue, partition)) = req.shape.queue() {
        if let Some(window) = st.cache.min_wait.window(queue) {
            min_wait::hold_underfull(st, req, queue, partition, window, deadline, closing).await?;
        }
    }
    let (lease_id, (sub_mode, sub_from)) = (fixed.lease_id, fixed.subscription);
    let args = ClaimArgs {
        group: &req.group,
        budget: req.batch,
        lease_seconds: req.lease_seconds,
        lease_id: lease_id.as_str(),
        auto_ack: req.auto_ack,
        max_partitions: req.partitions,
        sub_mode,
        sub_from,
    };
    // The sizes the claim used: the request's, unless its ring sized them.
    let mut sizing = Sizing::of(req.batch, req.partitions);
    let claimed = match &req.shape {
        PopShape::Wildcard { queue } if st.cfg.hotlist => {
            hotlist::claim(st, queue, &args, fixed.pilot, &mut sizing, start_by).await?
        }
        _ => scan::claim(st, req, hints, &args, start_by).await?,
    };
    let answer = match claimed {
        Claimed::Answer(answer) => answer,
        Claimed::Nothing => return Ok(Tried::Nothing),
        Claimed::OutOfTime => return Ok(Tried::OutOfTime),
    };
    if let (Some((queue, _)), Some(ms)) = (req.shape.queue(), answer.min_pop_wait_ms) {
        st.cache.min_wait.learn(queue, ms);
    }
    for part in &answer.partitions {
        st.hotlist
            .learn(part.partition_id, &part.queue, &part.partition);
    }
    let delivered = delivered(&answer);
    let messages: u64 = delivered.0.iter().map(|(_, taken, _)| taken).sum();
    if messages == 0 {
        return Ok(Tried::Nothing);
    }
    // Popped is what left the queue's cursor or was leased: frames the renderer cannot
    // decode count too (they are logged, and a leased one redelivers when its lease expires).
    st.counters.messages_popped.fetch_add(messages, Relaxed);
    st.cache
        .deliveries
        .record(delivered, Utc::now().timestamp_micros());
    let echo = fixed.pilot.echo().then_some(sizing);
    Ok(Tried::Claimed(claim(st, answer, req, fixed.lease_id, echo)))
}

/// The claimed answer with its envelope; a leasing pop's deliveries go to the ack registry
/// (docs/engine.md §6.4) through the births the renderer feeds. `autopilot`: the sizes to echo.
fn claim(
    st: &PopState,
    answer: PopAnswer,
    req: &PopRequest,
    lease_id: &LeaseId,
    autopilot: Option<Sizing>,
) -> Claim {
    let envelope = Envelope {
        queue: req.shape.queue().map_or("", |(q, _)| q).to_string(),
        group: req.group.clone(),
        lease_id: if req.auto_ack {
            LeaseId::none()
        } else {
            lease_id.clone()
        },
        per_message_queue: matches!(req.shape, PopShape::Discovery { .. }),
        frames: req.frames,
        max_segment_bytes: queen_proto::segment::MAX_SEGMENT_BYTES,
        encryption: st.encryption.clone(),
        autopilot,
        segments: st.segments.clone(),
    };
    let registry = (!req.auto_ack && st.ack_registry.enabled()).then(|| st.ack_registry.clone());
    Claim {
        answer,
        envelope,
        registry,
    }
}

/// The `(p_sub_mode, p_sub_from)` arguments of the SQL functions. `new` carries the instant
/// the request arrived (`arrived`), from which a first contact counts as future.
fn subscription_args(sub: &Subscription, arrived: DateTime<Utc>) -> (&'static str, String) {
    let iso = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
    match sub {
        Subscription::All => ("all", String::new()),
        Subscription::New => ("new", iso(&arrived)),
        Subscription::From(t) => ("all", iso(t)),
    }
}

/// Pop maintenance mode (`engine/maintenance.rs`: cached, re-read at most every 500 ms), or
/// `None` when it cannot be learnt before `until` (the refresh by another request, or a free
/// connection, takes longer): the caller then must not claim.
async fn maintenance_on(st: &PopState, until: Instant) -> Result<Option<bool>> {
    let flags = maintenance::cached(st, until).await.map_err(pop_failed)?;
    Ok(flags.map(|f| f.pop))
}

/// What one answer delivered, per queue, for the delivery metrics.
fn delivered(answer: &PopAnswer) -> Delivered {
    Delivered::per_queue(answer.partitions.iter().map(|part| {
        let taken: u64 = part
            .segments
            .iter()
            .map(|s| u64::try_from(s.take).unwrap_or(0))
            .sum();
        let oldest = part.segments.iter().map(|s| s.created_at).min();
        (part.queue.as_str(), taken, oldest)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_arguments() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T11:00:00.123456+01:00")
            .expect("ts")
            .with_timezone(&Utc);
        let arrived = t + chrono::Duration::seconds(5);
        assert_eq!(
            subscription_args(&Subscription::New, arrived),
            ("new", "2026-11-29T10:00:05.123456Z".to_string())
        );
        assert_eq!(
            subscription_args(&Subscription::From(t), arrived),
            ("all", "2026-11-29T10:00:00.123456Z".to_string())
        );
        assert_eq!(subscription_args(&Subscription::All, arrived).1, "");
    }

    #[test]
    fn an_answer_delivers_its_takes_and_oldest_segment_per_queue() {
        use crate::store::pop::{ClaimedPartition, ClaimedSegment};
        let part = |queue: &str, created: &[(i32, i64)]| ClaimedPartition {
            partition: "p".into(),
            partition_id: 1,
            queue: queue.into(),
            delivery_attempt: 1,
            lease_expires_at: None,
            segments: created
                .iter()
                .map(|&(take, created_at)| ClaimedSegment {
                    base: 0,
                    start_idx: 0,
                    take,
                    msg_count: take,
                    created_at,
                })
                .collect(),
        };
        let answer = PopAnswer {
            partitions: vec![
                part("a", &[(2, 5_000_000), (3, 6_000_000)]),
                part("b", &[(1, 9_000_000)]),
                part("a", &[(4, 2_000_000)]),
            ],
            min_pop_wait_ms: None,
            blobs: Vec::new(),
        };
        assert_eq!(
            delivered(&answer),
            Delivered(vec![("a".into(), 9, 2_000_000), ("b".into(), 1, 9_000_000)])
        );
    }
}
