//! The peer: pgmq (SQL from the PyPI `pgmq` wheel, loaded as plain SQL into a scratch
//! database of the same cluster), driven through its SQL functions with the same work as our
//! rows: `send_batch` of 1/10/100 messages open-loop at capacity, and end-to-end producers
//! with consumers that `read_with_poll(q, 30, 100)` and `delete` the batch, at pgmq's own
//! highest stable rate searched the same way as ours (`search.rs`). Each pgmq row carries the
//! queen-rs / pgmq ratios of the matching row of ours, so an e2e ratio compares best with best.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::task::JoinSet;
use tokio_postgres::types::{FromSql, Type};

use super::e2e::{consumers_for, LEASE_SECONDS};
use super::pgpool::PgPool;
use super::Ctx;
use crate::openloop::{self, Schedule};
use crate::payload::Stamp;
use crate::report::{Latency, Row};
use crate::tracker::Tracker;

const DB: &str = "queen_bench_pgmq";
const PGMQ_WHEEL: &str = "pgmq==1.1.4";
/// pgmq's long-poll: poll inside PostgreSQL for up to 1 s, every 100 ms.
const READ: &str =
    "SELECT msg_id, read_ct, message::text FROM pgmq.read_with_poll($1, $2, 100, 1, 100)";

/// A `text` column's bytes as PostgreSQL sent them, not re-checked as UTF-8: the stamp is read
/// from bytes, as from our pop answers (`queen_client::PopView`), so both sides parse alike.
struct RawText<'a>(&'a [u8]);

impl<'a> FromSql<'a> for RawText<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawText(raw))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TEXT
    }
}

pub async fn run(ctx: &mut Ctx, ours: &[Row]) -> Result<Vec<Row>> {
    let sql = pgmq_sql(ctx.overrides.pgmq_sql.clone())?;
    ctx.admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        .await?;
    ctx.admin
        .batch_execute(&format!("CREATE DATABASE {DB}"))
        .await?;
    let result = run_cells(ctx, &sql, ours).await;
    ctx.admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        .await
        .ok();
    result
}

async fn run_cells(ctx: &mut Ctx, sql: &str, ours: &[Row]) -> Result<Vec<Row>> {
    let db = ctx.target.connect(Some(DB)).await?;
    db.batch_execute(sql).await.context("loading pgmq.sql")?;
    let mut cfg = ctx.target.pg.clone();
    cfg.dbname(DB);
    let pool = PgPool::connect(&cfg, ctx.profile.inflight).await?;
    let mut rows = Vec::new();
    for batch in ctx.profile.push_batches.clone() {
        let mut row = push_cell(ctx, &db, &pool, batch).await?;
        compare(&mut row, find(ours, "push", &format!("bp-{batch} part-1")));
        eprintln!("  pgmq push bp-{batch}: {:.0} msg/s", row.msgs_per_s);
        rows.push(row);
    }
    // pgmq's e2e search starts where ours does: 40 % of its push capacity at batch 100.
    let capacity = rows
        .iter()
        .filter(|r| r.scenario == "peer-push")
        .map(|r| r.msgs_per_s)
        .fold(0.0, f64::max);
    let pg = Pgmq {
        db: &db,
        pool: &pool,
        cfg: &cfg,
    };
    let mut searched = Vec::new();
    for partitions in ctx.profile.partitions.clone() {
        // Only the cells we ran, for a ratio.
        if !ctx.e2e_rates.contains_key(&(partitions, 1)) {
            continue;
        }
        let label = super::e2e::label(partitions, 1);
        let consumers = consumers_for(partitions);
        let (row, _) = e2e_search(ctx, &pg, &label, consumers, capacity).await?;
        eprintln!("  pgmq e2e {label}: {:.0} delivered/s", row.msgs_per_s);
        searched.push(Searched { consumers, row });
    }
    for mut row in best_per_workload(&searched) {
        let cell = row.cell.clone();
        compare(&mut row, find(ours, "e2e", &cell));
        rows.push(row);
    }
    Ok(rows)
}

/// One pgmq e2e search: its cell's row and the consumers it ran.
struct Searched {
    consumers: u32,
    row: Row,
}

