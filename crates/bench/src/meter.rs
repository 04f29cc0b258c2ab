//! Resource accounting around one result row: broker CPU seconds and peak RSS, PostgreSQL CPU
//! seconds, the load generator's (this bench's) CPU seconds, WAL bytes, SQL statements and
//! transactions, all as deltas between two snapshots.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::procstat;
use crate::target::Target;

/// Cumulative counters at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    broker_cpu: Option<f64>,
    pg_cpu: Option<f64>,
    wal_bytes: i64,
    statements: Option<i64>,
    xacts: i64,
    machine_busy: Option<f64>,
    /// This bench's CPU seconds, reaped children (pgbench) included.
    bench_cpu: Option<f64>,
}

/// What happened between two snapshots.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    pub seconds: f64,
    pub broker_cpu_s: Option<f64>,
    pub broker_peak_rss_mb: Option<f64>,
    pub pg_cpu_s: Option<f64>,
    /// The load generator's CPU seconds: this bench's own (and pgbench's in ceiling rows). It
    /// shares the cores with the broker and PostgreSQL, so it completes the row's CPU split.
    pub bench_cpu_s: Option<f64>,
    pub wal_bytes: i64,
    /// Statements executed cluster-wide (`pg_stat_statements`), when available.
    pub statements: Option<i64>,
    /// Committed + rolled-back transactions cluster-wide (`pg_stat_database`).
    pub xacts: i64,
    /// CPU seconds the machine spent on anything but the broker, PostgreSQL and this bench:
    /// other work competing for the same cores, which skews the row.
    pub other_cpu_s: Option<f64>,
}

/// Snapshots the target through one dedicated monitoring connection.
pub struct Meter {
    client: tokio_postgres::Client,
    has_statements: bool,
    broker_pid: Option<u32>,
    postmaster_pid: Option<u32>,
}

impl Meter {
    pub async fn new(target: &Target) -> Result<Self> {
        let client = target.connect(None).await?;
        // Preloaded by the embedded cluster when the library ships; the view needs the extension
        // in the database we read it from.
        let has_statements = client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await
            .is_ok()
            && client
                .query_one("SELECT count(*) FROM pg_stat_statements", &[])
                .await
                .is_ok();
        Ok(Self {
            client,
            has_statements,
            broker_pid: target.broker_pid,
            postmaster_pid: target.postmaster_pid,
        })
    }

    pub fn has_statements(&self) -> bool {
        self.has_statements
    }

    /// Takes a snapshot and restarts the broker's peak-RSS window.
    pub async fn start(&self) -> Result<Snapshot> {
        if let Some(pid) = self.broker_pid {
            procstat::reset_peak_rss(pid);
        }
        self.snapshot().await
    }

    pub async fn snapshot(&self) -> Result<Snapshot> {
        let row = self
            .client
            .query_one(
                "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, \
                 (SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database)::bigint",
                &[],
            )
            .await?;
        let statements = if self.has_statements {
            let r = self
                .client
                .query_one(
                    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements",
                    &[],
                )
                .await?;
            Some(r.get::<_, i64>(0))
        } else {
            None
        };
        let broker_cpu = self.broker_pid.and_then(procstat::cpu_seconds);
        let pg_cpu = self.postmaster_pid.and_then(procstat::cluster_cpu_seconds);
        Ok(Snapshot {
            at: Instant::now(),
            broker_cpu,
            pg_cpu,
            machine_busy: procstat::machine_busy_seconds(),
            bench_cpu: procstat::self_cpu_seconds(),
            wal_bytes: row.get(0),
            statements,
            xacts: row.get(1),
        })
    }

    /// Usage since `start` (the peak RSS is the peak since `start`'s reset).
    pub async fn since(&self, start: &Snapshot) -> Result<Usage> {
        let end = self.snapshot().await?;
        let delta = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
        let broker_cpu_s = delta(end.broker_cpu, start.broker_cpu);
        let pg_cpu_s = delta(end.pg_cpu, start.pg_cpu);
        let bench_cpu_s = delta(end.bench_cpu, start.bench_cpu);
        // Whatever the machine was busy with beyond the broker, PostgreSQL and this bench.
        let other_cpu_s = delta(end.machine_busy, start.machine_busy)
            .zip(bench_cpu_s)
            .map(|(busy, bench)| {
                let own = bench + broker_cpu_s.unwrap_or(0.0) + pg_cpu_s.unwrap_or(0.0);
                (busy - own).max(0.0)
            });
        Ok(Usage {
            seconds: end.at.duration_since(start.at).as_secs_f64(),
            broker_cpu_s,
            broker_peak_rss_mb: self
                .broker_pid
                .and_then(procstat::peak_rss_bytes)
                .map(|b| b as f64 / (1024.0 * 1024.0)),
            pg_cpu_s,
            bench_cpu_s,
            wal_bytes: end.wal_bytes - start.wal_bytes,
            statements: end.statements.zip(start.statements).map(|(a, b)| a - b),
            xacts: end.xacts - start.xacts,
            other_cpu_s,
        })
    }
}
