//! What the bench drives: a broker it starts itself (the built `queen` binary on a fresh
//! embedded PostgreSQL in a temporary data directory) or a running one (`--url` + `--pg-url`).
//! Either way it yields the HTTP URL, a PostgreSQL connection config for the same cluster, the
//! broker pid when it is local, and the postmaster pid for CPU accounting.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio_postgres::config::Host;

/// How long a fresh broker may take to `initdb`, start PostgreSQL and apply the schema.
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

pub struct Target {
    pub url: String,
    pub pg: tokio_postgres::Config,
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
        let port = free_port()?;
        let data_dir =
            std::env::temp_dir().join(format!("queen-bench-{}-{port}", std::process::id()));
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir).ok();
        }
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let log = std::fs::File::create(data_dir.join("broker.log"))?;
        let mut cmd = Command::new(queen_bin);
        cmd.arg("serve")
            .env("PORT", port.to_string())
            .env("HOST", "127.0.0.1")
            .env("QUEEN_DATA_DIR", &data_dir)
            .env("LOG_LEVEL", "warn")
            .env_remove("DATABASE_URL")
            .env_remove("PG_HOST")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        // If the bench dies, the broker (and through it its PostgreSQL) shuts down too.
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", queen_bin.display()))?;
        let broker_pid = child.id();
        let mut spawned = Spawned {
            child,
            data_dir: data_dir.clone(),
            keep,
        };
        let url = format!("http://127.0.0.1:{port}");
        if let Err(e) = wait_healthy(&url, &mut spawned.child).await {
            let tail = log_tail(&data_dir.join("broker.log"));
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
        Ok(Self {
            url,
            pg,
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
        connect(&cfg).await
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

pub async fn connect(cfg: &tokio_postgres::Config) -> Result<tokio_postgres::Client> {
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .context("connecting to PostgreSQL")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

fn stop(s: &mut Spawned) {
    let pid = s.child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match s.child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = s.child.kill();
                let _ = s.child.wait();
                break;
            }
        }
    }
    if s.keep {
        eprintln!("kept broker data directory {}", s.data_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&s.data_dir);
    }
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

async fn wait_healthy(url: &str, child: &mut Child) -> Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + BOOT_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the broker exited during startup ({status})");
        }
        if let Ok(r) = http.get(format!("{url}/health")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("the broker did not become healthy within {BOOT_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
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
    let client = connect(pg).await?;
    let row = client
        .query_one("SELECT current_setting('data_directory')", &[])
        .await?;
    let dir: String = row.get(0);
    Ok(read_postmaster_pid(&Path::new(&dir).join("postmaster.pid"))?.0)
}

/// The `queen` binary next to this executable (same target directory), unless given.
pub fn locate_queen(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("no parent of {}", exe.display()))?;
    // Test binaries live in target/<profile>/deps; the bins one level up.
    for candidate in [dir.join("queen"), dir.join("..").join("queen")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "no `queen` binary next to {} — build it (cargo build --release -p queen-broker) or pass --queen-bin",
        exe.display()
    )
}
