//! The answers of `POST /api/v1/kv` (docs/wire.md §20.1), typed by the operation that asked:
//! each element of `results` is decoded as its operation's result, and the rolled-back answer
//! of a lost `required` precondition as [`KvOutcome::PreconditionFailed`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::KvOp;
use crate::{Error, Result};

/// The outcome of a key-value call.
#[derive(Debug, Clone, PartialEq)]
pub enum KvOutcome {
    /// Every operation ran; one result per operation, in order.
    Done(Vec<KvResult>),
    /// A `required` operation lost its precondition: nothing of the call was applied.
    PreconditionFailed(KvPrecondition),
}

/// What a required operation found instead of its precondition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvPrecondition {
    /// The operation's index (in a transaction, its flat index among the bundle's results).
    pub failed_index: usize,
    /// Why it did not hold.
    #[serde(rename = "kvReason")]
    pub reason: KvReason,
    /// The key's version now (0: absent).
    #[serde(default)]
    pub version: i64,
    /// The key's value now (`null` when absent).
    #[serde(default)]
    pub value: Value,
}

/// One operation's result.
#[derive(Debug, Clone, PartialEq)]
pub enum KvResult {
    /// `get`: the live row, or `None`.
    Get(Option<KvEntry>),
    /// `getMany`.
    Many(KvMany),
    /// `getPrefix` with values.
    Page(KvPage),
    /// `getPrefix` with `keys_only`.
    Keys(KvKeyPage),
    /// `put`, `putIfAbsent`, `delete`, `incr`, `check`.
    Write(KvVerdict),
}

/// A live row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvEntry {
    /// The key.
    pub key: String,
    /// Its value (any JSON, `null` included).
    pub value: Value,
    /// Its version: every write draws a greater one.
    pub version: i64,
    /// When it expires (fixed-width UTC, milliseconds); `None`: never.
    pub expires_at: Option<String>,
    /// When it was last written (fixed-width UTC, milliseconds).
    pub updated_at: String,
}

/// A live key without its value (`getPrefix` with `keys_only`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvKey {
    /// The key.
    pub key: String,
    /// Its version.
    pub version: i64,
    /// When it expires; `None`: never.
    pub expires_at: Option<String>,
}

/// The answer of `getMany`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvMany {
    /// The live rows, in key order.
    pub rows: Vec<KvEntry>,
    /// The keys without a live row, in request order.
    pub missing: Vec<String>,
    /// The call's 4 MiB read budget ran out: keys left out are in neither list.
    pub truncated: bool,
}

/// A page of `getPrefix`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvPage {
    /// The rows, in byte order of their keys.
    pub rows: Vec<KvEntry>,
    /// More keys follow.
    pub truncated: bool,
    /// The last key, to pass as `after` for the next page; `None` at the end.
    pub next_after: Option<String>,
}

/// A page of `getPrefix` with `keys_only`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvKeyPage {
    /// The keys, in byte order.
    pub rows: Vec<KvKey>,
    /// More keys follow.
    pub truncated: bool,
    /// The last key, to pass as `after` for the next page; `None` at the end.
    pub next_after: Option<String>,
}

/// The verdict of a write or a check.
#[derive(Debug, Clone, PartialEq)]
pub enum KvVerdict {
    /// It applied (a check: its precondition holds).
    Applied(KvApplied),
    /// It did not, and why; nothing was written.
    Refused(KvRefused),
}

impl KvVerdict {
    /// Whether it applied.
    pub fn applied(&self) -> bool {
        matches!(self, KvVerdict::Applied(_))
    }
}

/// An applied write or a holding check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvApplied {
    /// The key.
    pub key: String,
    /// The value written (`put`, `putIfAbsent`, `incr`) or read (`check`; `null` when the key
    /// is absent); `null` for `delete`.
    #[serde(default)]
    pub value: Value,
    /// The new version (a `delete`: the deleted row's; a `check` of an absent key: 0).
    pub version: i64,
    /// The row's expiry after a write; `None`: never (or not a write).
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// A refused write or a failing check, with the row as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvRefused {
    /// The key.
    pub key: String,
    /// Why.
    pub reason: KvReason,
    /// The key's value now (`incr` refused by a bound: the unchanged count; `null` when absent).
    #[serde(default)]
    pub value: Value,
    /// The key's version now (0: absent).
    #[serde(default)]
    pub version: i64,
}

/// Why a write or check did not apply.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum KvReason {
    /// The key exists (`expect: 0`, `putIfAbsent`).
    Exists,
    /// The key does not exist (`expect: n`, `delete`).
    Absent,
    /// The key is at another version.
    Version,
    /// An `incr` would leave its bounds.
    Limit,
    /// An `incr` of a value that is not a number.
    Type,
    /// A reason this SDK does not know (a newer broker).
    Other(String),
}

