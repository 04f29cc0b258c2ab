//! `/streams/v1/*` (docs/wire.md §24): the official client's streams runtime — query
//! registration, state reads and the cycle commit ([`parse`] checks the bodies,
//! `engine::streams` runs them). Answers carry `success`; a malformed body is 400, an unknown
//! (or another tenant's) query 404, a config-hash mismatch 409, each with `error` naming it.
//! A cycle the broker refused (its lease lost, a push refused) is 200 with `success:false`:
//! nothing of it was applied, and retrying it unchanged cannot succeed.

mod parse;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::streams::{self, CycleOutcome, Registered, Registration, StateFilter};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::auth::{CallerTenant, Producer};
use crate::http::extract::RawBody;

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/streams/v1/queries", post(register))
        .route("/streams/v1/state/get", post(state_get))
        .route("/streams/v1/cycle", post(cycle))
}

fn answer(result: Result<Value>) -> Response {
    match result {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn register(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let o = parse::object(&body)?;
            let r = Registration {
                name: parse::text(&o, "name")?,
                source_queue: parse::text(&o, "source_queue")?,
                sink_queue: parse::optional_text(&o, "sink_queue")?,
                config_hash: parse::text(&o, "config_hash")?,
                reset: parse::flag(&o, "reset", false)?,
            };
            match streams::register(&st, &tenant, &r).await? {
                Registered::Query(mut q) => {
                    q["success"] = Value::Bool(true);
                    Ok(q)
                }
                Registered::Conflict(stored) => Err(Error::Conflict(format!(
                    "config_hash mismatch: query {:?} is registered with config_hash {stored:?}, \
                     this run has {:?}",
                    r.name, r.config_hash
                ))),
            }
        }
        .await,
    )
}

async fn state_get(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let o = parse::object(&body)?;
            let query = parse::query_id(&o)?;
            let partition = parse::partition_id(&o)?.get().to_string();
            let keys = parse::keys(&o)?;
            let filter = StateFilter {
                keys: &keys,
                prefix: parse::optional_text(&o, "key_prefix")?,
                ripe_at_or_before: parse::ripe(&o)?,
            };
            let rows = streams::state_get(&st, &tenant, query, &partition, &filter).await?;
            Ok(json!({ "success": true, "rows": rows }))
        }
        .await,
    )
}

async fn cycle(
    State(st): State<Engine>,
    producer: Producer,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let cycle = parse::cycle(&body)?;
            Ok(
                match streams::commit(st.writers(), &tenant, producer.0, cycle).await? {
                    CycleOutcome::Committed(a) | CycleOutcome::Replayed(a) => a,
                    CycleOutcome::RolledBack { reason, error } => json!({
                        "success": false, "error": error, "reason": reason.as_str(),
                    }),
                },
            )
        }
        .await,
    )
}
