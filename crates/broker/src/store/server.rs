//! Which PostgreSQL server the pool's connections reach (docs/engine.md §12.5): every new
//! pooled connection asks once (`sql/statements/server_identity.sql`), and when the answer
//! differs from the previous connection's — a failover, a switchover, a node turned standby —
//! the switch is logged (warn) and remembered for `/health`. Also the pool's retirement of
//! connections that met a read-only server (`error::writes_refused_after`).

use std::sync::Mutex;

use chrono::{DateTime, Utc};
use deadpool_postgres::{ClientWrapper, HookError, Metrics};
use tokio_postgres::SimpleQueryMessage;

use crate::error::writes_refused_after;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::db_message;

const SERVER_IDENTITY: &str = include_str!("../../sql/statements/server_identity.sql");

/// One server as a connection saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// `pg_control_system()`'s system identifier: one per cluster (standbys share it).
    pub system_identifier: String,
    /// `inet_server_addr()`; `None` over a Unix socket.
    pub address: Option<String>,
    /// `current_setting('port')`.
    pub port: Option<u16>,
    /// `pg_is_in_recovery()` when the connection was made: a standby.
    pub in_recovery: bool,
}

impl std::fmt::Display for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let address = self.address.as_deref().unwrap_or("unix socket");
        let role = if self.in_recovery {
            "standby"
        } else {
            "primary"
        };
        let port = self.port.map(|p| p.to_string()).unwrap_or_default();
        write!(
            f,
            "{address} port {port} (system {}, {role})",
            self.system_identifier
        )
    }
}

/// What `/health` shows of the server the broker writes to.
#[derive(Debug, Clone, Default)]
pub struct ServerView {
    /// The server the newest connection reached (`None` before the first one).
    pub current: Option<ServerIdentity>,
    /// When the newest connection first reached `current`.
    pub since: Option<DateTime<Utc>>,
    /// Switches from one server to another since the broker started.
    pub switches: u64,
    /// When the last switch was seen.
    pub last_switch: Option<DateTime<Utc>>,
    /// Whether the server took writes at the last health probe (`transaction_read_only` off);
    /// `None` before the first probe, or when its answer could not be read.
    pub writable: Option<bool>,
}

/// The server watch of one pool.
#[derive(Default)]
pub struct ServerWatch {
    view: Mutex<ServerView>,
}

impl ServerWatch {
    pub fn view(&self) -> ServerView {
        self.view.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Records what the health probe found: `read_only` is the server's `transaction_read_only`.
    pub fn probed(&self, read_only: Option<bool>) {
        if let Ok(mut view) = self.view.lock() {
            view.writable = read_only.map(|r| !r);
        }
    }

    /// Records the server a new connection reached; logs a switch.
    pub fn reached(&self, seen: ServerIdentity) {
        let Ok(mut view) = self.view.lock() else {
            return;
        };
        let now = Utc::now();
        match &view.current {
            Some(current) if *current == seen => return,
            Some(current) => {
                tracing::warn!(
                    from = %current,
                    to = %seen,
                    "the broker's connections now reach another PostgreSQL server"
                );
                view.switches += 1;
                view.last_switch = Some(now);
            }
            None => tracing::info!(server = %seen, "connected to PostgreSQL"),
        }
        view.current = Some(seen);
        view.since = Some(now);
    }

    /// The pool's `post_create` step: asks the new connection which server it reached. The
    /// connection is served whatever the answer: a failed question is logged (identical
    /// causes once per window) and leaves the view as it was.
    pub async fn identify(&self, client: &ClientWrapper) -> Result<(), HookError> {
        match ask(client).await {
            Ok(seen) => self.reached(seen),
            Err(cause) => {
                if let Some(suppressed) = IDENTIFY_FAILURES.admit(&cause) {
                    tracing::warn!(error = %cause, suppressed, "cannot tell which PostgreSQL server a new connection reached");
                }
            }
        }
        Ok(())
    }
}

/// `transaction_read_only` from the answer of `SHOW transaction_read_only`.
pub fn read_only_answer(answer: &[SimpleQueryMessage]) -> Option<bool> {
    answer.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(|v| v == "on"),
        _ => None,
    })
}

/// Failed identity questions, logged at most once per window per cause.
static IDENTIFY_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// Runs the identity statement on a new connection.
async fn ask(client: &ClientWrapper) -> Result<ServerIdentity, String> {
    crate::telemetry::statement_sent();
    let answer = client
        .simple_query(SERVER_IDENTITY)
        .await
        .map_err(|e| db_message(&e))?;
    let row = answer
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .ok_or("the server identity statement answered no row")?;
    let text = |column: &str| row.try_get(column).map_err(|e| e.to_string());
    Ok(ServerIdentity {
        system_identifier: text("system_identifier")?.unwrap_or_default().to_string(),
        address: text("address")?.map(str::to_string),
        port: text("port")?.and_then(|p| p.parse().ok()),
        in_recovery: text("in_recovery")? == Some("t"),
    })
}

/// The pool's `pre_recycle` step: a connection made before a server last refused a write as
/// read-only is retired, so the next one is made anew (and may reach another server).
pub fn may_reuse(metrics: &Metrics) -> Result<(), HookError> {
    if writes_refused_after(metrics.created) {
        return Err(HookError::message(
            "retired: a server refused writes as read-only since it was made",
        ));
    }
    Ok(())
}
