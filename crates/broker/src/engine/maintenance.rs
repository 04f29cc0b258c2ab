//! The cluster-wide maintenance flags (docs/engine.md §2.9, §4.6): push maintenance sends every
//! push to the disk spool, pop maintenance answers every pop 204 at once. They live in
//! `queen.system_state`; each broker trusts its last read for 500 ms (`accel/maintenance.rs`)
//! and reads again only when a push, a pop or the spool drain asks, so a toggle through one
//! broker reaches every broker of the database within a second and an idle broker reads
//! nothing. The maintenance routes set them here.

use crate::engine::tenant::Tenant;
use tokio::time::Instant;

use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::store::maintenance::{self as sql, FlagRow};

pub use crate::accel::maintenance::Flags;
pub use crate::store::maintenance::FlagKey;

/// The flags with this broker's spool, for the maintenance routes.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    pub flags: Flags,
    pub spool: SpoolState,
}

/// This broker's disk spool, for the maintenance routes and `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpoolState {
    /// `FILE_BUFFER_ENABLED`.
    pub enabled: bool,
    /// Messages waiting to be replayed, and their bytes on disk.
    pub messages: u64,
    pub bytes: u64,
    /// False when the spool is off, or refuses appends after a failed write.
    pub healthy: bool,
}

/// What this broker's spool (`None`: off) holds now (no database read).
pub fn spool_state(spool: Option<&Spool>) -> SpoolState {
    match spool {
        None => SpoolState::default(),
        Some(spool) => {
            let held = spool.held();
            SpoolState {
                enabled: true,
                messages: held.messages,
                bytes: held.bytes,
                healthy: spool.healthy(),
            }
        }
    }
}

fn flags_of(row: FlagRow) -> Flags {
    Flags {
        push: row.push,
        pop: row.pop,
    }
}

/// The flags: the cached read while fresh, else a new one made before `until`. While another
/// request is making that read, the previous one is answered rather than waiting behind it (a
/// starved pool must not stall every push and pop); only a broker that never read the flags
/// waits. `None` when they cannot be learnt by `until` (another refresh, or a free connection,
/// takes longer). An unreachable database is an error for which `is_unavailable()` holds.
pub async fn cached(st: &Shared, until: Instant) -> Result<Option<Flags>> {
    let cache = &st.maintenance;
    if let Some(flags) = cache.fresh() {
        return Ok(Some(flags));
    }
    let refreshing = match (cache.try_refreshing(), cache.last()) {
        (Some(guard), _) => Some(guard),
        (None, Some(last)) => return Ok(Some(last)),
        (None, None) => cache.refreshing(until).await,
    };
    let Some(_refreshing) = refreshing else {
        return Ok(None);
    };
    if let Some(flags) = cache.fresh() {
        return Ok(Some(flags));
    }
    let row = {
        // No connection in time: the last read stands (`None` only before the first read).
        let Some(conn) = st.store.conn_before(until).await? else {
            return Ok(cache.last());
        };
        sql::flags(&conn).await?
    };
    let flags = flags_of(row);
    cache.set(flags);
    Ok(Some(flags))
}

/// The flags as PostgreSQL holds them now (the cache takes them too), with the state of this
/// broker's `spool`.
pub async fn status(st: &Shared, spool: Option<&Spool>) -> Result<Status> {
    let row = sql::flags(&st.store.conn().await?).await?;
    Ok(with_spool(st, spool, flags_of(row)))
}

/// Sets one flag. This broker acts on the new value at once; the others within a second.
/// The flags hold up every tenant's pushes or pops, so only the default tenant (the
/// operator's tokens, README "Tenants") may set them.
pub async fn set(
    st: &Shared,
    spool: Option<&Spool>,
    key: FlagKey,
    on: bool,
    tenant: &Tenant,
) -> Result<Status> {
    if !tenant.is_default() {
        return Err(Error::Forbidden(
            "maintenance is broker-wide: only a token without a tenant claim may set it".into(),
        ));
    }
    let row = sql::set(&st.store.conn().await?, key, on).await?;
    Ok(with_spool(st, spool, flags_of(row)))
}

fn with_spool(st: &Shared, spool: Option<&Spool>, flags: Flags) -> Status {
    st.maintenance.set(flags);
    Status {
        flags,
        spool: spool_state(spool),
    }
}
