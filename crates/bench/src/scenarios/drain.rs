//! Draining a pre-pushed backlog with autopilot consumers (docs/engine.md §5.7): the same
//! number of messages stored as many shallow partitions (10 000 × 2) and as few deep ones
//! (10 × 2 000), each drained by 10 consumers that pop the way the official client does by
//! default (`autopilot=true`, no `batch`, no `partitions`, long-poll) and ack each answer with
//! one `/ack/batch`. Reports both drain rates and their ratio (`wide_vs_narrow`): without
//! broker-side sizing a many-partition backlog drains a partition (two messages) per pop.
//! Every message is verified delivered once, in each partition's order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use queen_client::{PushItem, QueueRef};
use tokio::task::JoinSet;

use super::e2e::{self, ConsumerStats};
use super::{push, Ctx};
use crate::profile::ProfileName;
use crate::report::Row;
use crate::tracker::Tracker;

/// Consumers draining each backlog.
pub(super) const CONSUMERS: u32 = 10;
/// Concurrent push requests while the backlog is stored.
const PUSHERS: usize = 32;
/// Messages per push request (at most).
const PUSH_BATCH: u64 = 100;
/// Long-poll deadline of the consumers: short, so they notice the end of the drain quickly.
pub(super) const POP_TIMEOUT_MS: u64 = 1000;

/// One backlog: `partitions` partitions holding `depth` messages each.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backlog {
    pub(super) partitions: u64,
    pub(super) depth: u64,
}

impl Backlog {
    pub(super) fn messages(self) -> u64 {
        self.partitions * self.depth
    }

    pub(super) fn label(self) -> String {
        format!(
            "part-{} x{} autopilot c-{CONSUMERS}",
            self.partitions, self.depth
        )
    }
}

/// (wide, narrow) backlogs of the same size for the profile.
fn backlogs(profile: ProfileName) -> (Backlog, Backlog) {
    let (partitions, depth) = match profile {
        ProfileName::Tiny => (1_000, 200),
        ProfileName::Quick | ProfileName::Full => (10_000, 2_000),
    };
    (
        Backlog {
            partitions,
            depth: 2,
        },
        Backlog {
            partitions: 10,
            depth,
        },
    )
}

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let (wide, narrow) = backlogs(ctx.profile.name);
    let narrow_row = run_cell(ctx, narrow).await?;
    let mut wide_row = run_cell(ctx, wide).await?;
    let ratio = wide_row.msgs_per_s / narrow_row.msgs_per_s.max(1e-9);
    eprintln!(
        "  drain: {} partitions {:.0} msg/s, {} partitions {:.0} msg/s, ratio {ratio:.2}",
        wide.partitions, wide_row.msgs_per_s, narrow.partitions, narrow_row.msgs_per_s
    );
    wide_row.extra.insert("wide_vs_narrow".into(), ratio);
    Ok(vec![narrow_row, wide_row])
}

/// Stores `backlog`, then drains it with the autopilot consumers; the row's rate is what the
/// drain delivered per second from the consumers' start to the last message.
async fn run_cell(ctx: &Ctx, backlog: Backlog) -> Result<Row> {
    let name = ctx.queue_name(&format!("drain-p{}", backlog.partitions));
    let queue = ctx.queen.queue(&name);
    queue.configure(e2e::queue_options()).await?;
    let pushed_in = store(ctx, &queue, backlog).await?;

    let expected = backlog.messages();
    let tracker = Arc::new(Tracker::new(1));
    let cstats = Arc::new(ConsumerStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    ctx.checkpoint().await?;
    let start = ctx.meter.start().await?;
    let mut consumers = JoinSet::new();
    for _ in 0..CONSUMERS {
        let q = queue
            .clone()
            .autopilot(true)
            .wait(true)
            .timeout_ms(POP_TIMEOUT_MS);
        let args = (
            ctx.queen.clone(),
            tracker.clone(),
            cstats.clone(),
            stop.clone(),
            ctx.clock,
        );
        consumers.spawn(e2e::consume(q, 0, None, args));
    }
    e2e::drain(&tracker, expected, ctx.profile.drain_timeout).await;
    let usage = ctx.meter.since(&start).await?;
    stop.store(true, Ordering::Relaxed);
    while consumers.join_next().await.is_some() {}

    let delivered = tracker.unique().iter().sum::<u64>();
    let mut row = Row::new("drain", backlog.label(), "queen-rs");
    row.msgs = delivered;
    row.msgs_per_s = delivered as f64 / usage.seconds.max(1e-3);
    row.errors = cstats.errors.load(Ordering::Relaxed);
    let pops = cstats.pops.load(Ordering::Relaxed);
    if pops > 0 {
        row.extra
            .insert("msgs_per_pop".into(), delivered as f64 / pops as f64);
    }
    row.extra.insert(
        "empty_pops".into(),
        cstats.empty_pops.load(Ordering::Relaxed) as f64,
    );
    row.extra.insert("push_s".into(), pushed_in);
    let acks_failed = cstats.ack_failures.load(Ordering::Relaxed);
    if acks_failed > 0 {
        row.extra.insert("ack_failures".into(), acks_failed as f64);
    }
    row.verification = Some(tracker.verify(expected));
    Ok(row.with_usage(usage))
}

/// Pushes the backlog (sequence numbers partition by partition), `PUSHERS` requests at a
/// time; the seconds it took.
pub(super) async fn store(ctx: &Ctx, queue: &QueueRef, backlog: Backlog) -> Result<f64> {
    let started = Instant::now();
    let now = ctx.clock.now_us();
    let mut requests: Vec<(QueueRef, Vec<PushItem>)> = Vec::new();
    for p in 0..backlog.partitions {
        let lane = queue.clone().partition(format!("p{p}"));
        let mut first = 0;
        while first < backlog.depth {
            let n = PUSH_BATCH.min(backlog.depth - first);
            let seq = p * backlog.depth + first;
            let items = push::items(ctx, seq, n as u32, now);
            requests.push((lane.clone(), items));
            first += n;
        }
    }
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let mut pushers = JoinSet::new();
    for _ in 0..PUSHERS {
        let (requests, next) = (requests.clone(), next.clone());
        pushers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((lane, items)) = requests.get(i) else {
                    return Ok::<_, anyhow::Error>(());
                };
                let results = lane.push(items).await?;
                if let Some(bad) = results.iter().find(|r| !r.is_queued()) {
                    anyhow::bail!("backlog push not queued: {}", bad.status);
                }
            }
        });
    }
    while let Some(done) = pushers.join_next().await {
        done??;
    }
    Ok(started.elapsed().as_secs_f64())
}
