//! `POST /api/v1/push` (docs/wire.md §5, §6): the JSON body ([`parse`]) or the binary `QPB1` body
//! ([`binary`], `Content-Type: application/x-queen-push`) becomes push items, the engine pushes
//! them, and the answer is 201 with one result per item in input order ([`render`]).

mod binary;
pub(crate) mod parse;
mod render;

use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Router};

use crate::engine::push::{self, door};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::auth::{CallerTenant, Producer};
use crate::http::budget::BodyBudget;
use crate::http::extract::{is_binary, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/push", post(push_json))
}

async fn push_json(
    State(st): State<Engine>,
    _door: Door,
    producer: Producer,
    CallerTenant(tenant): CallerTenant,
    Extension(budget): Extension<BodyBudget>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response> {
    if is_binary(&headers) {
        return binary::push(&st, &budget, body, producer, &tenant).await;
    }
    let items = parse::parse_items(&body)?;
    let results = push::push(&st, items, producer.0, &tenant).await?;
    push::require_stored(&results)?;
    Ok(render::created(&results))
}

/// Passed through the push door (`engine/push/door.rs`) before the body is read: extracted
/// from the head alone, it refuses with 429 while push fusion is too far behind, charging
/// the body's announced `Content-Length`.
struct Door;

impl FromRequestParts<Engine> for Door {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, st: &Engine) -> Result<Self> {
        let announced = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        door::admit(st, announced)?;
        Ok(Door)
    }
}
