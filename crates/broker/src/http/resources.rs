//! `/api/v1/resources/{queues,overview}` (docs/wire.md §14) and `POST /api/v1/stats/refresh`
//! (§15): parsing, and the rendering of the engine's rows. `DELETE /api/v1/resources/queues/:queue`
//! belongs to `http::queues`.

use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use queen_proto::wire::QUEUE_MODE;
use queen_proto::Name;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::resources::{
    self, Counts, Overview, PartitionPage, PartitionStats, QueueSummary,
};
use crate::engine::Engine;
use crate::error::Result;
use crate::http::extract::Path;
use crate::http::extract::{limit_param, Query, RawBody};
use crate::http::queues::options_json;

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/resources/queues", get(queues))
        .route("/api/v1/resources/queues/{queue}", get(queue))
        .route("/api/v1/resources/queues/{queue}/depth", get(depth))
        .route("/api/v1/resources/overview", get(overview))
        .route("/api/v1/stats/refresh", post(refresh))
}

async fn queues(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
) -> Result<Json<Value>> {
    let queues: Vec<Value> = resources::queues(&st, &tenant)
        .await?
        .iter()
        .map(summary)
        .collect();
    Ok(Json(json!({ "queues": queues })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueueParams {
    partition_limit: Option<String>,
    partition_after: Option<String>,
}

/// `GET /api/v1/resources/queues/:queue[?partitionLimit=&partitionAfter=]`: the queue with
/// all its partitions, or one page of them by name (docs/wire.md §14).
async fn queue(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path(name): Path<String>,
    Query(q): Query<QueueParams>,
) -> Result<Json<Value>> {
    let name = Name::parse("queue", &name)?;
    let after = Name::optional("partitionAfter", q.partition_after.as_deref())?;
    let page = PartitionPage {
        after: after.as_ref().map(Name::as_str),
        limit: limit_param("partitionLimit", q.partition_limit.as_deref())?,
    };
    let q = resources::queue(&st, &name, page, &tenant).await?;
    let mut body = summary(&q.summary);
    body["config"] = options_json(&q.options);
    body["partitions"] = q.partitions.iter().map(partition).collect();
    body["partitionPage"] = json!({
        "limit": page.limit,
        "after": page.after,
        "next": q.next_partition,
        "total": q.summary.partitions,
    });
    body["consumerGroups"] = q
        .groups
        .iter()
        .map(|g| json!({ "name": g.name, "pending": g.pending, "activeLeases": g.active_leases }))
        .collect();
    Ok(Json(body))
}

#[derive(Deserialize)]
struct DepthParams {
    group: Option<String>,
}

async fn depth(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path(name): Path<String>,
    Query(q): Query<DepthParams>,
) -> Result<Json<Value>> {
    let name = Name::parse("queue", &name)?;
    Name::optional("group", q.group.as_deref())?;
    let group = q
        .group
        .as_deref()
        .filter(|g| !g.is_empty())
        .unwrap_or(QUEUE_MODE);
    let rows = resources::depth(&st, &name, group, &tenant).await?;
    let pending: i64 = rows.iter().map(|r| r.pending).sum();
    let partitions: Vec<Value> = rows
        .iter()
        .filter(|r| r.pending > 0)
        .filter_map(|r| r.partition.as_ref().map(|p| (p, r.pending)))
        .map(|(partition, pending)| json!({ "partition": partition, "pending": pending }))
        .collect();
    Ok(Json(json!({
        "queue": name.as_str(),
        "group": group,
        "pending": pending,
        "partitionsPending": partitions.len(),
        "conflation": rows.first().is_some_and(|r| r.conflation),
        "effectivePending": pending,
        "partitions": partitions,
    })))
}

async fn overview(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
) -> Result<Json<Value>> {
    Ok(Json(render_overview(
        &resources::overview(&st, &tenant).await?,
    )))
}

/// Any body (usually none) is accepted and ignored; the numbers are computed at read time
/// anyway, so the answer is the live overview stamped as refreshed.
async fn refresh(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(_ignored): RawBody,
) -> Result<Json<Value>> {
    let stats = render_overview(&resources::overview(&st, &tenant).await?);
    Ok(Json(
        json!({ "success": true, "message": "Statistics are computed live", "stats": stats }),
    ))
}

fn counts(c: &Counts) -> Value {
    json!({
        "total": c.total,
        "pending": c.pending,
        "processing": c.processing,
        "deadLetter": c.dead_letter,
    })
}

/// One queue of the listing (and the head of its detail).
fn summary(q: &QueueSummary) -> Value {
    json!({
        "id": q.id.to_string(),
        "name": q.name,
        "namespace": q.namespace,
        "task": q.task,
        "priority": q.priority,
        "partitions": q.partitions,
        "createdAt": q.created_at,
        "messages": counts(&q.messages),
    })
}

fn partition(p: &PartitionStats) -> Value {
    json!({
        "id": p.id.to_string(),
        "name": p.name,
        "createdAt": p.created_at,
        "lastActivity": p.last_activity,
        "lastOffset": p.last_offset,
        "logStart": p.log_start,
        "messages": counts(&p.messages),
    })
}

fn render_overview(o: &Overview) -> Value {
    let mut messages = counts(&o.messages);
    messages["completed"] = Value::from(o.completed);
    json!({
        "queues": o.queues,
        "partitions": o.partitions,
        "namespaces": o.namespaces,
        "tasks": o.tasks,
        "consumerGroups": o.consumer_groups,
        "messages": messages,
        "timestamp": o.at,
    })
}
