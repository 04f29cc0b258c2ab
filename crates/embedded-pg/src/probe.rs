//! Waiting on a server from outside: probing until it accepts connections, and waiting for
//! processes to be gone. Shared by the start path (process.rs) and the reuse of a server found
//! through `postmaster.pid` (locks.rs).

use std::time::{Duration, Instant};

use super::procfs::pid_alive;

/// Readiness and lock polling period.
pub(super) const PROBE_EVERY: Duration = Duration::from_millis(50);

/// Outcome of waiting for a server to accept connections.
pub(super) enum Probe {
    Ready,
    /// The server process went away.
    Stopped,
    TimedOut(String),
}

/// Tries to connect every [`PROBE_EVERY`] until it works, `stopped()` says the server is gone,
/// or `deadline` passes. "Starting up" / "in recovery" answers simply count as not yet.
pub(super) async fn probe_until(
    cfg: &tokio_postgres::Config,
    deadline: Instant,
    mut stopped: impl FnMut() -> bool,
) -> Probe {
    loop {
        if stopped() {
            return Probe::Stopped;
        }
        match cfg.connect(tokio_postgres::NoTls).await {
            Ok(_) => return Probe::Ready,
            Err(e) if Instant::now() >= deadline => return Probe::TimedOut(e.to_string()),
            Err(_) => {}
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Waits until none of `pids` is alive (zombies count as gone).
pub(super) async fn wait_gone(pids: &[i32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !pids.iter().any(|&p| pid_alive(p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
