//! Several brokers on one PostgreSQL (issue 38 item 3): `queen serve` processes this program
//! starts beside the bench's own broker, each on its own loopback port and pointed at the same
//! database through `DATABASE_URL`, with cross-broker wake on (`QUEEN_PEER_WAKE=on`), so a
//! consumer long-polling one broker is woken by a push through another. Stopped (SIGTERM) when
//! the fleet is dropped; their logs live in a scratch directory removed with it.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anyhow::{Context, Result};
use queen_client::Queen;

use crate::procstat;

/// One broker of the fleet.
struct Member {
    url: String,
    child: Child,
}

pub struct Fleet {
    members: Vec<Member>,
    dir: PathBuf,
}

/// The environment of a fleet broker: the shared database, peer wake on, then `extra`
/// (`--broker-env`), which may override either.
pub fn member_env(pg_url: &str, extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = vec![
        ("DATABASE_URL".to_string(), pg_url.to_string()),
        ("QUEEN_PEER_WAKE".to_string(), "on".to_string()),
    ];
    env.extend_from_slice(extra);
    env
}

impl Fleet {
    /// Starts `n` brokers on `pg_url`, one after the other (each migrates nothing new: the
    /// schema is the bench broker's), and waits for each one's `/health`.
    pub async fn start(
        queen_bin: &Path,
        n: usize,
        pg_url: &str,
        extra_env: &[(String, String)],
    ) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "queen-bench-fleet-{}-{}",
            std::process::id(),
            queen_launch::free_port()?
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut fleet = Self {
            members: Vec::new(),
            dir,
        };
        let env = member_env(pg_url, extra_env);
        for i in 0..n {
            let port = queen_launch::free_port()?;
            let log = fleet.dir.join(format!("broker-{i}.log"));
            let mut child = queen_launch::spawn_broker(queen_bin, port, &env, &log)?;
            let url = format!("http://127.0.0.1:{port}");
            if let Err(e) =
                queen_launch::wait_healthy(&url, &mut child, queen_launch::BOOT_TIMEOUT).await
            {
                queen_launch::terminate(&mut child, Duration::from_secs(5));
                let tail = queen_launch::log_tail(&log, 20);
                return Err(e.context(format!("fleet broker {i} log tail:\n{tail}")));
            }
            fleet.members.push(Member { url, child });
        }
        Ok(fleet)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// A client of every broker, in order.
    pub fn clients(&self) -> Vec<Queen> {
        self.members
            .iter()
            .map(|m| Queen::new(m.url.clone()))
            .collect()
    }

    /// CPU seconds the brokers have used so far, summed.
    pub fn cpu_seconds(&self) -> Option<f64> {
        self.members
            .iter()
            .map(|m| procstat::cpu_seconds(m.child.id()))
            .sum()
    }

    /// Restarts every broker's peak-RSS window (`VmHWM`).
    pub fn reset_peak_rss(&self) {
        for m in &self.members {
            procstat::reset_peak_rss(m.child.id());
        }
    }

    /// The largest peak RSS of any broker, MB.
    pub fn peak_rss_mb(&self) -> Option<f64> {
        self.members
            .iter()
            .filter_map(|m| procstat::peak_rss_bytes(m.child.id()))
            .max()
            .map(|b| b as f64 / (1024.0 * 1024.0))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for m in &mut self.members {
            queen_launch::terminate(&mut m.child, Duration::from_secs(30));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_share_the_database_with_peer_wake_on_unless_overridden() {
        let env = member_env("postgresql://x", &[]);
        assert!(env.contains(&("DATABASE_URL".into(), "postgresql://x".into())));
        assert!(env.contains(&("QUEEN_PEER_WAKE".into(), "on".into())));
        let env = member_env("u", &[("DB_POOL_SIZE".into(), "8".into())]);
        assert_eq!(env.last(), Some(&("DB_POOL_SIZE".into(), "8".into())));
    }
}
