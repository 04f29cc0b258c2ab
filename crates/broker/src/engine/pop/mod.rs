//! One pop request from parameters to answer (docs/spec/life-of-a-pop.md, docs/engine.md §5.1): pop
//! maintenance mode, the minimum pop wait, candidate selection and the claim in SQL, the frame
//! walk after the connection is released, and long-poll parking with no connection held.
//!
//! Candidates come from one of two paths: a wildcard pop with the hot-list on asks its ring
//! ([`hotlist`]): nothing ready answers without a permit, a connection or a statement; every
//! other pop runs the SQL candidate path ([`scan`]): the has-pending probe, then the claim of
//! its shape (docs/engine.md §5.2).
//!
//! Beside it: [`longpoll`] (parking), [`min_wait`] (the minimum pop wait). The answer's body is
//! rendered by the HTTP floor's [`Render`] (JSON or `QPF1`, `http/pop/`), which this module
//! runs after the connection is back in the pool, off the async workers when the answer is
//! big. What the pop path remembers between requests lives in `accel/` (`pop_cache.rs` and
//! the files it gathers, `hotlist/`).

pub mod autopilot;
mod hotlist;
pub mod longpoll;
mod min_wait;
mod scan;
mod state;

pub use state::PopState;

use crate::engine::tenant::{self, Tenant};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use deadpool_postgres::Object;
use queen_proto::frame::Frame;
use queen_proto::LeaseId;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::accel::ack_registry::AckRegistry;
use crate::accel::admission::{Lane, Permit};
use crate::accel::deliveries::Delivered;
use crate::engine::ack::births::Births;
use crate::engine::encryption::Encryption;
use crate::engine::maintenance;
use crate::engine::pop::autopilot::{Ask, Pilot, Sizing};
use crate::engine::pop::longpoll::{claim_cutoff, Armed, Backoff, Woke};
use crate::engine::push::segment::INLINE_BUILD_BYTES;
use crate::error::{Error, Result};
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::db_message;
use crate::store::pop::ClaimArgs;

/// Which partitions a pop may claim from.
#[derive(Debug, Clone)]
pub enum PopShape {
    /// Any partition(s) of the queue.
    Wildcard { queue: String },
    /// One named partition.
    Targeted { queue: String, partition: String },
    /// Every queue whose labels match; an empty label matches any.
    Discovery { namespace: String, task: String },
}

impl PopShape {
    /// The shape with its client names stored the way `tenant` stores them (namespace and
    /// task too: a discovery pop only ever matches the caller's queues).
    pub fn of_tenant(self, tenant: &Tenant) -> Result<PopShape> {
        Ok(match self {
            PopShape::Wildcard { queue } => PopShape::Wildcard {
                queue: tenant::qualify(tenant, "queue", &queue)?,
            },
            PopShape::Targeted { queue, partition } => PopShape::Targeted {
                queue: tenant::qualify(tenant, "queue", &queue)?,
                partition,
            },
            PopShape::Discovery { namespace, task } => PopShape::Discovery {
                namespace: tenant::qualify(tenant, "namespace", &namespace)?,
                task: tenant::qualify(tenant, "task", &task)?,
            },
        })
    }
}

/// A named group's first-contact starting point.
#[derive(Debug, Clone, PartialEq)]
pub enum Subscription {
    /// Everything retained.
    All,
    /// Future messages only.
    New,
    /// From the first segment at or after this instant.
    From(DateTime<Utc>),
}

/// A parsed pop request (docs/wire.md §7.2).
#[derive(Debug, Clone)]
pub struct PopRequest {
    pub shape: PopShape,
    pub batch: i32,
    pub partitions: i32,
    pub wait: bool,
    pub timeout: Duration,
    pub group: String,
    pub auto_ack: bool,
    pub subscription: Subscription,
    /// Per-request lease length; `None` = the queue's.
    pub lease_seconds: Option<i32>,
    /// `frames=true`: answer `QPF1` (docs/wire.md §7.7) instead of JSON.
    pub frames: bool,
    /// `autopilot=true`: the knobs the request left to the broker ([`autopilot`]).
    pub autopilot: Option<Ask>,
    /// Renders the claimed answer.
    pub render: Render,
}

pub use crate::store::pop::{ClaimedPartition, ClaimedSegment, PopAnswer};