/// pgmq has no partitions: e2e cells that differ only in our partition count are one pgmq
/// workload (the same consumers on one queue). Each cell reports the best stable rate any
/// search of its workload found, so a search that settled low after pgmq collapsed in one
/// attempt does not stand for pgmq's best (BENCHMARKS.md "Full profile with the accelerator
/// comparison: 2026-12-04"). Only stable, verified rows count; a cell whose own row failed
/// verification keeps it (a loss is reported).
fn best_per_workload(searched: &[Searched]) -> Vec<Row> {
    let sound = |s: &&Searched| s.row.stable_backlog == Some(true) && !s.row.failed();
    searched
        .iter()
        .map(|own| {
            let best = if own.row.failed() {
                own
            } else {
                searched
                    .iter()
                    .filter(|s| s.consumers == own.consumers)
                    .filter(sound)
                    .max_by(|a, b| a.row.msgs_per_s.total_cmp(&b.row.msgs_per_s))
                    .unwrap_or(own)
            };
            let mut row = best.row.clone();
            if best.row.cell != own.row.cell {
                row.cell = own.row.cell.clone();
                row.notes.push(format!(
                    "the same pgmq workload as {}, whose search found the higher stable rate; this cell's own: {:.0} msg/s",
                    best.row.cell, own.row.msgs_per_s
                ));
            }
            row
        })
        .collect()
}

fn find<'a>(rows: &'a [Row], scenario: &str, cell: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.cell == cell && r.system == "queen-rs")
}

/// Side-by-side ratios (queen-rs ÷ pgmq): throughput, p99, and total CPU per message.
fn compare(row: &mut Row, ours: Option<&Row>) {
    let Some(o) = ours else { return };
    if row.msgs_per_s > 0.0 {
        row.extra
            .insert("x_msgs_per_s".into(), o.msgs_per_s / row.msgs_per_s);
    }
    if let (Some(a), Some(b)) = (o.latency, row.latency) {
        row.extra
            .insert("x_p99".into(), a.p99_ms / b.p99_ms.max(1e-3));
    }
    let cpu_per_msg = |r: &Row| {
        let cpu = r.usage.broker_cpu_s.unwrap_or(0.0) + r.usage.pg_cpu_s.unwrap_or(0.0);
        (r.msgs > 0).then(|| cpu / r.msgs as f64)
    };
    if let (Some(a), Some(b)) = (cpu_per_msg(o), cpu_per_msg(row)) {
        if b > 0.0 {
            row.extra.insert("x_cpu_per_msg".into(), a / b);
        }
    }
    row.notes.push(format!("x_* = queen-rs {} / pgmq", o.cell));
}

async fn create_queue(db: &tokio_postgres::Client, name: &str) -> Result<()> {
    db.execute("SELECT pgmq.create($1)", &[&name]).await?;
    Ok(())
}

/// `send_batch` of `batch` messages; returns how many ids came back.
async fn send(pool: PgPool, queue: String, bodies: Vec<String>) -> Result<u64, String> {
    let conn = pool.get().await;
    let row = conn
        .query_one(
            "SELECT count(*) FROM pgmq.send_batch($1, $2::text[]::jsonb[])",
            &[&queue, &bodies],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get::<_, i64>(0) as u64)
}

fn bodies(ctx: &Ctx, first: u64, batch: u32, sched_us: i64) -> Vec<String> {
    (first..first + u64::from(batch))
        .map(|s| ctx.payloads.body(s, sched_us))
        .collect()
}

async fn push_cell(
    ctx: &Ctx,
    db: &tokio_postgres::Client,
    pool: &PgPool,
    batch: u32,
) -> Result<Row> {
    let queue = format!("push_b{batch}");
    create_queue(db, &queue).await?;
    let sent = Arc::new(AtomicU64::new(0));
    let next = AtomicU64::new(0);
    let send_one = |_slot: u64, due: Instant| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let fut = send(
            pool.clone(),
            queue.clone(),
            bodies(ctx, n * u64::from(batch), batch, ctx.clock.micros(due)),
        );
        let sent = sent.clone();
        async move {
            sent.fetch_add(fut.await?, Ordering::Relaxed);
            Ok(())
        }
    };
    let phases = super::push::measure(ctx, batch, send_one).await?;
    let mut row = Row::new("peer-push", format!("bp-{batch}"), "pgmq");
    phases.fill(&mut row, batch);
    let usage = phases.usage;
    let mut row = row.with_usage(usage);
    row.usage.broker_cpu_s = None;
    row.usage.broker_peak_rss_mb = None;
    let stored: i64 = db
        .query_one(&format!("SELECT count(*) FROM pgmq.q_{queue}"), &[])
        .await?
        .get(0);
    let expected = sent.load(Ordering::Relaxed);
    row.verification = Some(crate::tracker::Verification {
        expected,
        delivered_unique: vec![stored as u64],
        lost: expected.saturating_sub(stored as u64),
        duplicates: (stored as u64).saturating_sub(expected),
        redelivered: 0,
        order_violations: 0,
        ok: stored as u64 == expected,
    });
    // pgmq writes a row per message: its matching ceiling is the row-shaped one.
    let script = if batch > 1 { "batch100x1k" } else { "one1k" };
    if let Some(c) = ctx.ceilings.get(script) {
        row.ceiling_fraction = Some(row.msgs_per_s / c);
        row.ceiling_name = Some(script.into());
    }
    Ok(row)
}

