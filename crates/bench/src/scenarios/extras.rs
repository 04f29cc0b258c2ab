//! The client surface beyond queues (issue 37): key-value puts and gets through the broker
//! against PostgreSQL's own ceiling for the same statement (`queen.kv_apply_v1` called
//! directly by as many connections as the broker gets workers), lock acquire + release cycles,
//! and how late timers fire: a batch of timers due over the window, popped as they fire, the
//! delay measured from each one's due time to its delivery. Every timer must fire exactly once.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use queen_client::kv::{Expiry, KvOp};
use queen_client::locks::{Acquired, Kept};
use queen_client::timers::{Schedule, TimerOp};
use queen_client::Queen;
use queen_proto::wire::KV_READ_BUDGET_BYTES;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::pgpool::PgPool;
use super::Ctx;
use crate::meter::Usage;
use crate::report::{Latency, Row};

/// Closed-loop workers per cell, and connections of the direct-SQL ceiling.
const WORKERS: usize = 32;
/// Keys each worker cycles over.
const KEYS_PER_WORKER: u64 = 100;
const NAMESPACE: &str = "bench";
/// Timers due per second of the window.
const TIMERS_PER_S: f64 = 500.0;
/// Timers per schedule call (the route's most).
const TIMERS_PER_CALL: usize = 256;
/// The first timer is due this long after scheduling began: every schedule call has ended
/// by then (at about 100 timers a millisecond, 10 000 take well under a second).
const TIMER_LEAD: Duration = Duration::from_secs(2);

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let measure = ctx.profile.e2e_measure;
    let mut rows = Vec::new();
    for op in [KvKind::Put, KvKind::Get] {
        let broker = kv_cell(ctx, op, measure).await?;
        let sql = kv_ceiling(ctx, op, measure).await?;
        rows.push(against(broker, &sql));
        rows.push(sql);
    }
    rows.push(locks_cell(ctx, measure).await?);
    rows.push(timers_cell(ctx, measure).await?);
    Ok(rows)
}

#[derive(Debug, Clone, Copy)]
enum KvKind {
    Put,
    Get,
}

impl KvKind {
    fn label(self) -> &'static str {
        match self {
            KvKind::Put => "kv put",
            KvKind::Get => "kv get",
        }
    }

    /// The operation as the broker reads it and hands it, checked, to SQL.
    fn op(self, key: &str, n: u64) -> Value {
        match self {
            KvKind::Put => KvOp::put(NAMESPACE, key, json!({ "n": n }), Expiry::Forever),
            KvKind::Get => KvOp::get(NAMESPACE, key),
        }
        .to_json()
    }
}

fn key(worker: usize, n: u64) -> String {
    format!("w{worker}-k{}", n % KEYS_PER_WORKER)
}

/// Runs `WORKERS` closed loops of `one(worker, n)` for `measure`; ops, errors and latency.
async fn closed_loop<F, Fut>(measure: Duration, one: F) -> (u64, u64, Histogram<u64>)
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let deadline = Instant::now() + measure;
    let mut set = JoinSet::new();
    for w in 0..WORKERS {
        let one = one.clone();
        set.spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("3 significant figures");
            let (mut ops, mut errors) = (0u64, 0u64);
            while Instant::now() < deadline {
                let t = Instant::now();
                if one(w, ops + errors).await {
                    ops += 1;
                    hist.record(t.elapsed().as_micros() as u64).ok();
                } else {
                    errors += 1;
                }
            }
            (ops, errors, hist)
        });
    }
    let mut all = (
        0,
        0,
        Histogram::<u64>::new(3).expect("3 significant figures"),
    );
    while let Some(Ok((ops, errors, hist))) = set.join_next().await {
        all.0 += ops;
        all.1 += errors;
        all.2.add(&hist).ok();
    }
    all
}

fn row(
    cell: &str,
    system: &str,
    (ops, errors, hist): (u64, u64, Histogram<u64>),
    usage: Usage,
) -> Row {
    let mut row = Row::new("extras", cell.into(), system);
    row.msgs = ops;
    row.msgs_per_s = ops as f64 / usage.seconds.max(1e-3);
    row.errors = errors;
    row.latency = Latency::of(&hist);
    row.with_usage(usage)
}

/// Puts (or gets) through the broker's `/api/v1/kv`, one operation per call.
async fn kv_cell(ctx: &Ctx, kind: KvKind, measure: Duration) -> Result<Row> {
    seed_keys(&ctx.queen).await?;
    let kv = ctx.queen.kv();
    let start = ctx.meter.start().await?;
    let counts = closed_loop(measure, move |w, n| {
        let kv = kv.clone();
        async move {
            let key = key(w, n);
            match kind {
                KvKind::Put => kv
                    .put(NAMESPACE, &key, json!({ "n": n }), Expiry::Forever, None)
                    .await
                    .is_ok_and(|v| v.applied()),
                KvKind::Get => kv.get(NAMESPACE, &key).await.is_ok_and(|e| e.is_some()),
            }
        }
    })
    .await;
    let usage = ctx.meter.since(&start).await?;
    Ok(row(kind.label(), "queen-rs", counts, usage))
}

/// Every key the get cells read exists.
async fn seed_keys(queen: &Queen) -> Result<()> {
    let kv = queen.kv();
    for w in 0..WORKERS {
        for n in 0..KEYS_PER_WORKER {
            let v = kv
                .put(
                    NAMESPACE,
                    &key(w, n),
                    json!({ "n": n }),
                    Expiry::Forever,
                    None,
                )
                .await?;
            if !v.applied() {
                bail!("seeding key {} was not applied: {v:?}", key(w, n));
            }
        }
    }
    Ok(())
}

