//! The cost measure (issue 39 item 1): a fixed workload — single-message and 100-message
//! pushes, 100-item pushes spread over 100 partitions, end to end on 10 partitions, a drain of
//! many shallow partitions — each a fixed number of messages at a fixed concurrency, against a
//! broker this program starts under an instruction counter (`instructions.rs`: callgrind, else
//! perf). A row per workload gives the broker's instructions per message; its msg/s means
//! nothing (the broker runs many times slower under valgrind), and its broker CPU and RSS are
//! left empty (they would be valgrind's); PostgreSQL's CPU per message still means something. Every workload is verified like its timed counterpart. The setup
//! of a workload (its queue, the spread queue's partitions, the drain's backlog) is outside
//! the count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use queen_client::{Queen, QueueRef};
use tokio::task::JoinSet;

use super::drain::{self, Backlog};
use super::e2e::{self, ConsumerStats};
use super::push::{self, Outcome};
use super::spread::{self, Lane, Shape};
use super::Ctx;
use crate::instructions::{Counter, Tool};
use crate::meter::Meter;
use crate::openloop::{self, LoadStats};
use crate::profile::ProfileName;
use crate::report::Row;
use crate::target::Target;
use crate::tracker::Tracker;

/// Requests in flight in every workload, whatever `--inflight` says: the count depends on
/// how requests interleave (push fusion, pop batching), so it is fixed.
const INFLIGHT: usize = 4;
/// How long draining may take under valgrind.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(900);
/// The `HOST` every broker this program starts gets (`queen_launch::spawn_broker`).
const BROKER_HOST: &str = "127.0.0.1";
/// The push door refuses a push the broker expects to keep waiting (docs/engine.md §9); under
/// valgrind every wait is ~50× longer, so the counted broker runs with the door off unless
/// `--broker-env` sets it.
const DOOR: (&str, &str) = ("QUEEN_PUSH_WAIT_BUDGET_MS", "0");

/// The counted broker's environment: `--broker-env`, plus the push door off.
fn counted_env(base: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = base.to_vec();
    if !env.iter().any(|(k, _)| k == DOOR.0) {
        env.push((DOOR.0.to_string(), DOOR.1.to_string()));
    }
    env
}

/// Messages of each workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub push_bp1: u64,
    pub push_bp100: u64,
    pub spread: u64,
    pub spread_partitions: u32,
    pub e2e: u64,
    pub drain_partitions: u64,
}

impl Sizes {
    pub fn of(profile: ProfileName) -> Self {
        match profile {
            ProfileName::Tiny => Self {
                push_bp1: 100,
                push_bp100: 1_000,
                spread: 1_000,
                spread_partitions: 200,
                e2e: 1_000,
                drain_partitions: 200,
            },
            ProfileName::Quick | ProfileName::Full => Self {
                push_bp1: 1_000,
                push_bp100: 10_000,
                spread: 10_000,
                spread_partitions: 1_000,
                e2e: 10_000,
                drain_partitions: 1_000,
            },
        }
    }
}

