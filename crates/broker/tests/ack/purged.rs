//! Every delivered message can be acked (issue 36 §2, docs/engine.md §6.2 "purged span"): a
//! group far behind the hash-sidecar purge horizon is delivered messages whose `log_txns`
//! rows are gone. Its acks, nacks and partial batch acks, under the lease or lease-less,
//! resolve by position and answer exactly what they answer on an unpurged partition — with the accelerators (ack
//! registry, ack fusion) on, and with them off (the SQL path alone).
//!
//! The purge is forced: `QUEEN_SIDECAR_PURGE_FLOOR_SECONDS=0`, `dedupWindowSeconds: 0`, a short
//! retention interval, so every hash row goes as soon as the retention loop runs.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{self, TestBroker};
use crate::support::*;

const G: Option<&str> = Some("g");

/// A broker that purges every hash row at once, with the ack accelerators on or off.
async fn purging(accelerated: bool) -> TestBroker {
    common::broker_with(|cfg| {
        cfg.retention_interval_ms = 100;
        cfg.partition_cleanup_enabled = false;
        cfg.sidecar_purge_floor_s = 0;
        cfg.ack_registry = accelerated;
        cfg.ack_fusion = accelerated;
    })
    .await
}

/// The partition's `txns_start`.
async fn txns_start(db: &tokio_postgres::Client, pid: i64) -> i64 {
    db.query_one(
        "SELECT txns_start FROM queen.log_partitions WHERE id = $1",
        &[&pid],
    )
    .await
    .expect("partition row")
    .get(0)
}

/// Waits until the purge moved `txns_start` to at least `upto` (every hash row below it gone).
async fn purged(db: &tokio_postgres::Client, pid: i64, upto: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while txns_start(db, pid).await < upto {
        assert!(Instant::now() < deadline, "the sidecar purge did not run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.log_txns WHERE partition_id = $1",
            &[&pid],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 0, "every hash row of the partition is purged");
}

/// A queue `queue` with `n` messages on partition `p` whose hash rows are all purged; its
/// partition id.
async fn far_behind(b: &TestBroker, queue: &str, n: usize, options: Value) -> i64 {
    let mut opts = json!({ "dedupWindowSeconds": 0 });
    if let (Some(o), Some(extra)) = (opts.as_object_mut(), options.as_object()) {
        o.extend(extra.clone());
    }
    configure(b, queue, opts).await;
    push_txns(b, queue, "p", &txns(queue, n)).await;
    let db = b.sql().await;
    let pid = common::partition_id(&db, queue, "p").await;
    purged(&db, pid, n as i64).await;
    pid
}

/// The ack items of `popped`, each with `status`.
fn items(popped: &Popped, status: &str) -> Vec<Value> {
    ack_all(popped, status)
}

/// A full batch ack after the purge: every item succeeds, the cursor reaches the batch end and
/// the lease is released; nothing redelivers.
async fn full_batch_ack(accelerated: bool) {
    let b = purging(accelerated).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "full", 3, json!({})).await;
    let popped = pop(&b, "full", Some("p"), G, 10, "")
        .await
        .expect("three messages");
    assert_eq!(popped.messages.len(), 3);
    let answer = ack_batch(&b, G, items(&popped, "completed")).await;
    for r in &answer {
        assert_ok(r);
        assert_eq!(r["leaseReleased"], true, "{r}");
    }
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.batch_end), (2, None, None));
    assert!(
        pop(&b, "full", Some("p"), G, 10, "").await.is_none(),
        "an acked batch never redelivers"
    );
}

#[tokio::test]
async fn a_full_batch_ack_of_purged_messages_moves_the_cursor_accelerated() {
    full_batch_ack(true).await;
}

#[tokio::test]
async fn a_full_batch_ack_of_purged_messages_moves_the_cursor_by_sql() {
    full_batch_ack(false).await;
}

/// A single ack (`POST /api/v1/ack`) of the middle message and a partial batch ack: the
/// cursor moves to the acked position, the lease is kept until the batch is done.
async fn single_and_partial_acks(accelerated: bool) {
    let b = purging(accelerated).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "part", 4, json!({})).await;
    let popped = pop(&b, "part", Some("p"), G, 10, "")
        .await
        .expect("four messages");
    let all = items(&popped, "completed");
    let one = ack_one(&b, G, all[1].clone()).await;
    assert_ok(&one);
    assert_eq!(one["leaseReleased"], false, "{one}");
    let c = cursor(&db, pid, "g").await;
    assert_eq!(
        (c.committed, c.batch_end),
        (1, Some(3)),
        "silent gap acked too"
    );

    let rest = ack_batch(&b, G, vec![all[2].clone()]).await;
    assert_ok(&rest[0]);
    assert_eq!(cursor(&db, pid, "g").await.committed, 2);
    let last = ack_batch(&b, G, vec![all[3].clone()]).await;
    assert_ok(&last[0]);
    assert_eq!(last[0]["leaseReleased"], true, "{}", last[0]);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (3, None));
}