/// pgmq's scratch database: an admin connection, the producers' pool, and the config the
/// consumers connect with.
struct Pgmq<'a> {
    db: &'a tokio_postgres::Client,
    pool: &'a PgPool,
    cfg: &'a tokio_postgres::Config,
}

/// pgmq's highest stable producer rate for this cell, searched exactly like ours
/// (`search::highest_stable`, the same attempt budget and `--e2e-rate` override), starting at
/// 40 % of its push `capacity`.
async fn e2e_search(
    ctx: &Ctx,
    pg: &Pgmq<'_>,
    label: &str,
    consumers: u32,
    capacity: f64,
) -> Result<(Row, f64)> {
    let attempts = if ctx.overrides.e2e_rate.is_some() {
        1
    } else {
        ctx.profile.e2e_retries + 1
    };
    let start = ctx
        .overrides
        .e2e_rate
        .or((capacity > 0.0).then_some(capacity * 0.4))
        .unwrap_or(ctx.profile.e2e_default_rate)
        .max(100.0);
    let attempt =
        |rate: f64, may_abandon: bool| e2e_cell(ctx, pg, label, consumers, rate, may_abandon);
    super::search::highest_stable(&format!("pgmq e2e {label}"), attempts, start, attempt).await
}

/// One pgmq e2e attempt at `rate`; with `may_abandon`, an unstable one returns undrained and
/// unverified (the search never reports it).
async fn e2e_cell(
    ctx: &Ctx,
    pg: &Pgmq<'_>,
    label: &str,
    consumers: u32,
    rate: f64,
    may_abandon: bool,
) -> Result<Row> {
    let (db, pool, cfg) = (pg.db, pg.pool, pg.cfg);
    let queue = format!("e2e_{}_r{}", label.replace(['-', ' '], "_"), rate as u64);
    create_queue(db, &queue).await?;
    let tracker = Arc::new(Tracker::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..consumers {
        let conn = queen_launch::connect(cfg).await?;
        let (queue, tracker, stop, errors, clock) = (
            queue.clone(),
            tracker.clone(),
            stop.clone(),
            errors.clone(),
            ctx.clock,
        );
        tasks.spawn(async move {
            let vt = LEASE_SECONDS as i32;
            while !stop.load(Ordering::Relaxed) {
                let rows = match conn.query(READ, &[&queue, &vt]).await {
                    Ok(r) => r,
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if rows.is_empty() {
                    continue;
                }
                let now = clock.now_us();
                let mut ids: Vec<i64> = Vec::with_capacity(rows.len());
                for r in &rows {
                    ids.push(r.get(0));
                    if let Some(s) = Stamp::parse(r.get::<_, RawText<'_>>(2).0) {
                        tracker.record(0, s.i, r.get::<_, i32>(1).max(1) as u32, s.t, now, None);
                    }
                }
                if conn
                    .query(
                        "SELECT * FROM pgmq.delete($1, $2::bigint[])",
                        &[&queue, &ids],
                    )
                    .await
                    .is_err()
                {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let sent = Arc::new(AtomicU64::new(0));
    let next = AtomicU64::new(0);
    let send_one = |_slot: u64, due: Instant| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let fut = send(
            pool.clone(),
            queue.clone(),
            bodies(ctx, n * 100, 100, ctx.clock.micros(due)),
        );
        let sent = sent.clone();
        async move {
            sent.fetch_add(fut.await?, Ordering::Relaxed);
            Ok(())
        }
    };
    let schedule = |duration| Schedule {
        rate: Some(rate / 100.0),
        duration,
        inflight: ctx.profile.inflight,
    };
    ctx.checkpoint().await?;
    let warm = openloop::run(schedule(ctx.profile.e2e_warmup), send_one).await;
    tracker.open_window(ctx.clock.now_us());
    let delivered_start = tracker.unique()[0];
    let pushed_start = sent.load(Ordering::Relaxed);
    let start = ctx.meter.start().await?;
    let stats = openloop::run(schedule(ctx.profile.e2e_measure), send_one).await;
    let usage = ctx.meter.since(&start).await?;
    let delivered = tracker.unique()[0] - delivered_start;
    let backlog_end = sent
        .load(Ordering::Relaxed)
        .saturating_sub(tracker.unique()[0]);
    let expected = sent.load(Ordering::Relaxed);
    let pushed = expected - pushed_start;
    let window = super::e2e::Window {
        backlog_end,
        pushed,
        offered: rate * usage.seconds,
    };
    let stable = super::e2e::stable(&window, 100);
    let abandon = may_abandon && !stable;
    if !abandon {
        super::e2e::drain(&tracker, expected, ctx.profile.drain_timeout).await;
    }
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    // An abandoned backlog would only weigh on the next attempts.
    db.execute("SELECT pgmq.drop_queue($1)", &[&queue]).await?;

    let mut row = Row::new("peer-e2e", label.to_string(), "pgmq");
    row.offered_msgs_per_s = Some(rate);
    row.msgs = delivered;
    row.msgs_per_s = delivered as f64 / usage.seconds.max(1e-3);
    row.shed = stats.shed;
    row.errors = stats.errors + warm.errors + errors.load(Ordering::Relaxed);
    row.latency = Latency::of(&tracker.latency());
    row.stable_backlog = Some(stable);
    row.extra
        .insert("min_group_delivered_per_s".into(), row.msgs_per_s);
    if let Some(c) = ctx.ceilings.get("batch100x1k") {
        row.ceiling_fraction = Some(row.msgs_per_s / c);
        row.ceiling_name = Some("batch100x1k".into());
    }
    row.extra.insert("consumers".into(), f64::from(consumers));
    let mut row = row.with_usage(usage);
    row.usage.broker_cpu_s = None;
    row.usage.broker_peak_rss_mb = None;
    if !abandon {
        row.verification = Some(tracker.verify(expected));
    }
    Ok(row)
}

/// `--pgmq-sql`, else the cached copy, else `pip download` the wheel and extract
/// `pgmq/sql/pgmq.sql` from it (a wheel is a zip; Python's zipfile reads it).
fn pgmq_sql(explicit: Option<PathBuf>) -> Result<String> {
    if let Some(p) = explicit {
        return std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()));
    }
    let cache_root = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let cache = cache_root
        .join("queen-bench")
        .join(PGMQ_WHEEL.replace("==", "-"));
    let sql_path = cache.join("pgmq.sql");
    if let Ok(sql) = std::fs::read_to_string(&sql_path) {
        return Ok(sql);
    }
    std::fs::create_dir_all(&cache)?;
    pip_download(&cache)?;
    let wheel = std::fs::read_dir(&cache)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| anyhow!("no wheel in {}", cache.display()))?;
    let out = Command::new("python3")
        .args(["-c", "import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read('pgmq/sql/pgmq.sql'))"])
        .arg(&wheel)
        .output()?;
    if !out.status.success() {
        bail!(
            "no pgmq/sql/pgmq.sql in {}: {}",
            wheel.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(&sql_path, &out.stdout)?;
    Ok(String::from_utf8(out.stdout)?)
}

/// `pip download` of the wheel into `dir`: with the system pip, else with a private venv
/// (Debian's python3 has no pip module, but `python3 -m venv` bootstraps one).
fn pip_download(dir: &std::path::Path) -> Result<()> {
    let download = |python: &std::path::Path| {
        Command::new(python)
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "-d"])
            .arg(dir)
            .arg(PGMQ_WHEEL)
            .status()
            .is_ok_and(|s| s.success())
    };
    if download(std::path::Path::new("python3")) {
        return Ok(());
    }
    let venv = dir.join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status();
    if made.is_ok_and(|s| s.success()) && download(&venv.join("bin").join("python3")) {
        return Ok(());
    }
    bail!("could not `pip download {PGMQ_WHEEL}` (needs python3 with pip or venv, and PyPI); or pass --pgmq-sql")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn searched(cell: &str, consumers: u32, msgs_per_s: f64) -> Searched {
        let mut row = Row::new("peer-e2e", cell.to_string(), "pgmq");
        row.msgs_per_s = msgs_per_s;
        row.stable_backlog = Some(true);
        Searched { consumers, row }
    }

    #[test]
    fn an_overloaded_search_never_stands_for_the_workload() {
        let mut overloaded = searched("part-100 cg-1", 10, 13_110.0);
        overloaded.row.stable_backlog = Some(false);
        let rows = best_per_workload(&[searched("part-10 cg-1", 10, 4_949.0), overloaded]);
        let got: Vec<f64> = rows.iter().map(|r| r.msgs_per_s).collect();
        assert_eq!(got, [4_949.0, 4_949.0]);
        assert!(rows[0].notes.is_empty());
    }

    #[test]
    fn cells_of_one_pgmq_workload_report_its_best_search() {
        let rows = best_per_workload(&[
            searched("part-1 cg-1", 1, 10_573.0),
            searched("part-10 cg-1", 10, 268.0),
            searched("part-100 cg-1", 10, 12_994.0),
        ]);
        let got: Vec<(&str, f64)> = rows
            .iter()
            .map(|r| (r.cell.as_str(), r.msgs_per_s))
            .collect();
        assert_eq!(
            got,
            [
                ("part-1 cg-1", 10_573.0),
                ("part-10 cg-1", 12_994.0),
                ("part-100 cg-1", 12_994.0)
            ]
        );
        assert!(rows[1]
            .notes
            .iter()
            .any(|n| n.contains("part-100 cg-1") && n.contains("268")));
        assert!(rows[0].notes.is_empty() && rows[2].notes.is_empty());
    }
}
