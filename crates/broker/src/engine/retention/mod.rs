//! The retention loop (docs/engine.md §10): the background task that deletes what the queues'
//! options say may go — whole segments past `retentionSeconds` (rule 1), past
//! `completedRetentionSeconds` below the slowest cursor (rule 2) or past `maxWaitTimeSeconds`
//! (eviction), hash-sidecar rows past the purge horizon, and idle, empty partitions — in short
//! per-partition steps (`run.rs`, sql/functions/retention.sql).
//!
//! One broker of a database runs it at a time. Every broker starts the task; each round it
//! either holds the runner lock (a session-scoped PostgreSQL advisory lock on a dedicated
//! connection, store/retention.rs) and runs, or tries to take it. A runner that stops — shut
//! down, killed, or cut off from PostgreSQL — loses the lock with its connection, and the next
//! broker to try takes over within one `RETENTION_INTERVAL`. The task ends when the broker
//! shuts down (the engine's closing signal), giving the lock back on its way out.

mod run;
mod state;

pub use state::{RetentionCounters, RetentionSnapshot, RetentionState};

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Result;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::failure_text;
use crate::store::retention::RunnerLock;
use run::RunState;

/// Rate limit of the loop's error logs (a database outage fails every round alike).
static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// Starts the loop; it runs until the engine begins shutting down.
pub fn start(engine: &Arc<RetentionState>) -> JoinHandle<()> {
    tokio::spawn(run_loop(engine.clone()))
}

async fn run_loop(engine: Arc<RetentionState>) {
    let mut closing = engine.closing.subscribe();
    let interval = Duration::from_millis(engine.cfg.retention_interval_ms);
    let mut election = Election::default();
    let mut state = RunState::default();
    while !*closing.borrow() {
        if election.am_runner(&engine).await {
            if election.fresh {
                // A new runner starts with the safety walk and a clean back-off slate.
                state = RunState::default();
                election.fresh = false;
            }
            let started = Instant::now();
            match run::once(&engine, &mut state, &closing).await {
                Ok(()) => {
                    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    engine.counters.last_run_ms.store(ms, Relaxed);
                    engine.counters.runs.fetch_add(1, Relaxed);
                }
                Err(e) => failed(&engine, "retention run failed", &failure_text(&e)),
            }
        }
        if pause(&mut closing, interval).await {
            break;
        }
    }
    election.step_down(&engine).await;
}

/// Waits `d`, or less when the broker starts shutting down; true when it does.
async fn pause(closing: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::time::timeout(d, closing.wait_for(|c| *c))
        .await
        .is_ok()
}

/// Counts and logs (rate limited) a failure of the loop; the loop goes on.
fn failed(engine: &RetentionState, what: &str, error: &str) {
    engine.counters.errors.fetch_add(1, Relaxed);
    if let Some(suppressed) = FAILURES.admit(error) {
        tracing::warn!(error = %error, suppressed, "{what}");
    }
}

/// This broker's side of the runner election.
#[derive(Default)]
struct Election {
    /// The dedicated connection; it holds the lock when `runner`.
    lock: Option<RunnerLock>,
    runner: bool,
    /// Set when the lock was just taken, until the first run starts.
    fresh: bool,
}

impl Election {
    /// Whether this broker runs the loop this round: it still holds the lock, or it takes it
    /// now. A connection that fails is dropped (with whatever it held) and reopened next round.
    async fn am_runner(&mut self, engine: &RetentionState) -> bool {
        match self.settle(engine).await {
            Ok(runner) => runner,
            Err(e) => {
                if self.runner {
                    tracing::warn!("retention runner lock lost; another broker may take over");
                }
                self.lock = None;
                self.set_runner(engine, false);
                failed(engine, "retention runner lock failed", &failure_text(&e));
                false
            }
        }
    }

    async fn settle(&mut self, engine: &RetentionState) -> Result<bool> {
        let lock = match self.lock.take() {
            Some(lock) => lock,
            None => RunnerLock::connect(engine.store.pg_config()).await?,
        };
        let held = if self.runner {
            lock.check().await.map(|()| true)
        } else {
            lock.try_take().await
        };
        // Kept only when it answered: a failed connection is dropped with its lock.
        let held = held?;
        self.lock = Some(lock);
        if held && !self.runner {
            engine.counters.takeovers.fetch_add(1, Relaxed);
            tracing::info!("this broker now runs the retention loop");
            self.fresh = true;
        }
        self.set_runner(engine, held);
        Ok(held)
    }

    fn set_runner(&mut self, engine: &RetentionState, runner: bool) {
        self.runner = runner;
        engine.counters.runner.store(runner, Relaxed);
    }

    /// Gives the lock back when the broker stops, so another one takes over at its next try.
    async fn step_down(mut self, engine: &RetentionState) {
        if let Some(lock) = self.lock.take() {
            lock.release().await;
        }
        self.set_runner(engine, false);
    }
}
