//! Several brokers on one PostgreSQL (issue 38 item 3): for 1, 2 and 3 brokers (`fleet.rs`,
//! started beside the bench's own broker, which idles meanwhile), the e2e shape of 10
//! partitions and one group with the load spread across them: producer request `n` goes
//! through broker `n mod k`, consumer `c` (10 of them) pops and acks through broker `c mod k`.
//! Two cells per broker count: 100-message pushes at the e2e rate (delivered msg/s, PostgreSQL
//! and broker CPU per delivered message, and `pg_cpu_vs_1_broker`), and light load, single
//! pushes at 1 000 msg/s, whose push→delivery latency is also given for the deliveries popped
//! through another broker than the one that took the push (`cross_*`). Every cell is drained
//! and verified: every message delivered once, each partition in order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use queen_client::{AckRef, Queen, QueueRef};
use tokio::task::JoinSet;

use super::e2e::{self, ConsumerStats, Window};
use super::{push, Ctx};
use crate::fleet::Fleet;
use crate::openloop::{self, new_histogram, Schedule};
use crate::payload::Stamp;
use crate::report::{Latency, Row};
use crate::tracker::Tracker;

/// Broker counts measured.
const BROKER_COUNTS: [usize; 3] = [1, 2, 3];
/// Partitions of every cell's queue, and its consumers (one per partition).
const PARTITIONS: u64 = 10;
/// The light-load cell: single-message pushes at this rate (as the latency scenario).
const LIGHT_RATE: f64 = 1000.0;
/// Long-poll deadline of the consumers.
const POP_TIMEOUT_MS: u64 = 1000;

/// One cell's load: messages per push request and offered messages per second.
#[derive(Debug, Clone, Copy)]
struct Load {
    batch: u32,
    rate: f64,
    measure: Duration,
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let bin = ctx
        .overrides
        .queen_bin
        .clone()
        .context("the brokers scenario starts brokers: with --url, also pass --queen-bin")?;
    let rate = ctx
        .overrides
        .e2e_rate
        .or_else(|| ctx.e2e_rates.get(&(PARTITIONS as u32, 1)).copied())
        .unwrap_or(ctx.profile.e2e_default_rate);
    let mut rows = Vec::new();
    let mut one_broker_pg = None;
    for k in BROKER_COUNTS {
        let fleet = Fleet::start(&bin, k, &ctx.target.pg_url, &ctx.overrides.broker_env).await?;
        let loaded = Load {
            batch: 100,
            rate,
            measure: ctx.profile.e2e_measure,
        };
        let light = Load {
            batch: 1,
            rate: LIGHT_RATE,
            measure: ctx.profile.latency_measure,
        };
        let mut row = run_cell(ctx, &fleet, loaded).await?;
        let pg = row.extra.get("pg_cpu_us_per_msg").copied();
        if k == 1 {
            one_broker_pg = pg;
        }
        if let Some((pg, one)) = pg.zip(one_broker_pg) {
            row.extra.insert("pg_cpu_vs_1_broker".into(), pg / one);
        }
        let light_row = run_cell(ctx, &fleet, light).await?;
        eprintln!(
            "  brokers {k}: {:.0} msg/s delivered, PostgreSQL {:.1} us/msg; light load p99 {:.2} ms, cross-broker p99 {}",
            row.msgs_per_s,
            pg.unwrap_or(0.0),
            light_row.latency.map(|l| l.p99_ms).unwrap_or(0.0),
            light_row
                .extra
                .get("cross_p99_ms")
                .map(|v| format!("{v:.2} ms"))
                .unwrap_or_else(|| "-".into())
        );
        rows.push(row);
        rows.push(light_row);
    }
    Ok(rows)
}

/// Deliveries popped through another broker than the one that took their push.
struct Cross {
    brokers: u64,
    batch: u64,
    latency: Mutex<Histogram<u64>>,
    in_window: AtomicU64,
    all_in_window: AtomicU64,
}

impl Cross {
    /// The broker that took message `seq`'s push: request `seq / batch` went through broker
    /// `(seq / batch) mod k`.
    fn pushed_through(&self, seq: u64) -> u64 {
        (seq / self.batch) % self.brokers
    }
}

/// What a consumer needs: its broker's client and index, the bookkeeping, the stop flag.
struct Consumer {
    queen: Queen,
    broker: u64,
    tracker: Arc<Tracker>,
    cross: Arc<Cross>,
    stats: Arc<ConsumerStats>,
    stop: Arc<AtomicBool>,
    clock: crate::payload::Clock,
}

