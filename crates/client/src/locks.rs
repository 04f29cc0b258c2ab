//! Locks and semaphores: `POST /api/v1/locks` (docs/wire.md §21). A permit carries a fencing
//! token that is strictly greater for every later holder; its [`Permit::guard`] is a required
//! key-value `check`, so a batch or transaction carrying it commits only while the permit is
//! still this token's.
//!
//! ```no_run
//! # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
//! use queen_client::locks::Acquired;
//! let locks = queen.locks();
//! if let Acquired::Granted(permit) = locks.acquire("nightly-report", 30, None, None).await? {
//!     // … work, renewing before the 30 s run out, passing permit.token to the resource …
//!     locks.release(&permit).await?;
//! }
//! # Ok(()) }
//! ```

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::kv::KvOp;
use crate::{expect_json, Error, Queen, Result};

/// The key-value namespace of the permits.
pub const NAMESPACE: &str = "queen-locks";

/// A held permit.
#[derive(Debug, Clone, PartialEq)]
pub struct Permit {
    /// The lock's name.
    pub name: String,
    /// The permit's slot (0 for a lock; 0..limit for a semaphore).
    pub slot: u32,
    /// The fencing token: every later holder's is greater.
    pub token: i64,
    /// The holder's identity (minted by the broker when the acquire named none).
    pub owner: String,
    /// The owner held it already: the same permit and token.
    pub already: bool,
    guard: Guard,
}

impl Permit {
    /// A permit known from elsewhere (another process, the command line), to renew or
    /// release it; `owner` may be empty when unknown (a renew then goes by the token alone).
    /// Its guard is the documented one (docs/wire.md §21), a required check of
    /// the row `<name>#<slot>` of namespace `queen-locks` at version `token`.
    pub fn new(name: impl Into<String>, slot: u32, token: i64, owner: impl Into<String>) -> Self {
        let name = name.into();
        let guard = Guard {
            ns: NAMESPACE.to_string(),
            key: format!("{name}#{slot}"),
            expect: u64::try_from(token).unwrap_or(0),
        };
        Self {
            name,
            slot,
            token,
            owner: owner.into(),
            already: false,
            guard,
        }
    }

    /// The key-value `check` that holds while the permit is this token's (required: put it in
    /// a [`crate::kv::Kv::batch`] or a transaction's `kv` rider to make the rest conditional).
    pub fn guard(&self) -> KvOp {
        KvOp::guard(&self.guard.ns, &self.guard.key, self.guard.expect)
    }
}

/// One current holder of a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// Its slot.
    pub slot: u32,
    /// Its owner.
    pub owner: Value,
    /// Its token.
    pub token: i64,
    /// When it acquired the permit.
    pub since: Value,
    /// When the permit expires unless renewed.
    pub expires_at: Value,
    /// When it was last renewed.
    pub renewed_at: Value,
}

/// Why an acquire was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot is taken.
    Held,
    /// Free slots were lost to racing acquires.
    Contended,
}

/// The answer of an acquire.
#[derive(Debug, Clone, PartialEq)]
pub enum Acquired {
    /// The permit is the caller's.
    Granted(Permit),
    /// It is not; who holds the lock now.
    Refused {
        /// Why.
        reason: Refusal,
        /// The holders.
        holders: Vec<Holder>,
    },
}

/// The answer of a renew or release whose token was no longer the permit's.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept<T> {
    /// Done.
    Done(T),
    /// The permit expired or was taken: who holds it now.
    Lost(Vec<Holder>),
}

/// The locks of one broker ([`Queen::locks`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Locks {
    queen: Queen,
}

