//! The typed call of `queen.log_renew_lease_v1` (sql/functions/lease.sql): lease renewal.

use deadpool_postgres::GenericClient;
use serde::Deserialize;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Extends every live lease `p_worker` names to at least now + `p_seconds`, on partitions
    /// of `p_tenant` only.
    RenewLease<'a> = log_renew_lease_v1(p_worker: &'a str, p_seconds: i32, p_tenant: &'a str);
}

/// The result of a lease renewal.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Renewal {
    pub renewed: i64,
    /// The earliest expiry among the renewed leases (ISO-8601, microseconds, Z).
    pub expires_at: Option<String>,
}

/// `queen.log_renew_lease_v1`: extends every live lease `lease_id` names to at least
/// now + seconds, on partitions of `tenant` only.
pub async fn renew_lease(
    db: &impl GenericClient,
    lease_id: &str,
    seconds: i32,
    tenant: &str,
) -> Result<Renewal> {
    RenewLease {
        p_worker: lease_id,
        p_seconds: seconds,
        p_tenant: tenant,
    }
    .json(db)
    .await
}
