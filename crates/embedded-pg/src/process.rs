//! The server processes: running `initdb`, spawning the supervised postmaster, waiting for
//! readiness, and stopping it (fast shutdown, on drop, or `SIGKILL` for crash tests).
//!
//! Supervision: the postmaster gets `PR_SET_PDEATHSIG = SIGINT`, so it shuts down when the
//! broker dies. That signal fires when the *thread* that forked the child exits, so we fork
//! from one process-lifetime thread (`queen-pg-spawner`), never from a runtime or test thread
//! that may end first. `SIGINT` is PostgreSQL's "fast" shutdown: "smart" (`SIGTERM`) would wait
//! for every client, so one forgotten `psql` would keep an orphaned server alive.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::client::client_config;
use super::locks::clear_stale_socket_lock;
use super::probe::{probe_until, wait_gone, Probe, PROBE_EVERY};
use super::procfs::{descendants, pid_alive, proc_stat};
use super::run_as::RunAs;
use super::{
    io_ctx, server_log, start, EmbeddedPg, EmbeddedPgError, PgBinaries, Result, SUPERUSER,
};

/// How long [`EmbeddedPg::stop`] waits for a fast shutdown before `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// What PostgreSQL logs when backends of a killed postmaster still hold its shared memory;
/// they notice the postmaster's death within moments, so we retry instead of failing.
const SHMEM_IN_USE: &str = "pre-existing shared memory block";
/// Client-side variables a caller's environment may carry that would redirect initdb or the
/// server.
const SCRUBBED_ENV: &[&str] = &[
    "PGDATA",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGOPTIONS",
    "PGPASSWORD",
];

/// A command for a server binary: cwd `/` (the server user may not be able to enter ours,
/// e.g. /root), no stdin, no client-side `PG*` variables, and [`child_setup`].
fn server_command(
    program: &Path,
    run_as: Option<&RunAs>,
    supervised: bool,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.current_dir("/").stdin(Stdio::null());
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    // SAFETY: the hook only performs async-signal-safe syscalls.
    unsafe { cmd.pre_exec(child_setup(run_as.cloned(), supervised)) };
    cmd
}

/// The `pre_exec` hook: drop to the server user and, for a supervised server, take an own
/// process group (a terminal's Ctrl-C then reaches only the broker, which stops the server in
/// order) and the parent-death signal. Only async-signal-safe calls: this runs after fork.
fn child_setup(
    run_as: Option<RunAs>,
    supervised: bool,
) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
    let parent = std::process::id() as libc::pid_t;
    move || {
        // SAFETY: setpgid on the child itself has no memory-safety preconditions.
        if supervised && unsafe { libc::setpgid(0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(r) = &run_as {
            r.switch_to()?;
        }
        if supervised {
            // After the uid switch: the kernel clears the death signal on credential changes.
            // SAFETY: prctl/getppid on the child itself.
            let set = unsafe {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGINT as libc::c_ulong,
                    0,
                    0,
                    0,
                )
            };
            if set != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl: then no signal will ever come.
            if unsafe { libc::getppid() } != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    }
}

struct SpawnRequest {
    cmd: std::process::Command,
    reply: tokio::sync::oneshot::Sender<io::Result<Child>>,
}

/// Forks `cmd` from the process-lifetime `queen-pg-spawner` thread (see the module docs).
async fn spawn_supervised(cmd: std::process::Command) -> io::Result<Child> {
    static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
    let sender = {
        let mut guard = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let (tx, rx) = mpsc::channel::<SpawnRequest>();
            std::thread::Builder::new()
                .name("queen-pg-spawner".into())
                .spawn(move || {
                    // Never ends: the sender lives in a static.
                    for mut req in rx {
                        if let Err(Ok(mut orphan)) = req.reply.send(req.cmd.spawn()) {
                            // The caller's future was dropped mid-start: nobody will ever
                            // supervise this server, so shut it down right away.
                            // SAFETY: kill(2) has no memory-safety preconditions.
                            unsafe { libc::kill(orphan.id() as libc::pid_t, libc::SIGINT) };
                            let _ = orphan.wait();
                        }
                    }
                })?;
            *guard = Some(tx);
        }
        guard.as_ref().cloned().expect("spawner sender set above")
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let gone = || io::Error::other("queen-pg-spawner thread is gone");
    sender
        .send(SpawnRequest { cmd, reply })
        .map_err(|_| gone())?;
    answer.await.map_err(|_| gone())?
}

pub(super) async fn run_initdb(
    bins: &PgBinaries,
    data_dir: &Path,
    run_as: Option<&RunAs>,
) -> Result<()> {
    info!(bindir = %bins.bindir.display(), data_dir = %data_dir.display(), "initdb (first run)");
    let mut cmd = server_command(&bins.initdb, run_as, false);
    cmd.arg("-D")
        .arg(data_dir)
        .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8"])
        // C locale: always available (an unset or odd LANG cannot make initdb fail or clash
        // with UTF8) and byte-order collation, which is what a broker's keys want.
        .arg("--no-locale")
        .arg("--no-instructions");
    let out = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(io_ctx(format!("running {}", bins.initdb.display())))?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        return Err(EmbeddedPgError::Initdb {
            dir: data_dir.to_path_buf(),
            status: out.status.to_string(),
            output: server_log::tail_lines(&output, 40),
        });
    }
    Ok(())
}

