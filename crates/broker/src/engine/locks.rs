//! Locks and semaphores (docs/engine.md §15.2), turned into key-value operations: a permit IS the
//! row `<name>#<slot>` of namespace [`NAMESPACE`], value `{"owner"}` (plus `since` once
//! renewed), its lifetime the row's expiry, and its fencing token the row's version. Acquire is
//! a `putIfAbsent` on a free slot, renew a `put` with `expect`, release a `delete` with
//! `expect`, all through `engine::kv::apply`. Versions are drawn in the order writes happen
//! (sql/functions/kv.sql), so every later holder's token is strictly greater.

use serde_json::{json, Value};

use crate::engine::kv;
use crate::engine::tenant::Tenant;
use crate::engine::Shared;
use crate::error::{Error, Result};

/// The key-value namespace of the permits.
pub const NAMESPACE: &str = "queen-locks";
/// Most operations in one call.
pub const MAX_OPS: usize = 64;
/// Most permits of one semaphore.
pub const MAX_LIMIT: u32 = 1024;
/// Longest lock name and owner, in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Free slots one acquire tries before it answers `contended`.
const SLOT_TRIES: usize = 4;

/// One checked operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOp {
    Acquire {
        name: String,
        ttl_seconds: u64,
        owner: String,
        limit: u32,
    },
    Renew {
        name: String,
        token: i64,
        ttl_seconds: u64,
        slot: u32,
        owner: Option<String>,
    },
    Release {
        name: String,
        token: i64,
        slot: u32,
    },
    Get {
        name: String,
    },
}

impl LockOp {
    pub fn name(&self) -> &str {
        match self {
            LockOp::Acquire { name, .. }
            | LockOp::Renew { name, .. }
            | LockOp::Release { name, .. }
            | LockOp::Get { name } => name,
        }
    }
}

/// One permit as held now.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub slot: u32,
    pub owner: Value,
    pub token: i64,
    /// When the holder acquired it (fixed-width UTC).
    pub since: Value,
    pub expires_at: Value,
    pub renewed_at: Value,
}

/// What one operation came to.
#[derive(Debug, Clone, PartialEq)]
pub enum LockVerdict {
    /// `already`: the owner held it; the same permit and token.
    Acquired {
        slot: u32,
        token: i64,
        owner: String,
        already: bool,
    },
    /// `held`: every slot is taken; `contended`: free slots were lost to racing acquires.
    Refused {
        reason: &'static str,
        holders: Vec<Holder>,
    },
    Renewed {
        slot: u32,
        token: i64,
    },
    Released,
    /// The token is not the permit's any more (renew or release).
    Lost {
        holders: Vec<Holder>,
    },
    Held {
        holders: Vec<Holder>,
    },
}

/// The key of a permit.
pub fn permit_key(name: &str, slot: u32) -> String {
    format!("{name}#{slot}")
}

/// Runs each operation on its own (they are independent), in order.
pub async fn run(state: &Shared, tenant: &Tenant, ops: &[LockOp]) -> Result<Vec<LockVerdict>> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        out.push(run_one(state, tenant, op).await?);
    }
    Ok(out)
}

async fn run_one(state: &Shared, tenant: &Tenant, op: &LockOp) -> Result<LockVerdict> {
    match op {
        LockOp::Acquire {
            name,
            ttl_seconds,
            owner,
            limit,
        } => acquire(state, tenant, name, *ttl_seconds, owner, *limit).await,
        LockOp::Renew {
            name,
            token,
            ttl_seconds,
            slot,
            owner,
        } => {
            renew(
                state,
                tenant,
                name,
                *token,
                *ttl_seconds,
                *slot,
                owner.as_deref(),
            )
            .await
        }
        LockOp::Release { name, token, slot } => {
            let verdict = kv_one(
                state,
                tenant,
                json!({"op": "delete", "ns": NAMESPACE, "key": permit_key(name, *slot),
                       "expect": token}),
            )
            .await?;
            if applied(&verdict) {
                return Ok(LockVerdict::Released);
            }
            let holders = holders(state, tenant, name).await?;
            Ok(LockVerdict::Lost { holders })
        }
        LockOp::Get { name } => {
            let holders = holders(state, tenant, name).await?;
            Ok(LockVerdict::Held { holders })
        }
    }
}

