//! End-to-end: open-loop producers at a fixed rate, and per consumer group a set of consumers
//! that pop leased batches of 100 with long-poll and ack each batch with one `/ack/batch`.
//! Reports delivered msgs/s (all groups) while the backlog stays stable, end-to-end latency
//! from the scheduled send instant, and after a drain verifies that every group received every
//! accepted message exactly once (broker-labelled redeliveries aside). Also serves the
//! light-load latency cell.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use queen_client::{AckRef, PopView, QueueRef};
use tokio::task::JoinSet;

use super::refusals::Refusals;
use super::Ctx;
use crate::openloop::{self, Schedule};
use crate::payload::{Clock, Stamp};
use crate::report::{Latency, Row};
use crate::sizes;
use crate::tracker::{Delivery, Tracker};

/// Long-poll deadline of bench consumers: short, so they notice the end of a cell quickly.
const POP_TIMEOUT_MS: u64 = 1000;
/// Visibility timeout / lease, the same for the peer.
pub const LEASE_SECONDS: u32 = 30;

#[derive(Debug, Clone)]
pub struct Cell {
    pub scenario: &'static str,
    pub label: String,
    pub partitions: u32,
    pub groups: u32,
    pub push_batch: u32,
    /// Producer rate in messages per second.
    pub rate: f64,
    pub consumers_per_group: u32,
    pub warmup: Duration,
    pub measure: Duration,
    /// The queue's `/configure` options.
    pub options: serde_json::Value,
    /// Sample table sizes at this period during the measured window (the soak).
    pub sample_sizes: Option<Duration>,
}

/// The options of an e2e queue: only the lease.
pub fn queue_options() -> serde_json::Value {
    serde_json::json!({ "leaseTime": LEASE_SECONDS })
}