impl EmbeddedPg {
    /// Spawns the postmaster and waits for readiness; retries while backends of a killed
    /// predecessor still hold its shared memory.
    pub(super) async fn launch(&mut self, run_as: Option<&RunAs>, deadline: Instant) -> Result<()> {
        let cfg = client_config(&self.socket_dir, self.port, "postgres");
        loop {
            clear_stale_socket_lock(&self.socket_dir, self.port)?;
            let (log, log_start) = server_log::open(&self.log_path, run_as)?;
            let log_err = log
                .try_clone()
                .map_err(io_ctx(format!("duplicating {}", self.log_path.display())))?;
            let cmd = self.postgres_command(run_as, log, log_err);
            let child = spawn_supervised(cmd)
                .await
                .map_err(io_ctx(format!("starting {}", self.bins.postgres.display())))?;
            self.pid = child.id() as i32;
            let child = self.child.insert(child);
            debug!(pid = self.pid, "postgres spawned, waiting for readiness");

            let mut exited: Option<ExitStatus> = None;
            let probe = probe_until(&cfg, deadline, || match child.try_wait() {
                Ok(Some(status)) => {
                    exited = Some(status);
                    true
                }
                Ok(None) => false,
                Err(_) => true,
            })
            .await;
            match probe {
                Probe::Ready => {
                    info!(
                        bindir = %self.bins.bindir.display(),
                        data_dir = %self.data_dir.display(),
                        socket_dir = %self.socket_dir.display(),
                        pid = self.pid,
                        "embedded PostgreSQL ready"
                    );
                    return Ok(());
                }
                Probe::Stopped => {
                    self.child = None;
                    let tail = server_log::tail(&self.log_path, log_start);
                    if tail.contains(SHMEM_IN_USE) && Instant::now() < deadline {
                        warn!("old PostgreSQL processes still hold shared memory; retrying");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        continue;
                    }
                    return Err(EmbeddedPgError::ExitedEarly {
                        status: exited.map_or_else(|| "unknown".into(), |s| s.to_string()),
                        log: self.log_path.clone(),
                        tail,
                    });
                }
                Probe::TimedOut(last_error) => {
                    // Do not leave a half-started server behind.
                    self.shutdown(Duration::from_secs(5)).await;
                    let socket = self.socket_dir.clone();
                    return Err(self.start_timeout_error(socket, last_error, log_start));
                }
            }
        }
    }

    fn postgres_command(
        &self,
        run_as: Option<&RunAs>,
        log: File,
        log_err: File,
    ) -> std::process::Command {
        let mut cmd = server_command(&self.bins.postgres, run_as, true);
        cmd.stdout(Stdio::from(log)).stderr(Stdio::from(log_err));
        let mut set = |k: &str, v: &str| {
            cmd.arg("-c").arg(format!("{k}={v}"));
        };
        // Forced on every start, so they hold even if the first-run settings were never
        // written (a crash right after initdb) and when the socket directory moved.
        set("listen_addresses", "");
        set(
            "unix_socket_directories",
            &self.socket_dir.to_string_lossy(),
        );
        set("port", &self.port.to_string());
        if let Some(mb) = self.opts.shared_buffers_mb {
            set("shared_buffers", &format!("{mb}MB"));
        }
        if self.opts.unsafe_no_fsync {
            set("fsync", "off");
            set("synchronous_commit", "off");
            set("full_page_writes", "off");
        }
        for (k, v) in &self.opts.extra_settings {
            set(k, v);
        }
        cmd.arg("-D").arg(&self.data_dir);
        cmd
    }

