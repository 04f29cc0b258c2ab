//! Push throughput: batches of 1, 10 and 100 messages of 1 KiB over 1, 10 and 100 partitions
//! (one partition per request, round-robin), dedup on with the default window. After a
//! saturating warm-up, a saturating phase (bounded by the in-flight cap) measures throughput
//! and resource use, and an open-loop phase at 80 % of that rate measures latency from the
//! scheduled instant (at 100 % any jitter queues without bound, so latency there says nothing
//! but "saturated"). Verified by comparing the messages the broker stored with the pushes it
//! acknowledged as `queued`. The cells with many partitions per request are `spread.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use queen_client::{PushItem, PushResult, PushTally, QueueRef, RawPush};

use super::Ctx;
use crate::meter::Usage;
use crate::openloop::{self, LoadStats, Schedule};
use crate::payload::{Payloads, BODY_BYTES};
use crate::report::{Latency, Row};
use crate::tracker::Verification;

/// Item statuses of a cell's acknowledged pushes.
#[derive(Default)]
pub struct Outcome {
    queued: AtomicU64,
    duplicate: AtomicU64,
    failed: AtomicU64,
}

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for partitions in ctx.profile.partitions.clone() {
        for batch in ctx.profile.push_batches.clone() {
            let row = cell(ctx, batch, partitions).await?;
            if Some(&batch) == ctx.profile.push_batches.iter().max() {
                ctx.push_capacity.insert(partitions, row.msgs_per_s);
            }
            eprintln!(
                "  push bp-{batch} part-{partitions}: {:.0} msg/s",
                row.msgs_per_s
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Builds the `batch` items of request `slot` (sequence numbers `slot*batch ..`).
pub fn items(ctx: &Ctx, first_seq: u64, batch: u32, sched_us: i64) -> Vec<PushItem> {
    (first_seq..first_seq + u64::from(batch))
        .map(|seq| {
            PushItem::raw(ctx.payloads.body(seq, sched_us), Some(transaction_id(seq)))
                .expect("bench payloads are valid JSON")
        })
        .collect()
}

/// The JSON push to `lane` of the `batch` messages from `first_seq`, written in place.
pub fn request(
    payloads: &Payloads,
    lane: &QueueRef,
    first_seq: u64,
    batch: u32,
    sched_us: i64,
) -> RawPush {
    let mut push = RawPush::new(lane, batch as usize, BODY_BYTES);
    let mut id = String::with_capacity(21);
    for seq in first_seq..first_seq + u64::from(batch) {
        id.clear();
        id.push('m');
        id.push_str(itoa::Buffer::new().format(seq));
        push.item(Some(&id), |out| payloads.write(out, seq, sched_us));
    }
    push
}

/// Message `seq`'s transactionId, `m<seq>` (without the formatting machinery: it runs per
/// message).
pub fn transaction_id(seq: u64) -> String {
    let mut id = String::with_capacity(21);
    id.push('m');
    id.push_str(itoa::Buffer::new().format(seq));
    id
}

/// A push cell's request body: JSON written in place, or `QPB1` items (`--binary-push`).
enum Body {
    Json(RawPush),
    Binary(Vec<PushItem>),
}

/// One binary push request; counts statuses into `outcome`.
async fn push_binary(
    queue: QueueRef,
    items: Vec<PushItem>,
    outcome: Arc<Outcome>,
) -> Result<(), String> {
    let results = queue.push_binary(&items, false).await;
    tally(&results.map_err(|e| e.to_string())?, &outcome)
}

/// One JSON push request; counts statuses into `outcome`.
async fn push_json(queue: QueueRef, push: RawPush, outcome: Arc<Outcome>) -> Result<(), String> {
    let answer = queue.push_raw(push).await.map_err(|e| e.to_string())?;
    outcome.count(&answer)
}

impl Outcome {
    /// Counts one push answer's statuses; an error names the first item not queued.
    pub fn count(&self, answer: &PushTally) -> Result<(), String> {
        self.queued
            .fetch_add(answer.queued as u64, Ordering::Relaxed);
        self.duplicate
            .fetch_add(answer.duplicate as u64, Ordering::Relaxed);
        self.failed
            .fetch_add(answer.other as u64, Ordering::Relaxed);
        match &answer.first_not_queued {
            Some(first) => Err(format!("push {first}")),
            None => Ok(()),
        }
    }
}

/// Counts the statuses of one push answer into `outcome`; an error names the first item that
/// was not queued.
pub fn tally(results: &[PushResult], outcome: &Outcome) -> Result<(), String> {
    for r in results {
        let counter = match r.status.as_str() {
            "queued" => &outcome.queued,
            "duplicate" => &outcome.duplicate,
            _ => &outcome.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    match results.iter().find(|r| !r.is_queued()) {
        Some(r) => Err(format!(
            "push item {}: {} {}",
            r.index,
            r.status,
            r.error.clone().unwrap_or_default()
        )),
        None => Ok(()),
    }
}

/// Share of the measured capacity offered in the latency phase.
const LATENCY_LOAD: f64 = 0.8;

/// The three phases of a push cell, shared with the peer so both are measured alike.
pub struct Phases {
    /// Saturating: as many requests as the in-flight cap allows; gives msgs/s and the usage.
    pub capacity: LoadStats,
    pub usage: Usage,
    /// Open-loop at `LATENCY_LOAD` of that capacity (or `--push-rate`): gives latency and shed.
    pub latency: LoadStats,
    /// Offered requests per second of the latency phase.
    pub rate: f64,
    pub warm_errors: u64,
}

/// Warm-up (saturating, discarded), capacity (saturating, metered), latency (open-loop).
pub async fn measure<F, Fut>(ctx: &Ctx, batch: u32, send: F) -> Result<Phases>
where
    F: FnMut(u64, Instant) -> Fut + Copy,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let inflight = ctx.profile.inflight;
    let saturating = |duration| Schedule {
        rate: None,
        duration,
        inflight,
    };
    ctx.checkpoint().await?;
    let warm = openloop::run(saturating(ctx.profile.push_warmup), send).await;
    let start = ctx.meter.start().await?;
    let capacity = openloop::run(saturating(ctx.profile.push_measure), send).await;
    let usage = ctx.meter.since(&start).await?;
    let per_s = capacity.ok as f64 / capacity.elapsed.as_secs_f64().max(1e-3);
    let rate = ctx
        .overrides
        .push_rate
        .map(|m| m / f64::from(batch))
        .unwrap_or(per_s * LATENCY_LOAD)
        .max(1.0);
    let latency = openloop::run(
        Schedule {
            rate: Some(rate),
            duration: ctx.profile.push_measure,
            inflight,
        },
        send,
    )
    .await;
    Ok(Phases {
        capacity,
        usage,
        latency,
        rate,
        warm_errors: warm.errors,
    })
}

impl Phases {
    /// Throughput from the capacity phase, latency and shedding from the open-loop phase.
    pub fn fill(&self, row: &mut Row, batch: u32) {
        row.msgs = self.capacity.ok * u64::from(batch);
        row.msgs_per_s = row.msgs as f64 / self.capacity.elapsed.as_secs_f64().max(1e-3);
        row.offered_msgs_per_s = Some(self.rate * f64::from(batch));
        row.latency = Latency::of(&self.latency.latency_us);
        row.shed = self.latency.shed;
        row.errors = self.warm_errors + self.capacity.errors + self.latency.errors;
        row.extra
            .insert("lat_at_msgs_per_s".into(), self.rate * f64::from(batch));
        if self.latency.scheduled > 0 {
            row.extra.insert(
                "shed_pct".into(),
                100.0 * self.latency.shed as f64 / self.latency.scheduled as f64,
            );
        }
        if let Some(e) = self
            .capacity
            .first_error
            .as_ref()
            .or(self.latency.first_error.as_ref())
        {
            row.notes.push(format!("first error: {e}"));
        }
    }
}

async fn cell(ctx: &Ctx, batch: u32, partitions: u32) -> Result<Row> {
    let name = ctx.queue_name(&format!("push-b{batch}-p{partitions}"));
    let queue = ctx.queen.queue(&name);
    queue
        .configure(serde_json::json!({ "leaseTime": 30 }))
        .await?;
    let lanes: Arc<Vec<QueueRef>> = Arc::new(
        (0..partitions)
            .map(|p| queue.clone().partition(format!("p{p}")))
            .collect(),
    );
    let outcome = Arc::new(Outcome::default());
    let next_request = AtomicU64::new(0);
    let binary = ctx.overrides.binary_push;
    let send = |_slot: u64, due: std::time::Instant| {
        let n = next_request.fetch_add(1, Ordering::Relaxed);
        let lane = lanes[(n % u64::from(partitions)) as usize].clone();
        let (first, sched) = (n * u64::from(batch), ctx.clock.micros(due));
        let body = if binary {
            Body::Binary(items(ctx, first, batch, sched))
        } else {
            Body::Json(request(&ctx.payloads, &lane, first, batch, sched))
        };
        let outcome = outcome.clone();
        async move {
            match body {
                Body::Binary(items) => push_binary(lane, items, outcome).await,
                Body::Json(push) => push_json(lane, push, outcome).await,
            }
        }
    };
    let phases = measure(ctx, batch, send).await?;
    let mut row = Row::new("push", format!("bp-{batch} part-{partitions}"), "queen-rs");
    phases.fill(&mut row, batch);
    let usage = phases.usage;
    let row = verify(ctx, &name, &outcome, row.with_usage(usage), 0).await;
    ctx.discard(&name).await;
    Ok(with_ceiling(ctx, row, batch))
}

/// Messages stored since the cell began (`before` were stored already) must equal acknowledged
/// pushes, with no duplicate or failed item.
pub async fn verify(ctx: &Ctx, queue: &str, outcome: &Outcome, mut row: Row, before: u64) -> Row {
    let queued = outcome.queued.load(Ordering::Relaxed);
    let duplicate = outcome.duplicate.load(Ordering::Relaxed);
    let failed = outcome.failed.load(Ordering::Relaxed);
    match ctx.stored_messages(queue).await {
        Some(stored) => {
            let stored = (stored.max(0) as u64).saturating_sub(before);
            row.verification = Some(Verification {
                expected: queued,
                delivered_unique: vec![stored],
                lost: queued.saturating_sub(stored),
                duplicates: stored.saturating_sub(queued) + duplicate,
                redelivered: 0,
                order_violations: 0,
                ok: stored == queued && duplicate == 0 && failed == 0,
            });
        }
        None => row
            .notes
            .push("stored count unavailable (not our schema?)".into()),
    }
    if failed > 0 {
        row.notes.push(format!("{failed} items failed"));
    }
    row
}

/// Push efficiency: against the segment ceiling (our storage shape), plus the row-shaped
/// ceiling of the same batch size for comparison with row-based peers.
pub fn with_ceiling(ctx: &Ctx, mut row: Row, batch: u32) -> Row {
    if let Some(seg) = ctx.ceilings.get("seg100k") {
        row.ceiling_fraction = Some(row.msgs_per_s / seg);
        row.ceiling_name = Some("seg100k".into());
    }
    let row_script = if batch == 1 { "one1k" } else { "batch100x1k" };
    if let Some(c) = ctx.ceilings.get(row_script) {
        row.extra
            .insert(format!("pct_{row_script}"), 100.0 * row.msgs_per_s / c);
    }
    row
}
