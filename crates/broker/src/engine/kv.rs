//! The key-value store (docs/engine.md §15): its limits, and the one way its operations run —
//! checked operations handed to `queen.kv_apply_v1` (sql/functions/kv.sql) in one PostgreSQL
//! transaction. `POST /api/v1/kv`, the transaction's `kv` rider and the locks
//! (engine/locks.rs) all go through it; the rider runs it inside the bundle's own call.

use serde_json::Value;

use crate::accel::admission::Lane;
use crate::engine::tenant::Tenant;
use crate::engine::Shared;
use crate::error::Result;
pub use crate::store::kv::{KvLost, READ_BUDGET_BYTES};

/// Most operations in one call (a request or a transaction's rider).
pub const MAX_OPS: usize = 256;
/// Most keys one call names (`getMany` keys count one each).
pub const MAX_KEYS: usize = 1024;
/// Longest key, in UTF-8 bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Largest value, as compact JSON.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Longest lifetime a write may ask for (ten years); `forever` is the way past it.
pub const MAX_TTL_SECONDS: u64 = 10 * 365 * 24 * 3600;
/// `getPrefix` page size when the call names none, and the most one page holds (a larger
/// `limit` is clamped, never refused).
pub const PREFIX_LIMIT_DEFAULT: u64 = 100;
pub const PREFIX_LIMIT_MAX: u64 = 1000;

/// What a call came to: every operation's verdict, index-aligned, or the lost `required`
/// precondition that rolled them all back.
pub type KvOutcome = std::result::Result<Vec<Value>, KvLost>;

/// Applies checked operations (`http/kv/parse.rs`) for `tenant`, all in one transaction. A
/// call is a short write like an ack, so it takes a permit of the ack lane of the admission
/// limiter: key-value traffic holds no more connections than the lane allows.
pub async fn apply(state: &Shared, tenant: &Tenant, ops: &[Value]) -> Result<KvOutcome> {
    let _permit = state.admission.acquire(Lane::Ack).await;
    let db = state.store.conn().await?;
    crate::store::kv::apply(&db, tenant.id(), ops, READ_BUDGET_BYTES).await
}
