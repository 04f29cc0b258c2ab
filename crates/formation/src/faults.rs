//! The faults an operator meets, on a running formation: a planned switchover, the promotion
//! of a chosen node (how a node that was demoted becomes primary again), `kill -9` of the
//! primary's postmaster (its keeper restarts it, promptly or after a stall), and a node lost
//! for good (every process SIGKILLed: the monitor promotes a standby) then replaced by a fresh
//! node on the same port, so the brokers' multi-host URL stays valid. Each returns once the
//! formation is stable again (one primary, every other node a synchronous secondary) or the
//! wait times out.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{monitor, node, path_str, Formation, SETTLE_TIMEOUT};

/// How long the formation must stay unchanged to count as settled after a crash: the monitor
/// judges a node after `node_considered_unhealthy_timeout` (3 s here, see monitor.rs).
const QUIET: Duration = Duration::from_secs(5);

impl Formation {
    fn monitor_uri(&self) -> String {
        format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor_port
        )
    }

    fn perform_log(&self) -> std::path::PathBuf {
        self.dir.join("perform.log")
    }

    /// Runs `pg_autoctl perform <args>` and returns the primary once the formation is stable.
    /// The outcome is judged by that state, not by the command's exit status: its `--wait`
    /// loop can fail (exit 12) on a change that completed (pg_auto_failover issue #620; seen in
    /// CI, 2026-12-07). The command's error is returned only when `wanted` rejects the primary.
    async fn perform(&self, args: &[&str], wanted: impl Fn(usize) -> bool) -> Result<usize> {
        let pgdata = self.dir.join("monitor");
        let mut all = vec!["perform"];
        all.extend_from_slice(args);
        all.extend(["--pgdata", path_str(&pgdata)?, "--wait", "120"]);
        let ran = self.autoctl.run(&all, &self.perform_log()).await;
        let now = self.wait_stable().await?;
        if !wanted(now) {
            ran?;
        }
        Ok(now)
    }

    /// `pg_autoctl perform switchover`: the primary steps down, a standby takes over. Returns
    /// the new primary's index.
    pub async fn switchover(&self) -> Result<usize> {
        let before = self.wait_stable().await?;
        let after = self.perform(&["switchover"], |p| p != before).await?;
        if after == before {
            bail!("a switchover left node {before} primary");
        }
        Ok(after)
    }

    /// `pg_autoctl perform promotion` of node `i` (nothing to do when it is primary already).
    pub async fn promote(&self, i: usize) -> Result<()> {
        if self.wait_stable().await? == i {
            return Ok(());
        }
        let name = &self.nodes[i].name;
        let now = self
            .perform(&["promotion", "--name", name], |p| p == i)
            .await?;
        if now != i {
            bail!("promoting node {i} left node {now} primary");
        }
        Ok(())
    }

    /// `kill -9` of node `i`'s postmaster (no shutdown of any kind). Its keeper restarts
    /// PostgreSQL, which runs crash recovery; when that takes longer than the monitor's
    /// patience, the monitor fails over. Returns the primary's index once the formation has
    /// settled either way.
    pub async fn kill9_postmaster(&self, i: usize) -> Result<usize> {
        self.sigkill_postmaster(i)?;
        self.wait_settled().await
    }

    /// SIGKILLs node `i`'s postmaster; its pid.
    fn sigkill_postmaster(&self, i: usize) -> Result<i32> {
        let pid = node::postmaster_alive(&self.nodes[i].pgdata)?;
        // SAFETY: kill(2) on the postmaster of a node this formation runs.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        Ok(pid)
    }

    /// [`Formation::kill9_postmaster`] on an overloaded machine: once the keeper has restarted
    /// PostgreSQL (crash recovery under way), the keeper stalls for `stall` and the restarted
    /// node serves as a primary meanwhile, whatever the monitor decides. Returns the primary's
    /// index once the formation has settled.
    pub async fn kill9_postmaster_stalled_keeper(
        &self,
        i: usize,
        stall: Duration,
    ) -> Result<usize> {
        let pid = self.sigkill_postmaster(i)?;
        let node = &self.nodes[i];
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while !node::postmaster_alive(&node.pgdata).is_ok_and(|p| p != pid) {
            if Instant::now() > deadline {
                bail!("node {i}'s keeper did not restart PostgreSQL within {SETTLE_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        node.freeze_keeper()?;
        tokio::time::sleep(stall).await;
        node.thaw_keeper();
        self.wait_settled().await
    }

    /// [`Formation::wait_stable`], and still the same primary after [`QUIET`]: a restarted
    /// primary takes writes again before the monitor has judged it, and may then be failed
    /// over.
    pub async fn wait_settled(&self) -> Result<usize> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let primary = self.wait_stable().await?;
            tokio::time::sleep(QUIET).await;
            let states = self.states().await?;
            if monitor::stable(self.nodes.len())(&states) && self.wait_stable().await? == primary {
                return Ok(primary);
            }
            if Instant::now() > deadline {
                bail!("the formation did not settle within {SETTLE_TIMEOUT:?}: {states:?}");
            }
        }
    }

    /// Node `i` is lost for good (keeper and PostgreSQL SIGKILLed, never restarted): when it
    /// was primary the monitor promotes a standby. Returns once another node is primary.
    pub async fn lose_node(&mut self, i: usize) -> Result<usize> {
        self.nodes[i].kill();
        let port = self.nodes[i].port;
        let s = monitor::wait_for(
            self.monitor_port,
            SETTLE_TIMEOUT,
            "a primary other than the lost node",
            |s| {
                s.iter().any(|x| {
                    x.port != port
                        && matches!(x.reported.as_str(), "primary" | "wait_primary")
                        && x.assigned == x.reported
                })
            },
        )
        .await?;
        let primary = s
            .iter()
            .find(|x| x.port != port && x.assigned == x.reported && x.reported.ends_with("primary"))
            .and_then(|x| self.nodes.iter().position(|n| n.port == x.port))
            .context("the new primary is not one of our nodes")?;
        self.wait_writable(primary).await?;
        Ok(primary)
    }

    /// Replaces lost node `i` with a fresh one on the same port: the old node is dropped from
    /// the monitor, its data directory removed, and a new standby cloned from the primary.
    pub async fn replace_node(&mut self, i: usize) -> Result<()> {
        self.nodes[i].kill();
        let old = self.nodes[i].name.clone();
        let uri = self.monitor_uri();
        let args = ["drop", "node", "--monitor", &uri, "--name", &old, "--force"];
        self.autoctl.run(&args, &self.perform_log()).await?;
        monitor::wait_for(
            self.monitor_port,
            SETTLE_TIMEOUT,
            "the lost node dropped",
            |s| s.iter().all(|x| x.name != old),
        )
        .await?;
        let _ = std::fs::remove_dir_all(&self.nodes[i].pgdata);
        let port = self.nodes[i].port;
        self.nodes[i] = self.create_node(port)?;
        self.wait_settled().await?;
        Ok(())
    }
}
