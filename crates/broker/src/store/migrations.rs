//! Applies the versioned `sql/*.sql` files at boot under one transaction-scoped advisory lock,
//! so concurrent brokers serialise instead of colliding, and records each file's checksum in
//! `queen.schema_files`. A boot whose files all match what is recorded runs no DDL at all: a
//! broker joining (or restarting on) a live database must not take the table locks that
//! replaying `CREATE OR REPLACE`/trigger statements needs, which deadlocked running traffic.
//! Any difference (a new broker version) replays every file, as the files are written to be
//! replayed, and records the new checksums.

use crate::error::Result;
use crate::store::db_error::db_message;
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

/// The record of applied files; created before anything else so the check can read it.
const RECORD_DDL: &str = "CREATE SCHEMA IF NOT EXISTS queen;
CREATE TABLE IF NOT EXISTS queen.schema_files (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// What `schema_files` must hold for this binary: (name, xxh3-128 hex of the file's text).
fn checksums() -> Vec<(&'static str, String)> {
    FILES
        .iter()
        .map(|(name, sql)| {
            let sum = xxhash_rust::xxh3::xxh3_128(sql.as_bytes());
            (*name, format!("{sum:032x}"))
        })
        .collect()
}

/// Whether this binary's files were applied already.
async fn up_to_date(tx: &tokio_postgres::Transaction<'_>) -> Result<bool> {
    let have: std::collections::HashMap<String, String> = tx
        .query("SELECT name, checksum FROM queen.schema_files", &[])
        .await?
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    Ok(have.len() == FILES.len()
        && checksums()
            .iter()
            .all(|(name, sum)| have.get(*name) == Some(sum)))
}

/// Applies the files in one transaction holding the schema lock, unless already applied.
pub async fn apply(store: &Store) -> Result<()> {
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await?;
    // Schema DDL may outlast the request statement timeout, and waiting for another
    // booting broker's lock must not time out either.
    tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL client_min_messages = warning")
        .await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])
        .await?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('queen.schema_files') IS NOT NULL", &[])
        .await?
        .get(0);
    if exists && up_to_date(&tx).await? {
        tracing::info!("schema up to date; no migration replayed");
        return Ok(tx.commit().await?);
    }
    tx.batch_execute(RECORD_DDL).await?;
    for (name, sql) in FILES {
        tx.batch_execute(sql).await.map_err(|e| {
            crate::error::Error::internal(format!("applying {name}: {}", db_message(&e)))
        })?;
    }
    tx.execute("DELETE FROM queen.schema_files", &[]).await?;
    for (name, sum) in checksums() {
        tx.execute(
            "INSERT INTO queen.schema_files (name, checksum) VALUES ($1, $2)",
            &[&name, &sum],
        )
        .await?;
    }
    tx.commit().await?;
    tracing::info!(files = FILES.len(), "schema files applied");
    Ok(())
}
