//! The key-value store: `POST /api/v1/kv` (docs/wire.md §20). Every call is a batch of
//! [`KvOp`]s applied in order in one PostgreSQL transaction; [`Kv::batch`] sends one, and the
//! single-operation methods ([`Kv::get`], [`Kv::put`], …) send a batch of one. Verdicts (a
//! miss, a lost race, a refused increment) are typed answers, not errors; a malformed call is
//! [`crate::Error::Api`] (HTTP 400, the message naming the broker's reason and detail).
//!
//! ```no_run
//! # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
//! use queen_client::kv::{Expiry, KvVerdict};
//! let kv = queen.kv();
//! // Claim a key once: exactly one of many racing callers wins.
//! match kv.put_if_absent("jobs", "nightly:2026-12-07", serde_json::json!("me"), Expiry::Seconds(3600)).await? {
//!     KvVerdict::Applied(won) => println!("claimed at version {}", won.version),
//!     KvVerdict::Refused(lost) => println!("{:?}: held by {}", lost.reason, lost.value),
//! }
//! # Ok(()) }
//! ```

mod results;

use reqwest::Method;
use serde_json::{json, Map, Number, Value};

use crate::{expect_json, Error, Queen, Result};

pub use results::{
    KvApplied, KvEntry, KvKey, KvKeyPage, KvMany, KvOutcome, KvPage, KvPrecondition, KvReason,
    KvRefused, KvResult, KvVerdict,
};

/// How long a written key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// This many seconds from the write (1 to 315 360 000, ten years).
    Seconds(u64),
    /// Until deleted.
    Forever,
}

/// One key-value operation. Writes and `check` may be `required`: when their precondition is
/// lost, the whole batch (or the transaction it rides in) rolls back and the answer is
/// [`KvOutcome::PreconditionFailed`].
#[derive(Debug, Clone, PartialEq)]
pub enum KvOp {
    /// One key's live row.
    Get {
        /// The namespace (`^[a-z0-9][a-z0-9._-]{0,63}$`).
        ns: String,
        /// The key (1 to 512 bytes, no NUL).
        key: String,
    },
    /// Several keys' live rows (in key order) and the keys without one.
    GetMany {
        /// The namespace.
        ns: String,
        /// The keys (at most 1024 per call).
        keys: Vec<String>,
    },
    /// A page of the live keys starting with `prefix`, byte for byte, in byte order.
    GetPrefix {
        /// The namespace.
        ns: String,
        /// The prefix (non-empty; `%` and `_` are data).
        prefix: String,
        /// Only keys after this one (the previous page's `next_after`).
        after: Option<String>,
        /// Rows per page (the broker clamps it to 1..1000; 100 when `None`).
        limit: Option<u32>,
        /// Rows without values ([`KvResult::Keys`] instead of [`KvResult::Page`]).
        keys_only: bool,
    },
    /// Writes `value` with a new version; with `expect`, only if the key is at that version
    /// (0: only if it does not exist).
    Put {
        /// The namespace.
        ns: String,
        /// The key.
        key: String,
        /// Any JSON (at most 64 KiB as JSON), `null` included.
        value: Value,
        /// Its lifetime (a put never inherits the old one).
        expiry: Expiry,
        /// The version the key must be at (0: must not exist).
        expect: Option<u64>,
        /// Roll the whole call back when `expect` does not hold.
        required: bool,
    },
    /// A put that applies only when the key does not exist (an expired row does not).
    PutIfAbsent {
        /// The namespace.
        ns: String,
        /// The key.
        key: String,
        /// Any JSON.
        value: Value,
        /// Its lifetime.
        expiry: Expiry,
        /// Roll the whole call back when the key exists.
        required: bool,
    },
    /// Deletes the key; with `expect`, only at that version.
    Delete {
        /// The namespace.
        ns: String,
        /// The key.
        key: String,
        /// The version the key must be at.
        expect: Option<u64>,
        /// Roll the whole call back when the key is absent or at another version.
        required: bool,
    },
    /// Adds `delta` to a numeric value (an absent or expired key counts as 0); refused with
    /// [`KvReason::Limit`] when the sum would leave `min..=max`. The expiry applies only when
    /// the call creates the counter.
    Incr {
        /// The namespace.
        ns: String,
        /// The key.
        key: String,
        /// What to add (may be negative or fractional).
        delta: Number,
        /// The lowest sum allowed.
        min: Option<Number>,
        /// The highest sum allowed.
        max: Option<Number>,
        /// The lifetime of a counter this call creates.
        expiry: Expiry,
        /// Roll the whole call back when the bound refuses it.
        required: bool,
    },
    /// Whether the key is at version `expect` (0: absent); writes nothing. With `required`,
    /// the rest of the call commits only while it holds (a lock's guard).
    Check {
        /// The namespace.
        ns: String,
        /// The key.
        key: String,
        /// The version the key must be at (0: must not exist).
        expect: u64,
        /// Roll the whole call back when it does not hold.
        required: bool,
    },
}

