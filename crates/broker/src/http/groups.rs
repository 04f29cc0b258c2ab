//! `/api/v1/consumer-groups/...` (docs/wire.md §12): listings, lag, delete, subscription update and
//! seek. Parses paths, queries and bodies; the rules live in `engine::groups`.

use axum::extract::State;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use queen_proto::Name;
use serde::Deserialize;
use serde_json::Value;

use crate::engine::groups::{self, SeekTarget};
use crate::error::{Error, Result};
use crate::http::extract::Path;
use crate::http::extract::{json_body, Query, RawBody};
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/consumer-groups", get(list))
        // Static before the parameter: a group cannot shadow the lag report.
        .route("/api/v1/consumer-groups/lagging", get(lagging))
        .route(
            "/api/v1/consumer-groups/{group}",
            get(detail).delete(delete_group),
        )
        .route(
            "/api/v1/consumer-groups/{group}/subscription",
            post(subscription),
        )
        .route(
            "/api/v1/consumer-groups/{group}/queues/{queue}",
            delete(delete_group_on_queue),
        )
        .route(
            "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
            post(seek_queue),
        )
        .route(
            "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
            post(seek_partition),
        )
}

async fn list(State(st): State<AppState>) -> Result<Json<Value>> {
    groups::list(&st).await.map(Json)
}

#[derive(Deserialize)]
struct LaggingParams {
    #[serde(rename = "minLagSeconds")]
    min_lag_seconds: Option<u32>,
}

/// Lag threshold when the request names none (the official client's default).
const DEFAULT_MIN_LAG_SECONDS: u32 = 60;

async fn lagging(
    State(st): State<AppState>,
    Query(q): Query<LaggingParams>,
) -> Result<Json<Value>> {
    let min = q.min_lag_seconds.unwrap_or(DEFAULT_MIN_LAG_SECONDS);
    groups::lagging(&st, i64::from(min)).await.map(Json)
}

async fn detail(State(st): State<AppState>, Path(group): Path<String>) -> Result<Json<Value>> {
    let group = Name::parse("consumerGroup", &group)?;
    groups::detail(&st, &group).await.map(Json)
}

#[derive(Deserialize)]
struct DeleteParams {
    #[serde(rename = "deleteMetadata")]
    delete_metadata: Option<String>,
}

impl DeleteParams {
    /// `true/1/yes` or `false/0/no`; absent means true.
    fn delete_metadata(&self) -> Result<bool> {
        match self
            .delete_metadata
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("true" | "1" | "yes") => Ok(true),
            Some("false" | "0" | "no") => Ok(false),
            Some(other) => Err(Error::bad(format!(
                "deleteMetadata must be true or false, got {other:?}"
            ))),
        }
    }
}

async fn delete_group(
    State(st): State<AppState>,
    Path(group): Path<String>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<Value>> {
    let group = Name::parse("consumerGroup", &group)?;
    groups::delete(&st, &group, None, q.delete_metadata()?)
        .await
        .map(Json)
}

async fn delete_group_on_queue(
    State(st): State<AppState>,
    Path((group, queue)): Path<(String, String)>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<Value>> {
    let (group, queue) = group_queue(&group, &queue)?;
    groups::delete(&st, &group, Some(&queue), q.delete_metadata()?)
        .await
        .map(Json)
}

#[derive(Deserialize)]
struct SubscriptionBody {
    #[serde(rename = "subscriptionTimestamp")]
    subscription_timestamp: Option<String>,
}

async fn subscription(
    State(st): State<AppState>,
    Path(group): Path<String>,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let group = Name::parse("consumerGroup", &group)?;
    let parsed: SubscriptionBody = optional_json(&body)?.unwrap_or(SubscriptionBody {
        subscription_timestamp: None,
    });
    let text = parsed
        .subscription_timestamp
        .ok_or_else(|| Error::bad("subscriptionTimestamp is required"))?;
    let ts = groups::parse_timestamp("subscriptionTimestamp", &text)?;
    groups::set_subscription(&st, &group, ts).await.map(Json)
}

#[derive(Deserialize, Default)]
struct SeekBody {
    #[serde(rename = "toEnd")]
    to_end: Option<bool>,
    timestamp: Option<String>,
}

impl SeekBody {
    fn target(body: &[u8]) -> Result<SeekTarget> {
        let b: SeekBody = optional_json(body)?.unwrap_or_default();
        SeekTarget::from_request(b.to_end, b.timestamp.as_deref())
    }
}

async fn seek_queue(
    State(st): State<AppState>,
    Path((group, queue)): Path<(String, String)>,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let (group, queue) = group_queue(&group, &queue)?;
    let target = SeekBody::target(&body)?;
    groups::seek(&st, &group, &queue, None, target)
        .await
        .map(Json)
}

async fn seek_partition(
    State(st): State<AppState>,
    Path((group, queue, partition)): Path<(String, String, String)>,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let (group, queue) = group_queue(&group, &queue)?;
    let partition = Name::parse("partition", &partition)?;
    let target = SeekBody::target(&body)?;
    groups::seek(&st, &group, &queue, Some(&partition), target)
        .await
        .map(Json)
}

/// The group and queue of a path, each a name by the edge rule.
fn group_queue(group: &str, queue: &str) -> Result<(Name, Name)> {
    Ok((
        Name::parse("consumerGroup", group)?,
        Name::parse("queue", queue)?,
    ))
}

/// A JSON body that clients may omit entirely (the Python client sends no body for `{}`).
fn optional_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<Option<T>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    json_body(body).map(Some)
}
