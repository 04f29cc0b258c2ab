//! `POST /api/v1/push` (docs/wire.md §5, §6): the JSON body ([`parse`]) or the binary `QPB1` body
//! ([`binary`], `Content-Type: application/x-queen-push`) becomes push items, the engine pushes
//! them, and the answer is 201 with one result per item in input order ([`render`]).

mod binary;
pub(crate) mod parse;
mod render;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Router};

use crate::engine::push::{self, door};
use crate::engine::Engine;
use crate::error::Result;
use crate::http::auth::{CallerTenant, Producer};
use crate::http::budget::BodyBudget;
use crate::http::extract::{is_binary, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/push", post(push_json))
}

async fn push_json(
    State(st): State<Engine>,
    producer: Producer,
    CallerTenant(tenant): CallerTenant,
    Extension(budget): Extension<BodyBudget>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response> {
    // The door is asked once the body has arrived: refusing with the body unread would have
    // the connection closed under a client still sending it.
    door::admit(&st.push, body.len())?;
    if is_binary(&headers) {
        return binary::push(&st, &budget, body, producer, &tenant).await;
    }
    let items = parse::parse_items(&body)?;
    let results = push::push(&st.push, items, producer.0, &tenant).await?;
    push::require_stored(&results)?;
    Ok(render::created(&results))
}
