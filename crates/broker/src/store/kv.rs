//! The typed calls of sql/functions/kv.sql: `queen.kv_apply_v1` (one call of checked
//! operations, applied in one PostgreSQL transaction) and the retention loop's sweep of expired
//! rows. A lost `required` precondition (SQL `QKV`) is told apart from a fault.

use deadpool_postgres::GenericClient;
use serde::Deserialize;
use serde_json::Value;
use tokio_postgres::types::Json;

use crate::error::{Error, Result};
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// One call of checked operations, in one transaction.
    KvApply<'a> = kv_apply_v1(p_tenant: &'a str, p_ops: Json<&'a [Value]>, p_read_budget: i64);
    /// Deletes a batch of expired rows.
    KvSweepStep = kv_sweep_step_v1(p_max_rows: i32);
}

pub use queen_proto::wire::KV_READ_BUDGET_BYTES as READ_BUDGET_BYTES;

/// A `required` operation whose precondition did not hold: the whole call (and the
/// transaction it rode in) was rolled back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvLost {
    /// Its index among the call's operations.
    pub op_index: usize,
    /// `exists`, `absent`, `version`, `limit` or `type`.
    pub kv_reason: String,
    /// The key's version as it is (0: absent).
    pub version: Value,
    /// The key's value as it is.
    pub value: Value,
}

/// The lost precondition a `QKV` exception carries in its detail.
pub fn lost(e: &tokio_postgres::Error) -> Option<KvLost> {
    let db = e.as_db_error()?;
    if !db.message().starts_with("QKV ") {
        return None;
    }
    serde_json::from_str(db.detail().unwrap_or_default()).ok()
}

/// Applies `ops` (checked by the http floor) for `tenant`, their reads answering at most
/// `read_budget` bytes of rows: their verdicts, index-aligned, or the lost `required`
/// precondition that rolled them all back.
pub async fn apply(
    db: &impl GenericClient,
    tenant: &str,
    ops: &[Value],
    read_budget: i64,
) -> Result<std::result::Result<Vec<Value>, KvLost>> {
    let call = KvApply {
        p_tenant: tenant,
        p_ops: Json(ops),
        p_read_budget: read_budget,
    };
    let stmt = crate::store::prepare(db, KvApply::SQL).await?;
    match db.query_one(&stmt, &call.params()).await {
        Ok(row) => {
            let Json(results): Json<Vec<Value>> = row.try_get(0)?;
            if results.len() != ops.len() {
                return Err(Error::internal(format!(
                    "kv_apply_v1 answered {} results for {} operations",
                    results.len(),
                    ops.len()
                )));
            }
            Ok(Ok(results))
        }
        // Through `From`, so a read-only server (25006) is noted for the pool like anywhere else.
        Err(e) => match lost(&e) {
            Some(lost) => Ok(Err(lost)),
            None => Err(Error::from(e)),
        },
    }
}

/// `queen.kv_sweep_step_v1`: deletes up to `max_rows` expired rows; returns how many.
pub async fn sweep_step(db: &impl GenericClient, max_rows: i32) -> Result<i64> {
    let call = KvSweepStep {
        p_max_rows: max_rows,
    };
    let n: i32 = call.query_one(db).await?.try_get(0)?;
    Ok(i64::from(n))
}
