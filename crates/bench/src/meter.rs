//! Resource accounting around one result row: broker CPU seconds and peak RSS, PostgreSQL CPU
//! seconds, WAL bytes, SQL statements and transactions, all as deltas between two snapshots.

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
    /// Broker + PostgreSQL + bench CPU seconds (the part of `machine_busy` that is ours).
    own: Option<f64>,
}

/// What happened between two snapshots.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    pub seconds: f64,
    pub broker_cpu_s: Option<f64>,
    pub broker_peak_rss_mb: Option<f64>,
    pub pg_cpu_s: Option<f64>,
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
        let own = procstat::self_cpu_seconds()
            .map(|me| me + broker_cpu.unwrap_or(0.0) + pg_cpu.unwrap_or(0.0));
        Ok(Snapshot {
            at: Instant::now(),
            broker_cpu,
            pg_cpu,
            machine_busy: procstat::machine_busy_seconds(),
            own,
            wal_bytes: row.get(0),
            statements,
            xacts: row.get(1),
        })
    }

    /// Usage since `start` (the peak RSS is the peak since `start`'s reset).
    pub async fn since(&self, start: &Snapshot) -> Result<Usage> {
        let end = self.snapshot().await?;
        Ok(Usage {
            seconds: end.at.duration_since(start.at).as_secs_f64(),
            broker_cpu_s: end.broker_cpu.zip(start.broker_cpu).map(|(a, b)| a - b),
            broker_peak_rss_mb: self
                .broker_pid
                .and_then(procstat::peak_rss_bytes)
                .map(|b| b as f64 / (1024.0 * 1024.0)),
            pg_cpu_s: end.pg_cpu.zip(start.pg_cpu).map(|(a, b)| a - b),
            wal_bytes: end.wal_bytes - start.wal_bytes,
            statements: end.statements.zip(start.statements).map(|(a, b)| a - b),
            xacts: end.xacts - start.xacts,
            other_cpu_s: match (
                end.machine_busy.zip(start.machine_busy),
                end.own.zip(start.own),
            ) {
                (Some((m1, m0)), Some((o1, o0))) => Some(((m1 - m0) - (o1 - o0)).max(0.0)),
                _ => None,
            },
        })
    }
}
