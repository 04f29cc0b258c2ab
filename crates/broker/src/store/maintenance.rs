//! The typed calls of `sql/functions/maintenance.sql`: reading and setting the cluster-wide
//! maintenance flags of `queen.system_state`.

use deadpool_postgres::GenericClient;

use crate::error::Result;
use crate::store::prepare;

/// The two flags as PostgreSQL holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlagRow {
    pub push: bool,
    pub pop: bool,
}

/// Which flag to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKey {
    /// `maintenance_mode`: pushes go to the disk spool.
    Push,
    /// `pop_maintenance_mode`: pops answer 204 at once.
    Pop,
}

impl FlagKey {
    fn key(self) -> &'static str {
        match self {
            FlagKey::Push => "maintenance_mode",
            FlagKey::Pop => "pop_maintenance_mode",
        }
    }
}

fn row(r: &tokio_postgres::Row) -> Result<FlagRow> {
    Ok(FlagRow {
        push: r.try_get("push")?,
        pop: r.try_get("pop")?,
    })
}

/// `queen.maintenance_flags_v1`: both flags.
pub async fn flags(db: &impl GenericClient) -> Result<FlagRow> {
    let stmt = prepare(db, "SELECT push, pop FROM queen.maintenance_flags_v1()").await?;
    row(&db.query_one(&stmt, &[]).await?)
}

/// `queen.maintenance_set_v1`: sets one flag; answers both as they now stand.
pub async fn set(db: &impl GenericClient, key: FlagKey, on: bool) -> Result<FlagRow> {
    let stmt = prepare(db, "SELECT push, pop FROM queen.maintenance_set_v1($1, $2)").await?;
    row(&db.query_one(&stmt, &[&key.key(), &on]).await?)
}
