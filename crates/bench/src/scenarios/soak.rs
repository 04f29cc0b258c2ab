//! Soak: one end-to-end cell held at a steady rate for a long time (`--soak-seconds`, 600 by
//! default) on a queue whose consumed messages go after `completedRetentionSeconds`
//! (`--soak-retention`, 60), with the dedup window at the same value so the hash sidecar is
//! purged on the same horizon. Every 30 s the sizes of the tables that grow with traffic are
//! sampled and printed (`sizes.rs`); the row fails when, once the sizes had time to settle, a
//! table keeps growing. Delivery is verified like any e2e cell.
//!
//! Settling takes the later of one minute and two retention periods (retention has started
//! deleting), plus two autovacuum rounds (`autovacuum_naptime`, a minute by default): the
//! space of deleted segments becomes reusable only when vacuum has passed, so a table's
//! plateau holds the live messages plus up to one round of deleted ones.
//!
//! The sidecar's purge horizon also has the broker's floor in it
//! (`QUEEN_SIDECAR_PURGE_FLOOR_SECONDS`, 900 s by default): a broker this program starts gets
//! the retention period as its floor; a running broker (`--url`) keeps its own.

use std::time::Duration;

use anyhow::Result;

use super::e2e::{self, Cell, LEASE_SECONDS};
use super::Ctx;
use crate::report::Row;
use crate::sizes;

/// Producer rate when `--e2e-rate` does not set one (msgs/s).
const DEFAULT_RATE: f64 = 1000.0;
const PARTITIONS: u32 = 10;
/// Two named groups: rule 2 waits for the slower one.
const GROUPS: u32 = 2;
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
const WARMUP: Duration = Duration::from_secs(5);

/// How long the soak runs and the retention it runs under.
#[derive(Debug, Clone, Copy)]
pub struct SoakOptions {
    pub duration: Duration,
    pub retention_s: u32,
}

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let SoakOptions {
        duration,
        retention_s,
    } = ctx.overrides.soak;
    let rate = ctx.overrides.e2e_rate.unwrap_or(DEFAULT_RATE);
    let cell = Cell {
        scenario: "soak",
        label: format!(
            "{}s part-{PARTITIONS} cg-{GROUPS} completed-{retention_s}s",
            duration.as_secs()
        ),
        partitions: PARTITIONS,
        groups: GROUPS,
        push_batch: 100,
        rate,
        consumers_per_group: e2e::consumers_for(PARTITIONS),
        warmup: WARMUP,
        measure: duration,
        options: serde_json::json!({
            "leaseTime": LEASE_SECONDS,
            "retentionEnabled": true,
            "completedRetentionSeconds": retention_s,
            "dedupWindowSeconds": retention_s,
        }),
        sample_sizes: Some(SAMPLE_EVERY),
    };
    eprintln!(
        "  soak {} at {rate:.0} msg/s: table sizes every {}s",
        cell.label,
        SAMPLE_EVERY.as_secs()
    );
    let naptime = autovacuum_naptime(&ctx.admin).await?;
    let mut row = e2e::run_cell(ctx, &cell, false).await?;
    let settle =
        Duration::from_secs(60).max(Duration::from_secs(2 * u64::from(retention_s))) + 2 * naptime;
    row.flat_sizes = sizes::flat_after(&row.sizes, settle);
    match row.flat_sizes {
        Some(_) => row.notes.push(format!(
            "sizes judged from {}s on (autovacuum_naptime {}s)",
            settle.as_secs(),
            naptime.as_secs()
        )),
        None => row.notes.push(format!(
            "too short to judge table sizes (needs samples after {}s)",
            settle.as_secs()
        )),
    }
    if let Some(last) = row.sizes.last() {
        for (table, bytes) in &last.bytes {
            row.extra
                .insert(format!("{table}_mb"), *bytes as f64 / 1_048_576.0);
        }
    }
    Ok(vec![row])
}

/// The server's `autovacuum_naptime`.
async fn autovacuum_naptime(db: &tokio_postgres::Client) -> Result<Duration> {
    let row = db
        .query_one(
            "SELECT setting::bigint FROM pg_settings WHERE name = 'autovacuum_naptime'",
            &[],
        )
        .await?;
    let seconds: i64 = row.get(0);
    Ok(Duration::from_secs(u64::try_from(seconds).unwrap_or(60)))
}
