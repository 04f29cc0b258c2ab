//! The typed calls of `sql/functions/maintenance.sql`: reading and setting the cluster-wide
//! maintenance flags of `queen.system_state`.

use deadpool_postgres::GenericClient;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Both flags.
    Flags = maintenance_flags_v1() select "push, pop";
    /// Sets one flag; answers both.
    SetFlag<'a> = maintenance_set_v1(p_key: &'a str, p_on: bool) select "push, pop";
}

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
    row(&Flags {}.query_one(db).await?)
}

/// `queen.maintenance_set_v1`: sets one flag; answers both as they now stand.
pub async fn set(db: &impl GenericClient, key: FlagKey, on: bool) -> Result<FlagRow> {
    let call = SetFlag {
        p_key: key.key(),
        p_on: on,
    };
    row(&call.query_one(db).await?)
}
