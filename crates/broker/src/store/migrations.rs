//! Brings the database to this binary's schema at boot (docs/engine.md §1), in two steps that
//! both run under one advisory lock, so brokers booting together serialise:
//!
//! 1. The versioned migrations `sql/migrations/NNNN_name.sql` (tables, indexes, triggers), in
//!    order, each once, each in its own transaction, recorded with its checksum in
//!    `queen.schema_migrations`. An applied migration is immutable: a recorded checksum that
//!    differs from the file's, or a recorded version this binary does not have, fails the boot.
//! 2. The function files `sql/functions/*.sql` (`CREATE OR REPLACE`), one per concept, replayed
//!    in one transaction when their checksum differs from `queen.schema_functions`.
//!
//! A boot that finds everything recorded runs no DDL at all: a broker joining (or restarting
//! on) a live database must not take the table locks that replaying DDL needs, which
//! deadlocked running traffic.

use std::collections::HashMap;

use tokio_postgres::Transaction;

use crate::store::db_error::db_message;
use crate::store::Store;

/// One `sql/migrations/NNNN_name.sql` file.
struct Migration {
    version: i32,
    file: &'static str,
    sql: &'static str,
}

/// One `sql/functions/NAME.sql` file.
struct FunctionFile {
    file: &'static str,
    sql: &'static str,
}

macro_rules! migration {
    ($version:literal, $file:literal) => {
        Migration {
            version: $version,
            file: $file,
            sql: include_str!(concat!("../../sql/migrations/", $file)),
        }
    };
}

macro_rules! functions {
    ($file:literal) => {
        FunctionFile {
            file: $file,
            sql: include_str!(concat!("../../sql/functions/", $file)),
        }
    };
}

/// The migrations, in version order (a unit test checks the list against the directory).
const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_baseline.sql"),
    migration!(2, "0002_retention.sql"),
    migration!(3, "0003_options.sql"),
    migration!(4, "0004_auth.sql"),
    migration!(5, "0005_tenants.sql"),
    migration!(6, "0006_push_path.sql"),
    migration!(7, "0007_kv.sql"),
    migration!(8, "0008_timers.sql"),
    migration!(9, "0009_streams.sql"),
    migration!(10, "0010_ephemeral.sql"),
    migration!(11, "0011_timer_sealing.sql"),
];

/// The function files, in replay order: a SQL-language function is checked against the
/// functions it calls when created, so callees come first.
const FUNCTIONS: &[FunctionFile] = &[
    functions!("provision.sql"),
    functions!("push.sql"),
    functions!("spool.sql"),
    functions!("queues.sql"),
    functions!("pop_steps.sql"),
    functions!("pop_claim.sql"),
    functions!("pop.sql"),
    functions!("hotlist.sql"),
    functions!("ack.sql"),
    functions!("ack_at.sql"),
    functions!("lease.sql"),
    functions!("dlq.sql"),
    functions!("kv.sql"),
    functions!("ephemeral.sql"),
    functions!("timers.sql"),
    functions!("reads.sql"),
    functions!("streams.sql"),
    functions!("transaction.sql"),
    functions!("admin.sql"),
    functions!("dedup_cache.sql"),
    functions!("retention.sql"),
    functions!("maintenance.sql"),
];

/// Arbitrary fixed key of the schema lock ("queen" in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x71_75_65_65_6e;

/// The two records, created before anything else so the checks can read them.
const RECORD_DDL: &str = "CREATE SCHEMA IF NOT EXISTS queen;
CREATE TABLE IF NOT EXISTS queen.schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queen.schema_functions (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Why the schema could not be brought up to date; the boot fails with it.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "migration {file} was changed after it was applied (recorded checksum {recorded}, \
         file {current}); applied migrations are immutable: put the change in a new migration"
    )]
    Changed {
        file: String,
        recorded: String,
        current: String,
    },
    #[error(
        "the database has migration {version:04}_{name}.sql applied, which this broker does not \
         have: it was migrated by a newer broker version"
    )]
    Unknown { version: i32, name: String },
    #[error("applying {file}: {message}")]
    Apply { file: String, message: String },
    #[error(transparent)]
    Store(#[from] crate::error::Error),
}

impl From<tokio_postgres::Error> for SchemaError {
    fn from(e: tokio_postgres::Error) -> Self {
        SchemaError::Store(e.into())
    }
}

type Result<T, E = SchemaError> = std::result::Result<T, E>;

/// xxh3-128 hex of a file's text: what the records hold.
fn checksum(sql: &str) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(sql.as_bytes()))
}

impl Migration {
    /// The `name` column: the file name without its version prefix and extension.
    fn name(&self) -> &'static str {
        let stem = self.file.trim_end_matches(".sql");
        stem.split_once('_').map_or(stem, |(_, name)| name)
    }

    /// Fails unless `recorded` is this file's checksum.
    fn check(&self, recorded: &str) -> Result<()> {
        let current = checksum(self.sql);
        if recorded == current {
            return Ok(());
        }
        Err(SchemaError::Changed {
            file: self.file.to_string(),
            recorded: recorded.to_string(),
            current,
        })
    }
}

/// Runs the pending migrations, then replays the changed function files.
pub async fn apply(store: &Store) -> Result<()> {
    let mut conn = store.conn().await?;
    let applied = {
        let tx = locked(&mut conn).await?;
        let applied = recorded_migrations(&tx).await?;
        tx.commit().await?;
        applied
    };
    check_recorded(&applied)?;
    for m in MIGRATIONS {
        if !applied.contains_key(&m.version) {
            migrate(&mut conn, m).await?;
        }
    }
    replay_functions(&mut conn).await
}

