//! The typed calls of sql/functions/streams.sql: registering a stream query, the tenant check
//! of a query id (its source queue), and state reads. A cycle commit is not here: it rides in the transaction
//! wire's call (store/transaction.rs), whose SQL runs the cycle's two halves.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::error::Result;

/// A registration's request, the client's names as given.
pub struct Registration<'a> {
    pub name: &'a str,
    pub source_queue: &'a str,
    pub sink_queue: Option<&'a str>,
    pub config_hash: &'a str,
    pub reset: bool,
}

/// `queen.stream_register_v1`: `{"query_id","name","fresh","reset"}`, or
/// `{"conflict":true,"config_hash"}` for an existing query of another config hash.
pub async fn register(
    db: &impl GenericClient,
    tenant: &str,
    r: &Registration<'_>,
) -> Result<Value> {
    let stmt = crate::store::prepare(
        db,
        "SELECT queen.stream_register_v1($1, $2, $3, $4, $5, $6)",
    )
    .await?;
    let row = db
        .query_one(
            &stmt,
            &[
                &tenant,
                &r.name,
                &r.source_queue,
                &r.sink_queue,
                &r.config_hash,
                &r.reset,
            ],
        )
        .await?;
    let Json(answer): Json<Value> = row.try_get(0)?;
    Ok(answer)
}

/// The source queue `query` was registered with (as the client named it), when it is a
/// stream query of `tenant`.
pub async fn source_of(
    db: &impl GenericClient,
    tenant: &str,
    query: Uuid,
) -> Result<Option<String>> {
    let stmt = crate::store::prepare(db, "SELECT queen.stream_source_v1($1, $2)").await?;
    Ok(db.query_one(&stmt, &[&tenant, &query]).await?.try_get(0)?)
}

/// A state read's filters (all optional; together they AND).
pub struct StateFilter<'a> {
    pub keys: &'a [String],
    pub prefix: Option<&'a str>,
    pub ripe_at_or_before: Option<i64>,
}

/// `queen.stream_state_get_v1`: the matching rows `[{"key","value"}…]` in key byte order.
pub async fn state_get(
    db: &impl GenericClient,
    query: Uuid,
    partition: &str,
    f: &StateFilter<'_>,
) -> Result<Value> {
    let stmt =
        crate::store::prepare(db, "SELECT queen.stream_state_get_v1($1, $2, $3, $4, $5)").await?;
    let row = db
        .query_one(
            &stmt,
            &[&query, &partition, &f.keys, &f.prefix, &f.ripe_at_or_before],
        )
        .await?;
    let Json(rows): Json<Value> = row.try_get(0)?;
    Ok(rows)
}
