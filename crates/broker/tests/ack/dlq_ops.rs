//! Operations on dead letters (docs/wire.md §11, docs/engine.md §2.8): the purge of a queue's
//! rows (`DELETE /api/v1/dlq`), the delete of one address's rows
//! (`DELETE /api/v1/messages/:pid/:txn`) and the replay (`POST …/retry`), which pushes the
//! payload copy back and removes the rows in one transaction.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

/// The tables a DLQ operation may write.
const TABLES: &[&str] = &["queen.log_dlq", "queen.log_segments", "queen.log_txns"];

/// Pushes `txns` to (queue, "p") and files the first one as a dead letter of each of `groups`
/// (each group pops it and acks it `dlq`). Returns the partition id and the popped message.
async fn dead_letter(
    b: &common::TestBroker,
    queue: &str,
    txns: &[String],
    groups: &[&str],
) -> (i64, Value) {
    push_txns(b, queue, "p", txns).await;
    let mut first = Value::Null;
    for group in groups {
        let popped = pop(b, queue, Some("p"), Some(group), 1, "")
            .await
            .expect("the head message");
        assert_eq!(popped.txns()[0], txns[0]);
        let r = ack_batch(b, Some(group), vec![ack_item(&popped.messages[0], "dlq")]).await;
        assert_eq!(r[0]["dlq"], true, "{r:?}");
        first = popped.messages[0].clone();
    }
    let pid = first["partitionId"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .expect("decimal partitionId");
    (pid, first)
}

fn address(pid: i64, txn: &str) -> String {
    format!("/api/v1/messages/{pid}/{txn}")
}

fn assert_error(status: StatusCode, body: &Value, want: StatusCode, needle: &str) {
    assert_eq!(status, want, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains(needle), "error {error:?} lacks {needle:?}");
}

#[tokio::test]
async fn purge_removes_a_queues_dead_letters_of_one_group_or_all() {
    let b = common::broker().await;
    let db = b.sql().await;
    dead_letter(&b, "pq", &txns("pq", 2), &["g1", "g2", "g3"]).await;
    dead_letter(&b, "other", &txns("other", 1), &["g1"]).await;
    assert_eq!(common::count(&db, "queen.log_dlq").await, 4);

    let (status, body) = b.delete("/api/v1/dlq?queue=pq&consumerGroup=g1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "success": true, "deleted": 1 }));
    assert_eq!(dlq(&b, "queue=pq&consumerGroup=g1").await["total"], 0);
    assert_eq!(dlq(&b, "queue=pq").await["total"], 2);

    let (status, body) = b.delete("/api/v1/dlq?queue=pq").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "success": true, "deleted": 2 }));
    assert_eq!(dlq(&b, "queue=pq").await["total"], 0);
    assert_eq!(
        dlq(&b, "queue=other").await["total"],
        1,
        "another queue keeps its rows"
    );

    let (status, body) = b.delete("/api/v1/dlq?queue=pq").await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({ "success": true, "deleted": 0 }))
    );
}

#[tokio::test]
async fn purge_without_a_queue_is_refused_naming_it() {
    let b = common::broker().await;
    let db = b.sql().await;
    dead_letter(&b, "keep", &txns("keep", 1), &["g"]).await;
    let before = common::counts(&db, TABLES).await;
    for path in [
        "/api/v1/dlq",
        "/api/v1/dlq?queue=",
        "/api/v1/dlq?consumerGroup=g",
    ] {
        let (status, body) = b.delete(path).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "queue");
    }
    let (status, body) = b.delete("/api/v1/dlq?queue=%20bad").await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "queue");
    assert_eq!(common::counts(&db, TABLES).await, before, "nothing deleted");
}

#[tokio::test]
async fn delete_by_address_removes_every_groups_row_and_404s_otherwise() {
    let b = common::broker().await;
    let db = b.sql().await;
    let (pid, _) = dead_letter(&b, "del", &txns("del", 2), &["g1", "g2"]).await;
    dead_letter(&b, "del2", &txns("del", 1), &["g1"]).await;
    let before = common::counts(&db, TABLES).await;

    // A live message that was never dead-lettered, an unknown one, a bad partition id.
    for path in [
        address(pid, "del-1"),
        address(pid, "nope"),
        address(pid + 1000, "del-0"),
        "/api/v1/messages/abc/del-0".to_string(),
    ] {
        let (status, body) = b.delete(&path).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "no dead letter");
    }
    let (status, body) = b.delete(&address(pid, "a%00b")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "transactionId");
    assert_eq!(common::counts(&db, TABLES).await, before, "nothing deleted");

    let (status, body) = b.delete(&address(pid, "del-0")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "success": true, "deleted": 2 }));
    assert_eq!(dlq(&b, "queue=del").await["total"], 0);
    assert_eq!(
        dlq(&b, "queue=del2").await["total"],
        1,
        "same transactionId in another partition stays"
    );
    let (status, body) = b.delete(&address(pid, "del-0")).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "no dead letter");
    // The message itself is still readable: only its dead letters went.
    let (status, body) = b.get(&address(pid, "del-0")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn replay_makes_the_message_poppable_again_at_a_new_offset() {
    let b = common::broker().await;
    let (pid, original) = dead_letter(&b, "rq", &txns("rq", 2), &["g"]).await;
    let next = pop(&b, "rq", Some("p"), Some("g"), 5, "")
        .await
        .expect("the message after the dead letter");
    assert_eq!(next.txns(), vec!["rq-1".to_string()]);
    ack_batch(
        &b,
        Some("g"),
        vec![ack_item(&next.messages[0], "completed")],
    )
    .await;
    assert!(pop(&b, "rq", Some("p"), Some("g"), 5, "").await.is_none());

    let (status, body) = b
        .post(&format!("{}/retry", address(pid, "rq-0")), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["partitionId"], pid.to_string());
    assert_eq!(body["replayed"], 1);
    let offset = body["offset"].as_i64().expect("offset");
    assert!(
        offset > next.messages[0]["offset"].as_i64().unwrap(),
        "{body}"
    );

    let again = pop(&b, "rq", Some("p"), Some("g"), 5, "")
        .await
        .expect("the replayed message");
    let m = &again.messages[0];
    assert_eq!(again.messages.len(), 1);
    assert_eq!(m["transactionId"], "rq-0");
    assert_eq!(m["data"], json!({ "txn": "rq-0" }));
    assert_eq!(m["offset"], offset);
    assert_ne!(m["id"], original["id"], "a new message id");
    assert_eq!(
        dlq(&b, "queue=rq").await["total"],
        0,
        "the dead letter is gone"
    );

    // A group that never saw the queue reads it twice: the original and the replay.
    let fresh = pop(&b, "rq", Some("p"), Some("fresh"), 10, "")
        .await
        .expect("every message");
    assert_eq!(fresh.txns(), vec!["rq-0", "rq-1", "rq-0"]);

    let (status, body) = b
        .post(&format!("{}/retry", address(pid, "rq-0")), &json!({}))
        .await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "no dead letter");
}