impl KvOp {
    /// A `get` of `key`.
    pub fn get(ns: impl Into<String>, key: impl Into<String>) -> Self {
        KvOp::Get {
            ns: ns.into(),
            key: key.into(),
        }
    }

    /// An unconditional `put`.
    pub fn put(
        ns: impl Into<String>,
        key: impl Into<String>,
        value: Value,
        expiry: Expiry,
    ) -> Self {
        KvOp::Put {
            ns: ns.into(),
            key: key.into(),
            value,
            expiry,
            expect: None,
            required: false,
        }
    }

    /// A `putIfAbsent`, not required.
    pub fn put_if_absent(
        ns: impl Into<String>,
        key: impl Into<String>,
        value: Value,
        expiry: Expiry,
    ) -> Self {
        KvOp::PutIfAbsent {
            ns: ns.into(),
            key: key.into(),
            value,
            expiry,
            required: false,
        }
    }

    /// An unconditional `delete`.
    pub fn delete(ns: impl Into<String>, key: impl Into<String>) -> Self {
        KvOp::Delete {
            ns: ns.into(),
            key: key.into(),
            expect: None,
            required: false,
        }
    }

    /// An `incr` by `delta` without bounds.
    pub fn incr(ns: impl Into<String>, key: impl Into<String>, delta: i64, expiry: Expiry) -> Self {
        KvOp::Incr {
            ns: ns.into(),
            key: key.into(),
            delta: delta.into(),
            min: None,
            max: None,
            expiry,
            required: false,
        }
    }

    /// A required `check` that the key is at version `expect`: the rest of its call commits
    /// only while it holds.
    pub fn guard(ns: impl Into<String>, key: impl Into<String>, expect: u64) -> Self {
        KvOp::Check {
            ns: ns.into(),
            key: key.into(),
            expect,
            required: true,
        }
    }

    /// The operation's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            KvOp::Get { .. } => "get",
            KvOp::GetMany { .. } => "getMany",
            KvOp::GetPrefix { .. } => "getPrefix",
            KvOp::Put { .. } => "put",
            KvOp::PutIfAbsent { .. } => "putIfAbsent",
            KvOp::Delete { .. } => "delete",
            KvOp::Incr { .. } => "incr",
            KvOp::Check { .. } => "check",
        }
    }

    /// The key a single-key operation names (`None` for `getMany` and `getPrefix`).
    pub fn key(&self) -> Option<&str> {
        match self {
            KvOp::Get { key, .. }
            | KvOp::Put { key, .. }
            | KvOp::PutIfAbsent { key, .. }
            | KvOp::Delete { key, .. }
            | KvOp::Incr { key, .. }
            | KvOp::Check { key, .. } => Some(key),
            KvOp::GetMany { .. } | KvOp::GetPrefix { .. } => None,
        }
    }

    /// The operation as the broker reads it (also the element of a transaction's `kv` rider).
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("op".into(), json!(self.name()));
        let (ns, required) = match self {
            KvOp::Get { ns, key } => {
                o.insert("key".into(), json!(key));
                (ns, false)
            }
            KvOp::GetMany { ns, keys } => {
                o.insert("keys".into(), json!(keys));
                (ns, false)
            }
            KvOp::GetPrefix {
                ns,
                prefix,
                after,
                limit,
                keys_only,
            } => {
                o.insert("prefix".into(), json!(prefix));
                put_some(&mut o, "after", after.as_ref().map(|a| json!(a)));
                put_some(&mut o, "limit", limit.map(|l| json!(l)));
                if *keys_only {
                    o.insert("keysOnly".into(), json!(true));
                }
                (ns, false)
            }
            KvOp::Put {
                ns,
                key,
                value,
                expiry,
                expect,
                required,
            } => {
                write_fields(&mut o, key, Some(value), *expiry);
                put_some(&mut o, "expect", expect.map(|e| json!(e)));
                (ns, *required)
            }
            KvOp::PutIfAbsent {
                ns,
                key,
                value,
                expiry,
                required,
            } => {
                write_fields(&mut o, key, Some(value), *expiry);
                (ns, *required)
            }
            KvOp::Delete {
                ns,
                key,
                expect,
                required,
            } => {
                o.insert("key".into(), json!(key));
                put_some(&mut o, "expect", expect.map(|e| json!(e)));
                (ns, *required)
            }
            KvOp::Incr {
                ns,
                key,
                delta,
                min,
                max,
                expiry,
                required,
            } => {
                write_fields(&mut o, key, None, *expiry);
                o.insert("delta".into(), Value::Number(delta.clone()));
                put_some(&mut o, "min", min.clone().map(Value::Number));
                put_some(&mut o, "max", max.clone().map(Value::Number));
                (ns, *required)
            }
            KvOp::Check {
                ns,
                key,
                expect,
                required,
            } => {
                o.insert("key".into(), json!(key));
                o.insert("expect".into(), json!(expect));
                (ns, *required)
            }
        };
        o.insert("ns".into(), json!(ns));
        if required {
            o.insert("required".into(), json!(true));
        }
        Value::Object(o)
    }
}