/// Starts the counted broker, runs the workloads against it, stops it.
pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let Some(bin) = ctx.overrides.queen_bin.clone() else {
        bail!("the cost scenario starts its own broker: not with --url");
    };
    let tool = Tool::detect().await?;
    let dir = std::env::temp_dir().join(format!("queen-bench-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!("  cost: starting {} under {}", bin.display(), tool.name());
    let counted = Target::spawn_wrapped(
        &tool.wrapper(&dir),
        &bin,
        ctx.overrides.keep_data,
        &counted_env(&ctx.overrides.broker_env),
    )
    .await?;
    let pid = counted
        .broker_pid
        .context("the counted broker has no pid")?;
    let mut counter = Counter::new(tool, pid, &dir, BROKER_HOST);
    let saved = swap_in(ctx, counted).await?;
    let rows = workloads(ctx, &mut counter, tool).await;
    let mut counted = swap_out(ctx, saved);
    counted.shutdown();
    if ctx.overrides.keep_data {
        eprintln!("  cost: kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    rows
}

/// What the context pointed at before the counted broker.
struct Saved {
    target: Target,
    meter: Meter,
    admin: tokio_postgres::Client,
    queen: Queen,
}

async fn swap_in(ctx: &mut Ctx, counted: Target) -> Result<Saved> {
    let meter = Meter::new(&counted).await?;
    let admin = counted.connect(None).await?;
    let queen = Queen::new(counted.url.clone());
    Ok(Saved {
        target: std::mem::replace(&mut ctx.target, counted),
        meter: std::mem::replace(&mut ctx.meter, meter),
        admin: std::mem::replace(&mut ctx.admin, admin),
        queen: std::mem::replace(&mut ctx.queen, queen),
    })
}

/// Restores the context; returns the counted broker's target.
fn swap_out(ctx: &mut Ctx, saved: Saved) -> Target {
    ctx.meter = saved.meter;
    ctx.admin = saved.admin;
    ctx.queen = saved.queen;
    std::mem::replace(&mut ctx.target, saved.target)
}

async fn workloads(ctx: &Ctx, counter: &mut Counter, tool: Tool) -> Result<Vec<Row>> {
    let sizes = Sizes::of(ctx.profile.name);
    let mut rows = vec![
        pushes(ctx, counter, 1, sizes.push_bp1).await?,
        pushes(ctx, counter, 100, sizes.push_bp100).await?,
        spread_push(ctx, counter, &sizes).await?,
        end_to_end(ctx, counter, sizes.e2e).await?,
        drain_backlog(ctx, counter, sizes.drain_partitions).await?,
    ];
    for r in &mut rows {
        r.notes.push(format!(
            "counted by {}; msg/s is under the counter",
            tool.name()
        ));
        if let Some(per) = r.extra.get("broker_instr_per_msg") {
            eprintln!("  cost {}: {per:.0} broker instructions/msg", r.cell);
        }
    }
    Ok(rows)
}

/// The row of a counted workload: messages, instructions, usage (PostgreSQL CPU per message).
fn counted_row(cell: String, msgs: u64, instructions: u64, mut usage: crate::meter::Usage) -> Row {
    // The process measured is valgrind running the broker: its CPU and RSS are the
    // instrument's, not the broker's (and the run's peak RSS reads the rows).
    usage.broker_cpu_s = None;
    usage.broker_peak_rss_mb = None;
    let mut row = Row::new("cost", cell, "queen-rs");
    row.msgs = msgs;
    row.msgs_per_s = msgs as f64 / usage.seconds.max(1e-3);
    row.extra.insert("broker_instr".into(), instructions as f64);
    if msgs > 0 {
        row.extra.insert(
            "broker_instr_per_msg".into(),
            instructions as f64 / msgs as f64,
        );
        if let Some(pg) = usage.pg_cpu_s {
            row.extra
                .insert("pg_cpu_us_per_msg".into(), pg * 1e6 / msgs as f64);
        }
    }
    row.with_usage(usage)
}

/// Closed loop over `requests` requests, `INFLIGHT` at a time, counted.
async fn counted_loop<F, Fut>(
    ctx: &Ctx,
    counter: &mut Counter,
    label: &str,
    requests: u64,
    send: F,
) -> Result<(LoadStats, u64, crate::meter::Usage)>
where
    F: FnMut(u64, Instant) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let start = ctx.meter.start().await?;
    counter.begin().await?;
    let stats = openloop::run_count(requests, INFLIGHT, send).await;
    let instructions = counter.end(label).await?;
    let usage = ctx.meter.since(&start).await?;
    if let Some(e) = &stats.first_error {
        bail!("cost {label}: {} requests failed, first: {e}", stats.errors);
    }
    Ok((stats, instructions, usage))
}

/// `total` messages pushed `batch` per request to one partition.
async fn pushes(ctx: &Ctx, counter: &mut Counter, batch: u32, total: u64) -> Result<Row> {
    let cell = format!("push bp-{batch} part-1");
    let name = ctx.queue_name(&format!("cost-push-b{batch}"));
    let queue = ctx.queen.queue(&name);
    queue.configure(e2e::queue_options()).await?;
    let lane = queue.partition("p0");
    let outcome = Arc::new(Outcome::default());
    let requests = total / u64::from(batch);
    let send = |n: u64, due: Instant| {
        let items = push::items(ctx, n * u64::from(batch), batch, ctx.clock.micros(due));
        let (lane, outcome) = (lane.clone(), outcome.clone());
        async move {
            let results = lane.push(&items).await.map_err(|e| e.to_string())?;
            push::tally(&results, &outcome)
        }
    };
    let (_, instructions, usage) = counted_loop(ctx, counter, &cell, requests, send).await?;
    let row = counted_row(cell, requests * u64::from(batch), instructions, usage);
    Ok(push::verify(ctx, &name, &outcome, row, 0).await)
}

/// 100-item requests over 100 existing partitions of a wide queue (created before the count).
async fn spread_push(ctx: &Ctx, counter: &mut Counter, sizes: &Sizes) -> Result<Row> {
    let shape = Shape {
        partitions: sizes.spread_partitions,
        per_request: 100,
    };
    let lane = Lane::new(ctx, spread::queue(ctx, shape).await?, shape);
    let created = Arc::new(Outcome::default());
    let first = shape.covering_requests();
    let setup = openloop::run_count(first, INFLIGHT, |n, due| {
        lane.clone()
            .send(n, spread::items(ctx, n, due), created.clone())
    })
    .await;
    if let Some(e) = setup.first_error {
        bail!("cost spread: creating the partitions failed: {e}");
    }
    let before = ctx.stored_messages(&lane_queue(&lane)).await.unwrap_or(0) as u64;
    let outcome = Arc::new(Outcome::default());
    let requests = sizes.spread / 100;
    let cell = shape.cell();
    let (_, instructions, usage) = counted_loop(ctx, counter, &cell, requests, |n, due| {
        let n = first + n;
        lane.clone()
            .send(n, spread::items(ctx, n, due), outcome.clone())
    })
    .await?;
    let row = counted_row(cell, requests * 100, instructions, usage);
    Ok(push::verify(ctx, &lane_queue(&lane), &outcome, row, before).await)
}

fn lane_queue(lane: &Lane) -> String {
    lane.queue.clone()
}

/// `total` messages pushed 100 per request round-robin over 10 partitions while 10 consumers
/// pop leased batches of 100 and ack each batch; counted until every message is delivered.
async fn end_to_end(ctx: &Ctx, counter: &mut Counter, total: u64) -> Result<Row> {
    const PARTITIONS: u64 = 10;
    const BATCH: u32 = 100;
    let cell = format!("e2e part-{PARTITIONS} cg-1");
    let name = ctx.queue_name("cost-e2e");
    let queue = ctx.queen.queue(&name);
    queue.configure(e2e::queue_options()).await?;
    let tracker = Arc::new(Tracker::new(1));
    let cstats = Arc::new(ConsumerStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let popper = queue
        .clone()
        .batch(BATCH)
        .wait(true)
        .timeout_ms(drain::POP_TIMEOUT_MS)
        .subscription_mode("all");
    let mut consumers = spawn_consumers(ctx, &popper, &tracker, &cstats, &stop);
    let queued = Arc::new(AtomicU64::new(0));
    let requests = total / u64::from(BATCH);
    let start = ctx.meter.start().await?;
    counter.begin().await?;
    let stats = openloop::run_count(requests, INFLIGHT, |n, due| {
        let lane = queue.clone().partition(format!("p{}", n % PARTITIONS));
        let items = push::items(ctx, n * u64::from(BATCH), BATCH, ctx.clock.micros(due));
        let queued = queued.clone();
        async move {
            let results = lane.push(&items).await.map_err(|e| e.to_string())?;
            let ok = results.iter().filter(|r| r.is_queued()).count() as u64;
            queued.fetch_add(ok, Ordering::Relaxed);
            Ok(())
        }
    })
    .await;
    let expected = queued.load(Ordering::Relaxed);
    e2e::drain(&tracker, expected, DRAIN_TIMEOUT).await;
    let instructions = counter.end(&cell).await?;
    let usage = ctx.meter.since(&start).await?;
    stop.store(true, Ordering::Relaxed);
    while consumers.join_next().await.is_some() {}
    if let Some(e) = stats.first_error {
        bail!("cost e2e: {} pushes failed, first: {e}", stats.errors);
    }
    let mut row = counted_row(cell, expected, instructions, usage);
    row.errors = cstats.errors.load(Ordering::Relaxed);
    row.verification = Some(tracker.verify(total));
    Ok(row)
}

/// A backlog of `partitions` × 2 messages (stored before the count) drained by the autopilot
/// consumers of the drain scenario; counted from their start to the last delivery.
async fn drain_backlog(ctx: &Ctx, counter: &mut Counter, partitions: u64) -> Result<Row> {
    let backlog = Backlog {
        partitions,
        depth: 2,
    };
    let name = ctx.queue_name("cost-drain");
    let queue = ctx.queen.queue(&name);
    queue.configure(e2e::queue_options()).await?;
    drain::store(ctx, &queue, backlog).await?;
    let tracker = Arc::new(Tracker::new(1));
    let cstats = Arc::new(ConsumerStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let cell = format!("drain {}", backlog.label());
    let start = ctx.meter.start().await?;
    counter.begin().await?;
    let popper = queue
        .clone()
        .autopilot(true)
        .wait(true)
        .timeout_ms(drain::POP_TIMEOUT_MS);
    let mut consumers = spawn_consumers(ctx, &popper, &tracker, &cstats, &stop);
    e2e::drain(&tracker, backlog.messages(), DRAIN_TIMEOUT).await;
    let instructions = counter.end(&cell).await?;
    let usage = ctx.meter.since(&start).await?;
    stop.store(true, Ordering::Relaxed);
    while consumers.join_next().await.is_some() {}
    let delivered = tracker.unique().iter().sum();
    let mut row = counted_row(cell, delivered, instructions, usage);
    row.errors = cstats.errors.load(Ordering::Relaxed);
    row.verification = Some(tracker.verify(backlog.messages()));
    Ok(row)
}

/// The drain scenario's consumers (`drain::CONSUMERS` of them) popping through `popper`.
fn spawn_consumers(
    ctx: &Ctx,
    popper: &QueueRef,
    tracker: &Arc<Tracker>,
    cstats: &Arc<ConsumerStats>,
    stop: &Arc<AtomicBool>,
) -> JoinSet<()> {
    let mut consumers = JoinSet::new();
    for _ in 0..drain::CONSUMERS {
        let args = (
            ctx.queen.clone(),
            tracker.clone(),
            cstats.clone(),
            stop.clone(),
            ctx.clock,
        );
        consumers.spawn(e2e::consume(popper.clone(), 0, None, args));
    }
    consumers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_whole_requests_and_smaller_in_tiny() {
        for p in [ProfileName::Tiny, ProfileName::Quick, ProfileName::Full] {
            let s = Sizes::of(p);
            assert_eq!(s.push_bp100 % 100, 0);
            assert_eq!(s.spread % 100, 0);
            assert_eq!(s.e2e % 100, 0);
            assert_eq!(
                s.spread_partitions % 100,
                0,
                "the first push covers whole requests"
            );
        }
        assert!(Sizes::of(ProfileName::Tiny).e2e < Sizes::of(ProfileName::Full).e2e);
        assert_eq!(Sizes::of(ProfileName::Quick), Sizes::of(ProfileName::Full));
    }

    #[test]
    fn a_counted_row_gives_instructions_per_message_and_no_valgrind_cpu_or_rss() {
        let usage = crate::meter::Usage {
            seconds: 2.0,
            broker_cpu_s: Some(9.0),
            broker_peak_rss_mb: Some(180.0),
            pg_cpu_s: Some(0.5),
            ..Default::default()
        };
        let row = counted_row("push bp-1 part-1".into(), 1_000, 150_000_000, usage);
        assert_eq!(row.extra["broker_instr_per_msg"], 150_000.0);
        assert_eq!(row.extra["pg_cpu_us_per_msg"], 500.0);
        assert_eq!(row.usage.broker_cpu_s, None);
        assert_eq!(
            row.usage.broker_peak_rss_mb, None,
            "the run's peak RSS reads the rows"
        );
    }

    #[test]
    fn the_counted_broker_has_its_push_door_off_unless_told_otherwise() {
        let door = |env: Vec<(String, String)>| {
            env.into_iter()
                .filter(|(k, _)| k == DOOR.0)
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
        };
        assert_eq!(door(counted_env(&[])), vec!["0"]);
        let given = [(DOOR.0.to_string(), "5000".to_string())];
        assert_eq!(door(counted_env(&given)), vec!["5000"]);
    }
}
