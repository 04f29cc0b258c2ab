//! A pg_auto_failover formation on loopback ports, in a scratch directory: a monitor, a
//! primary and synchronous standbys (`number_sync_standbys` 1), each node run by its own
//! `pg_autoctl` keeper — what an operator runs in production, shrunk onto one machine, for the
//! broker's HA tests and `queen-chaos --failover`. Owns starting and stopping the formation,
//! its addresses (the multi-host URL a broker is given, one node's URL for a pinned broker)
//! and the faults an operator meets: a planned switchover, a promotion of a chosen node,
//! `kill -9` of a primary's postmaster, a node lost for good and replaced by a fresh one on
//! the same port. Needs Debian's `pg-auto-failover-cli` and `postgresql-15-auto-failover`
//! (scripts/setup.sh installs them); as root, `pg_autoctl` runs as the `postgres` OS user.

mod autoctl;
mod faults;
mod monitor;
mod node;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub use autoctl::PACKAGES;
pub use monitor::NodeState;

use autoctl::Autoctl;
use node::Node;

/// How long the formation may take to settle after a start or a fault.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Formation {
    dir: PathBuf,
    autoctl: Autoctl,
    monitor_port: u16,
    monitor: Option<Child>,
    nodes: Vec<Node>,
    /// Node names are unique for the monitor's life: a replacement gets the next number.
    incarnations: u32,
    keep_dir: bool,
}

impl Formation {
    /// Creates the monitor and `nodes` data nodes (the first one primary) under `dir` (which
    /// must not hold an earlier formation), and waits for one primary and `nodes - 1`
    /// synchronous secondaries.
    pub async fn start(dir: &Path, nodes: usize) -> Result<Formation> {
        let _ = std::fs::remove_dir_all(dir);
        let autoctl = Autoctl::new(dir)?;
        let monitor_port = free_port()?;
        let mut f = Formation {
            dir: dir.to_path_buf(),
            autoctl,
            monitor_port,
            monitor: None,
            nodes: Vec::new(),
            incarnations: 0,
            keep_dir: false,
        };
        f.start_monitor().await?;
        for i in 0..nodes {
            let port = free_port()?;
            let node = f.create_node(port)?;
            f.nodes.push(node);
            if i == 0 {
                let name = f.nodes[0].name.clone();
                monitor::wait_for(monitor_port, SETTLE_TIMEOUT, "a single primary", |s| {
                    s.iter().any(|x| x.name == name && x.reported == "single")
                })
                .await?;
            }
        }
        f.wait_stable().await?;
        if nodes > 1 {
            monitor::set_number_sync_standbys(monitor_port, 1).await?;
        }
        Ok(f)
    }

    async fn start_monitor(&mut self) -> Result<()> {
        let pgdata = self.dir.join("monitor");
        let port = self.monitor_port.to_string();
        let log = self.dir.join("monitor.log");
        let args = [
            "create",
            "monitor",
            "--pgdata",
            path_str(&pgdata)?,
            "--pgport",
            &port,
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--run",
        ];
        self.monitor = Some(self.autoctl.spawn(&args, &log)?);
        monitor::wait_up(self.monitor_port, SETTLE_TIMEOUT)
            .await
            .with_context(|| autoctl::tail(&log, 15))?;
        monitor::tune(self.monitor_port).await
    }

    /// Keeps the scratch directory (logs, data directories) when the formation is dropped.
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The data nodes' ports, in node order (a replaced node keeps its port).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The URL a broker is given: every node, the session on whichever accepts writes.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!(
            "postgresql://postgres@{}/postgres?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// One node's URL (a broker pinned to it follows it through standby and primary).
    pub fn node_url(&self, i: usize) -> String {
        format!(
            "postgresql://postgres@127.0.0.1:{}/postgres",
            self.nodes[i].port
        )
    }

    pub fn config(&self) -> Result<tokio_postgres::Config> {
        parse(&self.url())
    }

    pub fn node_config(&self, i: usize) -> Result<tokio_postgres::Config> {
        parse(&self.node_url(i))
    }

    /// The monitor's view of every node.
    pub async fn states(&self) -> Result<Vec<NodeState>> {
        monitor::states(self.monitor_port).await
    }

    /// The monitor's event log, one line per event, oldest first.
    pub async fn events(&self) -> Result<Vec<String>> {
        monitor::events(self.monitor_port).await
    }

    /// Waits for one primary that takes writes and every other node a secondary; returns
    /// the primary's index. (The monitor still calls a primary whose postmaster was killed
    /// `primary` while it runs crash recovery.)
    pub async fn wait_stable(&self) -> Result<usize> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let s = monitor::wait_for(
                self.monitor_port,
                SETTLE_TIMEOUT,
                "one primary and synchronous secondaries",
                monitor::stable(self.nodes.len()),
            )
            .await?;
            let primary = self.primary_of(&s)?;
            match self.takes_writes(primary).await {
                Ok(true) => return Ok(primary),
                Ok(false) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(false) => bail!("node {primary} is primary but in recovery"),
                Err(e) => return Err(e.context(format!("node {primary} takes no connection"))),
            }
        }
    }

    /// Waits until node `i` takes a session that is not in recovery.
    pub(crate) async fn wait_writable(&self, i: usize) -> Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.takes_writes(i).await {
                Ok(true) => return Ok(()),
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(false) => bail!("node {i} stays in recovery"),
                Err(e) => return Err(e.context(format!("node {i} takes no connection"))),
            }
        }
    }

    /// Node `i` accepts a session that is not in recovery.
    async fn takes_writes(&self, i: usize) -> Result<bool> {
        let (client, conn) = self.node_config(i)?.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let row = client.query_one("SELECT pg_is_in_recovery()", &[]).await?;
        Ok(!row.get::<_, bool>(0))
    }

    fn primary_of(&self, s: &[NodeState]) -> Result<usize> {
        let port = s
            .iter()
            .find(|x| x.reported == "primary")
            .map(|x| x.port)
            .context("no primary")?;
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .context("the primary is not one of our nodes")
    }

    /// Stops every keeper (each stops its PostgreSQL) and the monitor.
    pub fn stop(&mut self) {
        for n in &mut self.nodes {
            n.stop();
        }
        if let Some(mut m) = self.monitor.take() {
            node::stop_group(&mut m, &self.dir.join("monitor"));
        }
    }
}

impl Drop for Formation {
    fn drop(&mut self) {
        self.stop();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn parse(url: &str) -> Result<tokio_postgres::Config> {
    let mut cfg: tokio_postgres::Config = url.parse().with_context(|| format!("parsing {url}"))?;
    cfg.connect_timeout(Duration::from_secs(2));
    Ok(cfg)
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// A free TCP port on the loopback interface (free now; a node binds it soon after).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
