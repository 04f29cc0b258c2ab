//! One pop request from parameters to answer (docs/spec/life-of-a-pop.md, docs/engine.md §5.1): pop
//! maintenance mode, the minimum pop wait, the cheap has-pending probe, the claim in SQL, the
//! frame walk after the connection is released, and long-poll parking with no connection
//! held. This is the `QUEEN_HOTLIST=0` candidate path: the wildcard shape asks the SQL
//! wildcard procedure, which carries the group-first-contact bulk seed; a woken wildcard pop
//! first tries the partitions its wake gate was told were pushed (docs/engine.md §5.2).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use deadpool_postgres::GenericClient;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::longpoll::{claim_cutoff, Armed, Backoff, Woke};
use crate::engine::render::{self, RenderContext, Rendered};
use crate::engine::render_framed;
use crate::engine::segment_build::INLINE_BUILD_BYTES;
use crate::error::{Error, Result};
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

/// Serves one pop: claims now, or parks (with `wait`) until something is claimed or the
/// deadline passes.
pub async fn pop(st: &AppState, req: &PopRequest) -> Result<PopOutcome> {
    let deadline = Instant::now() + req.timeout;
    let worker = queen_proto::new_v7().to_string();
    let gate = req.wait.then(|| match &req.shape {
        PopShape::Discovery { .. } => st.wake.any_gate(),
        PopShape::Wildcard { queue } | PopShape::Targeted { queue, .. } => st.wake.gate(queue),
    });
    let mut closing = st.closing.subscribe();
    let mut backoff = Backoff::new(&st.cfg);
    // The pushed-partition hints taken on the last wake (wildcard pops only).
    let mut hints: Vec<String> = Vec::new();
    loop {
        // A claim whose answer cannot reach the client in time would strand its lease.
        if req.wait && Instant::now() >= claim_cutoff(deadline) {
            st.pop.stats.deadline_margin_skips.fetch_add(1, Relaxed);
            return Ok(PopOutcome::Empty);
        }
        if st.pop.maintenance.on(st).await? {
            return Ok(PopOutcome::Empty);
        }
        // Armed before the attempt: a push landing between the attempt and the park is kept.
        let armed = gate.as_deref().map(|g| Armed::arm(g.notified()));
        let tried = std::mem::take(&mut hints);
        if let Some(rendered) = attempt(st, req, &worker, &tried, deadline, &mut closing).await? {
            return Ok(PopOutcome::Delivered(rendered));
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
/// Every connection it takes is back in the pool when it returns.
async fn attempt(
    st: &AppState,
    req: &PopRequest,
    worker: &str,
    hints: &[String],
    deadline: Instant,
    closing: &mut watch::Receiver<bool>,
) -> Result<Option<Rendered>> {
    if let Some((queue, partition)) = queue_of(&req.shape) {
        if let Some(window) = st.pop.min_wait.window(queue) {
            hold_underfull(st, req, queue, partition, window, deadline, closing).await?;
        }
    }
    let (sub_mode, sub_from) = subscription_args(&req.subscription);
    let args = ClaimArgs {
        group: &req.group,
        budget: req.batch,
        lease_seconds: req.lease_seconds,
        worker,
        auto_ack: req.auto_ack,
        max_partitions: req.partitions,
        sub_mode,
        sub_from: &sub_from,
    };
    let answer = {
        let conn = st.store.conn().await?;
        match claim_hinted(st, &conn, req, hints, &args).await? {
            Some(answer) => answer,
            None => {
                if st.cfg.pop_pending_gate && !has_pending(&conn, req).await.map_err(pop_failed)? {
                    return Ok(None);
                }
                claim(&conn, req, &args).await.map_err(pop_failed)?
            }
        }
    };
    if let (Some((queue, _)), Some(ms)) = (queue_of(&req.shape), answer.min_pop_wait_ms) {
        st.pop.min_wait.learn(queue, ms);
    }
    if answer.partitions.is_empty() {
        return Ok(None);
    }
    let blob_bytes: usize = answer.blobs.iter().map(Vec::len).sum();
    let delivered = Delivered::of(&answer);
    let queue = queue_of(&req.shape).map_or("", |(q, _)| q).to_string();
    let lease_id = if req.auto_ack { "" } else { worker }.to_string();
    let (group, frames) = (req.group.clone(), req.frames);
    let per_message_queue = matches!(req.shape, PopShape::Discovery { .. });
    let render_answer = move || {
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
        tokio::task::spawn_blocking(render_answer)
            .await
            .map_err(|e| Error::internal(format!("pop render task failed: {e}")))?
    } else {
        render_answer()
    };
    st.counters
        .messages_popped
        .fetch_add(rendered.messages as u64, Relaxed);
    if rendered.messages == 0 {
        return Ok(None);
    }
    st.pop
        .deliveries
        .record(delivered, Utc::now().timestamp_micros());
    Ok(Some(rendered))
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

/// A failed claim is a server fault: log PostgreSQL's own message, answer `pop failed`.
fn pop_failed(e: Error) -> Error {
    match e {
        Error::Db(db) => {
            tracing::error!(error = %db_message(&db), "pop failed");
            Error::internal("pop failed")
        }
        other => other,
    }
}

fn queue_of(shape: &PopShape) -> Option<(&str, Option<&str>)> {
    match shape {
        PopShape::Wildcard { queue } => Some((queue, None)),
        PopShape::Targeted { queue, partition } => Some((queue, Some(partition))),
        PopShape::Discovery { .. } => None,
    }
}

/// The `(p_sub_mode, p_sub_from)` arguments of the SQL functions.
fn subscription_args(sub: &Subscription) -> (&'static str, String) {
    match sub {
        Subscription::All => ("all", String::new()),
        Subscription::New => ("new", String::new()),
        Subscription::From(t) => ("all", t.to_rfc3339_opts(SecondsFormat::Micros, true)),
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
            let conn = st.store.conn().await?;
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

/// Per-queue delivery metrics (docs/spec/life-of-a-pop.md Step 7): answers and messages delivered,
/// and the delivery lag, i.e. how long the oldest message of an answer waited since its
/// segment was written (last answer's and the largest seen).
#[derive(Default)]
struct Deliveries {
    by_queue: Mutex<HashMap<String, QueueDeliveries>>,
}

#[derive(Default)]
struct QueueDeliveries {
    pops: u64,
    messages: u64,
    last_lag_ms: u64,
    max_lag_ms: u64,
}

/// What one answer delivered per queue: (queue, messages, oldest segment timestamp in µs).
struct Delivered(Vec<(String, u64, i64)>);

impl Delivered {
    fn of(answer: &PopAnswer) -> Self {
        let mut per_queue: Vec<(String, u64, i64)> = Vec::new();
        for part in &answer.partitions {
            let taken: u64 = part
                .segments
                .iter()
                .map(|s| u64::try_from(s.take).unwrap_or(0))
                .sum();
            let oldest = part.segments.iter().map(|s| s.created_at).min();
            let (Some(oldest), true) = (oldest, taken > 0) else {
                continue;
            };
            match per_queue.iter_mut().find(|(q, ..)| *q == part.queue) {
                Some(entry) => {
                    entry.1 += taken;
                    entry.2 = entry.2.min(oldest);
                }
                None => per_queue.push((part.queue.clone(), taken, oldest)),
            }
        }
        Delivered(per_queue)
    }
}

impl Deliveries {
    fn record(&self, delivered: Delivered, now_us: i64) {
        let mut map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        for (queue, messages, oldest_us) in delivered.0 {
            let lag_ms = u64::try_from(now_us.saturating_sub(oldest_us) / 1000).unwrap_or(0);
            let q = map.entry(queue).or_default();
            q.pops += 1;
            q.messages += messages;
            q.last_lag_ms = lag_ms;
            q.max_lag_ms = q.max_lag_ms.max(lag_ms);
        }
    }

    fn snapshot(&self) -> Value {
        let map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .map(|(queue, q)| {
                let v = json!({
                    "pops": q.pops,
                    "messages": q.messages,
                    "lastLagMs": q.last_lag_ms,
                    "maxLagMs": q.max_lag_ms,
                });
                (queue.clone(), v)
            })
            .collect::<serde_json::Map<String, Value>>()
            .into()
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

    async fn on(&self, st: &AppState) -> Result<bool> {
        if let Some(on) = self.fresh() {
            return Ok(on);
        }
        let _refreshing = self.refresh.lock().await;
        if let Some(on) = self.fresh() {
            return Ok(on);
        }
        let on = {
            let conn = st.store.conn().await?;
            sql::pop_maintenance(&conn).await.map_err(pop_failed)?
        };
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), on));
        Ok(on)
    }
}

/// `min_pop_wait_time` per queue, learned from the claims' answers. The relaxed flag stays
/// false on a broker where no queue ever configured it, so the default path pays one load.
#[derive(Default)]
struct MinPopWait {
    any: AtomicBool,
    by_queue: Mutex<HashMap<String, u64>>,
}

impl MinPopWait {
    fn window(&self, queue: &str) -> Option<Duration> {
        if !self.any.load(Relaxed) {
            return None;
        }
        let map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        map.get(queue).map(|&ms| Duration::from_millis(ms))
    }

    fn learn(&self, queue: &str, ms: i64) {
        let ms = u64::try_from(ms).unwrap_or(0);
        if ms == 0 && !self.any.load(Relaxed) {
            return;
        }
        let mut map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        if ms == 0 {
            map.remove(queue);
        } else {
            map.insert(queue.to_string(), ms);
            self.any.store(true, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_wait_is_off_until_some_queue_configures_it() {
        let w = MinPopWait::default();
        w.learn("q", 0);
        assert!(!w.any.load(Relaxed));
        assert_eq!(w.window("q"), None);
        w.learn("q", 250);
        assert_eq!(w.window("q"), Some(Duration::from_millis(250)));
        assert_eq!(w.window("other"), None);
        w.learn("q", 0);
        assert_eq!(w.window("q"), None);
    }

    #[test]
    fn deliveries_count_messages_and_the_oldest_wait_per_queue() {
        use crate::store::pop::{ClaimedPartition, ClaimedSegment};
        let part = |queue: &str, created: &[(i32, i64)]| ClaimedPartition {
            partition: "p".into(),
            partition_id: 1,
            queue: queue.into(),
            delivery_attempt: 1,
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
        let d = Deliveries::default();
        d.record(Delivered::of(&answer), 10_000_000);
        d.record(Delivered::of(&answer), 10_500_000);
        let v = d.snapshot();
        assert_eq!(
            v["a"],
            json!({"pops": 2, "messages": 18, "lastLagMs": 8500, "maxLagMs": 8500})
        );
        assert_eq!(
            v["b"],
            json!({"pops": 2, "messages": 2, "lastLagMs": 1500, "maxLagMs": 1500})
        );
    }

    #[test]
    fn subscription_arguments() {
        assert_eq!(
            subscription_args(&Subscription::New),
            ("new", String::new())
        );
        let t = DateTime::parse_from_rfc3339("2026-11-29T11:00:00.123456+01:00")
            .expect("ts")
            .with_timezone(&Utc);
        assert_eq!(
            subscription_args(&Subscription::From(t)).1,
            "2026-11-29T10:00:00.123456Z"
        );
    }
}