impl Queen {
    /// Locks and semaphores (docs/wire.md §21), in the caller's tenant.
    pub fn locks(&self) -> Locks {
        Locks {
            queen: self.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Guard {
    ns: String,
    key: String,
    expect: u64,
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    acquired: Option<bool>,
    #[serde(default)]
    renewed: Option<bool>,
    #[serde(default)]
    released: Option<bool>,
    #[serde(default)]
    held: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    slot: Option<u32>,
    #[serde(default)]
    token: Option<i64>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    already: bool,
    #[serde(default)]
    guard: Option<Guard>,
    #[serde(default)]
    holders: Vec<Holder>,
}

impl Locks {
    /// Takes a permit of `name` for `ttl_seconds` as `owner` (minted when `None`); `limit`
    /// makes it a semaphore of that many permits (1 when `None`). An owner asking for a
    /// permit it holds gets the same one back (`already`).
    pub async fn acquire(
        &self,
        name: &str,
        ttl_seconds: u64,
        owner: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Acquired> {
        let mut op = json!({"op": "acquire", "name": name, "ttlSeconds": ttl_seconds});
        if let Some(owner) = owner {
            op["owner"] = json!(owner);
        }
        if let Some(limit) = limit {
            op["limit"] = json!(limit);
        }
        let a = self.one(op).await?;
        match (a.acquired, a.reason.as_deref()) {
            (Some(true), _) => Ok(Acquired::Granted(permit(name, a, None)?)),
            (Some(false), Some("held")) => Ok(Acquired::Refused {
                reason: Refusal::Held,
                holders: a.holders,
            }),
            (Some(false), Some("contended")) => Ok(Acquired::Refused {
                reason: Refusal::Contended,
                holders: a.holders,
            }),
            (_, reason) => Err(Error::Decode(format!("an acquire answered {reason:?}"))),
        }
    }

    /// Extends `permit` to `ttl_seconds` from now; the renewed permit has a new, greater
    /// token (use it from now on). The permit's owner may renew with an older token (its last
    /// renewal's answer was lost); without an owner only the current token renews.
    pub async fn renew(&self, permit: &Permit, ttl_seconds: u64) -> Result<Kept<Permit>> {
        let mut op = json!({"op": "renew", "name": permit.name, "token": permit.token,
                            "ttlSeconds": ttl_seconds, "slot": permit.slot});
        if !permit.owner.is_empty() {
            op["owner"] = json!(permit.owner);
        }
        let a = self.one(op).await?;
        match a.renewed {
            Some(true) => Ok(Kept::Done(permit_of(permit, a)?)),
            Some(false) => Ok(Kept::Lost(a.holders)),
            None => Err(Error::Decode("a renew answered no verdict".into())),
        }
    }

    /// Gives `permit` up.
    pub async fn release(&self, permit: &Permit) -> Result<Kept<()>> {
        let op = json!({"op": "release", "name": permit.name, "token": permit.token,
                        "slot": permit.slot});
        let a = self.one(op).await?;
        match a.released {
            Some(true) => Ok(Kept::Done(())),
            Some(false) => Ok(Kept::Lost(a.holders)),
            None => Err(Error::Decode("a release answered no verdict".into())),
        }
    }

    /// Who holds `name` now (empty: nobody).
    pub async fn holders(&self, name: &str) -> Result<Vec<Holder>> {
        let a = self.one(json!({"op": "get", "name": name})).await?;
        match a.held {
            Some(_) => Ok(a.holders),
            None => Err(Error::Decode("a get answered no verdict".into())),
        }
    }

    async fn one(&self, op: Value) -> Result<Answer> {
        let body = json!({ "operations": [op] });
        let req = self
            .queen
            .request(Method::POST, "/api/v1/locks")
            .json(&body);
        let mut answer: Value = expect_json(req.send().await?).await?;
        let results = answer.get_mut("results").map(Value::take);
        match results {
            Some(Value::Array(mut r)) if r.len() == 1 => {
                let v = r.swap_remove(0);
                let text = v.to_string();
                serde_json::from_value(v).map_err(|e| Error::Decode(format!("{e} in {text}")))
            }
            _ => Err(Error::Decode(format!("not one result in {answer}"))),
        }
    }
}

fn permit(name: &str, a: Answer, owner: Option<&str>) -> Result<Permit> {
    let missing = |f: &str| Error::Decode(format!("a granted permit without {f}"));
    Ok(Permit {
        name: name.to_string(),
        slot: a.slot.ok_or_else(|| missing("slot"))?,
        token: a.token.ok_or_else(|| missing("token"))?,
        owner: a
            .owner
            .or_else(|| owner.map(str::to_string))
            .ok_or_else(|| missing("owner"))?,
        already: a.already,
        guard: a.guard.ok_or_else(|| missing("guard"))?,
    })
}

/// The renewed `old` permit with the answer's new token.
fn permit_of(old: &Permit, a: Answer) -> Result<Permit> {
    permit(&old.name, a, Some(&old.owner)).map(|p| Permit {
        already: false,
        ..p
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_s_guard_is_the_broker_s_check() {
        let a: Answer = serde_json::from_value(json!({"index":0,"op":"acquire","name":"l",
            "acquired":true,"slot":0,"token":12,"owner":"me",
            "guard":{"op":"check","ns":"queen-locks","key":"l#0","expect":12,"required":true}}))
        .unwrap();
        let p = permit("l", a, None).unwrap();
        assert_eq!((p.slot, p.token, p.owner.as_str()), (0, 12, "me"));
        assert_eq!(
            p.guard().to_json(),
            json!({"op":"check","ns":"queen-locks","key":"l#0","expect":12,"required":true})
        );
        assert_eq!(
            Permit::new("l", 0, 12, "me"),
            p,
            "a permit named by hand is the same"
        );
    }
}
