//! `--failover`: the brokers run on a pg_auto_failover formation (crates/formation: monitor,
//! primary, two synchronous standbys) instead of one PostgreSQL. Two brokers are given the
//! multi-host URL (`target_session_attrs=read-write`), the third is pinned to node 0 and
//! follows it through standby and primary. Faults, on a cycle: a planned switchover; `kill -9`
//! of the primary's postmaster; a switchover while push maintenance ends (every broker's spool
//! replaying); a switchover while a lock parks every pop, ack and transaction (failover in the
//! middle of transactions with pushes and acks); the primary's node lost for good (a standby
//! promoted, the node replaced by a fresh one on its port); `kill -9` of a broker. Every
//! database fault ends with node 0 promoted again (the pinned broker's node: standby, then
//! primary again), and in a third of them a random broker is also killed mid-failover. Each
//! database fault is an outage window for the checker; the canary (canary.rs) measures how
//! soon the brokers store pushes again.

pub mod canary;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use queen_formation::Formation;
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::cluster::Cluster;
use crate::history::{FaultRec, Log, Micros, PushOutcome};
use crate::workload::Ctx;

/// Brokers in a failover run; the last one is pinned to [`PINNED_NODE`].
pub const SLOTS: usize = 3;
pub const PINNED_SLOT: usize = SLOTS - 1;
/// The node the pinned broker is given (the formation's first primary).
pub const PINNED_NODE: usize = 0;
/// How long push maintenance fills the spools before the replay a switchover interrupts.
const SPOOL_FILL: Duration = Duration::from_secs(4);
/// How long the lock parks cursor writes before the switchover.
const LOCK_HOLD: Duration = Duration::from_secs(1);
/// How long a broker may take to write to the new primary after a fault.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

pub struct Ha {
    pub formation: Mutex<Formation>,
    pub canary: canary::Canary,
    /// The multi-host URL (`target_session_attrs=read-write`) most brokers are given.
    pub url: String,
    pinned_url: String,
    pinned_port: u16,
}

/// Starts the formation in a scratch directory of its own (kept with `--keep`).
pub async fn start(keep: bool) -> Result<Arc<Ha>> {
    let dir = std::env::temp_dir().join(format!("queen-chaos-formation-{}", std::process::id()));
    eprintln!(
        "queen-chaos: starting a pg_auto_failover formation in {}",
        dir.display()
    );
    let mut f = Formation::start(&dir, 3)
        .await
        .context("starting the pg_auto_failover formation")?;
    if keep {
        f.keep_dir();
    }
    Ok(Arc::new(Ha {
        url: f.url(),
        pinned_url: f.node_url(PINNED_NODE),
        pinned_port: f.ports()[PINNED_NODE],
        formation: Mutex::new(f),
        canary: canary::Canary::default(),
    }))
}

impl Ha {
    /// Pins the last broker to its node and starts every broker.
    pub async fn start_brokers(&self, cluster: &Cluster) -> Result<()> {
        cluster.pin(PINNED_SLOT, self.pinned_url.clone());
        for slot in 0..SLOTS {
            cluster.start_broker(slot).await?;
        }
        Ok(())
    }

