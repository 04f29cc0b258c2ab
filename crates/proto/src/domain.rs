//! Named domain types with one parser each: the partition id and the lease id, as every floor
//! of the broker passes them around.

use std::fmt;

use crate::ids::new_v7;
use crate::name::{check_id, NameError};
use crate::scalar::Scalar;

/// A partition's id: a non-negative `bigint` (`queen.log_partitions.id`). On the JSON wire it
/// is a decimal string (docs/wire.md "Ids"); an id that is not a decimal id fails (§8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(i64);

/// Text or JSON that is not a partition id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a partition id")]
pub struct NotAPartitionId;

impl PartitionId {
    /// A stored id (from PostgreSQL); `None` when negative.
    pub fn new(id: i64) -> Option<Self> {
        (id >= 0).then_some(PartitionId(id))
    }

    pub fn get(self) -> i64 {
        self.0
    }

    /// The one rule: ASCII decimal digits only (no sign, no space), fitting an `i64`.
    pub fn parse(text: &str) -> Result<Self, NotAPartitionId> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NotAPartitionId);
        }
        text.parse().map(PartitionId).map_err(|_| NotAPartitionId)
    }

    /// A JSON `partitionId`: a decimal string (as pops render it) or a non-negative integer.
    /// `Ok(None)` when it is missing: absent, `null` or `""`.
    pub fn from_json(value: &Scalar<'_>) -> Result<Option<Self>, NotAPartitionId> {
        match value {
            Scalar::Null => Ok(None),
            Scalar::Str(s) if s.is_empty() => Ok(None),
            Scalar::Str(s) => PartitionId::parse(s).map(Some),
            Scalar::Int(n) => PartitionId::new(*n).map(Some).ok_or(NotAPartitionId),
            Scalar::Bool(_) | Scalar::Other => Err(NotAPartitionId),
        }
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The lease a leased pop took: a UUIDv7 minted per pop request (docs/wire.md "Ids"), shared by
/// every partition the pop claimed, and sent back by the client with its acks, renewals and
/// transactions. Empty means no lease (an autoAck pop, or a lease-less ack). SQL still calls
/// it the worker (`worker_id`, `p_worker`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh lease id for a pop.
    pub fn mint() -> Self {
        LeaseId(new_v7().to_string())
    }

    /// A lease id the client sent (`field` names it in the error): an id by the edge rule of
    /// [`check_id`]; empty is no lease.
    pub fn parse(field: &'static str, text: &str) -> Result<Self, NameError> {
        check_id(field, text)?;
        Ok(LeaseId(text.to_string()))
    }

    /// No lease.
    pub fn none() -> Self {
        LeaseId::default()
    }

    pub fn is_none(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn one_rule_for_partition_ids() {
        assert_eq!(PartitionId::parse("17").map(PartitionId::get), Ok(17));
        assert_eq!(PartitionId::parse("0").map(PartitionId::get), Ok(0));
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "abc",
            "99999999999999999999",
        ] {
            assert_eq!(PartitionId::parse(bad), Err(NotAPartitionId), "{bad:?}");
        }
        let from =
            |v: Value| PartitionId::from_json(&Scalar::from(&v)).map(|p| p.map(PartitionId::get));
        assert_eq!(from(json!("17")), Ok(Some(17)));
        assert_eq!(from(json!(17)), Ok(Some(17)));
        assert_eq!(from(json!("")), Ok(None));
        assert_eq!(from(Value::Null), Ok(None));
        assert_eq!(PartitionId::from_json(&Scalar::Null), Ok(None));
        for bad in [json!(-3), json!(1.5), json!([1]), json!("-1"), json!(true)] {
            assert_eq!(from(bad.clone()), Err(NotAPartitionId), "{bad}");
        }
    }

    #[test]
    fn lease_ids_are_ids_and_may_be_empty() {
        assert!(LeaseId::parse("leaseId", "").expect("empty").is_none());
        assert_eq!(
            LeaseId::parse("leaseId", "L-1").map(|l| l.to_string()),
            Ok("L-1".to_string())
        );
        assert!(LeaseId::parse("leaseId", "a\u{0}b").is_err());
        assert!(!LeaseId::mint().is_none());
    }
}
