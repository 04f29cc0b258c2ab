//! PostgreSQL's own ceiling for our write patterns, measured in the same run on the same
//! cluster with the pgbench scripts of docs/performance.md §2 (1 KiB random rows one or 100 per
//! commit, one 100-message 100 KiB segment per commit, and a consumer-group cursor advance on
//! 1/10/100 partitions). Runs in a scratch database that is dropped afterwards.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{anyhow, bail, Context, Result};

use super::Ctx;
use crate::report::Row;

const DB: &str = "queen_bench_ceiling";

const SETUP: &str = r#"
CREATE EXTENSION IF NOT EXISTS pgcrypto;
CREATE TABLE pool1k (id int PRIMARY KEY, payload bytea);
INSERT INTO pool1k SELECT i, gen_random_bytes(1024) FROM generate_series(1, 1000) i;
CREATE TABLE pool100k (id int PRIMARY KEY, payload bytea);
ALTER TABLE pool100k ALTER COLUMN payload SET STORAGE EXTERNAL;
INSERT INTO pool100k
  SELECT i, (SELECT string_agg(gen_random_bytes(1024), ''::bytea) FROM generate_series(1, 100) j WHERE i > 0)
  FROM generate_series(1, 200) i;
CREATE TABLE msg (id bigserial PRIMARY KEY, part int NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
                  payload bytea NOT NULL);
ALTER TABLE msg ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE TABLE seg (id bigserial PRIMARY KEY, part int NOT NULL, first_off bigint NOT NULL, n int NOT NULL,
                  payload bytea NOT NULL);
ALTER TABLE seg ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE TABLE cursors (grp int, part int, off bigint, lease_until timestamptz, PRIMARY KEY (grp, part))
  WITH (fillfactor = 50);
INSERT INTO cursors SELECT 1, p, 0, now() FROM generate_series(1, 100) p;
-- The engine-shaped cycle (docs/performance.md §2.3): partition rows, segments with their hash
-- sidecar, and group 2's cursors.
CREATE TABLE eparts (part int PRIMARY KEY, last_off bigint NOT NULL) WITH (fillfactor = 70);
INSERT INTO eparts SELECT p, -1 FROM generate_series(1, 10) p;
CREATE TABLE eseg (part int, base_off bigint, end_off bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
                   blob bytea NOT NULL, PRIMARY KEY (part, base_off));
ALTER TABLE eseg ALTER COLUMN blob SET STORAGE EXTERNAL;
CREATE TABLE etxn (part int, base_off bigint, hashes bytea NOT NULL, PRIMARY KEY (part, base_off));
ALTER TABLE etxn ALTER COLUMN hashes SET STORAGE EXTERNAL;
CREATE TABLE pool_hash (id int PRIMARY KEY, hashes bytea);
INSERT INTO pool_hash SELECT i, gen_random_bytes(800) || gen_random_bytes(800) FROM generate_series(1, 200) i;
INSERT INTO cursors SELECT 2, p, -1, NULL FROM generate_series(1, 10) p;
"#;

/// One push + pop + ack of a 100-message segment on one of 10 partitions, three commits:
/// lock and bump the partition row, insert the segment and its 1.6 KB hash row; claim the
/// cursor row with SKIP LOCKED, read the next segment by primary key, write the lease; advance
/// the cursor. A skipped claim (-2) reads nothing and leaves the row alone.
const CYCLE: &str = r#"\set p random(1, 10)
\set r random(1, 200)
BEGIN;
UPDATE eparts SET last_off = last_off + 100 WHERE part = :p RETURNING last_off AS hi \gset
INSERT INTO eseg (part, base_off, end_off, blob) SELECT :p, :hi - 99, :hi, payload FROM pool100k WHERE id = :r;
INSERT INTO etxn (part, base_off, hashes) SELECT :p, :hi - 99, hashes FROM pool_hash WHERE id = :r;
COMMIT;
BEGIN;
SELECT coalesce(max(off), -2) AS cur FROM (SELECT off FROM cursors WHERE grp = 2 AND part = :p FOR UPDATE SKIP LOCKED) c \gset
SELECT blob FROM eseg WHERE part = :p AND base_off = :cur + 1 AND :cur > -2;
UPDATE cursors SET lease_until = now() + interval '30 s' WHERE grp = 2 AND part = :p AND :cur > -2;
COMMIT;
UPDATE cursors SET off = off + 100, lease_until = NULL WHERE grp = 2 AND part = :p AND :cur > -2;
"#;

/// Script text and messages per commit (cursor scripts: 0, they are commits of acks).
fn script(name: &str) -> Option<(String, u32)> {
    let p10 = "\\set p random(1, 10)\n";
    Some(match name {
        "one1k" => (
            format!("\\set r random(1, 1000)\n{p10}INSERT INTO msg (part, payload) SELECT :p, payload FROM pool1k WHERE id = :r;\n"),
            1,
        ),
        "batch100x1k" => (
            format!("\\set r random(1, 900)\n{p10}INSERT INTO msg (part, payload) SELECT :p, payload FROM pool1k WHERE id BETWEEN :r AND :r + 99;\n"),
            100,
        ),
        "seg100k" => (
            format!("\\set r random(1, 200)\n{p10}INSERT INTO seg (part, first_off, n, payload) SELECT :p, 0, 100, payload FROM pool100k WHERE id = :r;\n"),
            100,
        ),
        "cycle100" => (CYCLE.to_string(), 100),
        cur if cur.starts_with("cur") => {
            let n: u32 = cur[3..].parse().ok()?;
            (
                format!("\\set p random(1, {n})\n\\set r random(1, 1000)\nUPDATE cursors SET off = off + 100, lease_until = now() + interval '30 s' WHERE grp = 1 AND part = :p;\n"),
                0,
            )
        }
        _ => return None,
    })
}

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let pgbench = locate_pgbench(ctx.overrides.pgbench.clone())?;
    ctx.admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DB}"))
        .await?;
    ctx.admin
        .batch_execute(&format!("CREATE DATABASE {DB}"))
        .await?;
    let result = run_cells(ctx, &pgbench).await;
    ctx.admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        .await
        .ok();
    result
}

