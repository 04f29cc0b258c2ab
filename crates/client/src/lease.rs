//! Lease renewal: `POST /api/v1/lease/:leaseId/extend` (docs/wire.md §9).

use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::queue::encode_segment;
use crate::{expect_json, Queen, Result};

/// The broker's answer to a renewal.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRenewal {
    /// False when no live lease of that id was left (released, acked or expired).
    pub success: bool,
    /// How many partitions' leases were extended.
    #[serde(default)]
    pub renewed: u64,
    /// The earliest new expiry among them (ISO-8601), `None` when nothing was renewed.
    #[serde(default)]
    pub expires_at: Option<String>,
}

#[derive(Serialize)]
struct ExtendBody {
    seconds: u32,
}

impl Queen {
    /// Extends every live lease of `lease_id` to at least `seconds` from now. Never shortens
    /// a lease and never revives an expired one.
    ///
    /// ```no_run
    /// # async fn demo(queen: queen_client::Queen, lease: &str) -> queen_client::Result<()> {
    /// let renewal = queen.extend_lease(lease, 60).await?;
    /// if !renewal.success {
    ///     eprintln!("lease {lease} is gone: its messages will be delivered again");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn extend_lease(&self, lease_id: &str, seconds: u32) -> Result<LeaseRenewal> {
        let path = format!("/api/v1/lease/{}/extend", encode_segment(lease_id));
        let req = self
            .request(Method::POST, &path)
            .json(&ExtendBody { seconds });
        expect_json(req.send().await?).await
    }
}
