//! Applies the versioned `sql/*.sql` files at boot, idempotently, under one
//! transaction-scoped advisory lock so concurrent brokers serialise instead of colliding.

use crate::error::Result;
use crate::store::Store;

/// The schema and procedure files, in application order.
const FILES: &[(&str, &str)] = &[
    ("001_schema.sql", include_str!("../../sql/001_schema.sql")),
    ("002_push.sql", include_str!("../../sql/002_push.sql")),
    ("002_queues.sql", include_str!("../../sql/002_queues.sql")),
    ("003_pop.sql", include_str!("../../sql/003_pop.sql")),
    ("004_ack.sql", include_str!("../../sql/004_ack.sql")),
    (
        "005_transaction.sql",
        include_str!("../../sql/005_transaction.sql"),
    ),
    ("006_admin.sql", include_str!("../../sql/006_admin.sql")),
    (
        "007_dedup_cache.sql",
        include_str!("../../sql/007_dedup_cache.sql"),
    ),
];

/// Arbitrary fixed key of the schema lock ("queen" in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x71_75_65_65_6e;

/// Applies every file in one transaction holding the schema lock.
pub async fn apply(store: &Store) -> Result<()> {
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await?;
    // Schema DDL may outlast the request statement timeout, and waiting for another
    // booting broker's lock must not time out either.
    tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL client_min_messages = warning")
        .await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])
        .await?;
    for (name, sql) in FILES {
        tx.batch_execute(sql).await.map_err(|e| {
            crate::error::Error::internal(format!("applying {name}: {}", db_message(&e)))
        })?;
    }
    tx.commit().await?;
    drop(conn);
    Ok(())
}

/// The server's own message of a database error, which tokio-postgres hides behind "db error".
pub fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}
