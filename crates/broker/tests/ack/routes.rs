//! Ack semantics over real HTTP and PostgreSQL (docs/wire.md §8, docs/spec/ack-internals.md): implicit
//! completion, the nack clamp, below-cursor and unresolvable honesty, lease validation,
//! per-item parse errors.

use reqwest::StatusCode;
use serde_json::json;

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

#[tokio::test]
async fn acking_one_offset_completes_every_earlier_one() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("imp", 5);
    push_txns(&b, "imp", "p", &txns).await;
    let popped = pop(&b, "imp", Some("p"), G, 5, "")
        .await
        .expect("five messages");
    assert_eq!(popped.txns(), txns);
    let pid = popped.partition_id();

    // Only the fourth message is acked: offsets 0..=2 complete implicitly, the lease stays
    // because the batch (ending at 4) is not finished.
    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[3], "completed")]).await;
    assert_ok(&r[0]);
    assert_eq!(r[0]["leaseReleased"], false);
    assert_eq!(r[0]["noop"], false);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.batch_end), (3, Some(4)));
    assert_eq!(c.worker.as_deref(), Some(popped.lease_id.as_str()));

    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[4], "completed")]).await;
    assert_ok(&r[0]);
    assert_eq!(r[0]["leaseReleased"], true);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.batch_end, c.worker), (4, None, None));
    assert!(
        pop(&b, "imp", Some("p"), G, 5, "").await.is_none(),
        "nothing left after the implicit acks"
    );
}

#[tokio::test]
async fn a_nack_is_never_skipped_by_a_later_completed_ack_in_the_same_call() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("clamp", 10);
    push_txns(&b, "clamp", "p", &txns).await;
    let popped = pop(&b, "clamp", Some("p"), G, 10, "")
        .await
        .expect("ten messages");
    let pid = popped.partition_id();

    // k = 2 failed; k + 5 = 7 and everything else completed, all in one call.
    let items = popped
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| ack_item(m, if i == 2 { "failed" } else { "completed" }))
        .collect();
    let answer = ack_batch(&b, G, items).await;
    assert!(
        answer
            .iter()
            .all(|r| r["success"] == true && r["leaseReleased"] == true),
        "{answer:?}"
    );

    let c = cursor(&db, pid, "g").await;
    assert_eq!(c.committed, 1, "the cursor stops just below the nack");
    assert_eq!(
        (c.worker, c.retries),
        (None, 1),
        "the nack released the lease and charged one retry"
    );

    let again = pop(&b, "clamp", Some("p"), G, 10, "")
        .await
        .expect("redelivery at once");
    assert_eq!(
        again.txns(),
        txns[2..].to_vec(),
        "k and everything after it redelivers"
    );
}

#[tokio::test]
async fn a_retry_clamps_without_charging_the_budget() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("retry", 3);
    push_txns(&b, "retry", "p", &txns).await;
    let popped = pop(&b, "retry", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let items = vec![
        ack_item(&popped.messages[0], "completed"),
        ack_item(&popped.messages[1], "retry"),
        ack_item(&popped.messages[2], "completed"),
    ];
    ack_batch(&b, G, items).await;
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.worker, c.retries), (0, None, 0));
    let again = pop(&b, "retry", Some("p"), G, 3, "")
        .await
        .expect("redelivery");
    assert_eq!(again.txns(), txns[1..].to_vec());
    assert_eq!(
        dlq(&b, "queue=retry").await["total"],
        0,
        "a retry never dead-letters"
    );
}

#[tokio::test]
async fn ties_at_one_offset_prefer_dlq_then_failed_then_retry() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("tie", 2);
    push_txns(&b, "tie", "p", &txns).await;

    // retry and failed on the same message: failed wins and charges the budget.
    let popped = pop(&b, "tie", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    let m = &popped.messages[0];
    ack_batch(&b, G, vec![ack_item(m, "retry"), ack_item(m, "failed")]).await;
    assert_eq!(cursor(&db, pid, "g").await.retries, 1);

    // failed and dlq on the same message: dlq wins and files it at once.
    let popped = pop(&b, "tie", Some("p"), G, 2, "")
        .await
        .expect("redelivery");
    let m = &popped.messages[0];
    let answer = ack_batch(&b, G, vec![ack_item(m, "failed"), ack_item(m, "dlq")]).await;
    assert!(answer.iter().all(|r| r["dlq"] == true), "{answer:?}");
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.retries), (0, None, 0));
    assert_eq!(dlq(&b, "queue=tie").await["total"], 1);
}

