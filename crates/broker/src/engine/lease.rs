//! Lease renewal (`POST /api/v1/lease/:leaseId/extend`, docs/wire.md §9): every live lease of one
//! lease id is extended, never shortened and never revived. Best effort: the caller reads
//! `renewed`, the route always answers 200. A renewal also keeps the ack registry's entries
//! of that lease alive as long as the lease (docs/engine.md §6.4).

use std::time::Duration;

use crate::accel::admission::Lane;
use crate::engine::ack::AckState;
use queen_proto::tenant::Tenant;
use queen_proto::LeaseId;

use crate::error::Result;
use crate::store::lease::{self as store, Renewal};

/// Seconds a renewal asks for when the client sends none.
pub const DEFAULT_SECONDS: i64 = 60;

/// Renews every live lease of `lease_id` on `tenant`'s partitions to at least now + `seconds`
/// (default 60, at least 1).
pub async fn extend(
    state: &AckState,
    lease_id: &LeaseId,
    seconds: Option<i64>,
    tenant: &Tenant,
) -> Result<Renewal> {
    let seconds = seconds
        .unwrap_or(DEFAULT_SECONDS)
        .clamp(1, i64::from(i32::MAX));
    let seconds = i32::try_from(seconds).unwrap_or(i32::MAX);
    let _permit = state.admission.acquire(Lane::Ack).await;
    let db = state.store.conn().await?;
    let renewal = store::renew_lease(&db, lease_id.as_str(), seconds, tenant.id()).await?;
    if renewal.renewed > 0 {
        let lease = Duration::from_secs(seconds.unsigned_abs().into());
        state.registry.extend(lease_id.as_str(), lease);
    }
    Ok(renewal)
}