    /// Fast shutdown of a supervised server: `SIGINT`, wait up to `timeout`, then `SIGKILL` the
    /// whole tree. No-op when not supervised or already gone.
    async fn shutdown(&mut self, timeout: Duration) {
        let Some(mut child) = self.child.take() else {
            if !self.supervised && pid_alive(self.pid) {
                info!(
                    pid = self.pid,
                    "leaving reused PostgreSQL running (not ours)"
                );
            }
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid, libc::SIGINT) };
        if let Some(status) = wait_child(&mut child, timeout).await {
            info!(pid = self.pid, %status, "embedded PostgreSQL stopped");
            return;
        }
        warn!(
            pid = self.pid,
            ?timeout,
            "PostgreSQL did not stop in time; killing it"
        );
        let pids = kill_tree(self.pid);
        wait_child(&mut child, Duration::from_secs(5)).await;
        wait_gone(&pids, Duration::from_secs(10)).await;
    }

    /// Fast shutdown (`SIGINT` to the postmaster), waits up to 30 s, then `SIGKILL`. A reused
    /// server that we do not supervise is left running.
    pub async fn stop(mut self) {
        self.shutdown(STOP_TIMEOUT).await;
    }

    /// Crash simulation: `SIGKILL`s the postmaster and all its processes at once and waits for
    /// them to be gone. `postmaster.pid` stays behind, as after a real crash, so [`restart`]
    /// (or [`start`]) goes through stale-pid handling and crash recovery. Works on a reused
    /// server too (an explicit request).
    ///
    /// [`restart`]: EmbeddedPg::restart
    pub async fn kill9(&mut self) {
        if !pid_alive(self.pid) {
            self.child = None;
            return;
        }
        warn!(
            pid = self.pid,
            "SIGKILL to embedded PostgreSQL (crash simulation)"
        );
        let pids = kill_tree(self.pid);
        if let Some(mut child) = self.child.take() {
            wait_child(&mut child, Duration::from_secs(10)).await;
        }
        if !wait_gone(&pids, Duration::from_secs(10)).await {
            warn!("some PostgreSQL processes survived SIGKILL for 10 s");
        }
    }

    /// Stops the server if we supervise it (no-op after [`EmbeddedPg::kill9`]) and starts it
    /// again with the same options. A reused server is not ours to stop, so it is reused again.
    pub async fn restart(&mut self) -> Result<()> {
        self.shutdown(STOP_TIMEOUT).await;
        let fresh = start(self.opts.clone()).await?;
        *self = fresh;
        Ok(())
    }
}

impl Drop for EmbeddedPg {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        // Best effort, non-blocking: fast shutdown finishes on its own. A helper thread reaps
        // the child so it does not linger as a zombie.
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid, libc::SIGINT) };
        let _ = std::thread::Builder::new()
            .name("queen-pg-reaper".into())
            .spawn(move || {
                let _ = child.wait();
            });
    }
}

/// `SIGKILL`s a postmaster and every process below it, as a power cut would. PostgreSQL puts
/// each child in its own session, so a group kill would miss them; freezing the postmaster
/// first stops it forking while we collect its tree. Returns the pids signalled.
fn kill_tree(pid: i32) -> Vec<i32> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline
        && !matches!(proc_stat(pid), Some(('T', _)) | Some(('Z', _)) | None)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut all = descendants(pid);
    for &p in &all {
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    unsafe { libc::kill(pid, libc::SIGKILL) };
    all.push(pid);
    all
}

/// Polls a child we own until it exits (reaping it) or `timeout` passes.
async fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "waiting for embedded PostgreSQL failed");
                return None;
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}
