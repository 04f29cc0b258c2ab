//! Typed calls of the retention SQL (sql/functions/retention.sql): the work list of due
//! partitions, the step functions, partition cleanup and the watermark safety walk; and the
//! runner lock, the PostgreSQL advisory lock that elects the one broker of a database running
//! the retention loop, held on a dedicated connection outside the pool.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// The work list of due partitions.
    DueList<'a> = log_retention_due_v1(p_floor_seconds: i32, p_cap: i32, p_skip: &'a [i64])
        select "*";
    /// One retention step of one partition.
    RetentionStep = log_retention_step_v1(
        p_pid: i64,
        p_all_cutoff: Option<DateTime<Utc>>,
        p_completed_cutoff: Option<DateTime<Utc>>,
        p_max_rows: i32,
    );
    /// One sidecar purge step of one partition.
    SidecarStep = log_txns_purge_step_v1(
        p_pid: i64,
        p_cutoff: Option<DateTime<Utc>>,
        p_max_rows: i32,
    );
    /// One step of the cleanup of partitions idle for so many seconds.
    CleanupStep = log_partition_cleanup_step_v1(
        p_cutoff: f64 = ("now() - make_interval(secs => ", ")"),
        p_max_rows: i32,
    );
    /// One step of the watermark safety walk.
    WatermarkWalkStep = log_watermark_walk_step_v1(p_after_id: i64, p_limit: i32)
        select "r_last_id, r_fixed";
}

/// The advisory lock key of the retention loop (upstream's, docs/engine.md §10.3).
pub const RUNNER_LOCK_KEY: i64 = 737_001;

/// One deletion phase of a retention run (docs/engine.md §10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Rules 1 and 2 (`retentionSeconds`, `completedRetentionSeconds`).
    Retention,
    /// The hash-sidecar purge.
    Sidecar,
    /// Max-wait eviction (`maxWaitTimeSeconds`).
    Evict,
}

/// A partition due for one phase, with the cutoffs of its queue.
#[derive(Debug, Clone)]
pub struct Due {
    pub phase: Phase,
    pub partition_id: i64,
    /// Rule 1, the eviction or the sidecar cutoff; `None`: that rule is off.
    pub all_cutoff: Option<DateTime<Utc>>,
    /// Rule 2's cutoff; `None`: rule 2 is off.
    pub completed_cutoff: Option<DateTime<Utc>>,
}

/// `queen.log_retention_due_v1`: the due partitions of every phase, oldest first, at most
/// `cap` per phase, leaving out `skip` from the retention phase.
pub async fn due(
    db: &impl GenericClient,
    sidecar_floor_s: i32,
    cap: i32,
    skip: &[i64],
) -> Result<Vec<Due>> {
    let rows = DueList {
        p_floor_seconds: sidecar_floor_s,
        p_cap: cap,
        p_skip: skip,
    }
    .query(db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let phase = match row.try_get::<_, &str>(0)? {
            "retention" => Phase::Retention,
            "sidecar" => Phase::Sidecar,
            _ => Phase::Evict,
        };
        out.push(Due {
            phase,
            partition_id: row.try_get(1)?,
            all_cutoff: row.try_get(2)?,
            completed_cutoff: row.try_get(3)?,
        });
    }
    Ok(out)
}

/// What one step did.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct Step {
    /// Segments (retention, eviction) or sidecar rows deleted.
    pub deleted: i64,
    /// Messages the deleted segments held (0 for the sidecar).
    pub messages: i64,
    /// False when the batch was full: call again.
    pub done: bool,
    /// A writer held the partition row; nothing was done.
    pub skipped: bool,
}

/// `queen.log_retention_step_v1`: deletes up to `max_rows` segments of `pid` that the cutoffs
/// allow (rule 2 off when `completed_cutoff` is `None`: max-wait eviction).
pub async fn retention_step(
    db: &impl GenericClient,
    pid: i64,
    all_cutoff: Option<DateTime<Utc>>,
    completed_cutoff: Option<DateTime<Utc>>,
    max_rows: i32,
) -> Result<Step> {
    RetentionStep {
        p_pid: pid,
        p_all_cutoff: all_cutoff,
        p_completed_cutoff: completed_cutoff,
        p_max_rows: max_rows,
    }
    .json(db)
    .await
}

/// `queen.log_txns_purge_step_v1`: deletes up to `max_rows` sidecar rows of `pid` older than
/// `cutoff`.
pub async fn sidecar_step(
    db: &impl GenericClient,
    pid: i64,
    cutoff: Option<DateTime<Utc>>,
    max_rows: i32,
) -> Result<Step> {
    SidecarStep {
        p_pid: pid,
        p_cutoff: cutoff,
        p_max_rows: max_rows,
    }
    .json(db)
    .await
}

/// `queen.log_partition_cleanup_step_v1`: deletes up to `max_rows` empty partitions idle for
/// `idle_s` seconds (by the database's clock); returns how many.
pub async fn cleanup_step(db: &impl GenericClient, idle_s: f64, max_rows: i32) -> Result<i64> {
    let call = CleanupStep {
        p_cutoff: idle_s,
        p_max_rows: max_rows,
    };
    let n: i32 = call.query_one(db).await?.try_get(0)?;
    Ok(i64::from(n))
}

/// `queen.log_watermark_walk_step_v1`: visits the `limit` partitions after `after_id`;
/// returns the last id visited (`None`: the walk is complete) and the rows repaired.
pub async fn watermark_walk_step(
    db: &impl GenericClient,
    after_id: i64,
    limit: i32,
) -> Result<(Option<i64>, i64)> {
    let row = WatermarkWalkStep {
        p_after_id: after_id,
        p_limit: limit,
    }
    .query_one(db)
    .await?;
    let fixed: i32 = row.try_get(1)?;
    Ok((row.try_get(0)?, i64::from(fixed)))
}

/// A dedicated connection that may hold the retention loop's advisory lock. Session-scoped:
/// the lock lives exactly as long as this connection, which runs nothing else, so it cannot
/// outlive the loop that took it — dropping the value closes the connection, and a broker
/// killed outright closes it with its process. The server also drops a peer that vanished
/// without closing: TCP keepalives are short on this session.
pub struct RunnerLock {
    client: Client,
    driver: JoinHandle<()>,
}

impl Drop for RunnerLock {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl RunnerLock {
    /// Opens the connection (no lock yet).
    pub async fn connect(pg: &tokio_postgres::Config) -> Result<Self> {
        let mut pg = pg.clone();
        pg.application_name("queen-rs-retention");
        pg.options(
            "-c statement_timeout=10000 -c tcp_keepalives_idle=10 \
             -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3",
        );
        let (client, connection) = pg.connect(NoTls).await?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "retention lock connection ended");
            }
        });
        Ok(RunnerLock { client, driver })
    }

    /// Takes the lock if no other session holds it; true when this connection holds it.
    pub async fn try_take(&self) -> Result<bool> {
        let row = self
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RUNNER_LOCK_KEY])
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Fails when the connection, and with it the lock, is gone.
    pub async fn check(&self) -> Result<()> {
        self.client.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// Gives the lock back at once (closing the connection would too, a moment later).
    pub async fn release(self) {
        let unlock = self
            .client
            .execute("SELECT pg_advisory_unlock($1)", &[&RUNNER_LOCK_KEY]);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), unlock).await;
    }
}