fn put_some(o: &mut Map<String, Value>, field: &str, v: Option<Value>) {
    if let Some(v) = v {
        o.insert(field.into(), v);
    }
}

fn write_fields(o: &mut Map<String, Value>, key: &str, value: Option<&Value>, expiry: Expiry) {
    o.insert("key".into(), json!(key));
    put_some(o, "value", value.cloned());
    match expiry {
        Expiry::Seconds(s) => o.insert("ttlSeconds".into(), json!(s)),
        Expiry::Forever => o.insert("forever".into(), json!(true)),
    };
}

/// The key-value store of one broker ([`Queen::kv`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Kv {
    queen: Queen,
}

impl Queen {
    /// The key-value store (docs/wire.md §20); its namespaces are the caller's tenant's.
    pub fn kv(&self) -> Kv {
        Kv {
            queen: self.clone(),
        }
    }
}

impl Kv {
    /// Applies `ops` in order in one transaction. Each result is typed by its operation
    /// (index-aligned); a lost `required` precondition rolls everything back and answers
    /// [`KvOutcome::PreconditionFailed`].
    pub async fn batch(&self, ops: &[KvOp]) -> Result<KvOutcome> {
        if ops.is_empty() {
            return Err(Error::Encode(
                "a key-value call needs at least one operation".into(),
            ));
        }
        let body = json!({ "operations": ops.iter().map(KvOp::to_json).collect::<Vec<_>>() });
        let req = self.queen.request(Method::POST, "/api/v1/kv").json(&body);
        let answer: Value = expect_json(req.send().await?).await?;
        results::decode(ops, answer)
    }

    /// Applies one operation. A required one whose precondition is lost answers its refusal
    /// (there is nothing else to roll back).
    pub async fn apply(&self, op: KvOp) -> Result<KvResult> {
        let key = op.key().unwrap_or_default().to_string();
        match self.batch(std::slice::from_ref(&op)).await? {
            KvOutcome::Done(mut results) if results.len() == 1 => Ok(results.swap_remove(0)),
            KvOutcome::Done(results) => Err(Error::Decode(format!(
                "{} results for one operation",
                results.len()
            ))),
            KvOutcome::PreconditionFailed(p) => {
                Ok(KvResult::Write(KvVerdict::Refused(KvRefused {
                    key,
                    reason: p.reason,
                    value: p.value,
                    version: p.version,
                })))
            }
        }
    }

    /// The key's live row, `None` when it is absent or expired (`Some` with a `null` value is
    /// a row holding `null`).
    pub async fn get(&self, ns: &str, key: &str) -> Result<Option<KvEntry>> {
        match self.apply(KvOp::get(ns, key)).await? {
            KvResult::Get(entry) => Ok(entry),
            other => Err(mismatch("get", &other)),
        }
    }

    /// The live rows of `keys` (in key order) and, in request order, the keys without one.
    pub async fn get_many(&self, ns: &str, keys: &[&str]) -> Result<KvMany> {
        let keys = keys.iter().map(|k| k.to_string()).collect();
        match self
            .apply(KvOp::GetMany {
                ns: ns.into(),
                keys,
            })
            .await?
        {
            KvResult::Many(many) => Ok(many),
            other => Err(mismatch("getMany", &other)),
        }
    }

