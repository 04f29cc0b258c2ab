//! What a pop may cost and how long it may take: its first attempt always runs, every wait
//! ends by its deadline with nothing claimed after it, and it leaves nothing behind for a
//! name nobody configured or pushed to (no queue row, no wake gate).

use std::time::Duration;

use queen_broker::engine::Engine;

use crate::common;
use crate::common::{count, TestBroker};
use crate::support::{get, pop, push_txns, txns, Handle};

/// Far longer than any of these pops may take; only a pop stuck in a wait reaches it.
const STUCK: Duration = Duration::from_secs(10);

fn state(b: &TestBroker) -> &Engine {
    &b.server.as_ref().expect("broker running").state
}

#[tokio::test]
async fn a_waiting_pop_with_a_timeout_inside_the_claim_margin_still_claims_once() {
    let b = common::broker().await;
    push_txns(&b, "short", "Default", &txns("m", 3)).await;
    // 40 ms: inside the 50 ms claim margin, so no later attempt could start, yet long enough
    // for a loaded machine to hand the first attempt a connection (it claims only with one).
    let first = pop(&b, "short", "batch=2&wait=true&timeout=40&autoAck=true").await;
    assert_eq!(first.txns(), ["m-0", "m-1"], "the first attempt runs");
    let zero = pop(&b, "short", "batch=2&wait=true&timeout=0&autoAck=true").await;
    assert_eq!(zero.txns(), ["m-2"]);
    pop(&b, "short", "wait=true&timeout=1").await.assert_empty();
}

#[tokio::test]
async fn a_pop_waiting_for_a_connection_answers_by_its_deadline_and_claims_nothing() {
    let b = common::broker_with(|cfg| cfg.db_pool_size = 2).await;
    push_txns(&b, "starved", "Default", &txns("m", 2)).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(state(&b).store.conn().await.expect("a pool connection"));
    }

    for query in [
        "consumerGroup=g&wait=true&timeout=300",
        "consumerGroup=g&wait=false&timeout=300",
        "wait=true&timeout=300",
    ] {
        let reply = tokio::time::timeout(STUCK, pop(&b, "starved", query))
            .await
            .unwrap_or_else(|_| panic!("{query}: the pop outlived its deadline"));
        reply.assert_empty();
    }

    drop(held);
    let db = b.sql().await;
    let leases = "queen.log_consumers WHERE worker_id IS NOT NULL";
    assert_eq!(count(&db, leases).await, 0, "no lease was taken");
    for group in ["consumerGroup=g", "consumerGroup="] {
        let reply = pop(&b, "starved", &format!("batch=5&{group}")).await;
        assert_eq!(reply.txns(), ["m-0", "m-1"], "{group}: nothing stranded");
        assert_eq!(reply.messages()[0]["deliveryAttempt"], 1);
    }
}

#[tokio::test]
async fn a_pop_of_a_missing_queue_creates_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    for route in [
        "/api/v1/pop/queue/ghost?consumerGroup=g",
        "/api/v1/pop/queue/ghost?consumerGroup=g&subscriptionMode=new",
        "/api/v1/pop/queue/ghost",
        "/api/v1/pop/queue/ghost/partition/p?consumerGroup=g",
    ] {
        get(&b, route).await.assert_empty();
    }
    for table in [
        "queen.queues",
        "queen.log_partitions",
        "queen.consumer_groups_metadata",
        "queen.log_consumers",
    ] {
        assert_eq!(count(&db, table).await, 0, "{table} stays empty");
    }
}

#[tokio::test]
async fn wake_gates_are_freed_when_their_last_waiter_leaves() {
    let b = common::broker().await;
    let gates = || state(&b).wake.gate_count();
    let h = Handle::of(&b);
    let wait_on = |queue: String, timeout: u32| {
        let h = h.clone();
        tokio::spawn(async move {
            h.get(&format!(
                "/api/v1/pop/queue/{queue}?wait=true&timeout={timeout}"
            ))
            .await
        })
    };

    // Waiters that time out.
    let expiring: Vec<_> = (0..5).map(|i| wait_on(format!("gone-{i}"), 200)).collect();
    for w in expiring {
        w.await.expect("waiter").assert_empty();
    }
    assert_eq!(gates(), 0, "every gate left with its last waiter");

    // Waiters woken by a push: the count sees them while they wait.
    let woken: Vec<_> = (0..20)
        .map(|i| wait_on(format!("name-{i}"), 30_000))
        .collect();
    for _ in 0..3000 {
        if gates() == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(gates(), 20, "one gate per waited-on name");
    for i in 0..20 {
        push_txns(&b, &format!("name-{i}"), "Default", &txns("m", 1)).await;
    }
    for w in woken {
        assert_eq!(w.await.expect("waiter").txns(), ["m-0"]);
    }
    assert_eq!(gates(), 0, "every gate left with its last waiter");
    let (_, metrics) = b.get("/metrics").await;
    assert_eq!(metrics["wake"]["gates"], 0);
}
