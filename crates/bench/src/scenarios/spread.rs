//! Push cells with many partitions per request and per queue (issue 12): requests of 100 items
//! whose items spread over 100 distinct partitions of a wide queue (`spread_partitions` of the
//! profile, 10 000), against the same requests spread over a 10-partition queue (10 items per
//! partition), both measured like the push matrix (`push::measure`: saturating warm-up,
//! saturating capacity phase, open-loop latency phase at 80 % of it, same in-flight cap); the
//! wide row carries `wide_vs_narrow`, the ratio of the two capacities. Before the wide cell,
//! the first push creates the wide queue's partitions: 100-item requests each naming 100
//! partitions never seen before, until every partition exists, `inflight` requests at a time;
//! its msg/s counts the whole creation. Every cell is verified like the push matrix (messages
//! stored = items acknowledged `queued`); the first push also by the partitions that exist
//! after it.
//!
//! A request names its partitions in runs (all items of a partition together), as one JSON
//! push (`--binary-push`: one `QPB1` group per partition), sent straight over HTTP because the
//! SDK's push names one partition.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use queen_client::retry429;
use queen_client::{PushItem, PushResult};
use queen_proto::push_bin::{encode_push_plain, Batch, BatchItem};
use queen_proto::wire::PUSH_CONTENT_TYPE;
use serde::Serialize;
use serde_json::value::RawValue;

use super::push::{self, Outcome};
use super::Ctx;
use crate::openloop;
use crate::report::{Latency, Row};

/// Items per request.
const BATCH: u32 = 100;
/// Partitions a request of the wide queue (and of the first push) spreads over.
const WIDE_PER_REQUEST: u32 = 100;
/// Partitions of the narrow queue; a request covers them all.
const NARROW_PARTITIONS: u32 = 10;
/// The first-push row's cell starts with this (the targets summary finds it by it).
pub const FIRST_PUSH: &str = "first push";

/// A queue of `partitions` partitions, each request of which covers `per_request` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub partitions: u32,
    pub per_request: u32,
}

impl Shape {
    /// Request `n`'s runs: (partition index, first item, item count), `BATCH / per_request`
    /// items each, over the `per_request` partitions after the previous request's (wrapping).
    pub fn runs(self, n: u64) -> Vec<(u32, u32, u32)> {
        let each = BATCH / self.per_request;
        (0..self.per_request)
            .map(|k| {
                let p =
                    (n * u64::from(self.per_request) + u64::from(k)) % u64::from(self.partitions);
                (p as u32, k * each, each)
            })
            .collect()
    }

    /// Requests that name every partition once (the first push).
    pub fn covering_requests(self) -> u64 {
        u64::from(self.partitions.div_ceil(self.per_request))
    }

    pub fn cell(self) -> String {
        format!(
            "bp-{BATCH} over {} of {} part",
            self.per_request, self.partitions
        )
    }
}

fn partition_name(p: u32) -> String {
    format!("s{p}")
}

/// Where a cell pushes.
pub(super) struct Lane {
    http: reqwest::Client,
    url: String,
    pub(super) queue: String,
    shape: Shape,
    binary: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireItem<'a> {
    queue: &'a str,
    partition: &'a str,
    payload: &'a RawValue,
    transaction_id: Option<&'a str>,
}

#[derive(Serialize)]
struct WireBody<'a> {
    items: Vec<WireItem<'a>>,
}

