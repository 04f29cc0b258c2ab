//! One data node of the formation: its keeper (`pg_autoctl create postgres … --run`, which
//! initialises the node — as a standby cloned from the primary when the formation has one —
//! and then keeps it where the monitor assigns it), its port, data directory and log, and the
//! ways it stops: gracefully (SIGTERM to the keeper, which stops PostgreSQL), or at once
//! (SIGKILL to its whole process group and to the postmaster: the machine is gone).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::{path_str, Formation};

/// How long a keeper may take to stop its PostgreSQL before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);

pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) pgdata: PathBuf,
    keeper: Option<Child>,
}

impl Formation {
    /// Creates and runs a fresh node on `port`: the primary when the formation has none, a
    /// standby otherwise (the monitor decides).
    pub(crate) fn create_node(&mut self, port: u16) -> Result<Node> {
        let name = format!("node_{}", self.incarnations);
        self.incarnations += 1;
        let pgdata = self.dir.join(&name);
        let log = self.dir.join(format!("{name}.log"));
        let monitor = format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor_port
        );
        let port_s = port.to_string();
        let args = [
            "create",
            "postgres",
            "--pgdata",
            path_str(&pgdata)?,
            "--pgport",
            &port_s,
            "--hostname",
            "127.0.0.1",
            "--listen",
            "127.0.0.1",
            "--name",
            &name,
            "--dbname",
            "postgres",
            "--auth",
            "trust",
            "--no-ssl",
            "--monitor",
            &monitor,
            "--run",
        ];
        let keeper = self.autoctl.spawn(&args, &log)?;
        Ok(Node {
            name,
            port,
            pgdata,
            keeper: Some(keeper),
        })
    }
}

impl Node {
    /// Graceful stop: the keeper stops PostgreSQL (fast shutdown) and exits.
    pub(crate) fn stop(&mut self) {
        if let Some(mut k) = self.keeper.take() {
            stop_group(&mut k, &self.pgdata);
        }
    }

    /// The keeper and its services stop running (SIGSTOP) while PostgreSQL keeps serving: an
    /// overloaded keeper that neither reports to the monitor nor acts on what it assigns.
    /// The postmaster and its children share the keeper's process group, so they are
    /// continued at once.
    pub(crate) fn freeze_keeper(&self) -> Result<()> {
        let keeper = self.keeper.as_ref().context("the node has no keeper")?;
        signal_group(keeper, libc::SIGSTOP);
        let postmaster = postmaster_of(&self.pgdata).context("no postmaster.pid")?;
        for pid in std::iter::once(postmaster).chain(children_of(postmaster)) {
            // SAFETY: kill(2) on the postmaster this node's keeper started, or its children.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        Ok(())
    }

    pub(crate) fn thaw_keeper(&self) {
        if let Some(keeper) = &self.keeper {
            signal_group(keeper, libc::SIGCONT);
        }
    }

    /// The node is gone at once: keeper, its services and the postmaster SIGKILLed (the
    /// postmaster's children exit when they notice it died).
    pub(crate) fn kill(&mut self) {
        if let Some(mut k) = self.keeper.take() {
            kill_group(&mut k, &self.pgdata);
        }
    }
}

/// SIGTERM to the keeper's process group, SIGKILL after [`STOP_GRACE`]; reaps the keeper.
pub(crate) fn stop_group(keeper: &mut Child, pgdata: &Path) {
    signal_group(keeper, libc::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if matches!(keeper.try_wait(), Ok(Some(_))) && postmaster_gone(pgdata) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    kill_group(keeper, pgdata);
}

fn kill_group(keeper: &mut Child, pgdata: &Path) {
    signal_group(keeper, libc::SIGKILL);
    if let Some(pid) = postmaster_of(pgdata) {
        // SAFETY: kill(2); the pid is the postmaster this node's keeper started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = keeper.wait();
}

fn signal_group(keeper: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on the process group our keeper leads (it was spawned as its leader).
    unsafe { libc::kill(-(keeper.id() as libc::pid_t), sig) };
}

/// The processes whose parent is `parent` (from /proc: the parent is field 4 of `stat`, after
/// the command name in parentheses).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: i32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent).then_some(pid)
    })
    .collect()
}

fn postmaster_of(pgdata: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(pgdata.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

fn postmaster_gone(pgdata: &Path) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    postmaster_of(pgdata).is_none_or(|pid| unsafe { libc::kill(pid, 0) } != 0)
}

/// The node's pid file names a live postmaster.
pub(crate) fn postmaster_alive(pgdata: &Path) -> Result<i32> {
    let pid = postmaster_of(pgdata).context("no postmaster.pid")?;
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        anyhow::bail!("postmaster {pid} is not running");
    }
    Ok(pid)
}
