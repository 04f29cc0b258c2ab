//! Who else uses this data directory: `postmaster.pid` (reuse a live server, wait out one
//! shutting down, remove a stale file), the socket lock `.s.PGSQL.<port>.lock`, and our own
//! start lock that serialises concurrent starts.
//!
//! Stale-file policy: a lock file whose PID no longer exists is left for PostgreSQL, which
//! replaces it after checking that no orphaned backend still holds the old shared memory (the
//! key is in the file, so deleting it would throw that check away). One naming a zombie or an
//! unrelated process (PID reuse) makes PostgreSQL refuse to start, so we remove it.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tracing::{debug, info, warn};

use super::client::client_config;
use super::probe::{probe_until, wait_gone, Probe, PROBE_EVERY};
use super::procfs::{is_postmaster_of, live_postgres_cmdline, pid_alive, pid_exists};
use super::{io_ctx, EmbeddedPg, Result};

/// The fields of `postmaster.pid` (and of the socket lock, same format) we use: lines 1, 4, 5
/// and 8.
#[derive(Debug)]
struct PidFile {
    pid: i32,
    port: Option<u16>,
    socket_dir: Option<PathBuf>,
    status: String,
}

fn read_pidfile(path: &Path) -> io::Result<Option<PidFile>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let lines: Vec<&str> = text.lines().collect();
    let pid = lines
        .first()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    Ok(Some(PidFile {
        pid,
        port: lines.get(3).and_then(|l| l.trim().parse().ok()),
        socket_dir: lines
            .get(4)
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map(PathBuf::from),
        status: lines
            .get(7)
            .map(|l| l.trim().to_string())
            .unwrap_or_default(),
    }))
}

/// Removes a stale lock file; someone else removing it first is fine.
fn remove_stale(path: &Path, pid: i32, what: &str) -> Result<()> {
    warn!(pid, path = %path.display(), "removing stale {what}");
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_ctx(format!("removing {}", path.display()))(e)),
    }
}

/// Removes `<socket dir>/.s.PGSQL.<port>.lock` when it names a zombie or a non-PostgreSQL
/// process (the dead postmaster of a crash is often an unreaped zombie). A live server's file
/// is left alone: PostgreSQL then reports the conflict.
pub(super) fn clear_stale_socket_lock(socket_dir: &Path, port: u16) -> Result<()> {
    let path = socket_dir.join(format!(".s.PGSQL.{port}.lock"));
    let Ok(Some(lock)) = read_pidfile(&path) else {
        return Ok(());
    };
    if lock.pid > 0 && (!pid_exists(lock.pid) || live_postgres_cmdline(lock.pid).is_some()) {
        return Ok(());
    }
    remove_stale(&path, lock.pid, "socket lock file")
}

impl EmbeddedPg {
    /// Acts on `postmaster.pid`: returns true after pointing `self` at a live server of this
    /// directory (reused, not supervised); otherwise waits out a server in shutdown, clears a
    /// stale file, and returns false so the caller launches its own.
    pub(super) async fn reuse_live_server(&mut self, deadline: Instant) -> Result<bool> {
        let path = self.data_dir.join("postmaster.pid");
        let Some(pf) =
            read_pidfile(&path).map_err(io_ctx(format!("reading {}", path.display())))?
        else {
            return Ok(false);
        };
        if is_postmaster_of(pf.pid, &self.data_dir) {
            if pf.status != "stopping" {
                let sock = pf
                    .socket_dir
                    .clone()
                    .unwrap_or_else(|| self.socket_dir.clone());
                let port = pf.port.unwrap_or(self.port);
                let cfg = client_config(&sock, port, "postgres");
                match probe_until(&cfg, deadline, || !pid_alive(pf.pid)).await {
                    Probe::Ready => {
                        info!(
                            pid = pf.pid,
                            data_dir = %self.data_dir.display(),
                            socket_dir = %sock.display(),
                            "reusing a running embedded PostgreSQL (not supervised by us)"
                        );
                        self.socket_dir = sock;
                        self.port = port;
                        self.pid = pf.pid;
                        self.supervised = false;
                        return Ok(true);
                    }
                    Probe::Stopped => {}
                    Probe::TimedOut(last_error) => {
                        let last_error = format!(
                            "a running postgres (pid {}) owns this directory: {last_error}",
                            pf.pid
                        );
                        return Err(self.start_timeout_error(sock, last_error, 0));
                    }
                }
            }
            // A server in shutdown (e.g. one we just dropped): let it finish, then start anew.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if !wait_gone(&[pf.pid], remaining).await {
                let last_error = format!("postgres pid {} is still shutting down", pf.pid);
                return Err(self.start_timeout_error(self.socket_dir.clone(), last_error, 0));
            }
        }
        if pf.pid > 0 && !pid_exists(pf.pid) {
            info!(
                pid = pf.pid,
                "stale postmaster.pid (server gone); PostgreSQL will replace it"
            );
        } else if path.exists() {
            // Orphaned backends are still detected without the file: PostgreSQL 12+ also
            // probes the shared memory key derived from the data directory's inode.
            remove_stale(&path, pf.pid, "postmaster.pid")?;
        }
        Ok(false)
    }
}

/// An exclusive `flock` on the data directory itself, released when dropped or when the
/// process dies. No lock file: `initdb` wants `DIR` empty and a sibling would litter the
/// parent; PostgreSQL does not flock its data directory, so there is no interference.
pub(super) struct StartLock {
    _file: Option<File>,
}

impl StartLock {
    pub(super) async fn acquire(data_dir: &Path, deadline: Instant) -> Result<Self> {
        let file = match File::open(data_dir) {
            Ok(f) => f,
            Err(e) => {
                // Not ours to open (postgres reports ownership problems itself): go unlocked.
                debug!(path = %data_dir.display(), error = %e, "no start lock");
                return Ok(Self { _file: None });
            }
        };
        let fd = std::os::unix::io::AsRawFd::as_raw_fd(&file);
        let mut announced = false;
        loop {
            // SAFETY: `fd` is an open descriptor owned by `file`.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self { _file: Some(file) });
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_ctx(format!("locking {}", data_dir.display()))(err));
            }
            if Instant::now() >= deadline {
                return Err(io_ctx(format!(
                    "another process is starting PostgreSQL in {}",
                    data_dir.display()
                ))(io::Error::from(io::ErrorKind::TimedOut)));
            }
            if !announced {
                info!(path = %data_dir.display(), "waiting for another start on this data directory");
                announced = true;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }
}
