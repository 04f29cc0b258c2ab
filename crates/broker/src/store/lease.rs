//! The typed call of `queen.log_renew_lease_v1` (sql/functions/lease.sql): lease renewal.

use deadpool_postgres::GenericClient;
use serde::Deserialize;

use crate::error::Result;
use crate::store::json_verdict;

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
    json_verdict(
        db,
        "SELECT queen.log_renew_lease_v1($1, $2, $3)",
        &[&lease_id, &seconds, &tenant],
    )
    .await
}