    /// One page of the live keys starting with `prefix`, with their values; pass the page's
    /// `next_after` as `after` for the next one.
    pub async fn get_prefix(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<KvPage> {
        match self
            .apply(prefix_op(ns, prefix, after, limit, false))
            .await?
        {
            KvResult::Page(page) => Ok(page),
            other => Err(mismatch("getPrefix", &other)),
        }
    }

    /// [`Kv::get_prefix`] without the values.
    pub async fn get_prefix_keys(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<KvKeyPage> {
        match self
            .apply(prefix_op(ns, prefix, after, limit, true))
            .await?
        {
            KvResult::Keys(page) => Ok(page),
            other => Err(mismatch("getPrefix", &other)),
        }
    }

    /// Writes `value` under `key`; with `expect`, only at that version (0: only if absent).
    pub async fn put(
        &self,
        ns: &str,
        key: &str,
        value: Value,
        expiry: Expiry,
        expect: Option<u64>,
    ) -> Result<KvVerdict> {
        let op = KvOp::Put {
            ns: ns.into(),
            key: key.into(),
            value,
            expiry,
            expect,
            required: false,
        };
        self.write(op).await
    }

    /// Writes `value` only if `key` does not exist: of many racing callers exactly one wins.
    pub async fn put_if_absent(
        &self,
        ns: &str,
        key: &str,
        value: Value,
        expiry: Expiry,
    ) -> Result<KvVerdict> {
        self.write(KvOp::put_if_absent(ns, key, value, expiry))
            .await
    }

    /// Deletes `key`; with `expect`, only at that version. An absent key is refused with
    /// [`KvReason::Absent`].
    pub async fn delete(&self, ns: &str, key: &str, expect: Option<u64>) -> Result<KvVerdict> {
        let op = KvOp::Delete {
            ns: ns.into(),
            key: key.into(),
            expect,
            required: false,
        };
        self.write(op).await
    }

    /// Adds `delta` to the counter at `key` (created at 0 with `expiry` when absent). For
    /// bounds, [`Kv::apply`] a [`KvOp::Incr`].
    pub async fn incr(&self, ns: &str, key: &str, delta: i64, expiry: Expiry) -> Result<KvVerdict> {
        self.write(KvOp::incr(ns, key, delta, expiry)).await
    }

    /// Whether `key` is at version `expect` (0: absent); writes nothing.
    pub async fn check(&self, ns: &str, key: &str, expect: u64) -> Result<KvVerdict> {
        let op = KvOp::Check {
            ns: ns.into(),
            key: key.into(),
            expect,
            required: false,
        };
        self.write(op).await
    }

    async fn write(&self, op: KvOp) -> Result<KvVerdict> {
        let name = op.name();
        match self.apply(op).await? {
            KvResult::Write(verdict) => Ok(verdict),
            other => Err(mismatch(name, &other)),
        }
    }
}

fn prefix_op(
    ns: &str,
    prefix: &str,
    after: Option<&str>,
    limit: Option<u32>,
    keys_only: bool,
) -> KvOp {
    KvOp::GetPrefix {
        ns: ns.into(),
        prefix: prefix.into(),
        after: after.map(str::to_string),
        limit,
        keys_only,
    }
}

fn mismatch(op: &str, got: &KvResult) -> Error {
    Error::Decode(format!("a {op} answered {got:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_sent_with_exactly_their_fields() {
        let put = KvOp::Put {
            ns: "n".into(),
            key: "k".into(),
            value: Value::Null,
            expiry: Expiry::Forever,
            expect: Some(0),
            required: true,
        };
        assert_eq!(
            put.to_json(),
            json!({"op":"put","ns":"n","key":"k","value":null,"forever":true,"expect":0,"required":true})
        );
        let incr = KvOp::Incr {
            ns: "n".into(),
            key: "c".into(),
            delta: Number::from(-2),
            min: Some(Number::from(0)),
            max: None,
            expiry: Expiry::Seconds(60),
            required: false,
        };
        assert_eq!(
            incr.to_json(),
            json!({"op":"incr","ns":"n","key":"c","delta":-2,"min":0,"ttlSeconds":60})
        );
        let page = prefix_op("n", "a:", Some("a:3"), Some(10), true);
        assert_eq!(
            page.to_json(),
            json!({"op":"getPrefix","ns":"n","prefix":"a:","after":"a:3","limit":10,"keysOnly":true})
        );
        assert_eq!(
            KvOp::guard("queen-locks", "l#0", 7).to_json(),
            json!({"op":"check","ns":"queen-locks","key":"l#0","expect":7,"required":true})
        );
    }
}
