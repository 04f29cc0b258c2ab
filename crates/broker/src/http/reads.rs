//! The reads by offset (docs/wire.md §23): `POST /api/v1/fetch` and
//! `POST /api/v1/partitions/changed` — the bodies parsed and checked, the answers rendered.
//! Both read the caller's tenant's queues only and need the `read-only` role.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use queen_proto::time::iso_micros;
use queen_proto::Name;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::reads::{
    self, ChangedAsk, FetchEntry, CALL_MAX_BYTES, CHANGED_MAX, ENTRY_DEFAULT_BYTES,
    ENTRY_MAX_BYTES, UNKNOWN,
};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::auth::CallerTenant;
use crate::http::extract::{json_object, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/fetch", post(fetch))
        .route("/api/v1/partitions/changed", post(changed))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FetchBody {
    entries: Vec<FetchItem>,
    max_bytes: Option<i64>,
    /// Long polling is not served: absent or 0 only.
    max_wait_ms: Option<i64>,
    min_bytes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FetchItem {
    queue: String,
    partition: String,
    offset: i64,
    max_bytes: Option<i64>,
}

/// A byte budget: absent is `default`, below 1 refused, above `max` clamped.
fn budget(field: &str, asked: Option<i64>, default: i64, max: i64) -> Result<i64> {
    match asked {
        None => Ok(default),
        Some(n) if n < 1 => Err(Error::bad(format!("{field} must be at least 1"))),
        Some(n) => Ok(n.min(max)),
    }
}

async fn fetch(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let b: FetchBody = json_object(&body)?;
    for (field, v) in [("maxWaitMs", b.max_wait_ms), ("minBytes", b.min_bytes)] {
        if v.is_some_and(|v| v != 0) {
            return Err(Error::bad(format!(
                "{field} is not served: a fetch answers at once"
            )));
        }
    }
    let call = budget("maxBytes", b.max_bytes, CALL_MAX_BYTES, CALL_MAX_BYTES)?;
    let entries = b
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let at = |e: Error| Error::bad(format!("entries[{i}]: {e}"));
            if e.offset < 0 {
                return Err(at(Error::bad("offset must be at least 0")));
            }
            Ok(FetchEntry {
                queue: Name::parse("queue", &e.queue)
                    .map_err(|e| at(e.into()))?
                    .into_string(),
                partition: Name::parse("partition", &e.partition)
                    .map_err(|e| at(e.into()))?
                    .into_string(),
                offset: e.offset,
                max_bytes: budget(
                    "maxBytes",
                    e.max_bytes,
                    ENTRY_DEFAULT_BYTES,
                    ENTRY_MAX_BYTES,
                )
                .map_err(at)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let fetched = reads::fetch(&st, &tenant, &entries, call).await?;
    let rendered: Vec<Value> = entries
        .iter()
        .zip(fetched)
        .map(|(e, f)| {
            let records: Vec<Value> = f
                .records
                .iter()
                .map(|r| {
                    json!({
                        "offset": r.offset, "transactionId": r.transaction_id,
                        "messageId": r.message_id.to_string(), "payload": r.payload, "ts": r.ts,
                    })
                })
                .collect();
            let mut v = json!({
                "queue": e.queue, "partition": e.partition, "records": records,
                "highWatermark": f.high_watermark, "logStartOffset": f.log_start_offset,
            });
            if let Some(error) = f.error {
                v["error"] = json!(error);
            }
            v
        })
        .collect();
    Ok(Json(json!({ "entries": rendered })))
}

#[derive(Deserialize)]
struct ChangedBody {
    entries: Vec<ChangedItem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangedItem {
    queue: String,
    limit: Option<i64>,
    since: Option<String>,
    after: Option<String>,
}

async fn changed(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let b: ChangedBody = json_object(&body)?;
    let asks = b
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| ask(e).map_err(|e| Error::bad(format!("entries[{i}]: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let (listings, safe) = reads::changed(&st, &tenant, &asks).await?;
    let entries: Vec<Value> = asks
        .iter()
        .zip(listings)
        .map(|(ask, listing)| {
            let Some(rows) = listing.rows else {
                return json!({ "partitions": [], "next": null, "error": UNKNOWN });
            };
            let next = listing
                .more
                .then(|| rows.last())
                .flatten()
                .map(|last| cursor(ask.since.map(|_| last.last_write_at), &last.name));
            let partitions: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "name": r.name, "id": r.id.to_string(), "lastOffset": r.last_offset,
                        "logStart": r.log_start,
                        "lastWriteAt": iso_micros(r.last_write_at.timestamp_micros()),
                    })
                })
                .collect();
            json!({ "partitions": partitions, "next": next })
        })
        .collect();
    Ok(Json(json!({
        "entries": entries, "safeTime": iso_micros(safe.timestamp_micros()),
    })))
}

fn ask(e: ChangedItem) -> Result<ChangedAsk> {
    let since = e.since.as_deref().map(parse_time).transpose()?;
    let after = e.after.as_deref().map(uncursor).transpose()?;
    if after
        .as_ref()
        .is_some_and(|(at, _)| at.is_some() != since.is_some())
    {
        return Err(Error::bad(
            "after is a cursor of a listing with another since",
        ));
    }
    Ok(ChangedAsk {
        queue: Name::parse("queue", &e.queue)?.into_string(),
        since,
        after,
        limit: i32::try_from(e.limit.unwrap_or(i64::from(CHANGED_MAX)).clamp(1, 1 << 20))
            .unwrap_or(CHANGED_MAX),
    })
}

fn parse_time(text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::bad(format!("since is not an ISO-8601 time ({e}): {text}")))
}

/// The opaque page cursor: the last row's write time (listings with `since`) and name.
fn cursor(at: Option<DateTime<Utc>>, name: &str) -> String {
    let at = at.map_or_else(String::new, |t| iso_micros(t.timestamp_micros()));
    URL_SAFE_NO_PAD.encode(format!("{at}\n{name}"))
}

fn uncursor(text: &str) -> Result<(Option<DateTime<Utc>>, String)> {
    let bad = || Error::bad("after is not a cursor this broker issued");
    let raw = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (at, name) = raw.split_once('\n').ok_or_else(bad)?;
    let at = (!at.is_empty())
        .then(|| parse_time(at))
        .transpose()
        .map_err(|_| bad())?;
    Ok((at, name.to_string()))
}