    /// The failover section of the report: what the workload met inside the failovers, then
    /// the canary's figures.
    pub fn render(&self, log: &Log) -> String {
        let inside = |at: Micros| {
            log.faults
                .iter()
                .any(|f| f.outage && at >= f.start && at <= f.end)
        };
        let buffered = log
            .pushes
            .iter()
            .filter(|p| matches!(&p.outcome, PushOutcome::Stored(s) if s == "buffered"))
            .count();
        let txns: Vec<u16> = log
            .http
            .iter()
            .filter(|h| h.route == "transaction" && inside(h.at))
            .map(|h| h.status)
            .collect();
        let ok = txns.iter().filter(|&&s| (200..300).contains(&s)).count();
        let mut out = String::from("\nfailover (the workload inside the failovers):\n");
        out.push_str(&format!(
            "  {:<46} {:>12}\n",
            "push items answered `buffered`", buffered
        ));
        out.push_str(&format!(
            "  {:<46} {:>12}\n",
            "transactions answered inside (2xx / other)",
            format!("{ok} / {}", txns.len() - ok)
        ));
        out + &self.canary.render(PINNED_SLOT, self.pinned_port, SLOTS)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HaFault {
    Switchover,
    KillPostmaster,
    SpoolReplay,
    KillBroker,
    UnderLock,
    LoseNode,
}

/// The small profile reaches the first three (a switchover and a `kill -9` at least).
const CYCLE: [HaFault; 6] = [
    HaFault::Switchover,
    HaFault::KillPostmaster,
    HaFault::SpoolReplay,
    HaFault::KillBroker,
    HaFault::UnderLock,
    HaFault::LoseNode,
];

/// Injects faults every `fault_every` until the producers are done, then sets `faults_done`
/// (as `faults::run` does for the single database).
pub async fn run(ctx: Arc<Ctx>, ha: Arc<Ha>) -> Result<()> {
    let mut i = 0;
    let result = loop {
        tokio::time::sleep(ctx.profile.fault_every).await;
        if ctx.producers_done.load(Ordering::Relaxed) {
            break Ok(());
        }
        let fault = CYCLE[i % CYCLE.len()];
        i += 1;
        if let Err(e) = inject(&ctx, &ha, fault).await {
            let events = ha.formation.lock().await.events().await.unwrap_or_default();
            let tail = events[events.len().saturating_sub(30)..].join("\n");
            break Err(e.context(format!("injecting {fault:?}; monitor events:\n{tail}")));
        }
    };
    ctx.end_faults();
    result
}

async fn inject(ctx: &Ctx, ha: &Ha, fault: HaFault) -> Result<()> {
    let start = ctx.now();
    if fault == HaFault::KillBroker {
        let slot = rand::thread_rng().gen_range(0..SLOTS);
        ctx.cluster.kill9_broker(slot);
        tokio::time::sleep(Duration::from_millis(500)).await;
        ctx.cluster.start_broker(slot).await?;
        let end = ctx.now();
        ctx.history.fault(FaultRec {
            kind: "kill -9 broker",
            start,
            end,
            outage: false,
            detail: format!("broker {slot} killed and restarted"),
        });
        return Ok(());
    }
    // A third of the database faults also kill a broker while the failover runs.
    let victim = rand::thread_rng()
        .gen_bool(1.0 / 3.0)
        .then(|| rand::thread_rng().gen_range(0..SLOTS));
    let killer = async {
        if let Some(slot) = victim {
            let after = rand::thread_rng().gen_range(0..2_000);
            tokio::time::sleep(Duration::from_millis(after)).await;
            ctx.cluster.kill9_broker(slot);
        }
    };
    let (outcome, ()) = tokio::join!(database_fault(ctx, ha, fault), killer);
    let (kind, mut detail) = outcome?;
    let f = ha.formation.lock().await;
    let before = f.wait_stable().await?;
    f.promote(PINNED_NODE).await?;
    drop(f);
    if before != PINNED_NODE {
        detail.push_str(&format!("; node {PINNED_NODE} (pinned) primary again"));
    }
    if let Some(slot) = victim {
        ctx.cluster.start_broker(slot).await?;
        detail.push_str(&format!(
            "; broker {slot} killed mid-failover and restarted"
        ));
    }
    wait_brokers_write(ctx).await?;
    let end = ctx.now();
    ctx.history.fault(FaultRec {
        kind,
        start,
        end,
        outage: true,
        detail,
    });
    Ok(())
}

/// The database part of `fault`; returns its kind and what happened.
async fn database_fault(ctx: &Ctx, ha: &Ha, fault: HaFault) -> Result<(&'static str, String)> {
    let mut f = ha.formation.lock().await;
    let primary = f.wait_stable().await?;
    Ok(match fault {
        HaFault::Switchover => {
            let to = f.switchover().await?;
            ("switchover", format!("node {primary} → node {to}"))
        }
        HaFault::KillPostmaster => {
            let now = f.kill9_postmaster(primary).await?;
            (
                "kill -9 postmaster",
                format!("node {primary}'s postmaster; node {now} primary after"),
            )
        }
        HaFault::SpoolReplay => {
            maintenance(ctx, true).await?;
            tokio::time::sleep(SPOOL_FILL).await;
            maintenance(ctx, false).await?;
            let to = f.switchover().await?;
            (
                "switchover during spool replay",
                format!("push maintenance {SPOOL_FILL:?}, then node {primary} → node {to}"),
            )
        }
        HaFault::UnderLock => {
            let pg = ctx.cluster.connect().await?;
            pg.batch_execute("BEGIN; LOCK TABLE queen.log_consumers IN SHARE ROW EXCLUSIVE MODE")
                .await?;
            tokio::time::sleep(LOCK_HOLD).await;
            let to = f.switchover().await?;
            drop(pg);
            (
                "switchover under parked transactions",
                format!(
                    "pops, acks, transactions parked {LOCK_HOLD:?}; node {primary} → node {to}"
                ),
            )
        }
        HaFault::LoseNode => {
            let to = f.lose_node(primary).await?;
            f.replace_node(primary).await?;
            (
                "primary lost (unplanned failover)",
                format!("node {primary} SIGKILLed for good → node {to}; a fresh node on its port"),
            )
        }
        HaFault::KillBroker => bail!("not a database fault"),
    })
}

/// Push maintenance on or off, through any live broker (the flag lives in PostgreSQL).
async fn maintenance(ctx: &Ctx, on: bool) -> Result<()> {
    let url = format!("{}/api/v1/system/maintenance", ctx.cluster.pick_url());
    let r = ctx
        .http
        .post(url)
        .json(&json!({ "enabled": on }))
        .send()
        .await
        .context("push maintenance")?;
    if !r.status().is_success() {
        bail!("push maintenance {on}: {}", r.status());
    }
    Ok(())
}

/// Waits until every running broker is healthy and writes to a writable server.
async fn wait_brokers_write(ctx: &Ctx) -> Result<()> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        let mut pending = Vec::new();
        for url in ctx.cluster.live_urls() {
            let health = match ctx.http.get(format!("{url}/health")).send().await {
                Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
                _ => None,
            };
            if !health.is_some_and(|h| h["server"]["writable"] == true) {
                pending.push(url);
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "brokers {pending:?} write to no writable server {READY_TIMEOUT:?} after the fault"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
