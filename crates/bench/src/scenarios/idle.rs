//! Idle cost: many long-poll consumers parked on empty queues. Measures what waiting costs
//! the broker (CPU %), PostgreSQL (statements and transactions per second) and the pool
//! (connections in use, sampled from `/metrics` and `pg_stat_activity`). A parked pop must
//! hold no pooled connection, so "in use" should stay near zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::task::JoinSet;

use super::Ctx;
use crate::report::Row;

/// Queues the consumers spread over.
const QUEUES: usize = 100;
/// Long-poll deadline of parked consumers (they re-poll when it passes).
const PARK_TIMEOUT_MS: u64 = 30_000;
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let n = ctx.profile.idle_consumers;
    let queues = QUEUES.min(n.max(1));
    let mut refs = Vec::with_capacity(queues);
    for k in 0..queues {
        let q = ctx.queen.queue(ctx.queue_name(&format!("idle-{k}")));
        q.configure(serde_json::json!({ "leaseTime": 30 })).await?;
        refs.push(q.batch(100).wait(true).timeout_ms(PARK_TIMEOUT_MS));
    }
    let returns = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut consumers = JoinSet::new();
    for i in 0..n {
        let q = refs[i % queues].clone();
        let (returns, errors) = (returns.clone(), errors.clone());
        consumers.spawn(async move {
            loop {
                match q.pop().await {
                    Ok(_) => returns.fetch_add(1, Ordering::Relaxed),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        errors.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    tokio::time::sleep(ctx.profile.idle_settle).await;
    let returns_start = returns.load(Ordering::Relaxed);
    let start = ctx.meter.start().await?;
    let mut pool_in_use = Samples::default();
    let mut pool_open = Samples::default();
    let mut pg_active = Samples::default();
    let deadline = Instant::now() + ctx.profile.idle_measure;
    while Instant::now() < deadline {
        if let Ok(m) = ctx.queen.metrics().await {
            let db = &m["database"];
            let open = db["connections"]
                .as_f64()
                .or_else(|| db["poolSize"].as_f64());
            let idle = db["idleConnections"].as_f64();
            if let (Some(open), Some(idle)) = (open, idle) {
                pool_open.add(open);
                pool_in_use.add((open - idle).max(0.0));
            }
        }
        pg_active.add(active_backends(ctx).await.unwrap_or(0.0));
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let usage = ctx.meter.since(&start).await?;
    let returned = returns.load(Ordering::Relaxed) - returns_start;
    consumers.abort_all();
    while consumers.join_next().await.is_some() {}

    let secs = usage.seconds.max(1e-3);
    let mut row = Row::new("idle", format!("{n} parked long-polls"), "queen-rs");
    row.errors = errors.load(Ordering::Relaxed);
    if let Some(cpu) = usage.broker_cpu_s {
        row.extra
            .insert("broker_cpu_pct".into(), 100.0 * cpu / secs);
    }
    if let Some(cpu) = usage.pg_cpu_s {
        row.extra.insert("pg_cpu_pct".into(), 100.0 * cpu / secs);
    }
    match usage.statements {
        Some(s) => row.extra.insert("sql_stmts_per_s".into(), s as f64 / secs),
        None => row
            .extra
            .insert("sql_xacts_per_s".into(), usage.xacts as f64 / secs),
    };
    row.extra
        .insert("xacts_per_s".into(), usage.xacts as f64 / secs);
    row.extra
        .insert("pops_returned_per_s".into(), returned as f64 / secs);
    if !pool_in_use.is_empty() {
        row.extra.insert("pool_in_use_max".into(), pool_in_use.max);
        row.extra
            .insert("pool_in_use_avg".into(), pool_in_use.avg());
        row.extra.insert("pool_open_max".into(), pool_open.max);
    } else {
        row.notes.push("no pool figures in /metrics".into());
    }
    row.extra
        .insert("pg_active_backends_max".into(), pg_active.max);
    row.notes
        .push(format!("{queues} empty queues, {}s window", secs.round()));
    Ok(vec![row.with_usage(usage)])
}

/// Client backends of the broker's database running a statement right now (ours excluded).
async fn active_backends(ctx: &Ctx) -> Result<f64> {
    let row = ctx
        .admin
        .query_one(
            "SELECT count(*)::float8 FROM pg_stat_activity WHERE datname = current_database() \
             AND backend_type = 'client backend' AND state <> 'idle' AND pid <> pg_backend_pid()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

#[derive(Default)]
struct Samples {
    n: u32,
    sum: f64,
    max: f64,
}

impl Samples {
    fn add(&mut self, v: f64) {
        self.n += 1;
        self.sum += v;
        self.max = self.max.max(v);
    }
    fn avg(&self) -> f64 {
        self.sum / f64::from(self.n.max(1))
    }
    fn is_empty(&self) -> bool {
        self.n == 0
    }
}
