//! The typed calls of sql/functions/streams.sql: registering a stream query, the tenant check
//! of a query id (its source queue), and state reads. A cycle commit is not here: it rides in the transaction
//! wire's call (store/transaction.rs), whose SQL runs the cycle's two halves.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Registers a stream query.
    Register<'a> = stream_register_v1(
        p_tenant: &'a str,
        p_name: &'a str,
        p_source: &'a str,
        p_sink: Option<&'a str>,
        p_hash: &'a str,
        p_reset: bool,
    );
    /// The source queue of a tenant's stream query.
    SourceOf<'a> = stream_source_v1(p_tenant: &'a str, p_query: Uuid);
    /// A state read.
    StateGet<'a> = stream_state_get_v1(
        p_query: Uuid,
        p_partition: &'a str,
        p_keys: &'a [String],
        p_prefix: Option<&'a str>,
        p_ripe: Option<i64>,
    );
}

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
    Register {
        p_tenant: tenant,
        p_name: r.name,
        p_source: r.source_queue,
        p_sink: r.sink_queue,
        p_hash: r.config_hash,
        p_reset: r.reset,
    }
    .json(db)
    .await
}

/// The source queue `query` was registered with (as the client named it), when it is a
/// stream query of `tenant`.
pub async fn source_of(
    db: &impl GenericClient,
    tenant: &str,
    query: Uuid,
) -> Result<Option<String>> {
    let call = SourceOf {
        p_tenant: tenant,
        p_query: query,
    };
    Ok(call.query_one(db).await?.try_get(0)?)
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
    StateGet {
        p_query: query,
        p_partition: partition,
        p_keys: f.keys,
        p_prefix: f.prefix,
        p_ripe: f.ripe_at_or_before,
    }
    .json(db)
    .await
}
