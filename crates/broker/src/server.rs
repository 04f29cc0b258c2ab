//! Boots one broker on a PostgreSQL connection: pool, schema, disk spool, background tasks (the
//! spool's drain, the retention loop) and the HTTP listener; and stops them gracefully. Used by
//! `queen serve` and by the test harness.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::engine::Engine;
use crate::http::auth::Auth;
use crate::http::browser::Guard;

/// A broker serving HTTP until `shutdown` is called.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub state: Engine,
    stop: oneshot::Sender<()>,
    join: JoinHandle<()>,
    /// The background tasks (the spool's drain, the retention loop); they end once shutdown
    /// begins (the retention loop then gives its runner lock back to the other brokers).
    background: Vec<JoinHandle<()>>,
}

/// Builds the pool, applies the schema (when configured) and starts serving on
/// `cfg.host:cfg.port` (port 0 picks a free one; see `RunningServer::addr`).
pub async fn start(cfg: Config, pg: tokio_postgres::Config) -> anyhow::Result<RunningServer> {
    let auth = Auth::from_config(&cfg.jwt, cfg.metrics_access).map_err(anyhow::Error::msg)?;
    let guard = Guard::from_config(&cfg).map_err(anyhow::Error::msg)?;
    let state = Engine::boot(cfg, pg).await?;
    let listener = TcpListener::bind((state.cfg.host.as_str(), state.cfg.port)).await?;
    let addr = listener.local_addr()?;
    if let Some(warning) = exposure(&state.cfg, addr) {
        tracing::warn!("{warning}");
    }
    let app = crate::http::router(state.clone(), auth, guard);
    let (stop, stopped) = oneshot::channel::<()>();
    let closing = state.clone();
    let cfg = state.cfg.clone();
    let join = tokio::spawn(async move {
        let stopping = async move {
            let _ = stopped.await;
            // Parked long-polls answer now instead of holding the drain for their timeout.
            closing.begin_shutdown();
        };
        crate::listener::serve(listener, app, &cfg, stopping).await;
    });
    let mut background = state.start_background();
    background.push(crate::engine::retention::start(&state.retention));
    tracing::info!(%addr, "queen-rs listening");
    Ok(RunningServer {
        addr,
        state,
        stop,
        join,
        background,
    })
}

impl RunningServer {
    /// Stops accepting, answers parked long-polls, waits for in-flight requests, and then for
    /// the background tasks to finish what they were doing.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.join.await {
            tracing::warn!(error = %e, "HTTP server task failed");
        }
        // Set already when the listener began draining; again in case it never ran.
        self.state.begin_shutdown();
        for task in self.background {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "background task failed");
            }
        }
    }
}

/// The boot warning of a broker anyone on the network can use: auth off on an address that
/// is not a loopback one (README "Browsers").
fn exposure(cfg: &Config, addr: SocketAddr) -> Option<String> {
    (!cfg.jwt.enabled && !addr.ip().is_loopback()).then(|| {
        format!(
            "authentication is off and the broker listens on {addr}, not only on loopback: \
             anyone who can reach this address can read, write and delete every queue. Set \
             JWT_ENABLED=true, or HOST=127.0.0.1"
        )
    })
}

/// The external database's connection settings: `DATABASE_URL`, else the discrete `PG_*`.
pub fn external_pg_config(cfg: &Config) -> anyhow::Result<tokio_postgres::Config> {
    if let Some(url) = &cfg.database_url {
        return url
            .parse()
            .map_err(|e| anyhow::anyhow!("DATABASE_URL is not a valid PostgreSQL URL: {e}"));
    }
    let mut pg = tokio_postgres::Config::new();
    pg.host(cfg.pg_host.as_deref().unwrap_or("localhost"))
        .port(cfg.pg_port)
        .user(&cfg.pg_user)
        .dbname(&cfg.pg_db);
    if let Some(pw) = &cfg.pg_password {
        pg.password(pw);
    }
    Ok(pg)
}
