//! A claim of damaged storage: the engine claims, the HTTP floor renders, and a claimed segment
//! that cannot be decoded is logged and left out of the body. When nothing of the claim could
//! be rendered, the pop answers as an empty pop (204) at once, waiting or not: the claim was
//! the request's one answer, and a leased frame redelivers when its lease expires. What the
//! claim took counts as popped: it left the queue's cursor (autoAck) or was leased.

use std::time::Duration;

use crate::common;
use crate::support::{pop, push_txns, txns};

/// `queen_messages_popped_total` as `b` exposes it (0 before the first pop).
async fn popped_total(b: &common::TestBroker) -> f64 {
    b.series("queen_messages_popped_total", "")
        .await
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_claim_that_renders_no_message_answers_204_at_once() {
    let b = common::broker_with(|cfg| cfg.metrics_cache_ms = 0).await;
    let db = b.sql().await;
    push_txns(&b, "dmg", "p", &txns("d", 2)).await;
    let damaged = db
        .execute(
            "UPDATE queen.log_segments SET blob = '\\x00ff00ff'::bytea",
            &[],
        )
        .await
        .expect("damage the segment");
    assert_eq!(damaged, 1);
    let before = popped_total(&b).await;

    let r = pop(&b, "dmg", "batch=10&wait=true&timeout=5000").await;
    r.assert_empty();
    assert!(
        r.elapsed < Duration::from_millis(2500),
        "answered once the claim rendered nothing, not at the deadline: {:?}",
        r.elapsed
    );
    assert_eq!(popped_total(&b).await - before, 2.0, "the claim took both");

    // The damaged partition stays leased: the next pop finds nothing.
    pop(&b, "dmg", "batch=10").await.assert_empty();
    // An undamaged push beside it is delivered as ever.
    push_txns(&b, "dmg", "q", &txns("ok", 1)).await;
    assert_eq!(pop(&b, "dmg", "batch=10").await.txns(), vec!["ok-0"]);
}