impl Consumer {
    /// Pop a leased batch, record every message, ack the batch; until told to stop.
    async fn run(self, queue: QueueRef) {
        while !self.stop.load(Ordering::Relaxed) {
            let body = match queue.pop_body().await {
                Ok(Some(body)) => body,
                Ok(None) => {
                    self.stats.empty_pops.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(e) => {
                    if self.stats.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("  consumer error: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let popped = match body.view() {
                Ok(view) if !view.messages.is_empty() => view,
                Ok(_) => {
                    self.stats.empty_pops.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(e) => {
                    if self.stats.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("  consumer error: {e}");
                    }
                    continue;
                }
            };
            self.stats.pops.fetch_add(1, Ordering::Relaxed);
            let now = self.clock.now_us();
            for m in &popped.messages {
                if let Some(s) = Stamp::parse(m.data) {
                    let lane = m.offset.map(|o| (m.partition_id.as_ref(), o));
                    let attempt = m.delivery_attempt.unwrap_or(1);
                    let fresh = self.tracker.record(0, s.i, attempt, s.t, now, lane);
                    if fresh && self.tracker.in_window(s.t) {
                        self.cross.all_in_window.fetch_add(1, Ordering::Relaxed);
                        if self.cross.pushed_through(s.i) != self.broker {
                            self.cross.in_window.fetch_add(1, Ordering::Relaxed);
                            let mut h =
                                self.cross.latency.lock().unwrap_or_else(|p| p.into_inner());
                            let _ = h.record((now - s.t).max(1) as u64);
                        }
                    }
                }
            }
            let acks: Vec<AckRef<'_>> = popped.messages.iter().map(|m| m.completed()).collect();
            match self.queen.ack_refs(&acks, None).await {
                Ok(refused) => {
                    self.stats
                        .ack_failures
                        .fetch_add(refused as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    if self.stats.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("  ack error: {e}");
                    }
                }
            }
        }
    }
}

/// One cell: open-loop producers and consumers spread over the fleet, a metered window, a
/// drain and the verification.
async fn run_cell(ctx: &Ctx, fleet: &Fleet, load: Load) -> Result<Row> {
    let k = fleet.len() as u64;
    let clients = fleet.clients();
    let name = ctx.queue_name(&format!("brokers-n{k}-b{}", load.batch));
    clients[0]
        .queue(&name)
        .configure(e2e::queue_options())
        .await?;
    let tracker = Arc::new(Tracker::new(1));
    let cross = Arc::new(Cross {
        brokers: k,
        batch: u64::from(load.batch),
        latency: Mutex::new(new_histogram()),
        in_window: AtomicU64::new(0),
        all_in_window: AtomicU64::new(0),
    });
    let cstats = Arc::new(ConsumerStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumers = JoinSet::new();
    for c in 0..PARTITIONS {
        let broker = c % k;
        let queen = clients[broker as usize].clone();
        let queue = queen
            .queue(&name)
            .batch(100)
            .wait(true)
            .timeout_ms(POP_TIMEOUT_MS)
            .subscription_mode("all");
        let consumer = Consumer {
            queen,
            broker,
            tracker: tracker.clone(),
            cross: cross.clone(),
            stats: cstats.clone(),
            stop: stop.clone(),
            clock: ctx.clock,
        };
        consumers.spawn(consumer.run(queue));
    }
    // Request n: broker n mod k, partition n mod 10.
    let lanes: Arc<Vec<QueueRef>> = Arc::new(
        (0..k * PARTITIONS)
            .map(|i| {
                clients[(i / PARTITIONS) as usize]
                    .queue(&name)
                    .partition(format!("p{}", i % PARTITIONS))
            })
            .collect(),
    );
    let queued = Arc::new(AtomicU64::new(0));
    let next_request = AtomicU64::new(0);
    let send = |_slot: u64, due: Instant| {
        let n = next_request.fetch_add(1, Ordering::Relaxed);
        let lane = lanes[((n % k) * PARTITIONS + n % PARTITIONS) as usize].clone();
        let batch = load.batch;
        let sched = ctx.clock.micros(due);
        let push = push::request(&ctx.payloads, &lane, n * u64::from(batch), batch, sched);
        let queued = queued.clone();
        async move {
            let answer = lane.push_raw(push).await.map_err(|e| e.to_string())?;
            let ok = answer.queued;
            queued.fetch_add(ok as u64, Ordering::Relaxed);
            if ok == answer.total() {
                Ok(())
            } else {
                Err(format!(
                    "{} of {} items not queued",
                    answer.total() - ok,
                    answer.total()
                ))
            }
        }
    };
    let schedule = |duration| Schedule {
        rate: Some(load.rate / f64::from(load.batch)),
        duration,
        inflight: ctx.profile.inflight,
    };
    ctx.checkpoint().await?;
    let warm = openloop::run(schedule(ctx.profile.e2e_warmup), send).await;
    let backlog = || {
        let q = queued.load(Ordering::Relaxed);
        q.saturating_sub(tracker.unique().iter().sum())
    };
    tracker.open_window(ctx.clock.now_us());
    let delivered_start: u64 = tracker.unique().iter().sum();
    let queued_start = queued.load(Ordering::Relaxed);
    fleet.reset_peak_rss();
    let cpu_start = fleet.cpu_seconds();
    let start = ctx.meter.start().await?;
    let stats = openloop::run(schedule(load.measure), send).await;
    let mut usage = ctx.meter.since(&start).await?;
    let fleet_cpu = fleet.cpu_seconds().zip(cpu_start).map(|(b, a)| b - a);
    let backlog_end = backlog();
    let delivered = tracker.unique().iter().sum::<u64>() - delivered_start;
    let pushed = queued.load(Ordering::Relaxed) - queued_start;
    let window = Window {
        backlog_end,
        pushed,
        offered: load.rate * usage.seconds,
    };
    let expected = queued.load(Ordering::Relaxed);
    e2e::drain(&tracker, expected, ctx.profile.drain_timeout).await;
    stop.store(true, Ordering::Relaxed);
    while consumers.join_next().await.is_some() {}

    // The fleet's CPU is the brokers' (the bench's own broker idles, and leaves `other`).
    usage.other_cpu_s = usage
        .other_cpu_s
        .map(|o| (o - fleet_cpu.unwrap_or(0.0)).max(0.0));
    usage.broker_cpu_s = fleet_cpu;
    usage.broker_peak_rss_mb = fleet.peak_rss_mb();
    let mut row = Row::new(
        "brokers",
        format!(
            "{k} broker{} part-{PARTITIONS} cg-1 bp-{}",
            if k == 1 { "" } else { "s" },
            load.batch
        ),
        "queen-rs",
    );
    row.offered_msgs_per_s = Some(load.rate);
    row.msgs = delivered;
    row.msgs_per_s = delivered as f64 / usage.seconds.max(1e-3);
    row.shed = stats.shed;
    row.errors = stats.errors + warm.errors + cstats.errors.load(Ordering::Relaxed);
    row.latency = Latency::of(&tracker.latency());
    row.stable_backlog = Some(e2e::stable(&window, load.batch));
    fill_cross(&mut row, &cross);
    per_message(&mut row, &usage, delivered, pushed);
    if let Some(e) = stats.first_error.or(warm.first_error) {
        row.notes.push(format!("first push error: {e}"));
    }
    let failed_acks = cstats.ack_failures.load(Ordering::Relaxed);
    if failed_acks > 0 {
        row.extra.insert("ack_failures".into(), failed_acks as f64);
    }
    let mut row = row.with_usage(usage);
    row.verification = Some(tracker.verify(expected));
    Ok(row)
}

/// Cross-broker latency percentiles and the share of deliveries that crossed brokers.
fn fill_cross(row: &mut Row, cross: &Cross) {
    let h = cross.latency.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = Latency::of(&h) {
        row.extra.insert("cross_p50_ms".into(), l.p50_ms);
        row.extra.insert("cross_p99_ms".into(), l.p99_ms);
    }
    let all = cross.all_in_window.load(Ordering::Relaxed);
    if all > 0 {
        let crossed = cross.in_window.load(Ordering::Relaxed);
        row.extra
            .insert("cross_share".into(), crossed as f64 / all as f64);
    }
}

/// CPU per delivered message (broker fleet, PostgreSQL) and transactions per pushed message.
fn per_message(row: &mut Row, usage: &crate::meter::Usage, delivered: u64, pushed: u64) {
    if delivered > 0 {
        let per = |s: Option<f64>| s.map(|s| s * 1e6 / delivered as f64);
        if let Some(pg) = per(usage.pg_cpu_s) {
            row.extra.insert("pg_cpu_us_per_msg".into(), pg);
        }
        if let Some(b) = per(usage.broker_cpu_s) {
            row.extra.insert("broker_cpu_us_per_msg".into(), b);
        }
    }
    if pushed > 0 {
        row.extra.insert(
            "xacts_per_pushed_msg".into(),
            usage.xacts as f64 / pushed as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cross(brokers: u64, batch: u64) -> Cross {
        Cross {
            brokers,
            batch,
            latency: Mutex::new(new_histogram()),
            in_window: AtomicU64::new(0),
            all_in_window: AtomicU64::new(0),
        }
    }

    #[test]
    fn a_message_was_pushed_through_the_broker_of_its_request() {
        let c = cross(3, 100);
        assert_eq!(c.pushed_through(0), 0);
        assert_eq!(c.pushed_through(99), 0);
        assert_eq!(c.pushed_through(100), 1);
        assert_eq!(c.pushed_through(250), 2);
        assert_eq!(c.pushed_through(300), 0);
        assert_eq!(
            cross(1, 1).pushed_through(12_345),
            0,
            "one broker: never crossed"
        );
    }
}
