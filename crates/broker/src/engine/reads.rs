//! Reads by offset (docs/wire.md §23): `fetch` reads the records of named partitions from an
//! offset, `changed` lists a queue's partitions (all, or those written since a time) with the
//! safe time of the answer. Neither takes a lease, moves a cursor or writes anything: two
//! readers asking the same question get the same answer and no consumer group notices them.
//! SQL hands out segments (`sql/functions/reads.sql`); the frames are decoded, and encrypted
//! payloads opened, here.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use queen_proto::{frame, segment};
use serde_json::Value;
use uuid::Uuid;

use crate::engine::encryption::Encryption;
use crate::engine::tenant::{self, Tenant};
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::reads::{self as store, ChangedRow, FetchAsk, FetchRows};

/// Most partitions one call may name (fetch entries, change listings).
pub const MAX_ENTRIES: usize = 1024;
/// A fetch entry's byte budget when it names none, and the most it may ask for.
pub const ENTRY_DEFAULT_BYTES: i64 = 1 << 20;
pub const ENTRY_MAX_BYTES: i64 = 8 << 20;
/// The most payload bytes one fetch call answers, across its entries.
pub const CALL_MAX_BYTES: i64 = 64 << 20;
/// The most records one fetch entry answers.
pub const ENTRY_MAX_RECORDS: usize = 10_000;
/// Segments one fetch entry reads at most.
const ENTRY_MAX_SEGMENTS: i32 = 64;
/// Partitions of one change page when the caller names no limit, and the most.
pub const CHANGED_MAX: i32 = 1000;

/// The refusal a fetch entry answers instead of records.
pub const UNKNOWN: &str = "UNKNOWN_TOPIC_OR_PARTITION";
pub const OUT_OF_RANGE: &str = "OFFSET_OUT_OF_RANGE";

/// One asked partition, as the client names it.
#[derive(Debug, Clone)]
pub struct FetchEntry {
    pub queue: String,
    pub partition: String,
    pub offset: i64,
    /// This entry's byte budget (already clamped).
    pub max_bytes: i64,
}

/// One record read.
#[derive(Debug, Clone)]
pub struct Record {
    pub offset: i64,
    pub transaction_id: String,
    pub message_id: Uuid,
    /// The payload as pushed (opened when encrypted; null when it cannot be).
    pub payload: Value,
    /// When the push that wrote it was stored.
    pub ts: String,
}

/// What a fetch read of one partition.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    pub records: Vec<Record>,
    /// The next offset the partition will assign.
    pub high_watermark: i64,
    /// The oldest offset retention kept.
    pub log_start_offset: i64,
    pub error: Option<&'static str>,
}

/// `POST /api/v1/fetch`: each entry's records from its offset, index-aligned.
pub async fn fetch(
    state: &Shared,
    tenant: &Tenant,
    entries: &[FetchEntry],
    call_max_bytes: i64,
) -> Result<Vec<Fetched>> {
    if entries.len() > MAX_ENTRIES {
        return Err(Error::bad(format!(
            "at most {MAX_ENTRIES} entries per call, got {}",
            entries.len()
        )));
    }
    let queues = entries
        .iter()
        .map(|e| tenant::qualify(tenant, "queue", &e.queue))
        .collect::<Result<Vec<_>>>()?;
    let asks: Vec<FetchAsk<'_>> = entries
        .iter()
        .zip(&queues)
        .map(|(e, q)| FetchAsk {
            queue: q,
            partition: &e.partition,
            offset: e.offset,
        })
        .collect();
    let budget = entries.iter().map(|e| e.max_bytes).max().unwrap_or(0);
    let rows = {
        let db = state.store.conn().await?;
        store::fetch(&db, &asks, budget, ENTRY_MAX_SEGMENTS).await?
    };
    let encryption = state.encryption.clone();
    let entries = entries.to_vec();
    tokio::task::spawn_blocking(move || decode_all(&entries, rows, call_max_bytes, &encryption))
        .await
        .map_err(|e| Error::internal(format!("fetch decode task failed: {e}")))?
}

/// Decodes every entry's segments, spending the call's byte budget in entry order.
fn decode_all(
    entries: &[FetchEntry],
    rows: Vec<FetchRows>,
    call_max_bytes: i64,
    encryption: &Arc<Encryption>,
) -> Result<Vec<Fetched>> {
    let mut left = call_max_bytes;
    entries
        .iter()
        .zip(rows)
        .map(|(entry, rows)| {
            let (fetched, spent) = decode_entry(entry, rows, left, encryption)?;
            left = left.saturating_sub(spent);
            Ok(fetched)
        })
        .collect()
}

