//! Fault tools for the tests that need more than one database or broker to go wrong: a
//! PostgreSQL cluster of one test's own, which it may stop and start again (the binary's shared
//! cluster must stay up for every other test), and a `queen serve` process it may `kill -9`
//! (an in-process broker cannot die without its test).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use queen_embedded_pg::{self as embedded_pg, EmbeddedOptions, EmbeddedPg};

/// A cluster of one test's own, in `/tmp/queen-test/own-<name>-<pid>` (removed by a later run
/// once this process is gone). Its address stays the same across [`OwnCluster::stop`] and
/// [`OwnCluster::start`].
pub struct OwnCluster {
    opts: EmbeddedOptions,
    pg: Option<EmbeddedPg>,
    config: tokio_postgres::Config,
}

impl OwnCluster {
    /// Creates and starts the cluster (a fresh directory).
    pub async fn new(name: &str) -> OwnCluster {
        let dir = PathBuf::from(format!("/tmp/queen-test/own-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = EmbeddedOptions::new(dir).shared_buffers_mb(128);
        let pg = embedded_pg::start(opts.clone())
            .await
            .expect("start the test's own PostgreSQL cluster");
        OwnCluster {
            config: pg.config("postgres"),
            opts,
            pg: Some(pg),
        }
    }

    /// Its `postgres` database.
    pub fn config(&self) -> tokio_postgres::Config {
        self.config.clone()
    }

    /// Its data directory (for a test that writes `standby.signal` there).
    pub fn data_dir(&self) -> PathBuf {
        self.opts.data_dir.clone()
    }

    /// Fast shutdown: every connection is closed and new ones are refused until
    /// [`OwnCluster::start`].
    pub async fn stop(&mut self) {
        if let Some(pg) = self.pg.take() {
            pg.stop().await;
        }
    }

    /// A crash and its recovery: `SIGKILL` to every process of the cluster, then a start on the
    /// same directory, which runs crash recovery (and so empties every unlogged table).
    pub async fn crash(&mut self) {
        if let Some(mut pg) = self.pg.take() {
            pg.kill9().await;
        }
        self.start().await;
    }

    /// Starts the stopped cluster again on the same directory and address.
    pub async fn start(&mut self) {
        assert!(self.pg.is_none(), "the cluster is running already");
        let pg = embedded_pg::start(self.opts.clone())
            .await
            .expect("restart the test's own PostgreSQL cluster");
        self.pg = Some(pg);
    }
}

/// A `queen serve` child process on an existing database, killed when dropped.
pub struct QueenProcess {
    child: Child,
    pub url: String,
}

impl QueenProcess {
    /// Starts `bin` (`env!("CARGO_BIN_EXE_queen")` of the test) on `pg` with `env` on top
    /// of a clean environment, and waits for its `/health`.
    pub async fn start(bin: &str, pg: &tokio_postgres::Config, env: &[(&str, String)]) -> Self {
        let port = crate::free_port();
        let host = match pg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            None => "localhost".into(),
        };
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("PG_HOST", host)
            .env(
                "PG_PORT",
                pg.get_ports().first().copied().unwrap_or(5432).to_string(),
            )
            .env("PG_USER", pg.get_user().unwrap_or("postgres"))
            .env("PG_DB", pg.get_dbname().unwrap_or("postgres"))
            .env("DB_POOL_SIZE", "8")
            .env("LOG_LEVEL", "warn")
            // Its own spool directory, not `queen-data/` under the test's working directory.
            .env("FILE_BUFFER_DIR", crate::scratch_spool_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut process = QueenProcess {
            child: cmd.spawn().expect("spawn queen serve"),
            url: format!("http://127.0.0.1:{port}"),
        };
        process.wait_healthy().await;
        process
    }

    async fn wait_healthy(&mut self) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("queen serve exited during startup: {status}");
            }
            let health = http.get(format!("{}/health", self.url)).send().await;
            if health.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "queen serve never became healthy"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `kill -9`: no shutdown of any kind; returns once the process is gone.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for QueenProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Cuts the test database `db` off: new connections refused and every session of it ended,
/// again until none is left. A session still starting when the first round ran (the broker's
/// background tasks connect at any moment) is not yet listed, so one round is not enough.
pub async fn refuse_connections(admin: &tokio_postgres::Client, db: &str) {
    admin
        .batch_execute(&format!("ALTER DATABASE \"{db}\" ALLOW_CONNECTIONS false"))
        .await
        .expect("refuse new connections");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&db],
            )
            .await
            .expect("terminate the database's sessions");
        let ended: i64 = row.get(0);
        if ended == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "sessions of {db} keep appearing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