#[tokio::test]
async fn below_the_cursor_a_completed_ack_is_a_noop_and_a_nack_says_committed() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("below", 3);
    push_txns(&b, "below", "p", &txns).await;
    let popped = pop(&b, "below", Some("p"), None, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();

    // The middle ack moves the cursor past #0 and #1; the lease lives on.
    assert_ok(&ack_one(&b, None, ack_item(&popped.messages[1], "completed")).await);

    let late_ack = ack_one(&b, None, ack_item(&popped.messages[0], "completed")).await;
    assert_ok(&late_ack);
    assert_eq!(late_ack["noop"], true);

    for status in ["failed", "retry", "dlq"] {
        let late_nack = ack_one(&b, None, ack_item(&popped.messages[0], status)).await;
        assert_refused(&late_nack, "committed");
    }
    let c = cursor(&db, pid, common_group()).await;
    assert_eq!(c.committed, 1, "refused nacks changed nothing");
    assert_eq!(
        c.worker.as_deref(),
        Some(popped.lease_id.as_str()),
        "and kept the lease"
    );
    assert_eq!(c.retries, 0, "and charged nothing");

    let fresh = ack_one(&b, None, ack_item(&popped.messages[2], "completed")).await;
    assert_ok(&fresh);
    assert_eq!(
        (fresh["noop"].clone(), fresh["leaseReleased"].clone()),
        (json!(false), json!(true))
    );
}

fn common_group() -> &'static str {
    queen_proto::wire::QUEUE_MODE
}

#[tokio::test]
async fn an_unknown_transaction_id_is_unresolvable_and_leaves_the_lease_alone() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("ghost", 3);
    push_txns(&b, "ghost", "p", &txns).await;
    let popped = pop(&b, "ghost", Some("p"), G, 3, "&leaseSeconds=120")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    let before = cursor(&db, pid, "g").await;

    let mut ghost = ack_item(&popped.messages[0], "completed");
    ghost["transactionId"] = json!("ghost-never-pushed");
    for status in ["completed", "failed", "dlq"] {
        ghost["status"] = json!(status);
        assert_refused(&ack_batch(&b, G, vec![ghost.clone()]).await[0], "unresolv");
    }
    let after = cursor(&db, pid, "g").await;
    assert_eq!(
        after.state(),
        before.state(),
        "unresolvable acks touched neither cursor nor lease"
    );

    // Mixed with real items only the ghost is refused: found nowhere, it counts for nothing,
    // and the real items commit the whole batch.
    let mut items: Vec<_> = popped
        .messages
        .iter()
        .map(|m| ack_item(m, "completed"))
        .collect();
    ghost["status"] = json!("completed");
    items.insert(1, ghost);
    let answer = ack_batch(&b, G, items).await;
    assert_refused(&answer[1], "unresolv");
    for r in [&answer[0], &answer[2], &answer[3]] {
        assert_ok(r);
    }
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (2, None));
}

