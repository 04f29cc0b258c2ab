//! `GET /api/v1/messages/:partitionId/:transactionId` (docs/wire.md §13): one message with its
//! per-group state. The lookup and rendering live in `engine::messages`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use queen_proto::name::check_id;
use serde_json::Value;

use crate::engine::messages;
use crate::error::Result;
use crate::http::extract::Path;
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/api/v1/messages/{partition_id}/{transaction_id}",
        get(detail),
    )
}

async fn detail(
    State(st): State<AppState>,
    Path((partition_id, transaction_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    check_id("transactionId", &transaction_id)?;
    messages::detail(&st, &partition_id, &transaction_id)
        .await
        .map(Json)
}
