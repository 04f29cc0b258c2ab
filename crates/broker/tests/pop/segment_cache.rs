//! The segment cache (docs/engine.md §5.8): once a queue is consumed, a pop of segments this
//! broker just committed renders them from the kept frames; a stored blob that is not the one
//! kept is decompressed, so the answer is always what PostgreSQL holds; with the cache off every
//! claimed segment is decompressed and the answers are the same.

use queen_proto::frame::Frame;
use queen_proto::segment;
use serde_json::{json, Value};

use crate::common;
use crate::support::{pop, push_txns, txns};

/// (hits, misses) of the segment cache in `/metrics/prometheus`.
async fn tally(b: &common::TestBroker) -> (f64, f64) {
    let label = r#"accelerator="segment_cache""#;
    let hits = b.series("queen_accelerator_hits_total", label).await;
    let misses = b.series("queen_accelerator_misses_total", label).await;
    (hits.unwrap_or(0.0), misses.unwrap_or(0.0))
}

/// The `{"txn": …}` payloads of an answer, in order.
fn payload_txns(answer: &[Value]) -> Vec<String> {
    answer
        .iter()
        .map(|m| m["data"]["txn"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Pushes two segments to `queue` (the first marks it consumed when popped) and pops the
/// second; returns its answer's payloads.
async fn second_segment(b: &common::TestBroker, queue: &str) -> Vec<String> {
    push_txns(b, queue, "p", &txns("a", 3)).await;
    assert_eq!(
        pop(b, queue, "batch=10&autoAck=true").await.txns(),
        txns("a", 3)
    );
    push_txns(b, queue, "p", &txns("b", 4)).await;
    let r = pop(b, queue, "batch=10&autoAck=true").await;
    assert_eq!(r.txns(), txns("b", 4));
    payload_txns(&r.messages())
}

#[tokio::test]
async fn a_consumed_queue_is_rendered_from_the_kept_frames() {
    let b = common::broker_with(|cfg| cfg.metrics_cache_ms = 0).await;
    assert_eq!(second_segment(&b, "sc").await, txns("b", 4));
    assert_eq!(
        tally(&b).await,
        (1.0, 1.0),
        "the first claim found nothing kept (its queue was not consumed yet), the second hit"
    );
}

#[tokio::test]
async fn off_every_claimed_segment_is_decompressed() {
    let b = common::broker_with(|cfg| {
        cfg.metrics_cache_ms = 0;
        cfg.segment_cache_mb = 0;
    })
    .await;
    assert_eq!(second_segment(&b, "sc").await, txns("b", 4));
    assert_eq!(tally(&b).await, (0.0, 0.0));
}

#[tokio::test]
async fn a_stored_blob_that_is_not_the_kept_one_is_decompressed() {
    let b = common::broker_with(|cfg| cfg.metrics_cache_ms = 0).await;
    push_txns(&b, "sc", "p", &txns("a", 1)).await;
    pop(&b, "sc", "batch=10&autoAck=true")
        .await
        .assert_delivered();
    push_txns(&b, "sc", "p", &txns("b", 2)).await;

    // Someone else's segment now sits at the kept one's place, with the same frame count.
    let mut frames = Vec::new();
    for txn in ["c-0", "c-1"] {
        let payload = json!({ "txn": txn }).to_string();
        Frame {
            flags: 0,
            message_id: *uuid::Uuid::now_v7().as_bytes(),
            trace_id: None,
            transaction_id: txn,
            producer_sub: None,
            payload: payload.as_bytes(),
        }
        .encode_into(&mut frames)
        .expect("encode a frame");
    }
    let replaced = b
        .sql()
        .await
        .execute(
            "UPDATE queen.log_segments SET blob = $1 WHERE base_offset = 1",
            &[&segment::compress(&frames, 1)],
        )
        .await
        .expect("replace the segment's blob");
    assert_eq!(replaced, 1);

    let r = pop(&b, "sc", "batch=10&autoAck=true").await;
    assert_eq!(
        r.txns(),
        txns("c", 2),
        "what PostgreSQL holds, not what was kept"
    );
    assert_eq!(payload_txns(&r.messages()), txns("c", 2));
    assert_eq!(tally(&b).await, (0.0, 2.0));
}