#[tokio::test]
async fn a_stale_lease_is_refused_while_a_lease_less_ack_commits() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("stale", 4);
    push_txns(&b, "stale", "p", &txns).await;
    let popped = pop(&b, "stale", Some("p"), G, 2, "&leaseSeconds=1")
        .await
        .expect("two messages");
    let pid = popped.partition_id();

    // A forged lease is refused item by item, with HTTP 200.
    let forged: Vec<_> = popped
        .messages
        .iter()
        .map(|m| {
            let mut i = ack_item(m, "completed");
            i["leaseId"] = json!("01a00000-0000-7000-8000-000000000000");
            i
        })
        .collect();
    let answer = ack_batch(&b, G, forged).await;
    assert_eq!(answer.len(), 2);
    answer.iter().for_each(|r| assert_refused(r, "lease"));

    // The real lease expires and someone else claims the batch: the old leaseId is stale.
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    let answer = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "completed")]).await;
    assert_refused(&answer[0], "lease");
    assert_eq!(cursor(&db, pid, "g").await.committed, -1);
    let second = pop(&b, "stale", Some("p"), G, 4, "&leaseSeconds=60")
        .await
        .expect("redelivered after expiry");
    assert_eq!(second.txns(), txns);
    assert_refused(
        &ack_batch(&b, G, vec![ack_item(&popped.messages[1], "completed")]).await[0],
        "lease",
    );

    // The same ack without a leaseId skips validation and commits.
    let mut lease_less = ack_item(&popped.messages[1], "completed");
    lease_less.as_object_mut().map(|o| o.remove("leaseId"));
    assert_ok(&ack_batch(&b, G, vec![lease_less]).await[0]);
    let c = cursor(&db, pid, "g").await;
    assert_eq!(c.committed, 1, "the lease-less ack advanced the cursor");
    assert_eq!(
        c.worker.as_deref(),
        Some(second.lease_id.as_str()),
        "the live lease (batch to 3) stays"
    );
}

#[tokio::test]
async fn malformed_items_fail_alone_and_malformed_bodies_are_400() {
    let b = common::broker().await;
    let txns = txns("shape", 1);
    push_txns(&b, "shape", "p", &txns).await;
    let popped = pop(&b, "shape", Some("p"), None, 1, "")
        .await
        .expect("one message");
    let good = ack_item(&popped.messages[0], "completed");
    let answer = ack_batch(
        &b,
        None,
        vec![
            json!({"partitionId": good["partitionId"], "status": "completed"}),
            json!({"transactionId": "x", "status": "completed"}),
            json!({"transactionId": "x", "partitionId": "not-a-number"}),
            json!("not an object"),
            good.clone(),
        ],
    )
    .await;
    assert_eq!(answer.len(), 5);
    assert_refused(&answer[0], "transactionid");
    assert_refused(&answer[1], "partitionid");
    assert_refused(&answer[2], "partitionid is not a partition id");
    assert_refused(&answer[3], "object");
    assert_ok(&answer[4]);
    for (i, r) in answer.iter().enumerate() {
        assert_eq!(r["index"], i);
    }
    assert_eq!(answer[4]["transactionId"], good["transactionId"]);

    // An unknown partition has no cursor row.
    let r = ack_one(
        &b,
        None,
        json!({"transactionId": "x", "partitionId": "987654"}),
    )
    .await;
    assert_refused(&r, "consumer not found");

    for (route, body, names) in [
        ("/api/v1/ack", "{not json", "key must be a string"),
        ("/api/v1/ack", "[{}]", "expected a JSON object"),
        (
            "/api/v1/ack/batch",
            "{\"acknowledgments\": 3}",
            "must be an array",
        ),
        (
            "/api/v1/ack/batch",
            "{\"consumerGroup\": \"g\"}",
            "must be an array",
        ),
        ("/api/v1/ack/batch", "[[], null]", "expected a JSON object"),
        // Two values for one key are ambiguous: the whole body is refused, nothing applied.
        (
            "/api/v1/ack/batch",
            "{\"acknowledgments\": [{\"status\": \"completed\", \"status\": \"failed\"}]}",
            "duplicate field `status`",
        ),
    ] {
        let (status, answer) = b
            .post_raw(route, "application/json", body.as_bytes().to_vec())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route}: {answer}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("bad body") && e.contains(names)),
            "{route} {body}: {answer}"
        );
    }
    // The echo is the transaction id as sent, escapes and all.
    let odd = ack_batch(
        &b,
        None,
        vec![json!({"transactionId": "q\"\u{e9}\n", "partitionId": "987654"})],
    )
    .await;
    assert_eq!(odd[0]["transactionId"], "q\"\u{e9}\n");
    assert_refused(&odd[0], "consumer not found");
    let empty = ack_batch(&b, None, vec![]).await;
    assert!(empty.is_empty());
}