#[tokio::test]
async fn single_and_partial_acks_of_purged_messages_move_the_cursor_accelerated() {
    single_and_partial_acks(true).await;
}

#[tokio::test]
async fn single_and_partial_acks_of_purged_messages_move_the_cursor_by_sql() {
    single_and_partial_acks(false).await;
}

/// Lease-less acks of what was just delivered (the wire allows acking without the leaseId):
/// they resolve by position within the row's last delivered batch, a partial one moves the
/// cursor and keeps the lease, the rest ends it, and nothing redelivers. Before, every one was
/// refused as unresolvable and the batch redelivered when its lease expired.
async fn lease_less_acks(accelerated: bool) {
    let b = purging(accelerated).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "bare", 6, json!({})).await;
    let popped = pop(&b, "bare", Some("p"), G, 4, "")
        .await
        .expect("four messages");
    let bare: Vec<Value> = popped
        .messages
        .iter()
        .map(|m| lease_less(m, "completed"))
        .collect();
    let first = ack_batch(&b, G, bare[..2].to_vec()).await;
    first.iter().for_each(assert_ok);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.batch_end), (1, Some(3)), "lease kept");
    let rest = ack_batch(&b, G, bare[2..].to_vec()).await;
    rest.iter().for_each(assert_ok);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.batch_end), (3, None, None));
    let next = pop(&b, "bare", Some("p"), G, 10, "")
        .await
        .expect("the two after them");
    assert_eq!(next.txns(), ["bare-4", "bare-5"], "nothing redelivers");
}

#[tokio::test]
async fn lease_less_acks_of_purged_messages_move_the_cursor_accelerated() {
    lease_less_acks(true).await;
}

#[tokio::test]
async fn lease_less_acks_of_purged_messages_move_the_cursor_by_sql() {
    lease_less_acks(false).await;
}

/// A nack of a purged message charges the retry budget and redelivers from it (the completed
/// message before it stays acked); once the budget is spent, the message is dead-lettered and
/// the cursor passes it.
async fn nack_retries_then_dead_letters(accelerated: bool) {
    let b = purging(accelerated).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "nack", 3, json!({ "retryLimit": 1 })).await;

    let first = pop(&b, "nack", Some("p"), G, 10, "")
        .await
        .expect("three messages");
    let mut acks = items(&first, "completed");
    acks[1]["status"] = json!("failed");
    acks[1]["error"] = json!("boom");
    let answer = ack_batch(&b, G, acks).await;
    assert_ok(&answer[0]);
    assert_ok(&answer[1]);
    assert_eq!(answer[1]["leaseReleased"], true, "{}", answer[1]);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.retries, c.worker), (0, 1, None));

    let again = pop(&b, "nack", Some("p"), G, 10, "")
        .await
        .expect("the redelivery");
    assert_eq!(
        again.txns(),
        ["nack-1", "nack-2"],
        "redelivered from the nack"
    );
    let mut acks = items(&again, "completed");
    acks[0]["status"] = json!("failed");
    acks[0]["error"] = json!("boom again");
    let answer = ack_batch(&b, G, acks).await;
    assert_ok(&answer[0]);
    assert_eq!(answer[0]["dlq"], true, "{}", answer[0]);
    let listing = dlq(&b, "queue=nack").await;
    assert_eq!(listing["total"], 1, "{listing}");
    assert_eq!(listing["messages"][0]["transactionId"], "nack-1");
    assert_eq!(listing["messages"][0]["errorMessage"], "boom again");
    assert_eq!(cursor(&db, pid, "g").await.committed, 1);

    let tail = pop(&b, "nack", Some("p"), G, 10, "")
        .await
        .expect("the message after the dead letter");
    assert_eq!(tail.txns(), ["nack-2"]);
    let answer = ack_batch(&b, G, items(&tail, "completed")).await;
    assert_ok(&answer[0]);
    assert_eq!(cursor(&db, pid, "g").await.committed, 2);
}

#[tokio::test]
async fn a_nack_of_a_purged_message_retries_then_dead_letters_accelerated() {
    nack_retries_then_dead_letters(true).await;
}

#[tokio::test]
async fn a_nack_of_a_purged_message_retries_then_dead_letters_by_sql() {
    nack_retries_then_dead_letters(false).await;
}

/// A batch straddling the purge watermark: its old part resolves by position, its new part
/// by hash rows, in one ack.
async fn straddling_batch(accelerated: bool) {
    let b = purging(accelerated).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "mix", 2, json!({})).await;
    // Hash rows written from now on live an hour.
    configure(&b, "mix", json!({ "dedupWindowSeconds": 3600 })).await;
    push_txns(&b, "mix", "p", &txns("fresh", 2)).await;
    assert_eq!(txns_start(&db, pid).await, 2);
    let popped = pop(&b, "mix", Some("p"), G, 10, "")
        .await
        .expect("four messages");
    assert_eq!(popped.txns(), ["mix-0", "mix-1", "fresh-0", "fresh-1"]);
    let mut acks = items(&popped, "completed");
    acks[3]["status"] = json!("retry");
    let answer = ack_batch(&b, G, acks).await;
    for r in &answer {
        assert_ok(r);
    }
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (2, None), "stops before the retry");
}

