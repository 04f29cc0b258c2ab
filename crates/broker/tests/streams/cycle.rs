//! The cycle commit: state, sink pushes and source ack together or not at all; a retry after
//! a lost answer answered again without a second push or ack; `release_lease` deciding
//! between a full-batch cycle and a gate's partial ack.

use serde_json::{json, Value};

use crate::{common, cycle, depth, full_cycle, register, state};

const GROUP: &str = "streams.q";

async fn popped(b: &common::TestBroker, batch: usize) -> Option<common::Popped> {
    common::pop(b, "src", None, Some(GROUP), batch, "").await
}

#[tokio::test]
async fn a_cycle_commits_state_pushes_and_ack_together() {
    let b = common::broker().await;
    let db = b.sql().await;
    let q = register(&b, "q", "h").await;
    b.push("src", "p1", &[json!(1), json!(2), json!(3)]).await;
    let batch = popped(&b, 10).await.expect("three messages");
    let body = full_cycle(&q, GROUP, &batch);

    let answer = cycle(&b, &body).await;
    assert_eq!(
        (
            answer["success"].clone(),
            answer["pushed"].clone(),
            answer["state_ops_applied"].clone()
        ),
        (json!(true), json!(3), json!(1)),
        "{answer}"
    );
    assert_eq!(depth(&db, "sink").await, 3);
    let pid = batch.partition_id().to_string();
    assert_eq!(state(&b, &q, &pid).await, json!({"seen": {"n": 3}}));
    assert!(popped(&b, 10).await.is_none(), "the source batch is acked");
}

#[tokio::test]
async fn a_retried_cycle_commits_once() {
    let b = common::broker().await;
    let db = b.sql().await;
    let q = register(&b, "q", "h").await;
    b.push("src", "p1", &[json!("a"), json!("b")]).await;
    let batch = popped(&b, 10).await.expect("two messages");
    let body = full_cycle(&q, GROUP, &batch);

    // The first answer is lost on the way back; the client sends the same cycle again.
    let first = cycle(&b, &body).await;
    assert_eq!(first["success"], true, "{first}");
    let retry = cycle(&b, &body).await;
    assert_eq!(retry["success"], true, "a retry is not a failure: {retry}");
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(retry["pushed"], first["pushed"]);
    assert_eq!(depth(&db, "sink").await, 2, "no second push");

    // An ack-less (idle-flush) cycle is remembered the same way.
    let flush = json!({"query_id": q, "partition_id": batch.messages[0]["partitionId"],
        "state_ops": [{"type": "delete", "key": "seen"}],
        "push_items": [{"queue": "sink", "partition": "p", "payload": {"window": 1}}], "ack": null});
    assert_eq!(cycle(&b, &flush).await["replayed"], Value::Null);
    assert_eq!(cycle(&b, &flush).await["replayed"], true);
    assert_eq!(depth(&db, "sink").await, 3, "the flush pushed once");
    let remembered: i64 = db
        .query_one("SELECT count(*) FROM queen.stream_cycles", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(remembered, 2);
}

#[tokio::test]
async fn a_refused_ack_applies_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    let q = register(&b, "q", "h").await;
    b.push("src", "p1", &[json!(1)]).await;
    let batch = popped(&b, 10).await.expect("a message");
    let mut body = full_cycle(&q, GROUP, &batch);
    body["ack"]["leaseId"] = json!("0190a0c4-1b2c-7d3e-8f40-123456789abc");

    let answer = cycle(&b, &body).await;
    assert_eq!(answer["success"], false, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .expect("error")
            .contains("rolled back"),
        "{answer}"
    );
    assert_eq!(depth(&db, "sink").await, 0, "no sink push");
    let pid = batch.partition_id().to_string();
    assert_eq!(state(&b, &q, &pid).await, json!({}), "no state write");
    // Nothing was remembered: the right cycle still commits.
    let good = full_cycle(&q, GROUP, &batch);
    assert_eq!(cycle(&b, &good).await["success"], true);
    assert_eq!(depth(&db, "sink").await, 1);
}

/// An ack naming the batch's first message: a gate's partial ack keeps the tail under the
/// lease (`release_lease: false`); a full-batch cycle (`true`) consumed the whole batch.
#[tokio::test]
async fn release_lease_decides_the_fate_of_a_partial_batch() {
    for release in [false, true] {
        let b = common::broker().await;
        let q = register(&b, "q", "h").await;
        b.push("src", "p1", &[json!(1), json!(2), json!(3)]).await;
        let batch = popped(&b, 10).await.expect("three messages");
        let first = &batch.messages[0];
        let body = json!({"query_id": q, "partition_id": first["partitionId"],
            "consumer_group": GROUP, "state_ops": [], "push_items": [],
            "ack": {"transactionId": first["transactionId"], "leaseId": batch.lease_id,
                    "status": "completed", "count": 1},
            "release_lease": release});
        assert_eq!(cycle(&b, &body).await["success"], true);
        assert!(
            popped(&b, 10).await.is_none(),
            "nothing to pop (release {release})"
        );
        b.push("src", "p1", &[json!(4)]).await;
        let next = popped(&b, 10).await;
        if release {
            let next = next.expect("the batch is done: the next message comes");
            assert_eq!(next.messages.len(), 1);
            assert_eq!(next.messages[0]["data"], 4);
        } else {
            assert!(next.is_none(), "the tail stays leased");
        }
    }
}
