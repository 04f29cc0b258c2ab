//! Keeps the embedded server running for the life of the broker: when the postmaster dies
//! (`kill -9`, an immediate stop, an OOM kill), the supervisor notices within one probe period,
//! reaps it, logs the death once, and starts the server again with backoff until it is back.
//!
//! Why reaping is the heart of it: an unreaped postmaster is a zombie whose pid still exists,
//! so PostgreSQL takes its `postmaster.pid` and socket lock for a live server's and refuses to
//! start (even by hand). Once reaped, the ordinary start path clears what the dead server left:
//! a lock naming a gone pid is replaced by PostgreSQL itself (after its shared-memory check),
//! one naming a reused pid is removed (locks.rs), and a start that finds the old backends still
//! holding shared memory retries until they are gone (process.rs). WAL recovery then restores
//! every committed transaction; the broker's pool drops its closed connections and reconnects
//! on the next checkout, on the same socket.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::probe::PROBE_EVERY;
use super::procfs::pid_alive;
use super::EmbeddedPg;

/// First pause after a failed restart; doubled on each further failure up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest pause between restart attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A server under supervision. [`Supervisor::stop`] ends the supervision and stops the server.
pub struct Supervisor {
    stop: oneshot::Sender<()>,
    task: JoinHandle<EmbeddedPg>,
}

impl EmbeddedPg {
    /// Hands the server to a supervisor task on the current runtime, which restarts it
    /// whenever it dies. A reused server (not our child) is watched by pid; after its death
    /// the supervisor starts its own.
    pub fn supervise(self) -> Supervisor {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(supervise(self, stopped));
        Supervisor { stop, task }
    }

    /// Resolves when the server is gone: our child is reaped (its exit status returned), or
    /// a server we only reuse no longer runs (`None`).
    async fn died(&mut self) -> Option<ExitStatus> {
        loop {
            match self.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(status))) => {
                    self.child = None;
                    return Some(status);
                }
                Some(Ok(None)) => {}
                Some(Err(e)) => {
                    // Not our child any more (someone else reaped it): watch the pid instead.
                    warn!(pid = self.pid, error = %e, "cannot wait for embedded PostgreSQL");
                    self.child = None;
                }
                None if !pid_alive(self.pid) => return None,
                None => {}
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }
}

impl Supervisor {
    /// Ends the supervision (an attempt in progress is abandoned) and stops the server with a
    /// fast shutdown.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(pg) => pg.stop().await,
            Err(e) => error!(error = %e, "embedded PostgreSQL supervisor failed"),
        }
    }
}

/// Watches `pg` until `stopped` fires; returns it for the final stop.
async fn supervise(mut pg: EmbeddedPg, mut stopped: oneshot::Receiver<()>) -> EmbeddedPg {
    loop {
        let status = tokio::select! {
            _ = &mut stopped => return pg,
            status = pg.died() => status,
        };
        let status = status.map_or_else(|| "not our child".to_string(), |s| s.to_string());
        error!(pid = pg.pid, %status, "embedded PostgreSQL died; restarting it");
        let mut backoff = FIRST_BACKOFF;
        loop {
            let attempt = tokio::select! {
                _ = &mut stopped => return pg,
                attempt = pg.restart() => attempt,
            };
            match attempt {
                Ok(()) => {
                    info!(pid = pg.pid, "embedded PostgreSQL restarted");
                    break;
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?backoff, "restarting embedded PostgreSQL failed")
                }
            }
            tokio::select! {
                _ = &mut stopped => return pg,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}