#[tokio::test]
async fn a_batch_straddling_the_purge_watermark_resolves_whole_accelerated() {
    straddling_batch(true).await;
}

#[tokio::test]
async fn a_batch_straddling_the_purge_watermark_resolves_whole_by_sql() {
    straddling_batch(false).await;
}

/// What the SQL procedure answers by itself when the broker does not pass the span: nothing
/// changes and the purged offsets are named, so a caller knows to resolve them by position.
#[tokio::test]
async fn without_the_span_the_procedure_names_the_purged_offsets_and_changes_nothing() {
    let b = purging(false).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "ask", 3, json!({})).await;
    let popped = pop(&b, "ask", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let hash = queen_proto::txn_hash("ask-0").to_vec();
    let answer = call(
        &db,
        "SELECT queen.log_ack_by_hash_v1($1, 'g', $2, ARRAY[$3::bytea], ARRAY['completed'])::text",
        &[&pid, &popped.lease_id, &hash],
    )
    .await;
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(
        answer["purgedSpan"],
        json!({ "from": 0, "to": 1 }),
        "{answer}"
    );
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.batch_end), (-1, Some(1)));
}

/// A transaction acking part of a purged leased batch (hash form with the registry off,
/// positional with it on) commits with its push, and a second one acks the rest.
async fn transaction_acks(accelerated: bool) {
    let b = purging(accelerated).await;
    let db = b.sql().await;
    let pid = far_behind(&b, "txn", 3, json!({})).await;
    let popped = pop(&b, "txn", Some("p"), G, 10, "")
        .await
        .expect("three messages");
    let push = json!({ "type": "push", "queue": "next", "partition": "p", "transactionId": "n-0", "payload": {} });
    let (status, answer) = b
        .post(
            "/api/v1/transaction",
            &json!({ "operations": [push, ack_op(&popped.messages[0], "completed", G)] }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(cursor(&db, pid, "g").await.committed, 0);
    let rest: Vec<Value> = popped.messages[1..]
        .iter()
        .map(|m| ack_op(m, "completed", G))
        .collect();
    let (_, answer) = b
        .post("/api/v1/transaction", &json!({ "operations": rest }))
        .await;
    assert_eq!(answer["success"], true, "{answer}");
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (2, None));

    // Lease-less ack operations resolve within the row's last delivered batch too.
    push_txns(&b, "txn", "p", &txns("late", 2)).await;
    purged(&db, pid, 5).await;
    let popped = pop(&b, "txn", Some("p"), G, 10, "")
        .await
        .expect("two more");
    let bare: Vec<Value> = popped
        .messages
        .iter()
        .map(|m| {
            let mut op = ack_op(m, "completed", G);
            op.as_object_mut().map(|o| o.remove("leaseId"));
            op
        })
        .collect();
    let (_, answer) = b
        .post("/api/v1/transaction", &json!({ "operations": bare }))
        .await;
    assert_eq!(answer["success"], true, "{answer}");
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (4, None));
}

#[tokio::test]
async fn a_transaction_acking_purged_messages_commits_accelerated() {
    transaction_acks(true).await;
}

#[tokio::test]
async fn a_transaction_acking_purged_messages_commits_by_sql() {
    transaction_acks(false).await;
}

/// The purge takes no lock an ack takes, so a batch's hash rows may vanish between the
/// procedure's reading of `txns_start` and its resolution. With the pairs given, the rows are
/// not needed: the hash rows deleted behind an unchanged watermark (what the ack's later
/// statement would see) still resolve.
#[tokio::test]
async fn the_pairs_resolve_a_batch_whose_rows_vanished_behind_the_watermark() {
    let b = purging(false).await;
    let db = b.sql().await;
    configure(&b, "race", json!({ "dedupWindowSeconds": 3600 })).await;
    push_txns(&b, "race", "p", &txns("race", 2)).await;
    let popped = pop(&b, "race", Some("p"), G, 10, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    db.execute(
        "DELETE FROM queen.log_txns WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .expect("rows vanish");
    assert_eq!(txns_start(&db, pid).await, 0, "the watermark as first read");
    let h0 = queen_proto::txn_hash("race-0").to_vec();
    let h1 = queen_proto::txn_hash("race-1").to_vec();
    let answer = call(
        &db,
        "SELECT queen.log_ack_by_hash_v1($1, 'g', $2, ARRAY[$3::bytea, $4::bytea], \
         ARRAY['completed', 'completed'], '{}', '', ARRAY[0, 1]::bigint[], \
         ARRAY[$3::bytea, $4::bytea])::text",
        &[&pid, &popped.lease_id, &h0, &h1],
    )
    .await;
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["unresolvedHashes"], json!([]), "{answer}");
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (1, None));
}
