//! The HTTP surface: the router, request parsing and response rendering, one module per
//! concept (the same names as in `engine/` and `store/`). Handlers parse, call `engine`, and
//! render; errors map to statuses in `http/error.rs`, once.

mod ack;
pub mod auth;
pub mod browser;
pub mod budget;
mod dashboard;
mod dlq;
mod ephemeral;
mod error;
pub mod extract;
mod groups;
mod health;
mod json_text;
mod kv;
mod lease;
mod locks;
mod maintenance;
mod messages;
mod observe;
mod pop;
mod prometheus;
mod push;
mod queues;
mod reads;
mod resources;
mod streams;
mod timers;
mod traces;
mod transaction;

pub use error::{HttpStatus, RETRY_AFTER_SECS};

use std::sync::Arc;

use axum::http::StatusCode;
use axum::middleware;
use axum::{Extension, Json, Router};
use serde_json::json;

use crate::engine::Engine;
use auth::Auth;
use browser::Guard;
use budget::BodyBudget;

/// Every route of the broker, each behind the authentication layer (a no-op with auth off),
/// and every request behind the browser guard.
pub fn router(state: Engine, auth: Arc<Auth>, guard: Arc<Guard>) -> Router {
    Router::new()
        .merge(health::routes())
        .merge(prometheus::routes())
        .merge(dashboard::routes())
        .merge(queues::routes())
        .merge(push::routes())
        .merge(pop::routes())
        .merge(ack::routes())
        .merge(lease::routes())
        .merge(maintenance::routes())
        .merge(dlq::routes())
        .merge(transaction::routes())
        .merge(kv::routes())
        .merge(locks::routes())
        .merge(streams::routes())
        .merge(groups::routes())
        .merge(resources::routes())
        .merge(messages::routes())
        .merge(traces::routes())
        .merge(timers::routes())
        .merge(reads::routes())
        .merge(ephemeral::routes())
        .route_layer(middleware::from_fn_with_state(auth, auth::authenticate))
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(guard, browser::guard))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            observe::request,
        ))
        .layer(Extension(BodyBudget::new(&state.cfg)))
        .with_state(state)
}

/// A path served with another method: 405 in our JSON shape (axum's own has no body; the
/// `Allow` header is still set by the route).
async fn method_not_allowed() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Json(json!({ "error": "method not allowed on this path", "code": "method_not_allowed" })),
    )
}

async fn no_such_route() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": "no such route", "code": "no_such_route" })),
    )
}