async fn run_cells(ctx: &mut Ctx, pgbench: &Path) -> Result<Vec<Row>> {
    let db = ctx.target.connect(Some(DB)).await?;
    db.batch_execute(SETUP)
        .await
        .context("ceiling schema (needs the pgcrypto extension)")?;
    let dir = std::env::temp_dir().join(format!("queen-bench-ceiling-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    for &(name, clients) in &ctx.profile.ceiling_cells.clone() {
        let (text, per_commit) =
            script(name).ok_or_else(|| anyhow!("unknown ceiling script {name}"))?;
        let file = dir.join(format!("{name}.sql"));
        std::fs::write(&file, text)?;
        db.batch_execute(
            "TRUNCATE msg, seg, eseg, etxn; UPDATE eparts SET last_off = -1; \
             UPDATE cursors SET off = -1 WHERE grp = 2; CHECKPOINT",
        )
        .await?;
        let start = ctx.meter.start().await?;
        let tps = pgbench_tps(ctx, pgbench, &file, clients).await?;
        let usage = ctx.meter.since(&start).await?;
        let mut row = Row::new("ceiling", format!("{name} c{clients}"), "postgres");
        let commits = (tps * f64::from(ctx.profile.ceiling_seconds)).round() as u64;
        // pgbench counts script runs; the cycle script is three commits.
        let unit = if name == "cycle100" {
            "cycles_per_s"
        } else {
            "commits_per_s"
        };
        row.extra.insert(unit.into(), tps);
        if per_commit > 0 {
            row.msgs = commits * u64::from(per_commit);
            row.msgs_per_s = tps * f64::from(per_commit);
            if name == "cycle100" {
                // A cycle whose claim was skipped delivers nothing: count what the cursors passed.
                let acked: i64 = db
                    .query_one(
                        "SELECT sum(off + 1)::bigint FROM cursors WHERE grp = 2",
                        &[],
                    )
                    .await?
                    .get(0);
                row.extra.insert("pushed_per_s".into(), row.msgs_per_s);
                row.msgs = acked.max(0) as u64;
                row.msgs_per_s = row.msgs as f64 / f64::from(ctx.profile.ceiling_seconds);
            }
            let best = ctx
                .ceilings
                .by_script
                .entry(name.to_string())
                .or_insert(0.0);
            *best = best.max(row.msgs_per_s);
        } else {
            row.extra
                .insert("acked_msgs_per_s_at_100".into(), tps * 100.0);
        }
        let mut row = row.with_usage(usage);
        row.usage.broker_cpu_s = None;
        row.usage.broker_peak_rss_mb = None;
        if name == "cycle100" {
            row.notes
                .push("3 commits per 100-message push+pop+ack".into());
        }
        eprintln!("  ceiling {name} c{clients}: {tps:.0} commits/s");
        rows.push(row);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// Runs one pgbench cell (`-n -M prepared -j 2 -T secs`) with durability on; returns tps.
async fn pgbench_tps(ctx: &Ctx, pgbench: &Path, script: &Path, clients: u32) -> Result<f64> {
    let mut cmd = tokio::process::Command::new(pgbench);
    cmd.args(["-n", "-M", "prepared", "-j", "2"])
        .arg("-c")
        .arg(clients.to_string())
        .arg("-T")
        .arg(ctx.profile.ceiling_seconds.to_string())
        .arg("-f")
        .arg(script)
        .arg(DB)
        .envs(ctx.target.libpq_env())
        .env("PGOPTIONS", "-c synchronous_commit=on")
        .stdin(Stdio::null());
    let out = cmd
        .output()
        .await
        .with_context(|| format!("running {}", pgbench.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "pgbench failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_tps(&stdout).ok_or_else(|| anyhow!("no tps in pgbench output:\n{stdout}"))
}

fn parse_tps(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l[6..].split_whitespace().next()?.parse().ok())
}

/// `--pgbench`, `PG_BINDIR`, the newest `/usr/lib/postgresql/*/bin`, then `PATH`.
fn locate_pgbench(explicit: Option<PathBuf>) -> Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = explicit.into_iter().collect();
    if let Some(dir) = std::env::var_os("PG_BINDIR") {
        candidates.push(PathBuf::from(dir).join("pgbench"));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            Some((
                e.file_name().to_str()?.parse().ok()?,
                e.path().join("bin/pgbench"),
            ))
        })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.0));
    candidates.extend(versions.into_iter().map(|(_, p)| p));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("pgbench")));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("pgbench not found (install postgresql-15 or pass --pgbench)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pgbench_tps() {
        let out =
            "latency average = 0.291 ms\ntps = 3429.123456 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(3429.123456));
        assert_eq!(parse_tps("nothing"), None);
    }

    #[test]
    fn every_profile_script_exists() {
        for name in [
            "one1k",
            "batch100x1k",
            "seg100k",
            "cur1",
            "cur10",
            "cur100",
            "cycle100",
        ] {
            assert!(script(name).is_some(), "{name}");
        }
        assert!(script("cur").is_none());
    }
}
