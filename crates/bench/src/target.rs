//! What the bench drives: a broker it starts itself (the built `queen` binary on a fresh
//! embedded PostgreSQL in a temporary data directory) or a running one (`--url` + `--pg-url`).
//! Either way it yields the HTTP URL, a PostgreSQL connection config for the same cluster, the
//! broker pid when it is local, and the postmaster pid for CPU accounting.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio_postgres::config::Host;

use queen_launch::BOOT_TIMEOUT;

pub struct Target {
    pub url: String,
    pub pg: tokio_postgres::Config,
    /// The same database as a URL, for brokers started beside this one (`DATABASE_URL`).
    pub pg_url: String,
    pub broker_pid: Option<u32>,
    pub postmaster_pid: Option<u32>,
    spawned: Option<Spawned>,
}

struct Spawned {
    child: Child,
    data_dir: PathBuf,
    keep: bool,
}

impl Target {
    /// A running broker: `url` and its database `pg_url`. `broker_pid` is found by the HTTP
    /// port's owner only if given explicitly (`--broker-pid`).
    pub async fn external(url: String, pg_url: &str, broker_pid: Option<u32>) -> Result<Self> {
        let pg: tokio_postgres::Config = pg_url.parse().context("parsing --pg-url")?;
        let postmaster_pid = postmaster_pid_of(&pg).await.ok();
        Ok(Self {
            url,
            pg,
            pg_url: pg_url.to_string(),
            broker_pid,
            postmaster_pid,
            spawned: None,
        })
    }

    /// Starts `queen serve` on a free loopback port with a fresh data directory.
    pub async fn spawn(
        queen_bin: &Path,
        keep: bool,
        extra_env: &[(String, String)],
    ) -> Result<Self> {
        Self::spawn_wrapped(&[], queen_bin, keep, extra_env).await
    }

    /// `spawn` under a wrapper command (`valgrind --tool=callgrind ...`, see `instructions.rs`);
    /// the broker's pid is the wrapper's. The embedded PostgreSQL the broker starts runs outside
    /// the wrapper (valgrind does not follow children unless told to).
    pub async fn spawn_wrapped(
        wrapper: &[String],
        queen_bin: &Path,
        keep: bool,
        extra_env: &[(String, String)],
    ) -> Result<Self> {
        let port = queen_launch::free_port()?;
        let data_dir =
            std::env::temp_dir().join(format!("queen-bench-{}-{port}", std::process::id()));
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir).ok();
        }
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let log = data_dir.join("broker.log");
        let mut env = vec![("QUEEN_DATA_DIR".to_string(), data_dir.display().to_string())];
        env.extend_from_slice(extra_env);
        let child = queen_launch::spawn_broker_wrapped(wrapper, queen_bin, port, &env, &log)?;
        let broker_pid = child.id();
        let mut spawned = Spawned {
            child,
            data_dir: data_dir.clone(),
            keep,
        };
        let url = format!("http://127.0.0.1:{port}");
        if let Err(e) = queen_launch::wait_healthy(&url, &mut spawned.child, BOOT_TIMEOUT).await {
            let tail = queen_launch::log_tail(&log, 20);
            stop(&mut spawned);
            return Err(e.context(format!("broker log tail:\n{tail}")));
        }
        let pid_file = data_dir.join("pg").join("postmaster.pid");
        let (postmaster, socket_dir, pg_port) = read_postmaster_pid(&pid_file)?;
        let mut pg = tokio_postgres::Config::new();
        pg.host_path(&socket_dir)
            .port(pg_port)
            .user("postgres")
            .dbname("postgres");
        let pg_url = format!(
            "postgresql://postgres@/postgres?host={}&port={pg_port}",
            socket_dir.display()
        );
        Ok(Self {
            url,
            pg,
            pg_url,
            broker_pid: Some(broker_pid),
            postmaster_pid: Some(postmaster),
            spawned: Some(spawned),
        })
    }

    /// Connects to `dbname` of the target's cluster (`None`: the broker's own database).
    pub async fn connect(&self, dbname: Option<&str>) -> Result<tokio_postgres::Client> {
        let mut cfg = self.pg.clone();
        if let Some(db) = dbname {
            cfg.dbname(db);
        }
        queen_launch::connect(&cfg).await
    }

    /// `(host or socket dir, port, user)` for command-line tools such as pgbench.
    pub fn libpq_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        match self.pg.get_hosts().first() {
            Some(Host::Unix(p)) => env.push(("PGHOST".into(), p.display().to_string())),
            Some(Host::Tcp(h)) => env.push(("PGHOST".into(), h.clone())),
            None => {}
        }
        if let Some(port) = self.pg.get_ports().first() {
            env.push(("PGPORT".into(), port.to_string()));
        }
        if let Some(user) = self.pg.get_user() {
            env.push(("PGUSER".into(), user.to_string()));
        }
        if let Some(pw) = self.pg.get_password() {
            env.push((
                "PGPASSWORD".into(),
                String::from_utf8_lossy(pw).into_owned(),
            ));
        }
        env
    }

    /// Stops a spawned broker (SIGTERM, then SIGKILL) and removes its data directory.
    pub fn shutdown(&mut self) {
        if let Some(mut s) = self.spawned.take() {
            stop(&mut s);
        }
    }

    pub fn data_dir(&self) -> Option<&Path> {
        self.spawned.as_ref().map(|s| s.data_dir.as_path())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn stop(s: &mut Spawned) {
    queen_launch::terminate(&mut s.child, Duration::from_secs(60));
    if s.keep {
        eprintln!("kept broker data directory {}", s.data_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&s.data_dir);
    }
}

/// `postmaster.pid`: line 1 pid, line 4 port, line 5 socket directory.
fn read_postmaster_pid(path: &Path) -> Result<(u32, PathBuf, u16)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let field = |i: usize| lines.get(i).map(|l| l.trim()).filter(|l| !l.is_empty());
    let pid = field(0)
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| anyhow!("no pid in {}", path.display()))?;
    let port = field(3).and_then(|l| l.parse().ok()).unwrap_or(5432);
    let socket = field(4)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("no socket dir in {}", path.display()))?;
    Ok((pid, socket, port))
}

/// The postmaster of the cluster behind `pg`, through its data directory (same machine).
async fn postmaster_pid_of(pg: &tokio_postgres::Config) -> Result<u32> {
    let client = queen_launch::connect(pg).await?;
    let row = client
        .query_one("SELECT current_setting('data_directory')", &[])
        .await?;
    let dir: String = row.get(0);
    Ok(read_postmaster_pid(&Path::new(&dir).join("postmaster.pid"))?.0)
}

pub use queen_launch::locate_queen;