/// A transaction holding the schema lock, with the records in place. Schema DDL may outlast
/// the request statement timeout, and waiting for another booting broker's lock must not time
/// out either.
async fn locked(conn: &mut tokio_postgres::Client) -> Result<Transaction<'_>> {
    let tx = conn.transaction().await?;
    tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL client_min_messages = warning")
        .await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])
        .await?;
    let records: bool = tx
        .query_one(
            "SELECT to_regclass('queen.schema_migrations') IS NOT NULL
                AND to_regclass('queen.schema_functions') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !records {
        tx.batch_execute(RECORD_DDL).await?;
    }
    Ok(tx)
}

/// `version → (name, checksum)` of every applied migration.
async fn recorded_migrations(tx: &Transaction<'_>) -> Result<HashMap<i32, (String, String)>> {
    let rows = tx
        .query(
            "SELECT version, name, checksum FROM queen.schema_migrations",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect())
}

/// Fails on an applied migration that was edited since, or that this binary does not have.
fn check_recorded(applied: &HashMap<i32, (String, String)>) -> Result<()> {
    let mut versions: Vec<_> = applied.iter().collect();
    versions.sort_by_key(|(version, _)| **version);
    for (version, (name, sum)) in versions {
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            Some(m) => m.check(sum)?,
            None => {
                return Err(SchemaError::Unknown {
                    version: *version,
                    name: name.clone(),
                })
            }
        }
    }
    Ok(())
}

/// Applies one migration in its own transaction, unless a broker booting beside us did it
/// while we waited for the lock.
async fn migrate(conn: &mut tokio_postgres::Client, m: &Migration) -> Result<()> {
    let tx = locked(conn).await?;
    let done = tx
        .query_opt(
            "SELECT checksum FROM queen.schema_migrations WHERE version = $1",
            &[&m.version],
        )
        .await?;
    if let Some(row) = done {
        m.check(row.get(0))?;
        return Ok(tx.commit().await?);
    }
    tx.batch_execute(m.sql)
        .await
        .map_err(|e| SchemaError::Apply {
            file: format!("migrations/{}", m.file),
            message: db_message(&e),
        })?;
    tx.execute(
        "INSERT INTO queen.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        &[&m.version, &m.name(), &checksum(m.sql)],
    )
    .await?;
    tx.commit().await?;
    tracing::info!(migration = m.file, "schema migration applied");
    Ok(())
}

/// Replays, in one transaction, the function files whose checksum differs from the record,
/// and forgets files this binary no longer has.
async fn replay_functions(conn: &mut tokio_postgres::Client) -> Result<()> {
    let tx = locked(conn).await?;
    let have: HashMap<String, String> = tx
        .query("SELECT name, checksum FROM queen.schema_functions", &[])
        .await?
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let changed: Vec<&FunctionFile> = FUNCTIONS
        .iter()
        .filter(|f| have.get(f.file) != Some(&checksum(f.sql)))
        .collect();
    if changed.is_empty() && have.len() == FUNCTIONS.len() {
        tracing::info!("schema up to date; nothing replayed");
        return Ok(tx.commit().await?);
    }
    for f in &changed {
        tx.batch_execute(f.sql)
            .await
            .map_err(|e| SchemaError::Apply {
                file: format!("functions/{}", f.file),
                message: db_message(&e),
            })?;
        tx.execute(
            "INSERT INTO queen.schema_functions (name, checksum) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()",
            &[&f.file, &checksum(f.sql)],
        )
        .await?;
    }
    let names: Vec<&str> = FUNCTIONS.iter().map(|f| f.file).collect();
    tx.execute(
        "DELETE FROM queen.schema_functions WHERE name <> ALL($1)",
        &[&names],
    )
    .await?;
    tx.commit().await?;
    tracing::info!(files = changed.len(), "schema function files replayed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `.sql` file names of one `sql/` subdirectory, sorted.
    fn files_in(dir: &str) -> Vec<String> {
        let path = format!("{}/sql/{dir}", env!("CARGO_MANIFEST_DIR"));
        let mut names: Vec<String> = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("reading {path}: {e}"))
            .map(|e| {
                e.expect("directory entry")
                    .file_name()
                    .into_string()
                    .unwrap()
            })
            .filter(|n| n.ends_with(".sql"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_migration_file_is_listed_once_with_its_version_in_order() {
        let listed: Vec<&str> = MIGRATIONS.iter().map(|m| m.file).collect();
        assert_eq!(
            listed,
            files_in("migrations"),
            "MIGRATIONS vs sql/migrations"
        );
        for (i, m) in MIGRATIONS.iter().enumerate() {
            let prefix = format!("{:04}_", m.version);
            assert_eq!(
                m.version,
                i as i32 + 1,
                "{}: versions run 1, 2, 3, …",
                m.file
            );
            assert!(m.file.starts_with(&prefix), "{} is not {prefix}…", m.file);
            assert!(
                !m.name().is_empty() && !m.name().contains('.'),
                "{}",
                m.file
            );
        }
    }

    #[test]
    fn every_function_file_is_listed_once() {
        let mut listed: Vec<String> = FUNCTIONS.iter().map(|f| f.file.to_string()).collect();
        listed.sort();
        listed.dedup();
        assert_eq!(
            listed.len(),
            FUNCTIONS.len(),
            "a function file is listed twice"
        );
        assert_eq!(listed, files_in("functions"), "FUNCTIONS vs sql/functions");
    }

    #[test]
    fn an_edited_migration_is_refused_by_name() {
        let err = MIGRATIONS[0].check("0123").unwrap_err().to_string();
        assert!(err.contains("0001_baseline.sql"), "{err}");
        assert!(err.contains("new migration"), "{err}");
        assert!(MIGRATIONS[0].check(&checksum(MIGRATIONS[0].sql)).is_ok());
    }
}