/// One entry's records and the payload bytes they spent.
fn decode_entry(
    entry: &FetchEntry,
    rows: FetchRows,
    call_left: i64,
    encryption: &Encryption,
) -> Result<(Fetched, i64)> {
    let Some(ends) = rows.partition else {
        let unknown = Fetched {
            error: Some(UNKNOWN),
            ..Fetched::default()
        };
        return Ok((unknown, 0));
    };
    let mut out = Fetched {
        high_watermark: ends.last_offset + 1,
        log_start_offset: ends.log_start,
        ..Fetched::default()
    };
    if entry.offset < ends.log_start || entry.offset > out.high_watermark {
        out.error = Some(OUT_OF_RANGE);
        return Ok((out, 0));
    }
    let start = entry.max_bytes.min(call_left);
    let mut budget = start;
    for (base, ts, blob) in rows.segments {
        let raw =
            segment::decompress(&blob, segment::MAX_SEGMENT_BYTES).map_err(|e| corrupt(base, e))?;
        let frames = frame::decode_all(&raw).map_err(|e| corrupt(base, e))?;
        for (k, f) in frames.iter().enumerate() {
            let offset = base + i64::try_from(k).unwrap_or(i64::MAX);
            if offset < entry.offset {
                continue;
            }
            let payload = if f.is_encrypted() {
                encryption
                    .open(f.payload)
                    .map_or(Value::Null, |plain| payload_value(&plain))
            } else {
                payload_value(f.payload)
            };
            let size = i64::try_from(f.payload.len()).unwrap_or(i64::MAX);
            // The first record always comes, so a reader moves past a record above its budget.
            if !out.records.is_empty() && (size > budget || out.records.len() >= ENTRY_MAX_RECORDS)
            {
                return Ok((out, start - budget));
            }
            budget -= size;
            out.records.push(Record {
                offset,
                transaction_id: f.transaction_id.to_string(),
                message_id: f.message_uuid(),
                payload,
                ts: ts.clone(),
            });
        }
    }
    Ok((out, start - budget))
}

/// A payload as JSON (empty: null); a payload that is not JSON is shown as text.
fn payload_value(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(bytes).into_owned()))
}

fn corrupt(base: i64, e: impl std::fmt::Display) -> Error {
    Error::internal(format!(
        "stored segment at offset {base} is unreadable: {e}"
    ))
}

/// One change listing asked: a queue, an optional `since`, the page cursor and size.
#[derive(Debug, Clone)]
pub struct ChangedAsk {
    pub queue: String,
    pub since: Option<DateTime<Utc>>,
    /// The last row of the previous page: its write time (with `since`) and name.
    pub after: Option<(Option<DateTime<Utc>>, String)>,
    pub limit: i32,
}

/// One listing: its rows (`None`: no such queue) and whether a page follows.
#[derive(Debug, Clone)]
pub struct Changed {
    pub rows: Option<Vec<ChangedRow>>,
    pub more: bool,
}

/// `POST /api/v1/partitions/changed`: each listing, and the safe time read before them.
pub async fn changed(
    state: &Shared,
    tenant: &Tenant,
    asks: &[ChangedAsk],
) -> Result<(Vec<Changed>, DateTime<Utc>)> {
    if asks.len() > MAX_ENTRIES {
        return Err(Error::bad(format!(
            "at most {MAX_ENTRIES} entries per call, got {}",
            asks.len()
        )));
    }
    let db = state.store.conn().await?;
    let safe = store::safe_time(&db).await?;
    let mut out = Vec::with_capacity(asks.len());
    for ask in asks {
        let queue = tenant::qualify(tenant, "queue", &ask.queue)?;
        let limit = ask.limit.clamp(1, CHANGED_MAX);
        let after = ask.after.as_ref().map(|(at, name)| (*at, name.as_str()));
        let rows = store::changed(&db, &queue, ask.since, after, limit + 1).await?;
        let (rows, more) = match rows {
            None => (None, false),
            Some(mut rows) => {
                let more = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
                rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                (Some(rows), more)
            }
        };
        out.push(Changed { rows, more });
    }
    Ok((out, safe))
}