async fn acquire(
    state: &Shared,
    tenant: &Tenant,
    name: &str,
    ttl_seconds: u64,
    owner: &str,
    limit: u32,
) -> Result<LockVerdict> {
    let keys: Vec<String> = (0..limit).map(|s| permit_key(name, s)).collect();
    let read = kv_one(
        state,
        tenant,
        json!({"op": "getMany", "ns": NAMESPACE, "keys": keys}),
    )
    .await?;
    let held = rows_to_holders(&read["rows"]);
    if let Some(mine) = held.iter().find(|h| h.owner.as_str() == Some(owner)) {
        return Ok(LockVerdict::Acquired {
            slot: mine.slot,
            token: mine.token,
            owner: owner.to_string(),
            already: true,
        });
    }
    let free: Vec<u32> = (0..limit)
        .filter(|s| held.iter().all(|h| h.slot != *s))
        .take(SLOT_TRIES)
        .collect();
    for &slot in &free {
        let verdict = kv_one(
            state,
            tenant,
            json!({"op": "putIfAbsent", "ns": NAMESPACE, "key": permit_key(name, slot),
                   "value": {"owner": owner}, "ttlSeconds": ttl_seconds}),
        )
        .await?;
        if applied(&verdict) {
            return Ok(LockVerdict::Acquired {
                slot,
                token: version(&verdict)?,
                owner: owner.to_string(),
                already: false,
            });
        }
    }
    let reason = if free.is_empty() { "held" } else { "contended" };
    let holders = holders(state, tenant, name).await?;
    Ok(LockVerdict::Refused { reason, holders })
}

/// A renew by the token's holder, or by the permit's owner sending an older token again (its
/// last renew's answer was lost), rewrites the row with a new version; it keeps `since`.
async fn renew(
    state: &Shared,
    tenant: &Tenant,
    name: &str,
    token: i64,
    ttl_seconds: u64,
    slot: u32,
    owner: Option<&str>,
) -> Result<LockVerdict> {
    let key = permit_key(name, slot);
    // A racing renew of the same holder can move the version between the read and the
    // write: one more try reads it again.
    for _ in 0..2 {
        let row = kv_one(
            state,
            tenant,
            json!({"op": "get", "ns": NAMESPACE, "key": key}),
        )
        .await?;
        if row["found"] != Value::Bool(true) {
            break;
        }
        let current = version(&row)?;
        let row_owner = row["value"]["owner"].clone();
        let mine = current == token || (owner.is_some() && row_owner.as_str() == owner);
        if !mine {
            break;
        }
        let since = match &row["value"]["since"] {
            Value::Null => row["updatedAt"].clone(),
            since => since.clone(),
        };
        let verdict = kv_one(
            state,
            tenant,
            json!({"op": "put", "ns": NAMESPACE, "key": key, "expect": current,
                   "value": {"owner": row_owner, "since": since}, "ttlSeconds": ttl_seconds}),
        )
        .await?;
        if applied(&verdict) {
            return Ok(LockVerdict::Renewed {
                slot,
                token: version(&verdict)?,
            });
        }
    }
    let holders = holders(state, tenant, name).await?;
    Ok(LockVerdict::Lost { holders })
}

/// Every live permit of `name`, by slot.
async fn holders(state: &Shared, tenant: &Tenant, name: &str) -> Result<Vec<Holder>> {
    let page = kv_one(
        state,
        tenant,
        json!({"op": "getPrefix", "ns": NAMESPACE, "prefix": format!("{name}#"),
               "limit": MAX_LIMIT}),
    )
    .await?;
    let mut holders = rows_to_holders(&page["rows"]);
    holders.sort_by_key(|h| h.slot);
    Ok(holders)
}

fn rows_to_holders(rows: &Value) -> Vec<Holder> {
    rows.as_array()
        .map(|rows| rows.iter().filter_map(row_to_holder).collect())
        .unwrap_or_default()
}

fn row_to_holder(row: &Value) -> Option<Holder> {
    let slot = row["key"].as_str()?.rsplit_once('#')?.1.parse().ok()?;
    let since = match &row["value"]["since"] {
        Value::Null => row["updatedAt"].clone(),
        since => since.clone(),
    };
    Some(Holder {
        slot,
        owner: row["value"]["owner"].clone(),
        token: row["version"].as_i64()?,
        since,
        expires_at: row["expiresAt"].clone(),
        renewed_at: row["updatedAt"].clone(),
    })
}

fn applied(verdict: &Value) -> bool {
    verdict["applied"] == Value::Bool(true)
}

fn version(verdict: &Value) -> Result<i64> {
    verdict["version"]
        .as_i64()
        .ok_or_else(|| Error::internal(format!("kv verdict without a version: {verdict}")))
}

/// One key-value operation of its own call (never `required`, so never rolled back).
async fn kv_one(state: &Shared, tenant: &Tenant, op: Value) -> Result<Value> {
    match kv::apply(state, tenant, std::slice::from_ref(&op)).await? {
        Ok(mut results) => results
            .pop()
            .ok_or_else(|| Error::internal("kv_apply_v1 answered no verdict")),
        Err(lost) => Err(Error::internal(format!(
            "a lock's kv operation lost a required precondition: {lost:?}"
        ))),
    }
}