#[tokio::test]
async fn replay_of_a_dead_letter_filed_by_two_groups_removes_both_rows() {
    let b = common::broker().await;
    let (pid, _) = dead_letter(&b, "two", &txns("two", 1), &["g1", "g2"]).await;
    let (status, body) = b
        .post(&format!("{}/retry", address(pid, "two-0")), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["replayed"], 2);
    for group in ["g1", "g2"] {
        let again = pop(&b, "two", Some("p"), Some(group), 5, "")
            .await
            .expect("the replayed message");
        assert_eq!(again.txns(), vec!["two-0".to_string()], "{group}");
    }
}

#[tokio::test]
async fn concurrent_replays_of_one_address_push_once() {
    let b = common::broker().await;
    let db = b.sql().await;
    for round in 0..5 {
        let queue = format!("race{round}");
        let (pid, _) = dead_letter(&b, &queue, &txns(&queue, 1), &["g"]).await;
        let segments_before = common::count(&db, "queen.log_segments").await;
        let path = format!("{}/retry", address(pid, &format!("{queue}-0")));
        let empty = json!({});
        let ((s1, b1), (s2, b2)) = tokio::join!(b.post(&path, &empty), b.post(&path, &empty));
        let mut statuses = [s1, s2];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::NOT_FOUND],
            "{b1} {b2}"
        );
        assert_eq!(
            common::count(&db, "queen.log_segments").await,
            segments_before + 1,
            "exactly one new message"
        );
        let again = pop(&b, &queue, Some("p"), Some("g"), 5, "")
            .await
            .expect("the replayed message");
        assert_eq!(again.messages.len(), 1);
    }
}

#[tokio::test]
async fn replay_of_nothing_writes_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    let (pid, _) = dead_letter(&b, "bad", &txns("bad", 2), &["g"]).await;
    let before = common::counts(&db, TABLES).await;
    for path in [
        address(pid, "bad-1"),
        address(pid, "unknown"),
        address(pid + 1000, "bad-0"),
        "/api/v1/messages/-1/bad-0".to_string(),
        "/api/v1/messages/abc/bad-0".to_string(),
    ] {
        let (status, body) = b.post(&format!("{path}/retry"), &json!({})).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "no dead letter");
    }
    let (status, body) = b
        .post(&format!("{}/retry", address(pid, "a%00b")), &json!({}))
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "transactionId");
    assert_eq!(common::counts(&db, TABLES).await, before, "nothing written");
}

#[tokio::test]
async fn replay_of_an_empty_payload_copy_pushes_an_empty_payload() {
    let b = common::broker().await;
    let db = b.sql().await;
    let (pid, _) = dead_letter(&b, "empty", &txns("empty", 1), &["g"]).await;
    // An empty payload's copy is NULL in older rows.
    db.execute("UPDATE queen.log_dlq SET payload = NULL", &[])
        .await
        .expect("null the copy");
    let (status, body) = b
        .post(&format!("{}/retry", address(pid, "empty-0")), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let again = pop(&b, "empty", Some("p"), Some("g"), 5, "")
        .await
        .expect("the replayed message");
    assert_eq!(again.txns(), vec!["empty-0".to_string()]);
    assert_eq!(again.messages[0]["data"], Value::Null);
}

#[tokio::test]
async fn a_replay_racing_a_queue_delete_never_deadlocks() {
    let b = common::broker().await;
    for round in 0..5 {
        let queue = format!("gone{round}");
        let (pid, _) = dead_letter(&b, &queue, &txns(&queue, 1), &["g"]).await;
        let replay = format!("{}/retry", address(pid, &format!("{queue}-0")));
        let delete = format!("/api/v1/resources/queues/{queue}");
        let empty = json!({});
        let ((rs, rb), (ds, db)) = tokio::join!(b.post(&replay, &empty), b.delete(&delete));
        assert!(
            rs == StatusCode::OK || rs == StatusCode::NOT_FOUND,
            "replay: {rs} {rb}"
        );
        assert_eq!(ds, StatusCode::OK, "queue delete: {db}");
        assert_eq!(dlq(&b, &format!("queue={queue}")).await["total"], 0);
    }
}
