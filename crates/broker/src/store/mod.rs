//! The one driver boundary: the connection pool, schema migrations and typed calls to the
//! SQL functions, one module per concept (the same names as in `engine/` and `http/`). Nothing
//! above this module writes SQL text.

pub mod ack;
pub mod buffers;
pub mod db_error;
pub mod dlq;
pub mod ephemeral;
pub mod groups;
pub mod hotlist;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod messages;
pub mod migrations;
pub mod pop;
pub mod push;
pub mod queues;
pub mod reads;
pub mod resources;
pub mod retention;
pub mod server;
pub mod sql_fn;
pub mod streams;
pub mod timers;
pub mod traces;
pub mod transaction;
pub mod wake;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod,
};
use tokio_postgres::{NoTls, Statement};

use crate::error::Result;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::telemetry::statement_sent;
use buffers::{Buffers, Load};
use server::ServerWatch;

/// How long the health probe waits for its answer.
const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// Failed health probes, logged at most once per window per cause.
static PING_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// How many times an autocommit write runs when PostgreSQL answers `serialization_failure`.
const CONFLICT_TRIES: u32 = 10;

/// The prepared statement for `sql`, from the connection's cache. Every statement the store
/// runs on a pooled connection is prepared here right before its one execution, so this is
/// where they are counted (`queen_pg_statements_total`, docs/wire.md §15); the conflict
/// retries of [`retry_conflicts`] count their extra runs themselves.
pub(crate) async fn prepare(
    db: &impl GenericClient,
    sql: &str,
) -> std::result::Result<Statement, tokio_postgres::Error> {
    statement_sent();
    db.prepare_cached(sql).await
}

/// Runs one autocommit statement, again when it fails with `serialization_failure`: the push
/// SQL raises that when a queue delete committed under it (sql/functions/push.sql,
/// provision.sql), in which case nothing was written and the next run finds the name free (or,
/// pushed by partition id, answers that the id is gone). Only for single statements
/// outside an explicit transaction, whose failure leaves nothing behind.
pub async fn retry_conflicts<T, F, Fut>(
    mut call: F,
) -> std::result::Result<T, tokio_postgres::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
{
    let mut tries = 1;
    loop {
        match call().await {
            Err(e)
                if tries < CONFLICT_TRIES
                    && e.code()
                        == Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE) =>
            {
                tries += 1;
                statement_sent();
            }
            done => return done,
        }
    }
}

/// Every SQL function the store calls, as its `sql_fns!` blocks declare them (store/sql_fn.rs):
/// what the schema test checks against the applied schema. One entry per declaring file.
pub fn sql_signatures() -> Vec<sql_fn::Signature> {
    let files: &[fn() -> Vec<sql_fn::Signature>] = &[
        ack::sql_signatures,
        dlq::sql_signatures,
        ephemeral::sql_signatures,
        groups::sql_signatures,
        hotlist::sql_signatures,
        kv::sql_signatures,
        lease::sql_signatures,
        maintenance::sql_signatures,
        messages::sql_signatures,
        pop::sql_signatures,
        push::sql_signatures,
        push::dedup::sql_signatures,
        queues::sql_signatures,
        reads::sql_signatures,
        resources::sql_signatures,
        retention::sql_signatures,
        streams::sql_signatures,
        timers::sql_signatures,
        traces::sql_signatures,
        transaction::sql_signatures,
    ];
    files.iter().flat_map(|declared| declared()).collect()
}

/// The broker's handle on PostgreSQL: a lazily filled pool plus the connection settings
/// (kept for dedicated connections such as the LISTEN channel).
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    pg: tokio_postgres::Config,
    buffers: Arc<Buffers>,
    servers: Arc<ServerWatch>,
}

impl Store {
    /// Builds the pool; no connection is made until first use. `buffers_bytes` bounds what the
    /// connections' buffers may keep (docs/performance.md §7.3).
    pub fn new(
        mut pg: tokio_postgres::Config,
        pool_size: usize,
        stmt_timeout_ms: u64,
        buffers_bytes: usize,
    ) -> Self {
        // JIT compilation costs ~20 ms on large hash scans and never pays off for short OLTP calls.
        pg.options(format!("-c statement_timeout={stmt_timeout_ms} -c jit=off"));
        pg.application_name("queen-rs");
        pg.connect_timeout(Duration::from_secs(10));
        let mgr = Manager::from_config(
            pg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // LIFO: the most recently returned connection serves next, so a broker that needs few
        // at a time keeps using those few. Each connection keeps the buffer capacity of the
        // largest statement it carried (bundles reach MiBs); FIFO rotated every bundle through
        // every connection and grew them all (docs/performance.md §7).
        let buffers = Arc::new(Buffers::new(buffers_bytes));
        let serves = buffers.clone();
        let servers = Arc::new(ServerWatch::default());
        let watch = servers.clone();
        let pool = Pool::builder(mgr)
            .max_size(pool_size.max(1))
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .post_create(Hook::async_fn(move |client, _| {
                let watch = watch.clone();
                Box::pin(async move { watch.identify(client).await })
            }))
            .pre_recycle(Hook::sync_fn(move |client, metrics| {
                server::may_reuse(metrics)?;
                if serves.may_serve(client) {
                    Ok(())
                } else {
                    Err(HookError::message(
                        "retired: connection buffers over budget",
                    ))
                }
            }))
            .build()
            .expect("pool builder with a runtime never fails");
        Store {
            pool,
            pg,
            buffers,
            servers,
        }
    }

    /// Charges `conn` with what a statement carrying payloads moved (see [`buffers`]).
    pub fn charge(&self, conn: &Object, load: Load) {
        self.buffers.charge(&self.pool, &conn.statement_cache, load);
    }

    /// Which server the pool's connections reach, and when that last changed.
    pub fn servers(&self) -> &ServerWatch {
        &self.servers
    }

    pub fn buffers(&self) -> &Buffers {
        &self.buffers
    }

    /// A pooled connection; dropped back into the pool when the guard goes.
    pub async fn conn(&self) -> Result<Object> {
        Ok(self.pool.get().await?)
    }

    /// A pooled connection if one is free before `deadline`, else `None`: a request bounded
    /// by a deadline (a pop) must not wait out the pool's own 30 s wait timeout.
    pub async fn conn_before(&self, deadline: tokio::time::Instant) -> Result<Option<Object>> {
        match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(conn) => Ok(Some(conn?)),
            Err(_elapsed) => Ok(None),
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Connection settings, for dedicated (non-pooled) connections.
    pub fn pg_config(&self) -> &tokio_postgres::Config {
        &self.pg
    }

    /// `SHOW transaction_read_only` with a short deadline: the health probe, which also tells
    /// the server watch whether the server takes writes. A failure is logged with its cause
    /// (identical ones once per window): it is what a 503 of `/health` means.
    pub async fn ping(&self) -> bool {
        let probe = async {
            let c = self.conn().await?;
            statement_sent();
            let answer = c.simple_query("SHOW transaction_read_only").await?;
            Ok::<_, crate::error::Error>(server::read_only_answer(&answer))
        };
        let cause = match tokio::time::timeout(PING_TIMEOUT, probe).await {
            Ok(Ok(read_only)) => {
                self.servers.probed(read_only);
                return true;
            }
            Ok(Err(e)) => e.chain(),
            Err(_) => format!("no answer within {PING_TIMEOUT:?}"),
        };
        if let Some(suppressed) = PING_FAILURES.admit(&cause) {
            tracing::warn!(error = %cause, suppressed, "health probe failed");
        }
        false
    }
}