impl From<String> for KvReason {
    fn from(s: String) -> Self {
        match s.as_str() {
            "exists" => KvReason::Exists,
            "absent" => KvReason::Absent,
            "version" => KvReason::Version,
            "limit" => KvReason::Limit,
            "type" => KvReason::Type,
            _ => KvReason::Other(s),
        }
    }
}

impl Serialize for KvReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for KvReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvReason::Exists => "exists",
            KvReason::Absent => "absent",
            KvReason::Version => "version",
            KvReason::Limit => "limit",
            KvReason::Type => "type",
            KvReason::Other(s) => s,
        })
    }
}

#[derive(Deserialize)]
struct Found {
    found: bool,
}

#[derive(Deserialize)]
struct Applied {
    applied: bool,
}

/// Decodes the answer of `ops`.
pub(crate) fn decode(ops: &[KvOp], answer: Value) -> Result<KvOutcome> {
    if answer.get("reason").and_then(Value::as_str) == Some("kv_precondition") {
        return Ok(KvOutcome::PreconditionFailed(from_value(answer)?));
    }
    let results = match answer.get("results") {
        Some(Value::Array(results)) => results,
        _ => return Err(Error::Decode(format!("no results in {answer}"))),
    };
    if results.len() != ops.len() {
        return Err(Error::Decode(format!(
            "{} results for {} operations",
            results.len(),
            ops.len()
        )));
    }
    ops.iter()
        .zip(results)
        .map(|(op, r)| one(op, r.clone()))
        .collect::<Result<Vec<_>>>()
        .map(KvOutcome::Done)
}

/// One element, as the result of `op`.
pub(crate) fn one(op: &KvOp, r: Value) -> Result<KvResult> {
    Ok(match op {
        KvOp::Get { .. } => {
            let found: Found = from_value(r.clone())?;
            KvResult::Get(if found.found {
                Some(from_value(r)?)
            } else {
                None
            })
        }
        KvOp::GetMany { .. } => KvResult::Many(from_value(r)?),
        KvOp::GetPrefix {
            keys_only: true, ..
        } => KvResult::Keys(from_value(r)?),
        KvOp::GetPrefix { .. } => KvResult::Page(from_value(r)?),
        _ => {
            let applied: Applied = from_value(r.clone())?;
            KvResult::Write(if applied.applied {
                KvVerdict::Applied(from_value(r)?)
            } else {
                KvVerdict::Refused(from_value(r)?)
            })
        }
    })
}

fn from_value<T: serde::de::DeserializeOwned>(v: Value) -> Result<T> {
    let text = v.to_string();
    serde_json::from_value(v).map_err(|e| Error::Decode(format!("{e} in {text}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Expiry;
    use serde_json::json;

    #[test]
    fn each_result_is_typed_by_its_operation() {
        let ops = [
            KvOp::get("n", "a"),
            KvOp::get("n", "b"),
            KvOp::put_if_absent("n", "c", json!(1), Expiry::Forever),
            KvOp::incr("n", "d", 1, Expiry::Forever),
        ];
        let answer = json!({"results":[
            {"index":0,"op":"get","found":true,"key":"a","value":null,"version":4,
             "expiresAt":null,"updatedAt":"2026-12-07T01:00:00.000Z"},
            {"index":1,"op":"get","found":false,"key":"b"},
            {"index":2,"op":"putIfAbsent","applied":false,"reason":"exists","key":"c","value":7,"version":9},
            {"index":3,"op":"incr","applied":false,"reason":"limit","key":"d","value":5,"version":0}]});
        let KvOutcome::Done(r) = decode(&ops, answer).unwrap() else {
            panic!("not done")
        };
        assert!(matches!(&r[0], KvResult::Get(Some(e)) if e.value.is_null() && e.version == 4));
        assert_eq!(r[1], KvResult::Get(None));
        assert!(matches!(&r[2], KvResult::Write(KvVerdict::Refused(x))
            if x.reason == KvReason::Exists && x.value == json!(7) && x.version == 9));
        assert!(
            matches!(&r[3], KvResult::Write(KvVerdict::Refused(x)) if x.reason == KvReason::Limit)
        );
    }

    #[test]
    fn a_lost_required_precondition_is_its_own_outcome() {
        let ops = [KvOp::guard("queen-locks", "l#0", 3)];
        let answer = json!({"success":false,"ok":false,"reason":"kv_precondition",
            "error":"kv_precondition_failed","results":[],"failedIndex":0,
            "kvReason":"version","version":5,"value":{"owner":"x"}});
        assert_eq!(
            decode(&ops, answer).unwrap(),
            KvOutcome::PreconditionFailed(KvPrecondition {
                failed_index: 0,
                reason: KvReason::Version,
                version: 5,
                value: json!({"owner":"x"}),
            })
        );
    }

    #[test]
    fn a_short_answer_is_refused() {
        let ops = [KvOp::get("n", "a"), KvOp::get("n", "b")];
        let answer = json!({"results":[{"index":0,"op":"get","found":false,"key":"a"}]});
        assert!(matches!(decode(&ops, answer), Err(Error::Decode(_))));
    }
}