#[tokio::test]
async fn status_aliases_and_queue_mode_normalise() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("alias", 4);
    push_txns(&b, "alias", "p", &txns).await;
    let popped = pop(&b, "alias", Some("p"), None, 4, "")
        .await
        .expect("four messages");
    let pid = popped.partition_id();
    // consumerGroup "" and null both mean queue mode; success/acked/ok mean completed.
    for (i, status) in ["success", "acked", "ok", "COMPLETED"].iter().enumerate() {
        let group = if i % 2 == 0 { Some("") } else { None };
        assert_ok(&ack_one(&b, group, ack_item(&popped.messages[i], status)).await);
        assert_eq!(cursor(&db, pid, common_group()).await.committed, i as i64);
    }
}

#[tokio::test]
async fn a_re_pushed_transaction_id_resolves_to_the_copy_being_acked() {
    let b = common::broker().await;
    let db = b.sql().await;
    // Without dedup the same transactionId can be stored twice; the sidecar is still written.
    configure(&b, "again", json!({ "dedupWindowSeconds": 0 })).await;
    let same = vec!["same".to_string()];
    push_txns(&b, "again", "p", &same).await;
    let first = pop(&b, "again", Some("p"), G, 1, "")
        .await
        .expect("first copy");
    assert_ok(&ack_batch(&b, G, vec![ack_item(&first.messages[0], "completed")]).await[0]);

    push_txns(&b, "again", "p", &same).await;
    let second = pop(&b, "again", Some("p"), G, 1, "")
        .await
        .expect("second copy");
    assert_eq!(second.messages[0]["offset"], 1);
    // The copy below the cursor must not shadow the in-span one: not a noop, the cursor moves.
    let r = ack_batch(&b, G, vec![ack_item(&second.messages[0], "completed")]).await;
    assert_ok(&r[0]);
    assert_eq!(
        (r[0]["noop"].clone(), r[0]["leaseReleased"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(cursor(&db, second.partition_id(), "g").await.committed, 1);
}

#[tokio::test]
async fn a_lease_less_ack_of_a_purged_message_delivered_before_a_release_is_unresolvable() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "purged", "p", &txns("purged", 2)).await;
    let popped = pop(&b, "purged", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    // The batch is released (a retry of its head): the row keeps no delivered batch.
    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "retry")]).await;
    assert_eq!(r[0]["leaseReleased"], true, "{}", r[0]);
    // Both messages (offsets 0 and 1) lose their hash rows. With no batch on the row there
    // is no span to resolve them by position (within the last delivered batch, lease-less
    // acks are: tests/ack/purged.rs).
    common::purge_hash_rows(&db, pid).await;
    let items = popped
        .messages
        .iter()
        .map(|m| lease_less(m, "completed"))
        .collect();
    let answer = ack_batch(&b, G, items).await;
    answer.iter().for_each(|r| assert_refused(r, "unresolv"));
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (-1, None), "redelivery over loss");
    let again = pop(&b, "purged", Some("p"), G, 2, "").await.expect("again");
    assert_eq!(again.txns(), popped.txns());
}

#[tokio::test]
async fn a_nack_wakes_a_parked_consumer_of_the_group() {
    let b = broker_without_backoff_rechecks().await;
    push_txns(&b, "nudge", "p", &txns("nudge", 1)).await;
    let popped = pop(&b, "nudge", None, G, 1, "&leaseSeconds=60")
        .await
        .expect("one message");
    // A second consumer of the group finds the only partition leased and parks.
    let waiter = parked_pop(&b, "/api/v1/pop/queue/nudge?batch=1&consumerGroup=g");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "retry")]).await;
    assert_eq!(r[0]["leaseReleased"], true);
    let (status, body, waited) = waiter.await.expect("waiter");
    assert_eq!(
        status,
        StatusCode::OK,
        "the released batch did not wake the group: {body}"
    );
    assert_eq!(body["messages"][0]["transactionId"], "nudge-0");
    assert_ne!(body["leaseId"], popped.lease_id.as_str());
    println!("parked consumer got the redelivery {waited:.2?} after it started");
}
