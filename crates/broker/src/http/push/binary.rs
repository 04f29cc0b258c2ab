//! `POST /api/v1/push` with a `QPB1` body (docs/wire.md §6): parsed off the async workers when
//! large or announcing a large inflation (its inflated bytes charged to the in-flight
//! budget until it is answered), pushed by `engine::push::binary`, answered like the JSON push (or counted, flag 2).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_proto::push_bin::parse_push;

use super::render::{counts, created};
use crate::engine::push::binary::push_envelope;
use crate::engine::push::require_stored;
use crate::engine::tenant::Tenant;
use crate::engine::Engine;
use crate::error::Result;
use crate::http::auth::Producer;
use crate::http::budget::BodyBudget;
use crate::http::extract::parse_binary;

/// `POST /api/v1/push` with a `QPB1` body: 201 with one result per message in wire order,
/// or with flag 2 the counts object; 503/500 when nothing was stored.
pub(super) async fn push(
    st: &Engine,
    budget: &BodyBudget,
    body: Bytes,
    producer: Producer,
    tenant: &Tenant,
) -> Result<Response> {
    // `_inflated` holds the body's share of the in-flight budget until it is answered.
    let (env, _inflated) = parse_binary(st, budget, body, "push", parse_push).await?;
    let counts_only = env.counts_only();
    let results = push_envelope(&st.push, env, producer.0, tenant).await?;
    require_stored(&results)?;
    if counts_only {
        return Ok((StatusCode::CREATED, Json(counts(&results))).into_response());
    }
    Ok(created(&results))
}
