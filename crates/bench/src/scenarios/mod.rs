//! The scenarios and what they share: the target, the meter, the HTTP handle, payloads, and
//! numbers one scenario hands to the next (ceilings, push capacity, e2e rates).

pub mod brokers;
pub mod ceiling;
pub mod cost;
pub mod drain;
pub mod e2e;
pub mod extras;
pub mod idle;
pub mod overload;
pub mod peer;
pub mod pgpool;
pub mod push;
pub mod refusals;
pub mod search;
pub mod soak;
pub mod spread;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Result;
use clap::ValueEnum;
use queen_client::Queen;

use crate::meter::Meter;
use crate::payload::{Clock, Payloads};
use crate::profile::Profile;
use crate::target::Target;

/// Selectable scenarios, run in this order (the ceiling first: later rows divide by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Scenario {
    Ceiling,
    Push,
    /// 100-item pushes over 100 partitions of a 10 000-partition queue against 10 of 10, and
    /// the first push that creates those partitions.
    Spread,
    E2e,
    /// e2e on 10 partitions offered 1×, 1.5×, 2× and 4× of its stable rate.
    Overload,
    /// A pre-pushed backlog drained by autopilot consumers: 10 000 shallow vs 10 deep
    /// partitions.
    Drain,
    Latency,
    /// Key-value puts and gets against `kv_apply_v1`'s own ceiling, lock cycles, timer
    /// firing delay.
    Extras,
    Idle,
    Peer,
    /// Not in the default list: e2e through 1, 2 and 3 brokers on one PostgreSQL.
    Brokers,
    /// Not in the default list: broker instructions per message of a fixed workload, the
    /// broker under callgrind (or perf).
    Cost,
    /// Not in the default list: `--scenario soak`.
    Soak,
}

/// Command-line overrides of the profile.
#[derive(Debug, Clone)]
pub struct Overrides {
    pub push_rate: Option<f64>,
    pub e2e_rate: Option<f64>,
    pub binary_push: bool,
    pub pgmq_sql: Option<PathBuf>,
    pub pgbench: Option<PathBuf>,
    pub soak: soak::SoakOptions,
    /// The broker binary, for scenarios that start brokers of their own (`None` with `--url`).
    pub queen_bin: Option<PathBuf>,
    /// `--broker-env` of every broker this program starts.
    pub broker_env: Vec<(String, String)>,
    pub keep_data: bool,
}

/// PostgreSQL's own throughput for the write patterns, messages per second.
#[derive(Debug, Clone, Default)]
pub struct Ceilings {
    pub by_script: BTreeMap<String, f64>,
}

impl Ceilings {
    pub fn get(&self, script: &str) -> Option<f64> {
        self.by_script.get(script).copied()
    }
}

pub struct Ctx {
    pub target: Target,
    pub meter: Meter,
    /// Admin connection to the broker's database (checkpoints, stored-message counts).
    pub admin: tokio_postgres::Client,
    pub queen: Queen,
    pub profile: Profile,
    pub overrides: Overrides,
    pub payloads: Payloads,
    pub clock: Clock,
    pub run_id: String,
    /// Queues named so far: a cell measured twice at one rate gets a fresh queue each time.
    pub queues_named: AtomicU32,
    pub ceilings: Ceilings,
    /// Partitions → push capacity (msgs/s) at the largest batch, from the push scenario.
    pub push_capacity: BTreeMap<u32, f64>,
    /// (partitions, groups) → producer rate an e2e cell sustained, reused by the peer.
    pub e2e_rates: BTreeMap<(u32, u32), f64>,
}

impl Ctx {
    /// A CHECKPOINT before each cell, so every cell starts with the same full-page-write debt.
    pub async fn checkpoint(&self) -> Result<()> {
        self.admin.batch_execute("CHECKPOINT").await?;
        Ok(())
    }

    /// Deletes a measured cell's queue and vacuums the log tables, outside every window, so
    /// the next cells reuse its space: a full run kept 46 GB of segments otherwise and filled
    /// the disk (2026-12-07). pgmq's cells drop their queues the same way. A failure is only
    /// reported: the cell was measured.
    pub async fn discard(&self, queue: &str) {
        let done: Result<()> = async {
            self.queen.queue(queue).delete().await?;
            let vacuum = "VACUUM queen.log_segments, queen.log_txns";
            Ok(self.admin.batch_execute(vacuum).await?)
        }
        .await;
        if let Err(e) = done {
            eprintln!("  could not discard queue {queue}: {e:#}");
        }
    }

    /// A queue name unique to this run.
    pub fn queue_name(&self, what: &str) -> String {
        let n = self.queues_named.fetch_add(1, Ordering::Relaxed);
        format!("bench-{}-{n}-{what}", self.run_id)
    }

    /// Messages stored in `queue` (offsets are dense from 0 per partition), if the target's
    /// schema is ours.
    pub async fn stored_messages(&self, queue: &str) -> Option<i64> {
        self.admin
            .query_one(
                "SELECT coalesce(sum(p.last_offset + 1), 0)::bigint FROM queen.log_partitions p \
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
                &[&queue],
            )
            .await
            .ok()
            .map(|r| r.get(0))
    }

    /// Partitions that exist in `queue`, if the target's schema is ours.
    pub async fn partitions_of(&self, queue: &str) -> Option<i64> {
        self.admin
            .query_one(
                "SELECT count(*) FROM queen.log_partitions p \
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
                &[&queue],
            )
            .await
            .ok()
            .map(|r| r.get(0))
    }
}