impl Lane {
    pub(super) fn new(ctx: &Ctx, queue: String, shape: Shape) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Arc::new(Self {
            http,
            url: format!("{}/api/v1/push", ctx.queen.url()),
            queue,
            shape,
            binary: ctx.overrides.binary_push,
        })
    }

    /// The body of request `n` carrying `items`, and its content type.
    fn body(&self, n: u64, items: &[PushItem]) -> Result<(Vec<u8>, &'static str), String> {
        let runs = self.shape.runs(n);
        let names: Vec<String> = runs.iter().map(|r| partition_name(r.0)).collect();
        let slice =
            |(_, first, count): (u32, u32, u32)| &items[first as usize..(first + count) as usize];
        if self.binary {
            let groups: Vec<Batch<'_>> = runs
                .iter()
                .zip(&names)
                .map(|(run, name)| Batch {
                    queue: &self.queue,
                    partition: name,
                    items: slice(*run)
                        .iter()
                        .map(|i| BatchItem {
                            transaction_id: i.transaction_id.as_deref(),
                            payload: i.payload.get().as_bytes(),
                        })
                        .collect(),
                })
                .collect();
            let body = encode_push_plain(&groups, false, false).map_err(|e| e.to_string())?;
            return Ok((body, PUSH_CONTENT_TYPE));
        }
        let wire = WireBody {
            items: runs
                .iter()
                .zip(&names)
                .flat_map(|(run, name)| {
                    slice(*run).iter().map(|i| WireItem {
                        queue: &self.queue,
                        partition: name,
                        payload: &i.payload,
                        transaction_id: i.transaction_id.as_deref(),
                    })
                })
                .collect(),
        };
        let body = serde_json::to_vec(&wire).map_err(|e| e.to_string())?;
        Ok((body, "application/json"))
    }

    /// Pushes request `n`'s `items`; counts the answer into `outcome`.
    pub(super) async fn send(
        self: Arc<Self>,
        n: u64,
        items: Vec<PushItem>,
        outcome: Arc<Outcome>,
    ) -> Result<(), String> {
        let (body, content_type) = self.body(n, &items)?;
        let body = bytes::Bytes::from(body);
        // A 429 from the push door is sent again after its Retry-After, as the official client does.
        let resp = retry429::send(retry429::DEFAULT_ATTEMPTS, || {
            self.http
                .post(&self.url)
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body.clone())
        })
        .await
        .map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ));
        }
        let results: Vec<PushResult> = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        if results.len() != items.len() {
            return Err(format!(
                "push answered {} results for {} items",
                results.len(),
                items.len()
            ));
        }
        push::tally(&results, &outcome)
    }
}

/// The narrow cell, the first push into the wide queue, the wide cell.
pub async fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    if ctx.profile.spread_partitions == 0 {
        return Ok(Vec::new());
    }
    let narrow_shape = Shape {
        partitions: NARROW_PARTITIONS,
        per_request: NARROW_PARTITIONS,
    };
    let wide_shape = Shape {
        partitions: ctx.profile.spread_partitions,
        per_request: WIDE_PER_REQUEST,
    };
    let narrow = Lane::new(ctx, queue(ctx, narrow_shape).await?, narrow_shape);
    let narrow_row = measured(ctx, &narrow, 0).await?;
    let wide = Lane::new(ctx, queue(ctx, wide_shape).await?, wide_shape);
    let first_row = first_push(ctx, &wide).await?;
    let mut wide_row = measured(ctx, &wide, wide_shape.covering_requests()).await?;
    let ratio = wide_row.msgs_per_s / narrow_row.msgs_per_s.max(1e-9);
    wide_row.extra.insert("wide_vs_narrow".into(), ratio);
    eprintln!(
        "  push {}: {:.0} msg/s; {}: {:.0} msg/s; {}: {:.0} msg/s (ratio {ratio:.2})",
        first_row.cell,
        first_row.msgs_per_s,
        narrow_row.cell,
        narrow_row.msgs_per_s,
        wide_row.cell,
        wide_row.msgs_per_s
    );
    Ok(vec![narrow_row, first_row, wide_row])
}

/// Creates the cell's queue (no partition yet); its name.
pub(super) async fn queue(ctx: &Ctx, shape: Shape) -> Result<String> {
    let name = ctx.queue_name(&format!("spread-p{}", shape.partitions));
    ctx.queen
        .queue(&name)
        .configure(serde_json::json!({ "leaseTime": 30 }))
        .await?;
    Ok(name)
}

/// The items of request `n` (sequence numbers `n * BATCH ..`, unique per queue).
pub(super) fn items(ctx: &Ctx, n: u64, due: Instant) -> Vec<PushItem> {
    push::items(ctx, n * u64::from(BATCH), BATCH, ctx.clock.micros(due))
}

