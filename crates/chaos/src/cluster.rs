//! The system under test: one PostgreSQL cluster (a private embedded one this process starts
//! and can crash, or an external `--pg-url`) and up to two `queen` broker processes pointed at
//! it through `DATABASE_URL`. Brokers keep their port across restarts so clients' URLs stay
//! valid; which brokers are up is what workers read before each request.

use std::path::PathBuf;
use std::process::Child;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use queen_embedded_pg::{self as embedded_pg, EmbeddedOptions, EmbeddedPg};
use rand::seq::SliceRandom;

/// Where the brokers' database comes from.
pub enum Database {
    Embedded(Box<tokio::sync::Mutex<Option<EmbeddedPg>>>),
    External,
}

struct Broker {
    port: u16,
    child: Option<Child>,
    log: PathBuf,
    /// Its own `DATABASE_URL` instead of the cluster's (a broker pinned to one node).
    pg_url: Option<String>,
}

pub struct Cluster {
    pub queen_bin: PathBuf,
    pub db: Database,
    pub pg_url: String,
    pub pg: tokio_postgres::Config,
    pub dir: PathBuf,
    keep: bool,
    env: Vec<(String, String)>,
    brokers: Mutex<Vec<Broker>>,
}

impl Cluster {
    /// Starts the database (unless `pg_url` is given) and `initial` brokers of `slots`.
    pub async fn start(
        queen_bin: PathBuf,
        pg_url: Option<String>,
        slots: usize,
        env: Vec<(String, String)>,
        keep: bool,
    ) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("queen-chaos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (db, pg_url) = match pg_url {
            Some(url) => (Database::External, url),
            None => {
                let mut opts = EmbeddedOptions::new(dir.join("pg"));
                opts.shared_buffers_mb = Some(128);
                let pg = embedded_pg::start(opts)
                    .await
                    .context("starting the embedded PostgreSQL")?;
                let url = pg.url("postgres");
                (
                    Database::Embedded(Box::new(tokio::sync::Mutex::new(Some(pg)))),
                    url,
                )
            }
        };
        let pg: tokio_postgres::Config = pg_url.parse().context("parsing the PostgreSQL URL")?;
        let mut brokers = Vec::new();
        for i in 0..slots {
            brokers.push(Broker {
                port: queen_launch::free_port()?,
                child: None,
                log: dir.join(format!("broker-{i}.log")),
                pg_url: None,
            });
        }
        Ok(Self {
            queen_bin,
            db,
            pg_url,
            pg,
            dir,
            keep,
            env,
            brokers: Mutex::new(brokers),
        })
    }

    pub fn url(&self, slot: usize) -> String {
        let port = self.brokers.lock().unwrap()[slot].port;
        format!("http://127.0.0.1:{port}")
    }

    /// URLs of the brokers currently running.
    pub fn live_urls(&self) -> Vec<String> {
        let brokers = self.brokers.lock().unwrap();
        brokers
            .iter()
            .filter(|b| b.child.is_some())
            .map(|b| format!("http://127.0.0.1:{}", b.port))
            .collect()
    }

    /// One running broker's URL at random (the first slot's if none is up: requests then
    /// fail as transport errors, which is what a client would see).
    pub fn pick_url(&self) -> String {
        let urls = self.live_urls();
        urls.choose(&mut rand::thread_rng())
            .cloned()
            .unwrap_or_else(|| self.url(0))
    }

    /// The process id of the broker of `slot`, when it runs.
    pub fn broker_pid(&self, slot: usize) -> Option<u32> {
        self.brokers.lock().unwrap()[slot]
            .child
            .as_ref()
            .map(|c| c.id())
    }

    pub fn is_up(&self, slot: usize) -> bool {
        self.brokers.lock().unwrap()[slot].child.is_some()
    }

    /// Gives the broker of `slot` its own database URL from its next start on.
    pub fn pin(&self, slot: usize, pg_url: String) {
        self.brokers.lock().unwrap()[slot].pg_url = Some(pg_url);
    }

    /// Starts the broker of `slot` and waits for its `/health`.
    pub async fn start_broker(&self, slot: usize) -> Result<()> {
        let (port, log, pg_url) = {
            let b = &self.brokers.lock().unwrap()[slot];
            (b.port, b.log.clone(), b.pg_url.clone())
        };
        let pg_url = pg_url.unwrap_or_else(|| self.pg_url.clone());
        let mut env = vec![("DATABASE_URL".to_string(), pg_url)];
        env.extend(self.env.iter().cloned());
        let mut child = queen_launch::spawn_broker(&self.queen_bin, port, &env, &log)?;
        let url = format!("http://127.0.0.1:{port}");
        if let Err(e) =
            queen_launch::wait_healthy(&url, &mut child, queen_launch::BOOT_TIMEOUT).await
        {
            queen_launch::terminate(&mut child, Duration::from_secs(5));
            let tail = queen_launch::log_tail(&log, 20);
            return Err(e.context(format!("broker {slot} log tail:\n{tail}")));
        }
        self.brokers.lock().unwrap()[slot].child = Some(child);
        Ok(())
    }

    /// `kill -9` of the broker of `slot` (no shutdown of any kind) and reaping it.
    pub fn kill9_broker(&self, slot: usize) {
        let child = self.brokers.lock().unwrap()[slot].child.take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Graceful stop (SIGTERM) of the broker of `slot`.
    pub fn stop_broker(&self, slot: usize) {
        let child = self.brokers.lock().unwrap()[slot].child.take();
        if let Some(mut child) = child {
            queen_launch::terminate(&mut child, Duration::from_secs(30));
        }
    }

    /// Crash of the embedded PostgreSQL (every server process SIGKILLed), a pause, and a
    /// restart through crash recovery. `false` when the database is external.
    pub async fn crash_postgres(&self, down_for: Duration) -> Result<bool> {
        let Database::Embedded(pg) = &self.db else {
            return Ok(false);
        };
        let mut pg = pg.lock().await;
        let Some(pg) = pg.as_mut() else {
            return Ok(false);
        };
        pg.kill9().await;
        tokio::time::sleep(down_for).await;
        pg.restart().await.context("restarting PostgreSQL")?;
        Ok(true)
    }

    /// A fresh connection to the cluster (checker, fault injection).
    pub async fn connect(&self) -> Result<tokio_postgres::Client> {
        queen_launch::connect(&self.pg).await
    }

    pub fn log_paths(&self) -> Vec<PathBuf> {
        self.brokers
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.log.clone())
            .collect()
    }

    /// Stops the brokers, then the embedded PostgreSQL, and removes the scratch directory
    /// unless asked to keep it.
    pub async fn finish(&self) {
        self.stop_all();
        if let Database::Embedded(pg) = &self.db {
            if let Some(pg) = pg.lock().await.take() {
                pg.stop().await;
            }
        }
        if self.keep {
            eprintln!("kept {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn stop_all(&self) {
        let n = self.brokers.lock().unwrap().len();
        for slot in 0..n {
            self.stop_broker(slot);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
