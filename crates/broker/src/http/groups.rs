//! `/api/v1/consumer-groups/...` (docs/wire.md §12): listings, lag, delete, subscription update and
//! seek. Parses paths, queries and bodies, and renders the engine's rows; the rules live in
//! `engine::groups`.

use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use queen_proto::time::iso_millis;
use queen_proto::Name;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::engine::groups::{self, GroupPartitionRow, GroupQueueRow, LaggingRow, SeekTarget};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::extract::Path;
use crate::http::extract::{json_body, Query, RawBody};

pub fn routes() -> Router<Engine> {
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

async fn list(State(st): State<Engine>, CallerTenant(tenant): CallerTenant) -> Result<Json<Value>> {
    Ok(Json(render_list(&groups::list(&st, &tenant).await?)))
}

#[derive(Deserialize)]
struct LaggingParams {
    #[serde(rename = "minLagSeconds")]
    min_lag_seconds: Option<u32>,
}

/// Lag threshold when the request names none (the official client's default).
const DEFAULT_MIN_LAG_SECONDS: u32 = 60;

async fn lagging(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Query(q): Query<LaggingParams>,
) -> Result<Json<Value>> {
    let min = q.min_lag_seconds.unwrap_or(DEFAULT_MIN_LAG_SECONDS);
    let rows = groups::lagging(&st, i64::from(min), &tenant).await?;
    Ok(Json(rows.iter().map(render_lagging).collect()))
}

async fn detail(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path(group): Path<String>,
) -> Result<Json<Value>> {
    let group = Name::parse("consumerGroup", &group)?;
    Ok(Json(render_detail(
        &groups::detail(&st, &group, &tenant).await?,
    )))
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
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path(group): Path<String>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<Value>> {
    let group = Name::parse("consumerGroup", &group)?;
    let delete_metadata = q.delete_metadata()?;
    let deleted = groups::delete(&st, &st.pop, &group, None, delete_metadata, &tenant).await?;
    Ok(Json(deleted_body(&group, None, deleted, delete_metadata)))
}

async fn delete_group_on_queue(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((group, queue)): Path<(String, String)>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<Value>> {
    let (group, queue) = group_queue(&group, &queue)?;
    let delete_metadata = q.delete_metadata()?;
    let deleted =
        groups::delete(&st, &st.pop, &group, Some(&queue), delete_metadata, &tenant).await?;
    Ok(Json(deleted_body(
        &group,
        Some(&queue),
        deleted,
        delete_metadata,
    )))
}

#[derive(Deserialize)]
struct SubscriptionBody {
    #[serde(rename = "subscriptionTimestamp")]
    subscription_timestamp: Option<String>,
}

async fn subscription(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
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
    let updated = groups::set_subscription(&st, &group, ts, &tenant).await?;
    Ok(Json(json!({
        "success": true,
        "consumerGroup": group.as_str(),
        "subscriptionTimestamp": iso(ts),
        "registrationsUpdated": updated,
    })))
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
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((group, queue)): Path<(String, String)>,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let (group, queue) = group_queue(&group, &queue)?;
    let target = SeekBody::target(&body)?;
    let updated = groups::seek(&st, &st.pop, &group, &queue, None, target, &tenant).await?;
    Ok(Json(seeked_body(&group, &queue, None, target, updated)))
}

async fn seek_partition(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((group, queue, partition)): Path<(String, String, String)>,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let (group, queue) = group_queue(&group, &queue)?;
    let partition = Name::parse("partition", &partition)?;
    let target = SeekBody::target(&body)?;
    let updated = groups::seek(
        &st,
        &st.pop,
        &group,
        &queue,
        Some(&partition),
        target,
        &tenant,
    )
    .await?;
    Ok(Json(seeked_body(
        &group,
        &queue,
        Some(&partition),
        target,
        updated,
    )))
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

fn iso(t: DateTime<Utc>) -> String {
    iso_millis(t.timestamp_micros())
}

/// `GET /api/v1/consumer-groups`: one element per group with its queues; `state` is `idle`
/// with nothing pending, `active` while a member holds a lease, else `lagging`.
fn render_list(rows: &[GroupQueueRow]) -> Value {
    let mut out: Vec<Value> = Vec::new();
    for group in rows.chunk_by(|a, b| a.group == b.group) {
        let members: i64 = group.iter().map(|r| r.active_leases).sum();
        let total_lag: i64 = group.iter().map(|r| r.pending).sum();
        let max_lag = group.iter().map(|r| r.time_lag_seconds).max().unwrap_or(0);
        let state = match (total_lag, members) {
            (0, _) => "idle",
            (_, m) if m > 0 => "active",
            _ => "lagging",
        };
        let queues: Vec<Value> = group
            .iter()
            .map(|r| {
                json!({
                    "queue": r.queue,
                    "partitions": r.partitions,
                    "pending": r.pending,
                    "activeLeases": r.active_leases,
                    "timeLagSeconds": r.time_lag_seconds,
                    "subscriptionMode": r.subscription_mode,
                    "subscriptionTimestamp": r.subscription_timestamp,
                })
            })
            .collect();
        out.push(json!({
            "name": group[0].group,
            "queues": queues,
            "members": members,
            "totalLag": total_lag,
            "maxTimeLag": max_lag,
            "state": state,
        }));
    }
    Value::Array(out)
}

/// `GET /api/v1/consumer-groups/:group`: an object keyed by queue name.
fn render_detail(rows: &[GroupPartitionRow]) -> Value {
    let mut out = Map::new();
    for queue in rows.chunk_by(|a, b| a.queue == b.queue) {
        let first = &queue[0];
        let partitions: Vec<Value> = queue
            .iter()
            .map(|r| {
                json!({
                    "partition": r.partition,
                    "partitionId": r.partition_id,
                    "workerId": r.lease_id,
                    "lastConsumedAt": r.last_consumed_at,
                    "totalConsumed": r.total_consumed,
                    "offsetLag": r.offset_lag,
                    "timeLagSeconds": r.time_lag_seconds,
                    "leaseActive": r.lease_active,
                })
            })
            .collect();
        out.insert(
            first.queue.clone(),
            json!({
                "conflation": first.conflation,
                "subscriptionMode": first.subscription_mode,
                "subscriptionTimestamp": first.subscription_timestamp,
                "partitions": partitions,
            }),
        );
    }
    Value::Object(out)
}

/// One element of `GET /api/v1/consumer-groups/lagging` (snake_case, as the wire has it).
fn render_lagging(r: &LaggingRow) -> Value {
    json!({
        "consumer_group": r.group,
        "queue_name": r.queue,
        "partition_name": r.partition,
        "partition_id": r.partition_id,
        "worker_id": r.lease_id,
        "offset_lag": r.offset_lag,
        "time_lag_seconds": r.time_lag_seconds,
        "lag_hours": lag_hours(r.time_lag_seconds),
        "oldest_unconsumed_at": r.oldest_unconsumed_at,
        "last_consumed_at": r.last_consumed_at,
    })
}

/// Seconds as hours rounded to two decimals, halves away from zero.
fn lag_hours(seconds: i64) -> f64 {
    (seconds as f64 / 36.0).round() / 100.0
}

fn seeked_body(
    group: &str,
    queue: &str,
    partition: Option<&str>,
    target: SeekTarget,
    updated: i32,
) -> Value {
    let (to_end, ts) = match target {
        SeekTarget::End => (true, None),
        SeekTarget::Timestamp(t) => (false, Some(iso(t))),
    };
    let body = json!({
        "success": true,
        "consumerGroup": group,
        "queueName": queue,
        "seekToEnd": to_end,
        "targetTimestamp": ts,
        "partitionsUpdated": updated,
    });
    with_name(body, "partition", partition)
}

fn deleted_body(group: &str, queue: Option<&str>, deleted: i32, metadata_deleted: bool) -> Value {
    let body = json!({
        "success": true,
        "consumerGroup": group,
        "deletedPartitions": deleted,
        "metadataDeleted": metadata_deleted,
    });
    with_name(body, "queueName", queue)
}

/// `body` with `key` set to the name the request was scoped to, when it was.
fn with_name(mut body: Value, key: &str, name: Option<&str>) -> Value {
    if let Some(name) = name {
        body[key] = Value::from(name);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_hours_round_to_two_decimals() {
        assert_eq!(lag_hours(0), 0.0);
        assert_eq!(lag_hours(3600), 1.0);
        assert_eq!(lag_hours(5400), 1.5);
        assert_eq!(lag_hours(18), 0.01);
        assert_eq!(lag_hours(17), 0.0);
        assert_eq!(lag_hours(500), 0.14);
    }
}