/// Consumer counters shared with the cell.
#[derive(Default)]
pub struct ConsumerStats {
    pub pops: AtomicU64,
    pub empty_pops: AtomicU64,
    pub errors: AtomicU64,
    pub ack_failures: AtomicU64,
}

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for partitions in ctx.profile.partitions.clone() {
        for groups in ctx.profile.groups.clone() {
            let (row, rate) = search(ctx, partitions, groups).await?;
            ctx.e2e_rates.insert((partitions, groups), rate);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The highest producer rate with a stable backlog within the attempt budget
/// (`search::highest_stable`), starting at 40 % of push capacity.
pub async fn search(ctx: &Ctx, partitions: u32, groups: u32) -> Result<(Row, f64)> {
    // A rate fixed on the command line is measured as given.
    let attempts = if ctx.overrides.e2e_rate.is_some() {
        1
    } else {
        ctx.profile.e2e_retries + 1
    };
    let start = initial_rate(ctx, partitions);
    let attempt = |rate, may_abandon| attempt(ctx, partitions, groups, rate, may_abandon);
    let label = format!("e2e {}", label(partitions, groups));
    super::search::highest_stable(&label, attempts, start, attempt).await
}

/// Confirms that `rate`, found earlier in the run, still holds (`search::confirm`).
pub async fn confirm(ctx: &Ctx, partitions: u32, groups: u32, rate: f64) -> Result<(Row, f64)> {
    let mut attempt = |rate, may_abandon| attempt(ctx, partitions, groups, rate, may_abandon);
    let label = format!("e2e {}", label(partitions, groups));
    super::search::confirm(&label, rate, &mut attempt).await
}

/// The cell label of an e2e shape.
pub fn label(partitions: u32, groups: u32) -> String {
    format!("part-{partitions} cg-{groups}")
}

/// One search attempt: the e2e cell at `rate`, abandoned undrained when allowed and unstable.
async fn attempt(
    ctx: &Ctx,
    partitions: u32,
    groups: u32,
    rate: f64,
    may_abandon: bool,
) -> Result<Row> {
    let cell = Cell {
        scenario: "e2e",
        label: label(partitions, groups),
        partitions,
        groups,
        push_batch: 100,
        rate,
        consumers_per_group: consumers_for(partitions),
        warmup: ctx.profile.e2e_warmup,
        measure: ctx.profile.e2e_measure,
        options: queue_options(),
        sample_sizes: None,
    };
    run_cell(ctx, &cell, may_abandon).await
}

/// Light load: 1 000 msgs/s pushed one per request to one partition, one group.
pub async fn run_latency(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let cell = Cell {
        scenario: "latency",
        label: "1000 msg/s bp-1 part-1".into(),
        partitions: 1,
        groups: 1,
        push_batch: 1,
        rate: 1000.0,
        consumers_per_group: 1,
        warmup: Duration::from_secs(1),
        measure: ctx.profile.latency_measure,
        options: queue_options(),
        sample_sizes: None,
    };
    Ok(vec![run_cell(ctx, &cell, false).await?])
}

/// Consumers per group: one per partition up to 10 (a partition serves one lease at a time).
pub fn consumers_for(partitions: u32) -> u32 {
    partitions.clamp(1, 10)
}

/// 40 % of the measured push capacity at this partition count, else the profile default.
fn initial_rate(ctx: &Ctx, partitions: u32) -> f64 {
    ctx.overrides
        .e2e_rate
        .or_else(|| ctx.push_capacity.get(&partitions).map(|c| c * 0.4))
        .unwrap_or(ctx.profile.e2e_default_rate)
        .max(100.0)
}

fn group_name(groups: u32, g: u32) -> Option<String> {
    (groups > 1).then(|| format!("g{g}"))
}

/// Runs one cell. With `may_abandon`, a cell whose backlog grew returns right after its window,
/// unverified and undrained (the caller retries slower and reports only the retry).
pub async fn run_cell(ctx: &Ctx, cell: &Cell, may_abandon: bool) -> Result<Row> {
    let name = ctx.queue_name(&format!(
        "{}-p{}-g{}-r{}",
        cell.scenario, cell.partitions, cell.groups, cell.rate as u64
    ));
    let queue = ctx.queen.queue(&name);
    queue.configure(cell.options.clone()).await?;
    let tracker = Arc::new(Tracker::new(cell.groups as usize));
    let cstats = Arc::new(ConsumerStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumers = JoinSet::new();
    for g in 0..cell.groups {
        for _ in 0..cell.consumers_per_group {
            let mut q = queue
                .clone()
                .batch(100)
                .wait(true)
                .timeout_ms(POP_TIMEOUT_MS)
                .subscription_mode("all");
            if let Some(group) = group_name(cell.groups, g) {
                q = q.group(group);
            }
            let args = (
                ctx.queen.clone(),
                tracker.clone(),
                cstats.clone(),
                stop.clone(),
                ctx.clock,
            );
            consumers.spawn(consume(q, g, group_name(cell.groups, g), args));
        }
    }

    // Every 429 comes back to the producer, which counts it and waits it out (refusals.rs).
    let producer = ctx.queen.clone().retry_429(1).queue(&name);
    let lanes: Arc<Vec<QueueRef>> = Arc::new(
        (0..cell.partitions)
            .map(|p| producer.clone().partition(format!("p{p}")))
            .collect(),
    );
    let queued = Arc::new(AtomicU64::new(0));
    let refusals = Arc::new(Refusals::default());
    let next_request = AtomicU64::new(0);
    let batch = cell.push_batch;
    let send = |_slot: u64, due: Instant| {
        let n = next_request.fetch_add(1, Ordering::Relaxed);
        let lane = lanes[(n % u64::from(cell.partitions)) as usize].clone();
        let sched = ctx.clock.micros(due);
        let push = super::push::request(&ctx.payloads, &lane, n * u64::from(batch), batch, sched);
        let (queued, refusals) = (queued.clone(), refusals.clone());
        async move {
            let answer = match lane.push_raw(push).await {
                Ok(answer) => answer,
                Err(e) => return refusals.back_off(e, n).await,
            };
            queued.fetch_add(answer.queued as u64, Ordering::Relaxed);
            if answer.queued == answer.total() {
                refusals.accepted(due);
                Ok(())
            } else {
                Err(format!(
                    "{} of {} items not queued",
                    answer.total() - answer.queued,
                    answer.total()
                ))
            }
        }
    };
    let schedule = |duration| Schedule {
        rate: Some(cell.rate / f64::from(batch)),
        duration,
        inflight: ctx.profile.inflight,
    };

    ctx.checkpoint().await?;
    let warm = openloop::run(schedule(cell.warmup), send).await;
    let backlog = |t: &Tracker| {
        let q = queued.load(Ordering::Relaxed);
        t.unique()
            .iter()
            .map(|u| q.saturating_sub(*u))
            .max()
            .unwrap_or(0)
    };
    tracker.open_window(ctx.clock.now_us());
    refusals.open_window();
    let per_group_start = tracker.unique();
    let delivered_start: u64 = per_group_start.iter().sum();
    let queued_start = queued.load(Ordering::Relaxed);
    let start = ctx.meter.start().await?;
    let sampling = async {
        match cell.sample_sizes {
            Some(every) => sizes::sample(&ctx.admin, every, cell.measure).await,
            None => Vec::new(),
        }
    };
    let (stats, samples) = tokio::join!(openloop::run(schedule(cell.measure), send), sampling);
    let usage = ctx.meter.since(&start).await?;
    let backlog_end = backlog(&tracker);
    let delivered: u64 = tracker.unique().iter().sum::<u64>() - delivered_start;
    let pushed = queued.load(Ordering::Relaxed) - queued_start;

    let slowest_group = tracker
        .unique()
        .iter()
        .zip(&per_group_start)
        .map(|(end, start)| end - start)
        .min()
        .unwrap_or(0);
    let window = Window {
        backlog_end,
        pushed,
        offered: cell.rate * usage.seconds,
    };
    let stable = stable(&window, batch);
    let abandon = may_abandon && !stable;
    let expected = queued.load(Ordering::Relaxed);
    if !abandon {
        drain(&tracker, expected, ctx.profile.drain_timeout).await;
    }
    stop.store(true, Ordering::Relaxed);
    while consumers.join_next().await.is_some() {}

    let mut row = Row::new(cell.scenario, cell.label.clone(), "queen-rs");
    row.offered_msgs_per_s = Some(cell.rate);
    row.msgs = delivered;
    row.msgs_per_s = delivered as f64 / usage.seconds.max(1e-3);
    row.shed = stats.shed;
    row.errors = stats.errors + warm.errors + cstats.errors.load(Ordering::Relaxed);
    row.latency = Latency::of(&tracker.latency());
    row.stable_backlog = Some(stable);
    row.sizes = samples;
    row.extra.insert(
        "min_group_delivered_per_s".into(),
        slowest_group as f64 / usage.seconds.max(1e-3),
    );
    row.extra.insert("backlog_end".into(), backlog_end as f64);
    refusals.report(&mut row);
    row.extra.insert(
        "pushed_per_s".into(),
        pushed as f64 / usage.seconds.max(1e-3),
    );
    // Batching efficiency over the whole cell (warm-up and drain included).
    let pops = cstats.pops.load(Ordering::Relaxed);
    if pops > 0 {
        let all: u64 = tracker.unique().iter().sum();
        row.extra
            .insert("msgs_per_pop".into(), all as f64 / pops as f64);
    }
    row.extra.insert(
        "empty_pops".into(),
        cstats.empty_pops.load(Ordering::Relaxed) as f64,
    );
    let acks_failed = cstats.ack_failures.load(Ordering::Relaxed);
    if acks_failed > 0 {
        row.extra.insert("ack_failures".into(), acks_failed as f64);
    }
    if let Some(e) = stats.first_error.or(warm.first_error) {
        row.notes.push(format!("first push error: {e}"));
    }
    let mut row = row.with_usage(usage);
    if pushed > 0 {
        row.wal_bytes_per_msg = Some(row.usage.wal_bytes as f64 / pushed as f64);
        row.extra.insert(
            "xacts_per_pushed_msg".into(),
            row.usage.xacts as f64 / pushed as f64,
        );
    }
    // End-to-end efficiency: against the engine-shaped push/pop/ack cycle when measured.
    if let Some((name, c)) = ["cycle100", "seg100k"]
        .iter()
        .find_map(|n| Some((*n, ctx.ceilings.get(n)?)))
    {
        row.ceiling_fraction = Some(row.msgs_per_s / c);
        row.ceiling_name = Some(name.into());
    }
    if !abandon {
        row.verification = Some(tracker.verify(expected));
    }
    ctx.discard(&name).await;
    Ok(row)
}

/// How long the drain may go without any new delivery before it gives up.
const DRAIN_STALL: Duration = Duration::from_secs(10);

/// Waits until every group has all `expected` messages, the deliveries stall, or `limit`.
pub async fn drain(tracker: &Tracker, expected: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut last_total = 0;
    let mut last_progress = Instant::now();
    loop {
        let unique = tracker.unique();
        if unique.iter().all(|u| *u >= expected) || Instant::now() >= deadline {
            return;
        }
        let total: u64 = unique.iter().sum();
        if total != last_total {
            (last_total, last_progress) = (total, Instant::now());
        } else if last_progress.elapsed() >= DRAIN_STALL {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What an attempt's window saw: the backlog at its end, the messages the broker
/// accepted, and the messages the schedule offered.
pub struct Window {
    pub backlog_end: u64,
    pub pushed: u64,
    pub offered: f64,
}

/// Share of the offered messages the broker must accept for a rate to count as kept up: a
/// broker that refuses (429) or slows the producers below their schedule has not kept up with
/// that rate, however flat its backlog stays.
const KEPT_UP: f64 = 0.95;

/// Share of the pushed messages, in percent, that may still wait at the end of a stable
/// window. Once it was a tenth of the growth over the window: that called 40 000 msg/s stable
/// where the next windows delivered 28 000, because the window opened on a warm-up backlog
/// and drained it, and a backlog growing by 4 000 msg/s passed as well.
const BACKLOG_SLACK_PCT: u64 = 1;

/// Stable: over the window the broker accepted what was offered, and at its end the backlog
/// is no more than [`BACKLOG_SLACK_PCT`] % of what was pushed plus ten requests' worth (what is
/// in flight between a push and its delivery when consumers keep up).
pub fn stable(w: &Window, batch: u32) -> bool {
    let slack = w.pushed * BACKLOG_SLACK_PCT / 100 + 10 * u64::from(batch);
    w.pushed as f64 >= KEPT_UP * w.offered && w.backlog_end <= slack
}

pub type ConsumerArgs = (
    queen_client::Queen,
    Arc<Tracker>,
    Arc<ConsumerStats>,
    Arc<AtomicBool>,
    Clock,
);

/// Pop, record, ack the whole batch in one call; until told to stop. The answer is read only
/// as far as the check and the ack need (`queen_client::PopView`).
pub async fn consume(queue: QueueRef, g: u32, group: Option<String>, args: ConsumerArgs) {
    let (queen, tracker, stats, stop, clock) = args;
    while !stop.load(Ordering::Relaxed) {
        let body = match queue.pop_body().await {
            Ok(Some(body)) => body,
            Ok(None) => {
                stats.empty_pops.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => {
                if stats.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("  consumer error: {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let popped = match body.view() {
            Ok(view) if view.messages.is_empty() => {
                stats.empty_pops.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(view) => view,
            Err(e) => {
                if stats.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("  consumer error: {e}");
                }
                continue;
            }
        };
        stats.pops.fetch_add(1, Ordering::Relaxed);
        record(&tracker, g as usize, &popped, clock.now_us());
        let acks: Vec<AckRef<'_>> = popped.messages.iter().map(|m| m.completed()).collect();
        match queen.ack_refs(&acks, group.as_deref()).await {
            Ok(refused) => {
                stats
                    .ack_failures
                    .fetch_add(refused as u64, Ordering::Relaxed);
            }
            Err(e) => {
                if stats.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("  ack error: {e}");
                }
            }
        }
    }
}

/// Records every message of one pop answer to `group`, delivered at `now` (µs). The stamps
/// are read before the tracker's lock is taken: the consumers of a group share it.
pub fn record(tracker: &Tracker, group: usize, popped: &PopView<'_>, now: i64) {
    let deliveries: Vec<Delivery<'_>> = popped
        .messages
        .iter()
        .filter_map(|m| {
            let s = Stamp::parse(m.data)?;
            Some(Delivery {
                seq: s.i,
                attempt: m.delivery_attempt.unwrap_or(1),
                sched_us: s.t,
                lane: m.offset.map(|o| (m.partition_id.as_ref(), o)),
            })
        })
        .collect();
    tracker.record_all(group, now, deliveries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::Payloads;
    use queen_client::PopBody;

    /// A pop answer as the broker renders it (docs/wire.md §7.3) of messages `seqs` (their
    /// offsets too) of one partition, at delivery `attempt`.
    fn answer(p: &Payloads, seqs: &[u64], attempt: u32) -> PopBody {
        let messages: Vec<String> = seqs
            .iter()
            .map(|&s| {
                format!(
                    r#"{{"id":"M{s}","transactionId":"m{s}","traceId":null,"data":{},"producerSub":null,"createdAt":"2026-12-07T01:00:00.000Z","partitionId":"7","partition":"p0","leaseId":"L","consumerGroup":null,"deliveryAttempt":{attempt},"offset":{s}}}"#,
                    p.body(s, 100)
                )
            })
            .collect();
        let text = format!(
            r#"{{"success":true,"queue":"q","leaseId":"L","messages":[{}]}}"#,
            messages.join(",")
        );
        PopBody::new(text.into())
    }

    /// Four messages delivered as `answers`, read as the consumers read them.
    fn verify(answers: &[PopBody]) -> crate::tracker::Verification {
        let tracker = Tracker::new(1);
        tracker.open_window(0);
        for a in answers {
            record(&tracker, 0, &a.view().unwrap(), 200);
        }
        assert_eq!(tracker.latency().len(), tracker.unique()[0]);
        tracker.verify(4)
    }

    #[test]
    fn the_consumer_path_catches_a_lost_and_a_duplicated_message() {
        let p = Payloads::new(9);
        let all = verify(&[answer(&p, &[0, 1], 1), answer(&p, &[2, 3], 1)]);
        assert!(all.ok, "{all:?}");
        let lost = verify(&[answer(&p, &[0, 1], 1), answer(&p, &[3], 1)]);
        assert!(!lost.ok && lost.lost == 1, "{lost:?}");
        let twice = verify(&[answer(&p, &[0, 1], 1), answer(&p, &[1, 2, 3], 1)]);
        assert!(!twice.ok && twice.duplicates == 1, "{twice:?}");
        let again = verify(&[
            answer(&p, &[0, 1], 1),
            answer(&p, &[1], 2),
            answer(&p, &[2, 3], 1),
        ]);
        assert!(
            again.ok && again.redelivered == 1,
            "a labelled redelivery: {again:?}"
        );
    }

    fn window(pushed: u64, backlog_end: u64) -> Window {
        Window {
            backlog_end,
            pushed,
            offered: 10_000.0,
        }
    }

    #[test]
    fn a_flat_backlog_of_everything_offered_is_stable() {
        assert!(stable(&window(10_000, 500), 100));
    }

    #[test]
    fn a_growing_backlog_is_not() {
        assert!(!stable(&window(10_000, 5_000), 100));
        // Growing by a tenth of what was pushed is not keeping up.
        assert!(!stable(&window(100_000, 10_000), 100));
    }

    #[test]
    fn a_backlog_left_at_the_end_is_not_stable_whatever_the_start() {
        // Whatever backlog the window opened on (a warm-up's, drained meanwhile), what is
        // still waiting at its end says whether the consumers kept up.
        assert!(!stable(&window(100_000, 40_000), 100));
        assert!(stable(&window(100_000, 1_500), 100));
    }

    #[test]
    fn a_flat_backlog_of_refused_pushes_is_not() {
        assert!(!stable(&window(6_000, 0), 100));
    }
}
