//! `/api/v1/resources/{queues,overview}` (docs/wire.md §14) and `POST /api/v1/stats/refresh`
//! (§15). `DELETE /api/v1/resources/queues/:queue` belongs to `http::queues`.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use queen_proto::Name;
use serde::Deserialize;
use serde_json::Value;

use crate::engine::resources;
use crate::error::Result;
use crate::http::extract::Path;
use crate::http::extract::{Query, RawBody};
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/resources/queues", get(queues))
        .route("/api/v1/resources/queues/{queue}", get(queue))
        .route("/api/v1/resources/queues/{queue}/depth", get(depth))
        .route("/api/v1/resources/overview", get(overview))
        .route("/api/v1/stats/refresh", post(refresh))
}

async fn queues(State(st): State<AppState>) -> Result<Json<Value>> {
    resources::queues(&st).await.map(Json)
}

async fn queue(State(st): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>> {
    let name = Name::parse("queue", &name)?;
    resources::queue(&st, &name).await.map(Json)
}

#[derive(Deserialize)]
struct DepthParams {
    group: Option<String>,
}

async fn depth(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<DepthParams>,
) -> Result<Json<Value>> {
    let name = Name::parse("queue", &name)?;
    Name::optional("group", q.group.as_deref())?;
    resources::depth(&st, &name, q.group.as_deref())
        .await
        .map(Json)
}

async fn overview(State(st): State<AppState>) -> Result<Json<Value>> {
    resources::overview(&st).await.map(Json)
}

/// Any body (usually none) is accepted and ignored.
async fn refresh(State(st): State<AppState>, RawBody(_ignored): RawBody) -> Result<Json<Value>> {
    resources::refresh(&st).await.map(Json)
}
