//! `POST /api/v1/transaction` (docs/wire.md §10): pushes and acks in one PostgreSQL transaction,
//! all or nothing; HTTP 200 for both outcomes, 400 for malformed bundles.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

async fn transaction(b: &common::TestBroker, body: Value) -> (StatusCode, Value) {
    b.post("/api/v1/transaction", &body).await
}

fn push_op(queue: &str, partition: &str, txns: &[&str]) -> Value {
    let items: Vec<Value> = txns
        .iter()
        .map(|t| json!({ "queue": queue, "partition": partition, "transactionId": t, "payload": { "txn": t } }))
        .collect();
    json!({ "type": "push", "items": items })
}

async fn segments_of(db: &tokio_postgres::Client, queue: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions lp ON lp.id = s.partition_id
         JOIN queen.queues q ON q.id = lp.queue_id WHERE q.name = $1",
        &[&queue],
    )
    .await
    .expect("count")
    .get(0)
}

#[tokio::test]
async fn pushes_and_acks_commit_together_with_aligned_results() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "stage1", "p", &txns("s1", 3)).await;
    let popped = pop(&b, "stage1", Some("p"), G, 3, "")
        .await
        .expect("three messages");

    let (status, answer) = transaction(
        &b,
        json!({ "operations": [
            push_op("stage2", "q", &["n-0", "n-1", "n-0"]),
            ack_op(&popped.messages[0], "completed", G),
            ack_op(&popped.messages[1], "completed", G),
            { "type": "push", "queue": "stage2", "partition": "q", "transactionId": "n-2", "data": [1, 2] },
            ack_op(&popped.messages[2], "completed", G),
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["success"], true, "{answer}");
    assert!(
        answer.get("error").is_none_or(Value::is_null),
        "no error on success: {answer}"
    );
    let results = answer["results"].as_array().expect("results");
    let kinds = result_kinds(&answer);
    assert_eq!(
        kinds,
        ["push", "push", "push", "ack", "ack", "push", "ack"],
        "one slot per pushed item and per ack"
    );
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            (r["index"].clone(), r["success"].clone()),
            (json!(i), json!(true)),
            "{r}"
        );
    }
    assert_eq!(
        results[2]["duplicate"], true,
        "a repeat inside the bundle is a follower"
    );
    assert_eq!(results[2]["messageId"], results[0]["messageId"]);
    assert_eq!(results[0]["queueName"], "stage2");
    assert_eq!(results[6]["transactionId"], "s1-2");

    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.worker), (2, None), "the acks committed");
    let next = pop(&b, "stage2", Some("q"), G, 10, "")
        .await
        .expect("the pushes are visible");
    assert_eq!(next.txns(), vec!["n-0", "n-1", "n-2"]);
    assert_eq!(next.messages[2]["data"], json!([1, 2]));
    assert_eq!(next.messages[0]["id"], results[0]["messageId"]);
}

#[tokio::test]
async fn one_bad_ack_leaves_no_pushed_message_behind() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "src", "p", &txns("src", 2)).await;
    let popped = pop(&b, "src", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let before = cursor(&db, popped.partition_id(), "g").await;

    let mut ghost = ack_op(&popped.messages[1], "completed", G);
    ghost["transactionId"] = json!("never-pushed");
    let mut forged = ack_op(&popped.messages[1], "completed", G);
    forged["leaseId"] = json!("01a00000-0000-7000-8000-000000000000");
    for (bad, needle) in [
        (ghost, "unknown transactionid"),
        (forged, "invalid or expired lease"),
    ] {
        let (status, answer) = transaction(
            &b,
            json!({ "operations": [
                push_op("dst", "p", &["d-0", "d-1"]),
                ack_op(&popped.messages[0], "completed", G),
                bad,
            ]}),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a rollback is a business outcome: {answer}"
        );
        assert_eq!(answer["success"], false);
        assert_eq!(answer["reason"], "rejected_ack");
        assert_eq!(answer["results"], json!([]));
        let error = answer["error"].as_str().unwrap_or_default().to_lowercase();
        assert!(
            error.contains("rolled back") && error.contains(needle),
            "{error}"
        );
        assert!(answer["transactionId"]
            .as_str()
            .is_some_and(|t| !t.is_empty()));
    }
    assert_eq!(
        segments_of(&db, "dst").await,
        0,
        "no pushed message survives the rollback"
    );
    assert_eq!(
        cursor(&db, popped.partition_id(), "g").await.state(),
        before.state(),
        "nor does the good ack"
    );

    // The same bundle with good acks commits.
    let (_, answer) = transaction(
        &b,
        json!({ "operations": [
            push_op("dst", "p", &["d-0", "d-1"]),
            ack_op(&popped.messages[0], "completed", G),
            ack_op(&popped.messages[1], "completed", G),
        ]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(segments_of(&db, "dst").await, 1);
}

#[tokio::test]
async fn a_push_duplicating_stored_data_rolls_back_the_bundle() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "dup", "p", &["stored".to_string()]).await;
    let (status, answer) = transaction(
        &b,
        json!({ "operations": [push_op("dup", "p", &["fresh", "stored"])] }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (answer["success"].clone(), answer["reason"].clone()),
        (json!(false), json!("duplicate"))
    );
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("rolled back")),
        "{answer}"
    );
    assert_eq!(
        segments_of(&db, "dup").await,
        1,
        "only the original segment"
    );
}