/// Turns a claimed answer into the response body (the HTTP floor's renderers), telling `seen`
/// each claimed segment it decodes on the way.
pub type Render = fn(&PopAnswer, &RenderContext<'_>, seen: &mut dyn Decoded) -> Rendered;

/// Told what a renderer decoded, segment by segment: the claimed frames of `seg`, or `None`
/// when they could not be decoded. A leasing pop's ack-registry births listen here, so its
/// answer is decompressed once (docs/engine.md §6.4).
pub trait Decoded {
    fn segment(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        claimed: Option<&[Frame<'_>]>,
    );
}

/// Nobody listens (autoAck pops, the registry off).
impl Decoded for () {
    fn segment(&mut self, _: &ClaimedPartition, _: &ClaimedSegment, _: Option<&[Frame<'_>]>) {}
}

impl Decoded for Births<'_> {
    fn segment(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        claimed: Option<&[Frame<'_>]>,
    ) {
        self.seen(part, seg, claimed);
    }
}

/// Fixed parts of an answer's envelope.
pub struct RenderContext<'a> {
    /// Top-level `queue`: the queue name, or `""` for a discovery pop.
    pub queue: &'a str,
    pub group: &'a str,
    /// The pop's lease id, or `""` for autoAck.
    pub lease_id: &'a str,
    /// Discovery answers carry a per-message `queue`.
    pub per_message_queue: bool,
    /// `QPF1` instead of JSON.
    pub frames: bool,
    /// Upper bound of one decompressed segment.
    pub max_segment_bytes: usize,
    /// Opens the payloads of encrypted frames.
    pub encryption: &'a Encryption,
    /// The sizes to echo (`autopilot=true` pops with the autopilot on).
    pub autopilot: Option<Sizing>,
}

/// A rendered 200 answer.
pub struct Rendered {
    pub body: Vec<u8>,
    pub messages: usize,
    pub partitions_claimed: usize,
}

pub enum PopOutcome {
    /// Nothing delivered: 204 with no body.
    Empty,
    Delivered(Rendered),
}

/// What a candidate path's claim came to.
enum Claimed {
    Answer(PopAnswer),
    /// Nothing claimable now (no statement may have run).
    Nothing,
    /// No permit or connection came before the attempt's start-by instant.
    OutOfTime,
}

/// What one claim attempt came to.
enum Tried {
    Delivered(Rendered),
    /// Nothing claimable now.
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
            Tried::Delivered(rendered) => return Ok(PopOutcome::Delivered(rendered)),
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
    if let Some((queue, partition)) = queue_of(&req.shape) {
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
    if let (Some((queue, _)), Some(ms)) = (queue_of(&req.shape), answer.min_pop_wait_ms) {
        st.cache.min_wait.learn(queue, ms);
    }
    for part in &answer.partitions {
        st.hotlist
            .learn(part.partition_id, &part.queue, &part.partition);
    }
    if answer.partitions.is_empty() {
        return Ok(Tried::Nothing);
    }
    // A leasing pop's deliveries go to the ack registry (docs/engine.md §6.4).
    let registry = (!req.auto_ack && st.ack_registry.enabled()).then(|| st.ack_registry.clone());
    let echo = fixed.pilot.echo().then_some(sizing);
    let (rendered, delivered) = render_answer(st, answer, req, lease_id, registry, echo).await?;
    st.counters
        .messages_popped
        .fetch_add(rendered.messages as u64, Relaxed);
    if rendered.messages == 0 {
        return Ok(Tried::Nothing);
    }
    st.cache
        .deliveries
        .record(delivered, Utc::now().timestamp_micros());
    Ok(Tried::Delivered(rendered))
}

/// Renders a claimed answer (JSON or framed), off the async workers when it is big; returns
/// it with what it delivered per queue. With `registry`, the answer's leased batches are
/// stored in it right after the render, before the answer leaves. `autopilot`: the sizes to
/// echo.
async fn render_answer(
    st: &PopState,
    answer: PopAnswer,
    req: &PopRequest,
    lease_id: &LeaseId,
    registry: Option<Arc<AckRegistry>>,
    autopilot: Option<Sizing>,
) -> Result<(Rendered, Delivered)> {
    let blob_bytes: usize = answer.blobs.iter().map(Vec::len).sum();
    let delivered = delivered(&answer);
    let queue = queue_of(&req.shape).map_or("", |(q, _)| q).to_string();
    let lease_id = if req.auto_ack {
        LeaseId::none()
    } else {
        lease_id.clone()
    };
    let (group, frames, render) = (req.group.clone(), req.frames, req.render);
    let per_message_queue = matches!(req.shape, PopShape::Discovery { .. });
    let encryption = st.encryption.clone();
    let render = move || {
        let ctx = RenderContext {
            queue: &queue,
            group: &group,
            lease_id: lease_id.as_str(),
            per_message_queue,
            frames,
            max_segment_bytes: queen_proto::segment::MAX_SEGMENT_BYTES,
            encryption: &encryption,
            autopilot,
        };
        let Some(registry) = registry else {
            return render(&answer, &ctx, &mut ());
        };
        let mut births = Births::new(&registry, ctx.group, ctx.lease_id);
        let rendered = render(&answer, &ctx, &mut births);
        births.finish(&answer, ctx.max_segment_bytes);
        rendered
    };
    // Decompressing and rendering a big answer would stall an async worker for milliseconds.
    let rendered = if blob_bytes > INLINE_BUILD_BYTES {
        tokio::task::spawn_blocking(render)
            .await
            .map_err(|e| Error::internal(format!("pop render task failed: {e}")))?
    } else {
        render()
    };
    Ok((rendered, delivered))
}

/// A pop permit, then a pooled connection (always in that order), both before `start_by`;
/// `None` when either comes too late.
async fn admit(st: &PopState, start_by: Instant) -> Result<Option<(Permit, Object)>> {
    let Some(permit) = st.admission.acquire_before(Lane::Pop, start_by).await else {
        return Ok(None);
    };
    Ok(st
        .store
        .conn_before(start_by)
        .await?
        .map(|conn| (permit, conn)))
}

/// A failed claim is a server fault: log PostgreSQL's own message (identical ones once per
/// window), answer `pop failed`, or 503 when the database could not be reached.
fn pop_failed(e: Error) -> Error {
    static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);
    let Error::Db(db) = &e else {
        return e;
    };
    let text = db_message(db);
    if let Some(suppressed) = FAILURES.admit(&text) {
        tracing::error!(error = %text, suppressed, "pop failed");
    }
    if e.is_unavailable() {
        return Error::Unavailable(text);
    }
    Error::internal("pop failed")
}

fn queue_of(shape: &PopShape) -> Option<(&str, Option<&str>)> {
    match shape {
        PopShape::Wildcard { queue } => Some((queue, None)),
        PopShape::Targeted { queue, partition } => Some((queue, Some(partition))),
        PopShape::Discovery { .. } => None,
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
