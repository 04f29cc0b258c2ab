//! Starting `queen` broker processes for the workspace tools (`queen-bench`, `queen-chaos`):
//! finding the built binary, picking a free loopback port, spawning `queen serve` tied to the
//! tool's lifetime, waiting for `/health`, stopping it, reading its log tail on failure, and
//! opening the tools' own PostgreSQL connections.
//! What the broker is pointed at (embedded or external PostgreSQL) is the caller's choice,
//! expressed through the environment it passes.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// How long a fresh broker may take to `initdb`, start PostgreSQL and apply the schema.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

/// A free TCP port on the loopback interface (free now; the caller binds it soon after).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Spawns `queen serve` on `127.0.0.1:port`, its output appended to `log`. The database comes
/// from `env` (`DATABASE_URL`, or `QUEEN_DATA_DIR` for the embedded cluster); inherited
/// database settings are removed so a developer's shell cannot redirect the tool.
pub fn spawn_broker(
    queen_bin: &Path,
    port: u16,
    env: &[(String, String)],
    log: &Path,
) -> Result<Child> {
    spawn_broker_wrapped(&[], queen_bin, port, env, log)
}

/// `spawn_broker` under a wrapper command (e.g. `valgrind --tool=callgrind ...`): the wrapper's
/// words come first, then the broker binary and `serve`. The child's pid is the wrapper's, which
/// for valgrind is the process running the broker's code.
pub fn spawn_broker_wrapped(
    wrapper: &[String],
    queen_bin: &Path,
    port: u16,
    env: &[(String, String)],
    log: &Path,
) -> Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(queen_bin);
            cmd
        }
        None => Command::new(queen_bin),
    };
    cmd.arg("serve")
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("LOG_LEVEL", "warn")
        .env_remove("DATABASE_URL")
        .env_remove("PG_HOST")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // If the tool dies, the broker (and through it an embedded PostgreSQL) shuts down too.
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().with_context(|| match wrapper.first() {
        Some(w) => format!("starting {} under {w}", queen_bin.display()),
        None => format!("starting {}", queen_bin.display()),
    })
}

/// Waits until `url/health` answers 2xx, failing early if `child` exits.
pub async fn wait_healthy(url: &str, child: &mut Child, timeout: Duration) -> Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + timeout;
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
            bail!("the broker did not become healthy within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGTERM, then SIGKILL after `grace`; reaps the child either way.
pub fn terminate(child: &mut Child, grace: Duration) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `n` lines of a log file (empty if unreadable).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
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
        "no `queen` binary next to {} — build it (cargo build -p queen-broker) or pass --queen-bin",
        exe.display()
    )
}

/// A PostgreSQL connection of the tool's own (setup, checks, fault injection), driven on a
/// spawned task.
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