/// The same operation as one call of `queen.kv_apply_v1` straight to PostgreSQL, by
/// `WORKERS` connections: the statement's own ceiling on this cluster.
async fn kv_ceiling(ctx: &Ctx, kind: KvKind, measure: Duration) -> Result<Row> {
    let pool = PgPool::connect(&ctx.target.pg, WORKERS).await?;
    let start = ctx.meter.start().await?;
    let counts = closed_loop(measure, move |w, n| {
        let pool = pool.clone();
        async move {
            let ops = json!([kind.op(&key(w, n), n)]).to_string();
            let db = pool.get().await;
            db.query_one(
                "SELECT queen.kv_apply_v1('', $1::text::jsonb, $2)",
                &[&ops, &KV_READ_BUDGET_BYTES],
            )
            .await
            .is_ok()
        }
    })
    .await;
    let usage = ctx.meter.since(&start).await?;
    Ok(row(kind.label(), "postgres", counts, usage))
}

/// The broker's row, read as a fraction of the statement's ceiling.
fn against(mut broker: Row, sql: &Row) -> Row {
    if sql.msgs_per_s > 0.0 {
        broker.ceiling_fraction = Some(broker.msgs_per_s / sql.msgs_per_s);
        broker.ceiling_name = Some(format!("{} (kv_apply_v1 direct)", sql.cell));
    }
    broker
}

/// Acquire + release of an uncontended lock per worker, one cycle per operation counted.
async fn locks_cell(ctx: &Ctx, measure: Duration) -> Result<Row> {
    let locks = ctx.queen.locks();
    let run = ctx.run_id.clone();
    let start = ctx.meter.start().await?;
    let counts = closed_loop(measure, move |w, _| {
        let (locks, name) = (locks.clone(), format!("bench-{run}-lock-{w}"));
        async move {
            let Ok(Acquired::Granted(permit)) = locks.acquire(&name, 30, None, None).await else {
                return false;
            };
            matches!(locks.release(&permit).await, Ok(Kept::Done(())))
        }
    })
    .await;
    let usage = ctx.meter.since(&start).await?;
    Ok(row("lock acquire+release", "queen-rs", counts, usage))
}

/// Schedules timers due evenly over `measure` (after [`TIMER_LEAD`]), pops their queue with
/// auto-ack as they fire, and reports the delay from due time to delivery. Fails unless every
/// timer fired exactly once.
async fn timers_cell(ctx: &Ctx, measure: Duration) -> Result<Row> {
    let queue = ctx.queue_name("timers");
    let total = (TIMERS_PER_S * measure.as_secs_f64()).ceil() as u64;
    let spacing = measure.as_secs_f64() / total as f64;
    let timers = ctx.queen.timers();
    let first_due_us = ctx.clock.now_us() + TIMER_LEAD.as_micros() as i64;
    let due_us = |i: u64| first_due_us + (i as f64 * spacing * 1e6) as i64;
    let ids: Vec<u64> = (0..total).collect();
    for chunk in ids.chunks(TIMERS_PER_CALL) {
        let mut ops = Vec::with_capacity(chunk.len());
        for &i in chunk {
            // Delays count from the database's now, which is this machine's clock.
            let delay = Duration::from_micros((due_us(i) - ctx.clock.now_us()).max(0) as u64);
            let payload = json!({"i": i, "due": due_us(i)});
            ops.push(TimerOp::Schedule(Schedule::new(
                queue.as_str(),
                format!("t{i}"),
                &payload,
                delay,
            )?));
        }
        timers.apply(&ops).await?;
    }
    let start = ctx.meter.start().await?;
    let fired = pop_fired(ctx, &queue, total, measure + TIMER_LEAD * 10).await?;
    let usage = ctx.meter.since(&start).await?;
    let mut row = row(
        "timer firing delay",
        "queen-rs",
        (fired.count, 0, fired.delay),
        usage,
    );
    row.offered_msgs_per_s = Some(TIMERS_PER_S);
    row.extra.insert("timers".into(), total as f64);
    row.extra.insert("fired".into(), fired.count as f64);
    if fired.count != total || fired.duplicates > 0 {
        row.errors += (total.abs_diff(fired.count)) + fired.duplicates;
        row.notes.push(format!(
            "{} of {total} timers fired, {} twice",
            fired.count, fired.duplicates
        ));
    }
    Ok(row)
}

struct Fired {
    count: u64,
    duplicates: u64,
    /// µs from each timer's due time to its delivery.
    delay: Histogram<u64>,
}

async fn pop_fired(ctx: &Ctx, queue: &str, total: u64, limit: Duration) -> Result<Fired> {
    let q = ctx
        .queen
        .queue(queue)
        .batch(100)
        .wait(true)
        .timeout_ms(1000)
        .auto_ack(true);
    let mut seen = HashSet::new();
    let mut fired = Fired {
        count: 0,
        duplicates: 0,
        delay: Histogram::new(3)?,
    };
    let deadline = Instant::now() + limit;
    while fired.count < total && Instant::now() < deadline {
        let Some(batch) = q.pop().await? else {
            continue;
        };
        let now = ctx.clock.now_us();
        for m in batch.messages {
            let v: Value = serde_json::from_str(m.data.get())?;
            let (Some(i), Some(due)) = (v["i"].as_u64(), v["due"].as_i64()) else {
                bail!("a fired timer's payload lost its stamp: {}", m.data.get());
            };
            if !seen.insert(i) {
                fired.duplicates += 1;
                continue;
            }
            fired.count += 1;
            fired.delay.record((now - due).max(0) as u64).ok();
        }
    }
    Ok(fired)
}