#[tokio::test]
async fn malformed_bundles_answer_400_with_the_failure_shape() {
    let b = common::broker().await;
    for body in [
        json!({}),
        json!({ "operations": [] }),
        json!({ "operations": [{ "type": "teleport" }] }),
        json!({ "operations": [{ "type": "ack", "partitionId": "1" }] }),
        json!({ "operations": [{ "type": "push", "items": [{ "queue": "", "payload": 1 }] }] }),
        json!({ "operations": [push_op("x", "p", &["a"])], "kv": [{ "op": "set" }] }),
    ] {
        let (status, answer) = transaction(&b, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            (answer["success"].clone(), answer["reason"].clone()),
            (json!(false), json!("bad_request"))
        );
        assert_eq!(answer["results"], json!([]));
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let (status, answer) = b
        .post_raw("/api/v1/transaction", "application/json", b"{nope".to_vec())
        .await;
    assert_eq!(
        (status, answer["reason"].clone()),
        (StatusCode::BAD_REQUEST, json!("bad_request"))
    );
    let db = b.sql().await;
    assert_eq!(
        common::count(&db, "queen.queues").await,
        0,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_failed_ack_with_retry_limit_zero_dead_letters_after_the_commit() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "tx-dlq", json!({ "retryLimit": 0 })).await;
    push_txns(&b, "tx-dlq", "p", &txns("txd", 2)).await;
    let popped = pop(&b, "tx-dlq", Some("p"), None, 1, "")
        .await
        .expect("one message");
    let mut nack = ack_op(&popped.messages[0], "failed", None);
    nack["error"] = json!("Test error in a bundle");
    let (_, answer) = transaction(
        &b,
        json!({ "operations": [push_op("tx-out", "p", &["o-0"]), nack] }),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["results"][1]["dlq"], true);
    let listing = dlq(&b, "queue=tx-dlq").await;
    assert_eq!(
        listing["messages"][0]["errorMessage"],
        "Test error in a bundle"
    );
    let c = cursor(&db, popped.partition_id(), queen_proto::wire::QUEUE_MODE).await;
    assert_eq!((c.committed, c.worker), (0, None));
    let next = pop(&b, "tx-dlq", Some("p"), None, 5, "")
        .await
        .expect("the next message");
    assert_eq!(
        next.txns(),
        vec!["txd-1"],
        "the dead letter is not redelivered"
    );
}

#[tokio::test]
async fn acks_without_a_lease_borrow_the_only_required_lease() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "lend", "p", &txns("lend", 1)).await;
    let popped = pop(&b, "lend", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let mut op = ack_op(&popped.messages[0], "completed", G);
    op.as_object_mut().map(|o| o.remove("leaseId"));

    // Lent a foreign lease, the ack is validated against it and refused.
    let (_, answer) = transaction(
        &b,
        json!({ "operations": [op.clone()], "requiredLeases": ["01a00000-0000-7000-8000-000000000000"] }),
    )
    .await;
    assert_eq!(
        (answer["success"].clone(), answer["reason"].clone()),
        (json!(false), json!("rejected_ack"))
    );

    let (_, answer) = transaction(
        &b,
        json!({ "operations": [op], "requiredLeases": [popped.lease_id] }),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["results"][0]["leaseReleased"], true);
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, 0);
}

#[tokio::test]
async fn a_nack_in_a_bundle_is_not_skipped_by_a_later_ack_of_the_same_batch() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "txclamp", "p", &txns("tc", 4)).await;
    let popped = pop(&b, "txclamp", Some("p"), G, 4, "")
        .await
        .expect("four messages");
    let ops: Vec<Value> = popped
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| ack_op(m, if i == 1 { "failed" } else { "completed" }, G))
        .rev() // order within the bundle must not matter
        .collect();
    let (_, answer) = transaction(&b, json!({ "operations": ops })).await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, 0);
    let again = pop(&b, "txclamp", Some("p"), G, 4, "")
        .await
        .expect("redelivery");
    assert_eq!(again.txns(), vec!["tc-1", "tc-2", "tc-3"]);
}

#[tokio::test]
async fn a_push_inside_a_transaction_wakes_a_parked_pop() {
    let b = broker_without_backoff_rechecks().await;
    let waiter = parked_pop(&b, "/api/v1/pop/queue/woken?batch=5");
    // Give the pop time to find nothing and park (if it has not, it simply finds the push).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, answer) = transaction(
        &b,
        json!({ "operations": [push_op("woken", "p", &["w-0"])] }),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    let (status, body, waited) = waiter.await.expect("waiter");
    assert_eq!(
        status,
        StatusCode::OK,
        "the parked pop was never woken: {body}"
    );
    assert_eq!(body["messages"][0]["transactionId"], "w-0");
    println!("parked pop answered {waited:.2?} after it started (300 ms of it before the push)");
}

#[tokio::test]
async fn a_bundle_too_large_to_compress_inline_commits_intact() {
    let b = common::broker().await;
    // 3 × 200 KiB: over the inline build threshold, so the segments build off the workers.
    let big = |n: usize| "x".repeat(200 * 1024) + &n.to_string();
    let items: Vec<Value> = (0..3)
        .map(|n| json!({ "queue": "big", "partition": format!("p{}", n % 2), "transactionId": format!("big-{n}"), "payload": big(n) }))
        .collect();
    let (status, answer) = transaction(
        &b,
        json!({ "operations": [{ "type": "push", "items": items }] }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(result_kinds(&answer), ["push", "push", "push"]);
    let results = answer["results"].as_array().expect("results");
    for (partition, ns) in [("p0", vec![0, 2]), ("p1", vec![1])] {
        let popped = pop(&b, "big", Some(partition), G, 10, "")
            .await
            .expect("the pushed messages");
        assert_eq!(popped.messages.len(), ns.len());
        for (m, n) in popped.messages.iter().zip(ns) {
            assert_eq!(m["data"], json!(big(n)), "payload {n} stored verbatim");
            assert_eq!(m["id"], results[n]["messageId"], "the answered id of {n}");
        }
    }
}
