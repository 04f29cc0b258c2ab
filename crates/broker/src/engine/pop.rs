//! One pop request from parameters to answer (docs/spec/life-of-a-pop.md, docs/engine.md §5.1): pop
//! maintenance mode, the minimum pop wait, the cheap has-pending probe, the claim in SQL, the
//! frame walk after the connection is released, and long-poll parking with no connection
//! held. This is the `QUEEN_HOTLIST=0` candidate path: the wildcard shape asks the SQL
//! wildcard procedure, which carries the group-first-contact bulk seed; a woken wildcard pop
//! first tries the partitions its wake gate was told were pushed (docs/engine.md §5.2).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use deadpool_postgres::GenericClient;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::longpoll::{claim_cutoff, Armed, Backoff, Woke};
use crate::engine::pop_state::{Delivered, Deliveries, MinPopWait};
use crate::engine::render::{self, RenderContext, Rendered};
use crate::engine::render_framed;
use crate::engine::segment_build::INLINE_BUILD_BYTES;
use crate::error::{Error, Result};
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::state::AppState;
use crate::store::migrations::db_message;
use crate::store::pop::{self as sql, ClaimArgs, PopAnswer};

/// Upper bound of one decompressed stored segment.
const MAX_SEGMENT_BYTES: usize = 1 << 30;
/// How long a read of pop maintenance mode is trusted.
const MAINTENANCE_TTL: Duration = Duration::from_secs(1);

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
}

pub enum PopOutcome {
    /// Nothing delivered: 204 with no body.
    Empty,
    Delivered(Rendered),
}

/// Per-broker pop state: the cached maintenance flag, the learned minimum pop waits, the
/// long-poll's counters and the per-queue delivery metrics.
#[derive(Default)]
pub struct PopService {
    maintenance: MaintenanceFlag,
    min_wait: MinPopWait,
    stats: PopStats,
    deliveries: Deliveries,
}

impl PopService {
    /// The `pop` section of `/metrics`.
    pub fn metrics(&self) -> Value {
        json!({
            "hintClaims": self.stats.hint_claims.load(Relaxed),
            "hintFallthroughs": self.stats.hint_fallthroughs.load(Relaxed),
            "deadlineMarginSkips": self.stats.deadline_margin_skips.load(Relaxed),
            "queues": self.deliveries.snapshot(),
        })
    }
}

/// How woken pops were scheduled, so the cheaper paths can be seen working.
#[derive(Default)]
struct PopStats {
    /// Woken wildcard pops served from their pushed-partition hints.
    hint_claims: AtomicU64,
    /// Hinted claims that delivered nothing and fell through to the wildcard scan.
    hint_fallthroughs: AtomicU64,
    /// Waiting pops that answered 204 instead of starting a claim inside the deadline margin.
    deadline_margin_skips: AtomicU64,
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
pub async fn pop(st: &AppState, req: &PopRequest) -> Result<PopOutcome> {
    let deadline = Instant::now() + req.timeout;
    let worker = queen_proto::new_v7().to_string();
    // `new` means "after this request arrived", however long its first contact waits (a
    // long-poll on a queue nobody created yet registers only once a push creates it).
    let subscription = subscription_args(&req.subscription, Utc::now());
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
            st.pop.stats.deadline_margin_skips.fetch_add(1, Relaxed);
            return Ok(PopOutcome::Empty);
        }
        first = false;
        if st.pop.maintenance.on(st, start_by).await? != Some(false) {
            return Ok(PopOutcome::Empty);
        }
        // Armed before the attempt: a push landing between the attempt and the park is kept.
        let armed = gate.as_deref().map(|g| Armed::arm(g.notified()));
        let tried = std::mem::take(&mut hints);
        let bounds = (start_by, deadline);
        match attempt(
            st,
            req,
            &worker,
            &subscription,
            &tried,
            bounds,
            &mut closing,
        )
        .await?
        {
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
                if let (Some(gate), PopShape::Wildcard { .. }) = (&gate, &req.shape) {
                    hints = gate.take_hints();
                }
            }
            Woke::Interval => {}
            Woke::Done => return Ok(PopOutcome::Empty),
        }
    }
}