/// A cell measured like the push matrix; its requests are numbered from `first_request` (the
/// requests before it already stored their transactionIds).
async fn measured(ctx: &Ctx, lane: &Arc<Lane>, first_request: u64) -> Result<Row> {
    let before = stored(ctx, &lane.queue).await;
    let outcome = Arc::new(Outcome::default());
    let next = AtomicU64::new(first_request);
    let send = |_slot: u64, due: Instant| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        lane.clone().send(n, items(ctx, n, due), outcome.clone())
    };
    let phases = push::measure(ctx, BATCH, send).await?;
    let mut row = Row::new("push", lane.shape.cell(), "queen-rs");
    phases.fill(&mut row, BATCH);
    let row = row.with_usage(phases.usage);
    let row = push::verify(ctx, &lane.queue, &outcome, row, before).await;
    Ok(push::with_ceiling(ctx, row, BATCH))
}

async fn stored(ctx: &Ctx, queue: &str) -> u64 {
    ctx.stored_messages(queue).await.unwrap_or(0).max(0) as u64
}

/// The first push into the wide queue: every partition named once, `inflight` requests at a
/// time; msg/s over the whole creation, request latency closed-loop.
async fn first_push(ctx: &Ctx, lane: &Arc<Lane>) -> Result<Row> {
    let shape = lane.shape;
    let outcome = Arc::new(Outcome::default());
    ctx.checkpoint().await?;
    let start = ctx.meter.start().await?;
    let stats = openloop::run_count(shape.covering_requests(), ctx.profile.inflight, |n, due| {
        lane.clone().send(n, items(ctx, n, due), outcome.clone())
    })
    .await;
    let usage = ctx.meter.since(&start).await?;
    let mut row = Row::new(
        "push",
        format!(
            "{FIRST_PUSH} bp-{BATCH} over {} new of {} part",
            shape.per_request, shape.partitions
        ),
        "queen-rs",
    );
    row.msgs = stats.ok * u64::from(BATCH);
    row.msgs_per_s = row.msgs as f64 / stats.elapsed.as_secs_f64().max(1e-3);
    row.latency = Latency::of(&stats.latency_us);
    row.errors = stats.errors;
    row.extra
        .insert("seconds".into(), stats.elapsed.as_secs_f64());
    row.notes
        .push("latency: request round trips, closed loop at the in-flight cap".into());
    if let Some(e) = &stats.first_error {
        row.notes.push(format!("first error: {e}"));
    }
    let mut row = push::verify(ctx, &lane.queue, &outcome, row.with_usage(usage), 0).await;
    if let Some(made) = ctx.partitions_of(&lane.queue).await {
        row.extra.insert("partitions".into(), made as f64);
        if made != i64::from(shape.partitions) {
            row.notes.push(format!(
                "PARTITIONS: {made} exist, {} expected",
                shape.partitions
            ));
            if let Some(v) = row.verification.as_mut() {
                v.ok = false;
            }
        }
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_request_names_100_distinct_partitions_one_item_each() {
        let wide = Shape {
            partitions: 10_000,
            per_request: 100,
        };
        let runs = wide.runs(99);
        let mut parts: Vec<u32> = runs.iter().map(|r| r.0).collect();
        parts.dedup();
        assert_eq!(parts.len(), 100);
        assert_eq!((parts[0], parts[99]), (9_900, 9_999));
        assert!(runs.iter().all(|r| r.2 == 1));
        assert_eq!(wide.runs(100)[0].0, 0, "wraps after the last partition");
    }

    #[test]
    fn the_first_push_names_every_partition_exactly_once() {
        let wide = Shape {
            partitions: 10_000,
            per_request: 100,
        };
        let mut seen = vec![0u32; 10_000];
        for n in 0..wide.covering_requests() {
            for (p, _, count) in wide.runs(n) {
                seen[p as usize] += count;
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
    }

    #[test]
    fn a_narrow_request_covers_its_10_partitions_with_10_items_each() {
        let narrow = Shape {
            partitions: 10,
            per_request: 10,
        };
        let runs = narrow.runs(7);
        assert_eq!(runs.len(), 10);
        let firsts: Vec<u32> = runs.iter().map(|r| r.1).collect();
        assert_eq!(firsts, (0..10).map(|k| k * 10).collect::<Vec<_>>());
        let mut parts: Vec<u32> = runs.iter().map(|r| r.0).collect();
        parts.sort_unstable();
        assert_eq!(parts, (0..10).collect::<Vec<_>>());
        assert_eq!(narrow.cell(), "bp-100 over 10 of 10 part");
    }
}
