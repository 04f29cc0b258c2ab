//! Producers: batches of 1–20 messages to a random queue and partition, JSON or binary, paced
//! over the push phase. A batch is retried (same transactionIds, same partition) until every
//! item is answered `queued`/`duplicate`/`buffered` (the broker vouches for a spooled push as
//! for a stored one), like a client that must not lose what it sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_client::PushItem;
use rand::Rng;

use super::{error_text, status_of, Ctx, PARTITIONS, QUEUES};
use crate::history::{PushOutcome, PushRec};

const MAX_BATCH: usize = 20;
/// Long enough to ride out a PostgreSQL restart (backoff caps at 2 s).
const MAX_ATTEMPTS: u32 = 60;
/// Share of batches pushed twice.
const RESEND: f64 = 0.05;

pub async fn run(ctx: Arc<Ctx>, id: usize) {
    let p = &ctx.profile;
    let quota = p.messages / p.producers + if id == 0 { p.messages % p.producers } else { 0 };
    let start = Instant::now();
    let mut sent = 0;
    while sent < quota {
        let (k, queue, partition, binary) = {
            let mut rng = rand::thread_rng();
            (
                rng.gen_range(1..=MAX_BATCH).min(quota - sent),
                QUEUES[rng.gen_range(0..QUEUES.len())],
                format!("p{}", rng.gen_range(0..PARTITIONS)),
                rng.gen_bool(0.5),
            )
        };
        let items: Vec<PushItem> = (sent..sent + k)
            .map(|n| {
                let txn = format!("m{id}-{n}");
                let payload = format!(r#"{{"producer":{id},"n":{n}}}"#);
                PushItem::raw(payload, Some(txn)).expect("valid JSON")
            })
            .collect();
        // A client that lost the answer sends the batch again: `duplicate` under the dedup
        // window, a second stored copy without it.
        let resend = rand::thread_rng().gen_bool(RESEND);
        let again = resend.then(|| items.clone());
        push_until_stored(&ctx, queue, &partition, items, binary).await;
        if let Some(items) = again {
            push_until_stored(&ctx, queue, &partition, items, binary).await;
        }
        sent += k;
        // Pace: the quota spreads over the push phase so faults hit a running workload.
        let due = start + p.push_for.mul_f64(sent as f64 / quota as f64);
        tokio::time::sleep_until(due.into()).await;
    }
}

async fn push_until_stored(
    ctx: &Ctx,
    queue: &str,
    partition: &str,
    mut pending: Vec<PushItem>,
    binary: bool,
) {
    for attempt in 0..MAX_ATTEMPTS {
        let q = ctx.queen().queue(queue).partition(partition);
        let res = if binary {
            q.push_binary(&pending, false).await
        } else {
            q.push(&pending).await
        };
        ctx.history
            .http("push", status_of(&res, 201), error_text(&res));
        let rec = |item: &PushItem, outcome| PushRec {
            queue: queue.to_string(),
            partition: partition.to_string(),
            txn: item.transaction_id.clone().unwrap_or_default(),
            outcome,
        };
        match res {
            Ok(results) => {
                let mut retry = Vec::new();
                let mut recs = Vec::new();
                for (item, r) in pending.into_iter().zip(results) {
                    if matches!(r.status.as_str(), "queued" | "duplicate" | "buffered") {
                        recs.push(rec(&item, PushOutcome::Stored(r.status)));
                    } else {
                        recs.push(rec(&item, PushOutcome::Failed(r.error.unwrap_or(r.status))));
                        retry.push(item);
                    }
                }
                ctx.history.pushes(recs);
                pending = retry;
            }
            Err(queen_client::Error::Api {
                status, message, ..
            }) if status.is_client_error() && status.as_u16() != 429 => {
                // Our input is valid: a 4xx here is a finding, kept in the HTTP log.
                let recs = pending
                    .iter()
                    .map(|i| rec(i, PushOutcome::Failed(format!("{status}: {message}"))));
                ctx.history.pushes(recs.collect::<Vec<_>>());
                return;
            }
            Err(_) => {
                let recs = pending.iter().map(|i| rec(i, PushOutcome::Unknown));
                ctx.history.pushes(recs.collect::<Vec<_>>());
            }
        }
        if pending.is_empty() {
            return;
        }
        let backoff =
            Duration::from_millis(100 * u64::from(attempt + 1)).min(Duration::from_secs(2));
        tokio::time::sleep(backoff).await;
    }
}
