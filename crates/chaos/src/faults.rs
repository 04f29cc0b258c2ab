//! Fault injection on a fixed cycle while the producers run: kill -9 of a broker (and its
//! restart), a crash of PostgreSQL (every server process SIGKILLed, restarted through crash
//! recovery), `pg_terminate_backend` of every broker connection, pool exhaustion (a lock that
//! parks every connection that touches cursors while a burst of pops arrives), and a second
//! broker starting on (or leaving) the same database. Each fault is recorded with its window;
//! database outages are marked so the checker tolerates 5xx inside them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::history::FaultRec;
use crate::workload::{Ctx, QUEUES};

#[derive(Debug, Clone, Copy)]
pub enum Fault {
    KillBroker,
    TerminateBackends,
    CrashPostgres,
    PoolExhaustion,
    SecondBroker,
}

const CYCLE: [Fault; 5] = [
    Fault::SecondBroker,
    Fault::KillBroker,
    Fault::TerminateBackends,
    Fault::PoolExhaustion,
    Fault::CrashPostgres,
];
/// After an outage ends (brokers healthy again), requests already in flight may still fail.
pub const OUTAGE_GRACE_US: u64 = 5_000_000;
/// How long the database stays down in a crash.
const PG_DOWN: Duration = Duration::from_secs(2);
/// How long the lock parks the brokers' connections.
const LOCK_HOLD: Duration = Duration::from_secs(2);

/// Injects faults every `fault_every` until the producers are done, then sets `faults_done`.
/// An injection that fails (a broker does not come back) ends the run with that error.
pub async fn run(ctx: Arc<Ctx>) -> Result<()> {
    let mut i = 0;
    let result = loop {
        tokio::time::sleep(ctx.profile.fault_every).await;
        if ctx.producers_done.load(Ordering::Relaxed) {
            break Ok(());
        }
        let fault = CYCLE[i % CYCLE.len()];
        i += 1;
        if let Err(e) = inject(&ctx, fault).await {
            break Err(e.context(format!("injecting {fault:?}")));
        }
    };
    // The second broker stays up for the drain only if it was up; both serve the drain.
    ctx.end_faults();
    result
}

async fn inject(ctx: &Ctx, fault: Fault) -> Result<()> {
    let start = ctx.now();
    let (kind, outage, detail) = match fault {
        Fault::KillBroker => {
            let slot = if ctx.cluster.is_up(1) && rand::random::<bool>() {
                1
            } else {
                0
            };
            ctx.cluster.kill9_broker(slot);
            tokio::time::sleep(Duration::from_millis(500)).await;
            ctx.cluster.start_broker(slot).await?;
            (
                "kill -9 broker",
                false,
                format!("broker {slot} killed and restarted"),
            )
        }
        Fault::TerminateBackends => {
            let pg = ctx.cluster.connect().await?;
            let row = pg
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                       AND backend_type = 'client backend'",
                    &[],
                )
                .await?;
            let n: i64 = row.get(0);
            (
                "pg_terminate_backend",
                true,
                format!("{n} connections terminated"),
            )
        }
        Fault::CrashPostgres => {
            if !ctx.cluster.crash_postgres(PG_DOWN).await? {
                return Ok(()); // external database: not ours to crash
            }
            wait_brokers_healthy(ctx).await;
            (
                "PostgreSQL crash",
                true,
                format!("down {PG_DOWN:?}, crash recovery"),
            )
        }
        Fault::PoolExhaustion => {
            let n = pool_exhaustion(ctx).await?;
            (
                "pool exhaustion",
                false,
                format!("{n} concurrent pops behind a {LOCK_HOLD:?} lock"),
            )
        }
        Fault::SecondBroker => {
            if ctx.cluster.is_up(1) {
                ctx.cluster.stop_broker(1);
                ("second broker stop", false, "SIGTERM".to_string())
            } else {
                ctx.cluster.start_broker(1).await?;
                (
                    "second broker start",
                    false,
                    "booted on the live database".to_string(),
                )
            }
        }
    };
    let end = ctx.now();
    ctx.history.fault(FaultRec {
        kind,
        start,
        end,
        outage,
        detail,
    });
    Ok(())
}

async fn wait_brokers_healthy(ctx: &Ctx) {
    for _ in 0..600 {
        let mut healthy = true;
        for url in ctx.cluster.live_urls() {
            let ok = queen_client::Queen::with_client(url, ctx.http.clone())
                .healthy()
                .await
                .unwrap_or(false);
            healthy &= ok;
        }
        if healthy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Holds a lock that blocks every cursor write (pops, acks) while four pools' worth of pops
/// from a separate group arrive: every broker connection is parked and new requests queue
/// for the pool. Returns the burst size.
async fn pool_exhaustion(ctx: &Ctx) -> Result<usize> {
    let mut pg = ctx.cluster.connect().await?;
    let tx = pg.transaction().await?;
    tx.batch_execute("LOCK TABLE queen.log_consumers IN SHARE ROW EXCLUSIVE MODE")
        .await?;
    let n = 4 * ctx.profile.pool_size as usize;
    let mut burst = Vec::new();
    for i in 0..n {
        let q = ctx
            .queen()
            .queue(QUEUES[i % QUEUES.len()])
            .group("chaos-burst")
            .batch(1)
            .wait(false);
        burst.push(tokio::spawn(async move { q.pop().await }));
    }
    tokio::time::sleep(LOCK_HOLD).await;
    tx.rollback().await?;
    for b in burst {
        if let Ok(res) = b.await {
            let status = crate::workload::status_of(&res, 200);
            ctx.history
                .http("pop(burst)", status, crate::workload::error_text(&res));
        }
    }
    Ok(n)
}