/// One claim attempt: the hinted partitions first (if any), else the request's own shape.
/// It claims only with a connection taken before `start_by` (`bounds.0`); `bounds.1` is the
/// pop's deadline. Every connection it takes is back in the pool when it returns.
async fn attempt(
    st: &AppState,
    req: &PopRequest,
    worker: &str,
    (sub_mode, sub_from): &(&'static str, String),
    hints: &[String],
    (start_by, deadline): (Instant, Instant),
    closing: &mut watch::Receiver<bool>,
) -> Result<Tried> {
    if let Some((queue, partition)) = queue_of(&req.shape) {
        if let Some(window) = st.pop.min_wait.window(queue) {
            hold_underfull(st, req, queue, partition, window, deadline, closing).await?;
        }
    }
    let args = ClaimArgs {
        group: &req.group,
        budget: req.batch,
        lease_seconds: req.lease_seconds,
        worker,
        auto_ack: req.auto_ack,
        max_partitions: req.partitions,
        sub_mode,
        sub_from,
    };
    let answer = {
        let Some(conn) = st.store.conn_before(start_by).await? else {
            return Ok(Tried::OutOfTime);
        };
        match claim_hinted(st, &conn, req, hints, &args).await? {
            Some(answer) => answer,
            None => {
                if st.cfg.pop_pending_gate && !has_pending(&conn, req).await.map_err(pop_failed)? {
                    return Ok(Tried::Nothing);
                }
                claim(&conn, req, &args).await.map_err(pop_failed)?
            }
        }
    };
    if let (Some((queue, _)), Some(ms)) = (queue_of(&req.shape), answer.min_pop_wait_ms) {
        st.pop.min_wait.learn(queue, ms);
    }
    if answer.partitions.is_empty() {
        return Ok(Tried::Nothing);
    }
    let (rendered, delivered) = render_answer(answer, req, worker).await?;
    st.counters
        .messages_popped
        .fetch_add(rendered.messages as u64, Relaxed);
    if rendered.messages == 0 {
        return Ok(Tried::Nothing);
    }
    st.pop
        .deliveries
        .record(delivered, Utc::now().timestamp_micros());
    Ok(Tried::Delivered(rendered))
}

/// Renders a claimed answer (JSON or framed), off the async workers when it is big; returns
/// it with what it delivered per queue.
async fn render_answer(
    answer: PopAnswer,
    req: &PopRequest,
    worker: &str,
) -> Result<(Rendered, Delivered)> {
    let blob_bytes: usize = answer.blobs.iter().map(Vec::len).sum();
    let delivered = Delivered::of(&answer);
    let queue = queue_of(&req.shape).map_or("", |(q, _)| q).to_string();
    let lease_id = if req.auto_ack { "" } else { worker }.to_string();
    let (group, frames) = (req.group.clone(), req.frames);
    let per_message_queue = matches!(req.shape, PopShape::Discovery { .. });
    let render = move || {
        let ctx = RenderContext {
            queue: &queue,
            group: &group,
            lease_id: &lease_id,
            per_message_queue,
            max_segment_bytes: MAX_SEGMENT_BYTES,
        };
        if frames {
            render_framed::render(&answer, &ctx)
        } else {
            render::render(&answer, &ctx)
        }
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

/// A woken wildcard pop's targeted claims on its pushed-partition hints, cheaper than a
/// candidate scan. `None` when there were no hints or they delivered nothing: the caller then
/// runs the wildcard pop, the backstop for missed wakes and older backlog, so a stale hint
/// never hides work.
async fn claim_hinted(
    st: &AppState,
    db: &impl GenericClient,
    req: &PopRequest,
    hints: &[String],
    args: &ClaimArgs<'_>,
) -> Result<Option<PopAnswer>> {
    let PopShape::Wildcard { queue } = &req.shape else {
        return Ok(None);
    };
    if hints.is_empty() {
        return Ok(None);
    }
    let answer = sql::pop_hinted(db, queue, hints, args)
        .await
        .map_err(pop_failed)?;
    if answer.partitions.is_empty() {
        st.pop.stats.hint_fallthroughs.fetch_add(1, Relaxed);
        return Ok(None);
    }
    st.pop.stats.hint_claims.fetch_add(1, Relaxed);
    Ok(Some(answer))
}

/// The cheap probe: false means definitively nothing to deliver.
async fn has_pending(db: &impl GenericClient, req: &PopRequest) -> Result<bool> {
    match &req.shape {
        PopShape::Wildcard { queue } => sql::has_pending(db, queue, &req.group).await,
        PopShape::Targeted { queue, partition } => {
            sql::partition_has_pending(db, queue, partition, &req.group).await
        }
        PopShape::Discovery { namespace, task } => {
            sql::discover_has_pending(db, namespace, task, &req.group).await
        }
    }
}

async fn claim(
    db: &impl GenericClient,
    req: &PopRequest,
    args: &ClaimArgs<'_>,
) -> Result<PopAnswer> {
    match &req.shape {
        PopShape::Wildcard { queue } => sql::pop_wildcard(db, queue, args).await,
        PopShape::Targeted { queue, partition } => {
            sql::pop_specific(db, queue, partition, args).await
        }
        PopShape::Discovery { namespace, task } => {
            sql::pop_discover(db, namespace, task, args).await
        }
    }
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

/// The minimum pop wait: holds an under-full claim on a non-empty queue, in the broker and
/// before any connection is held for the claim, until the batch could be full, the window
/// elapses or the caller's deadline (less the claim margin) passes. A push to the queue
/// re-evaluates at once.
async fn hold_underfull(
    st: &AppState,
    req: &PopRequest,
    queue: &str,
    partition: Option<&str>,
    window: Duration,
    deadline: Instant,
    closing: &mut watch::Receiver<bool>,
) -> Result<()> {
    let until = (Instant::now() + window).min(claim_cutoff(deadline));
    let gate = st.wake.gate(queue);
    loop {
        let armed = Armed::arm(gate.notified());
        let pending = {
            let Some(conn) = st.store.conn_before(until).await? else {
                return Ok(());
            };
            sql::pending_estimate(&conn, queue, partition, &req.group, i64::from(req.batch))
                .await
                .map_err(pop_failed)?
        };
        if pending == 0 || pending >= i64::from(req.batch) {
            return Ok(());
        }
        if armed.park(window, until, closing).await == Woke::Done {
            return Ok(());
        }
    }
}

/// Pop maintenance mode, re-read from PostgreSQL at most once per second.
#[derive(Default)]
struct MaintenanceFlag {
    cached: Mutex<Option<(Instant, bool)>>,
    /// One refresh at a time; the others wait for its answer.
    refresh: tokio::sync::Mutex<()>,
}

impl MaintenanceFlag {
    fn fresh(&self) -> Option<bool> {
        let cached = *self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .filter(|(at, _)| at.elapsed() < MAINTENANCE_TTL)
            .map(|(_, on)| on)
    }

    /// The flag, or `None` when it cannot be learnt before `until` (the refresh by another
    /// pop, or a free connection, takes longer): the caller then must not claim.
    async fn on(&self, st: &AppState, until: Instant) -> Result<Option<bool>> {
        if let Some(on) = self.fresh() {
            return Ok(Some(on));
        }
        let Ok(_refreshing) = tokio::time::timeout_at(until, self.refresh.lock()).await else {
            return Ok(None);
        };
        if let Some(on) = self.fresh() {
            return Ok(Some(on));
        }
        let on = {
            let Some(conn) = st.store.conn_before(until).await? else {
                return Ok(None);
            };
            sql::pop_maintenance(&conn).await.map_err(pop_failed)?
        };
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), on));
        Ok(Some(on))
    }
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
}
