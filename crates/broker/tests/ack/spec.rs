//! Conformance of the ack path to the spec (docs/spec/ack-internals.md, docs/wire.md §8–§11, docs/engine.md §6),
//! rule by rule, for the rules the feature tests (ack, dlq, lease, transaction,
//! ack_positional) leave open: the ack path never takes a partition row lock; resolution
//! under a lease ends at batch_end; the hash lists of `log_ack_by_hash_v1`; a transactionId
//! delivered twice; signals without a live lease; the retry budget's charging and reset;
//! DLQ enablement, reasons, empty payloads and the missing foreign key; renewal's earliest
//! expiry; positional acks under an expired lease; and the transaction wire's tolerance of
//! below-cursor acks, lease lending, riders and lock order under concurrency.

use std::time::{Duration, Instant};

use queen_proto::hash::{to_hex, txn_hash};
use rand::seq::SliceRandom;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

/// Makes the lease on (pid, group) expire now, without sleeping.
async fn expire_lease(db: &tokio_postgres::Client, pid: i64, group: &str) {
    db.execute(
        "UPDATE queen.log_consumers SET lease_expires_at = clock_timestamp() - interval '1 second'
         WHERE partition_id = $1 AND consumer_group = $2",
        &[&pid, &group],
    )
    .await
    .expect("expire the lease");
}

/// (attempt_count, attempt_offset, total_consumed) of a cursor row.
async fn counters(db: &tokio_postgres::Client, pid: i64, group: &str) -> (i32, Option<i64>, i64) {
    let row = db
        .query_one(
            "SELECT attempt_count, attempt_offset, total_consumed FROM queen.log_consumers
             WHERE partition_id = $1 AND consumer_group = $2",
            &[&pid, &group],
        )
        .await
        .expect("cursor row");
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test]
async fn the_ack_path_never_waits_on_a_partition_row_lock() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "nolock", json!({ "retryLimit": 0 })).await;
    push_txns(&b, "nolock", "p", &txns("nolock", 4)).await;
    let popped = pop(&b, "nolock", Some("p"), G, 4, "")
        .await
        .expect("four messages");
    let pid = popped.partition_id();

    // What the push serializer holds while it appends: the partition row, FOR UPDATE.
    let mut holder = b.sql().await;
    let lock = holder.transaction().await.expect("begin");
    lock.execute(
        "SELECT 1 FROM queen.log_partitions WHERE id = $1 FOR UPDATE",
        &[&pid],
    )
    .await
    .expect("lock the partition row");

    let started = Instant::now();
    let acks = async {
        let partial = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "completed")]).await;
        assert_ok(&partial[0]);
        let renewal = b
            .post(
                &format!("/api/v1/lease/{}/extend", popped.lease_id),
                &json!({ "seconds": 30 }),
            )
            .await;
        assert_eq!(renewal.1["renewed"], 1, "{renewal:?}");
        let (_, bundle) = b
            .post(
                "/api/v1/transaction",
                &json!({ "operations": [ack_op(&popped.messages[1], "completed", G)] }),
            )
            .await;
        assert_eq!(bundle["success"], true, "{bundle}");
        // A nack with retryLimit 0: resolution, then the DLQ hand-off.
        let nack = ack_batch(&b, G, vec![ack_item(&popped.messages[2], "failed")]).await;
        assert_eq!(nack[0]["dlq"], true, "{nack:?}");
    };
    tokio::time::timeout(Duration::from_secs(20), acks)
        .await
        .expect("an ack waited on the partition row lock");
    println!(
        "ack, renewal, transaction ack and DLQ hand-off under a held partition lock: {:.2?}",
        started.elapsed()
    );
    lock.rollback().await.expect("release");
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (2, None));
}

#[tokio::test]
async fn under_a_lease_resolution_ends_at_batch_end() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("span", 4);
    push_txns(&b, "span", "p", &txns).await;
    let popped = pop(&b, "span", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    let before = cursor(&db, pid, "g").await;
    assert_eq!(before.batch_end, Some(1));

    // Offset 3 was never delivered under this lease: unresolvable, nothing moves.
    let beyond = json!({
        "transactionId": txns[3], "partitionId": pid.to_string(),
        "leaseId": popped.lease_id, "status": "completed",
    });
    assert_refused(&ack_batch(&b, G, vec![beyond.clone()]).await[0], "unresolv");
    assert_eq!(cursor(&db, pid, "g").await.state(), before.state());

    // Lease-less, the span is everything above the cursor: the ack completes 0..=3 and
    // ends the live lease, whose whole batch is now committed.
    let mut unleased = beyond;
    unleased.as_object_mut().map(|o| o.remove("leaseId"));
    let r = ack_batch(&b, G, vec![unleased]).await;
    assert_ok(&r[0]);
    assert_eq!(r[0]["leaseReleased"], true);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.batch_end, c.worker), (3, None, None));
}

#[tokio::test]
async fn the_decision_procedure_reports_hex_lists_in_input_order() {
    let b = common::broker().await;
    let db = b.sql().await;
    let txns = txns("lists", 5);
    push_txns(&b, "lists", "p", &txns).await;
    let popped = pop(&b, "lists", Some("p"), G, 5, "")
        .await
        .expect("five messages");
    let pid = popped.partition_id();
    assert_ok(&ack_batch(&b, G, vec![ack_item(&popped.messages[1], "completed")]).await[0]);
    let (_, _, consumed_before) = counters(&db, pid, "g").await;

    let items = [
        ("ghost-a", "failed"),
        (txns[0].as_str(), "completed"), // below the cursor: noop
        (txns[3].as_str(), "completed"),
        ("ghost-b", "completed"),
        (txns[1].as_str(), "retry"), // a signal below the cursor: stale
    ];
    let hashes: Vec<Vec<u8>> = items.iter().map(|(t, _)| txn_hash(t).to_vec()).collect();
    let statuses: Vec<&str> = items.iter().map(|(_, s)| *s).collect();
    let hex = |t: &str| json!(to_hex(&txn_hash(t)));
    let by_hash = "SELECT queen.log_ack_by_hash_v1($1, 'g', $2, $3, $4)::text";
    let v = call(&db, by_hash, &[&pid, &popped.lease_id, &hashes, &statuses]).await;
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["noopHashes"], json!([hex(&txns[0])]));
    assert_eq!(v["staleHashes"], json!([hex(&txns[1])]));
    assert_eq!(
        v["unresolvedHashes"],
        json!([hex("ghost-a"), hex("ghost-b")])
    );
    for token in v["unresolvedHashes"].as_array().expect("list") {
        let token = token.as_str().expect("a string token");
        assert!(
            token.len() == 32
                && token
                    .bytes()
                    .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
            "{token}"
        );
    }
    // acked is new − old committed: 3 − 1.
    assert_eq!(
        (
            v["acked"].clone(),
            v["off"].clone(),
            v["leaseReleased"].clone()
        ),
        (json!(2), json!(3), json!(false))
    );
    let (_, _, consumed_after) = counters(&db, pid, "g").await;
    assert_eq!(
        consumed_after - consumed_before,
        2,
        "total_consumed += acked"
    );

    let misaligned = db
        .query_one(
            by_hash,
            &[&pid, &popped.lease_id, &hashes, &vec!["completed"]],
        )
        .await;
    assert!(misaligned.is_err(), "misaligned arrays raise");
    assert_eq!(cursor(&db, pid, "g").await.committed, 3);
}

#[tokio::test]
async fn a_transaction_id_delivered_twice_signals_at_its_first_copy_and_acks_both() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "twice", json!({ "dedupWindowSeconds": 0 })).await;
    push_txns(&b, "twice", "p", &["twin".to_string(), "mid".to_string()]).await;
    push_txns(&b, "twice", "p", &["twin".to_string()]).await;
    let popped = pop(&b, "twice", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    assert_eq!(popped.txns(), ["twin", "mid", "twin"]);
    let pid = popped.partition_id();

    // A nack of the shared id stops at its first copy (offset 0), whatever else is acked.
    let answer = ack_batch(
        &b,
        G,
        vec![
            ack_item(&popped.messages[1], "completed"),
            ack_item(&popped.messages[2], "failed"),
        ],
    )
    .await;
    answer.iter().for_each(assert_ok);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.retries), (-1, None, 1));

    // Acking the shared id acks both offsets (docs/spec/ack-internals.md: "acking that transactionId acks both
    // offsets in the SQL model too"), so the batch is fully committed and the lease ends.
    let again = pop(&b, "twice", Some("p"), G, 3, "")
        .await
        .expect("redelivery of all three");
    assert_eq!(again.txns(), ["twin", "mid", "twin"]);
    let r = ack_batch(&b, G, vec![ack_item(&again.messages[0], "completed")]).await;
    assert_ok(&r[0]);
    assert_eq!(r[0]["leaseReleased"], true);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.retries), (2, None, 0));
}

#[tokio::test]
async fn signals_without_a_live_lease_only_clamp_the_implicit_advance() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "orphan", json!({ "retryLimit": 0 })).await;
    push_txns(&b, "orphan", "p", &txns("orphan", 3)).await;
    let popped = pop(&b, "orphan", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    expire_lease(&db, pid, "g").await;

    // Under the expired lease every item is refused.
    let refused = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "completed")]).await;
    assert_refused(&refused[0], "lease");

    // Lease-less, the nack is not actionable (no charge, no DLQ, no release of anything) but
    // is never skipped: the cursor stops below it.
    let answer = ack_batch(
        &b,
        G,
        vec![
            lease_less(&popped.messages[0], "completed"),
            lease_less(&popped.messages[1], "failed"),
            lease_less(&popped.messages[2], "completed"),
        ],
    )
    .await;
    answer.iter().for_each(assert_ok);
    assert!(answer.iter().all(|r| r["dlq"] == false), "{answer:?}");
    let dead = ack_batch(&b, G, vec![lease_less(&popped.messages[1], "dlq")]).await;
    assert_ok(&dead[0]);
    assert_eq!(dead[0]["dlq"], false);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.retries), (0, 0));
    assert_eq!(dlq(&b, "queue=orphan").await["total"], 0);

    let next = pop(&b, "orphan", Some("p"), G, 3, "")
        .await
        .expect("the nacked message redelivers");
    assert_eq!(next.txns(), ["orphan-1", "orphan-2"]);
}

#[tokio::test]
async fn the_retry_budget_is_charged_once_per_failed_call_and_never_by_expiry_or_retry() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "budget", json!({ "retryLimit": 5 })).await;
    push_txns(&b, "budget", "p", &txns("budget", 3)).await;
    let popped = pop(&b, "budget", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();

    // Three failed items in one call charge one unit.
    let items = popped
        .messages
        .iter()
        .map(|m| ack_item(m, "failed"))
        .collect();
    ack_batch(&b, G, items).await.iter().for_each(assert_ok);
    assert_eq!(cursor(&db, pid, "g").await.retries, 1);

    // An expiry redelivers as a new attempt but spends nothing.
    let second = pop(&b, "budget", Some("p"), G, 3, "")
        .await
        .expect("redelivery after the nack");
    expire_lease(&db, pid, "g").await;
    let third = pop(&b, "budget", Some("p"), G, 3, "")
        .await
        .expect("redelivery after the expiry");
    assert_ne!(third.lease_id, second.lease_id);
    assert_eq!(third.messages[0]["deliveryAttempt"], 3);
    assert_eq!(cursor(&db, pid, "g").await.retries, 1);
    assert_eq!(counters(&db, pid, "g").await.0, 3);

    // retry releases the lease and spends nothing either.
    let r = ack_batch(&b, G, vec![ack_item(&third.messages[0], "retry")]).await;
    assert_eq!(r[0]["leaseReleased"], true);
    assert_eq!(cursor(&db, pid, "g").await.retries, 1);

    // Committing the whole batch resets the budget and the attempt telemetry.
    let last = pop(&b, "budget", Some("p"), G, 3, "")
        .await
        .expect("redelivery after the retry");
    let items = last
        .messages
        .iter()
        .map(|m| ack_item(m, "completed"))
        .collect();
    ack_batch(&b, G, items).await.iter().for_each(assert_ok);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.retries), (2, None, 0));
    let (attempts, attempt_offset, _) = counters(&db, pid, "g").await;
    assert_eq!((attempts, attempt_offset), (0, None));
}

#[tokio::test]
async fn either_dlq_option_enables_dead_letters_and_an_unconfigured_queue_has_both() {
    let b = common::broker().await;
    for (queue, dead_letter_queue, after_max) in
        [("only-dlq", true, false), ("only-after", false, true)]
    {
        configure(
            &b,
            queue,
            json!({ "retryLimit": 0, "deadLetterQueue": dead_letter_queue, "dlqAfterMaxRetries": after_max }),
        )
        .await;
        push_txns(&b, queue, "p", &txns(queue, 1)).await;
        let popped = pop(&b, queue, Some("p"), G, 1, "")
            .await
            .expect("one message");
        let r = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "failed")]).await;
        assert_eq!(r[0]["dlq"], true, "{queue}: {r:?}");
        assert_eq!(dlq(&b, &format!("queue={queue}")).await["total"], 1);
    }

    // Never configured: retry limit 3 and the DLQ on, so the fourth failure files it.
    push_txns(&b, "plain", "p", &txns("plain", 1)).await;
    let mut deliveries = 0;
    while let Some(popped) = pop(&b, "plain", Some("p"), G, 1, "").await {
        deliveries += 1;
        assert!(deliveries <= 4, "never dead-lettered");
        ack_batch(&b, G, vec![ack_item(&popped.messages[0], "failed")]).await;
    }
    assert_eq!(deliveries, 4);
    let listing = dlq(&b, "queue=plain").await;
    assert_eq!(listing["messages"][0]["retryCount"], 3, "{listing}");
    assert_eq!(listing["messages"][0]["errorMessage"], "Retries exhausted");
}

#[tokio::test]
async fn the_dead_letter_reason_falls_back_to_the_first_nack_of_the_call() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "why", json!({ "retryLimit": 0 })).await;
    push_txns(&b, "why", "p", &txns("why", 3)).await;
    let popped = pop(&b, "why", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    let mut later = ack_item(&popped.messages[2], "failed");
    later["error"] = json!("the later nack's reason");
    let answer = ack_batch(
        &b,
        G,
        vec![
            ack_item(&popped.messages[0], "completed"),
            later,
            // The head signal, with no reason of its own.
            ack_item(&popped.messages[1], "failed"),
        ],
    )
    .await;
    assert_eq!(
        answer.iter().map(|r| r["dlq"].clone()).collect::<Vec<_>>(),
        [json!(false), json!(false), json!(true)]
    );
    let row = &dlq(&b, "queue=why").await["messages"][0];
    assert_eq!(row["transactionId"], "why-1");
    assert_eq!(row["errorMessage"], "the later nack's reason");
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (1, None));
    let (attempts, attempt_offset, _) = counters(&db, pid, "g").await;
    assert_eq!((attempts, attempt_offset), (0, None), "attempt state reset");
}

#[tokio::test]
async fn an_empty_payload_is_filed_as_json_null_and_dead_letters_have_no_foreign_key() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "nullpay", "p", &txns("nullpay", 1)).await;
    let popped = pop(&b, "nullpay", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let pid = popped.partition_id();
    let filed = call(
        &db,
        "SELECT queen.log_dlq_head_v1($1, 'g', $2, 0, NULL, 'nullpay-0', NULL, 'r')::text",
        &[&pid, &popped.lease_id],
    )
    .await;
    assert_eq!(filed["ok"], true, "{filed}");
    let kind: Option<String> = db
        .query_one("SELECT json_typeof(payload) FROM queen.log_dlq", &[])
        .await
        .expect("the row")
        .get(0);
    assert_eq!(kind.as_deref(), Some("null"), "JSON null, not SQL NULL");
    let listing = dlq(&b, "queue=nullpay").await;
    assert_eq!(listing["messages"][0]["data"], Value::Null);

    let foreign_keys: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'queen.log_dlq'::regclass AND contype = 'f'",
            &[],
        )
        .await
        .expect("constraints")
        .get(0);
    assert_eq!(foreign_keys, 0);
    // Even the partition itself going away leaves the dead letter.
    db.execute("DELETE FROM queen.log_partitions WHERE id = $1", &[&pid])
        .await
        .expect("delete the partition");
    assert_eq!(common::count(&db, "queen.log_dlq").await, 1);
}

#[tokio::test]
async fn a_hand_off_over_a_retention_gap_gives_up_without_failing_the_ack() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "gap", json!({ "retryLimit": 0 })).await;
    push_txns(&b, "gap", "p", &txns("gap", 1)).await;
    let popped = pop(&b, "gap", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let pid = popped.partition_id();
    db.execute(
        "DELETE FROM queen.log_segments WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .expect("the segment is gone; its hash row stays");
    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "failed")]).await;
    assert_eq!(r[0]["dlq"], false, "{r:?}");
    assert_eq!(dlq(&b, "queue=gap").await["total"], 0);
    let c = cursor(&db, pid, "g").await;
    assert_eq!(
        (c.committed, c.worker),
        (-1, Some(popped.lease_id.clone())),
        "nothing filed, nothing skipped: the lease runs out"
    );
}

#[tokio::test]
async fn renewal_reports_the_earliest_expiry_among_the_renewed_leases() {
    let b = common::broker().await;
    let db = b.sql().await;
    for p in ["a", "b", "c"] {
        push_txns(&b, "earliest", p, &txns(&format!("earliest-{p}"), 1)).await;
    }
    let popped = pop(&b, "earliest", None, G, 10, "&partitions=3&leaseSeconds=5")
        .await
        .expect("messages");
    assert_eq!(popped.messages.len(), 3);
    let pid = popped.partition_id();
    db.execute(
        "UPDATE queen.log_consumers SET lease_expires_at = clock_timestamp() + interval '1 hour'
         WHERE partition_id = $1 AND consumer_group = 'g'",
        &[&pid],
    )
    .await
    .expect("one long lease");
    let (status, answer) = b
        .post(
            &format!("/api/v1/lease/{}/extend", popped.lease_id),
            &json!({ "seconds": 90 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["renewed"], 3, "{answer}");
    let expiries: Vec<chrono::DateTime<chrono::Utc>> = db
        .query(
            "SELECT lease_expires_at FROM queen.log_consumers WHERE worker_id = $1 ORDER BY 1",
            &[&popped.lease_id],
        )
        .await
        .expect("leases")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let reported = queen_proto::time::parse_iso(answer["expiresAt"].as_str().expect("an expiry"))
        .expect("ISO");
    assert_eq!(reported, expiries[0], "the earliest renewed expiry");
    assert!(
        expiries[2] - expiries[0] > chrono::Duration::minutes(50),
        "the hour-long lease was not shortened: {expiries:?}"
    );
}

#[tokio::test]
async fn positional_acks_re_validate_an_expired_lease() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "posexp", "p", &txns("posexp", 2)).await;
    let popped = pop(&b, "posexp", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    expire_lease(&db, pid, "g").await;

    let at = call(
        &db,
        "SELECT queen.log_ack_at_v1($1, 'g', $2, 1, true, 2)::text",
        &[&pid, &popped.lease_id],
    )
    .await;
    assert_eq!(at["error"], "invalid or expired lease");
    let multi = call(
        &db,
        "SELECT queen.log_ack_multi_v1($1, $2, $3, $4, $5)::text",
        &[
            &vec![pid],
            &vec!["g"],
            &vec![1i64],
            &vec![popped.lease_id.as_str()],
            &vec![2i32],
        ],
    )
    .await;
    assert_eq!(multi["results"][0]["error"], "invalid or expired lease");
    assert_eq!(cursor(&db, pid, "g").await.committed, -1);

    // Without a worker there is nothing to validate: the expired batch is committed.
    let lease_less = call(
        &db,
        "SELECT queen.log_ack_at_v1($1, 'g', '', 1, true, 2)::text",
        &[&pid],
    )
    .await;
    assert_eq!(lease_less["acked"], 2, "{lease_less}");
    assert_eq!(cursor(&db, pid, "g").await.committed, 1);
}

#[tokio::test]
async fn a_status_that_is_not_a_string_is_a_failure() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "oddstatus", "p", &txns("oddstatus", 1)).await;
    let popped = pop(&b, "oddstatus", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let mut item = ack_item(&popped.messages[0], "completed");
    item["status"] = json!(7);
    let r = ack_batch(&b, G, vec![item]).await;
    assert_ok(&r[0]);
    assert_eq!(r[0]["leaseReleased"], true);
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.retries), (-1, 1), "counted as failed");
}

#[tokio::test]
async fn a_bundle_tolerates_acks_below_the_cursor() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "txbelow", "p", &txns("txbelow", 3)).await;
    let popped = pop(&b, "txbelow", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    assert_ok(&ack_batch(&b, G, vec![ack_item(&popped.messages[1], "completed")]).await[0]);

    let push = json!({ "type": "push", "items": [{ "queue": "txbelow-out", "partition": "p", "transactionId": "out-0", "payload": 1 }] });
    let (status, answer) = b
        .post(
            "/api/v1/transaction",
            &json!({ "operations": [
                push,
                ack_op(&popped.messages[0], "completed", G),
                ack_op(&popped.messages[0], "failed", G),
                ack_op(&popped.messages[2], "completed", G),
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["success"], true, "{answer}");
    let results = answer["results"].as_array().expect("results");
    assert_eq!(
        (results[1]["success"].clone(), results[1]["noop"].clone()),
        (json!(true), json!(true))
    );
    assert!(results[1]["error"].is_null());
    assert_refused(&results[2], "committed");
    assert_eq!(results[3]["leaseReleased"], true);
    assert_eq!(cursor(&db, pid, "g").await.committed, 2);
    assert!(pop(&b, "txbelow-out", Some("p"), G, 1, "").await.is_some());

    // A lease-less replay of acks that already landed resolves as duplicates.
    let (_, replay) = b
        .post(
            "/api/v1/transaction",
            &json!({ "operations": [
                { "type": "ack", "transactionId": popped.messages[2]["transactionId"],
                  "partitionId": popped.messages[2]["partitionId"], "consumerGroup": "g" },
            ]}),
        )
        .await;
    assert_eq!(replay["success"], true, "{replay}");
    assert_eq!(replay["results"][0]["noop"], true);
}

#[tokio::test]
async fn with_two_required_leases_an_ack_without_its_own_lease_borrows_none() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "twolease", "p", &txns("twolease", 1)).await;
    let popped = pop(&b, "twolease", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let mut op = lease_less(&popped.messages[0], "completed");
    op["type"] = json!("ack");
    op["consumerGroup"] = json!("g");
    // Lending either forged lease would refuse the ack; applied lease-less it commits.
    let (_, answer) = b
        .post(
            "/api/v1/transaction",
            &json!({ "operations": [op], "requiredLeases": [
                "01a00000-0000-7000-8000-000000000001", "01a00000-0000-7000-8000-000000000002"] }),
        )
        .await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, 0);
}

#[tokio::test]
async fn rider_operations_are_refused_and_empty_riders_ignored() {
    let b = common::broker().await;
    let db = b.sql().await;
    let push = json!({ "type": "push", "queue": "riders", "transactionId": "r-0", "payload": 1 });
    for riders in [
        json!({ "timers": [{ "in": 5 }] }),
        json!({ "kv": [{ "set": "k" }] }),
    ] {
        let mut body = json!({ "operations": [push.clone()] });
        body.as_object_mut()
            .expect("object")
            .extend(riders.as_object().expect("object").clone());
        let (status, answer) = b.post("/api/v1/transaction", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{riders}: {answer}");
        assert_eq!(answer["reason"], "bad_request");
    }
    assert_eq!(common::count(&db, "queen.log_segments").await, 0);
    let (status, answer) = b
        .post(
            "/api/v1/transaction",
            &json!({ "operations": [push], "kv": [], "timers": null }),
        )
        .await;
    assert_eq!(
        (status, answer["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{answer}"
    );
}

/// Bundles push to partitions of their own and ack (lease-less, so every bundle locks both)
/// the same two consumer rows, listing their operations in random orders. Only the total
/// lock order (partitions ascending, then consumer rows by (partition_id, group)) keeps
/// them from deadlocking, which PostgreSQL would report as a failed bundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_bundles_in_random_orders_never_deadlock() {
    const TASKS: usize = 8;
    const BUNDLES: usize = 12;
    let b = std::sync::Arc::new(common::broker().await);
    configure(&b, "lock-dst", json!({})).await;
    let mut sources = Vec::new();
    for p in ["a", "b"] {
        push_txns(&b, "lock-src", p, &txns(&format!("src-{p}"), 1)).await;
        let popped = pop(&b, "lock-src", Some(p), G, 1, "")
            .await
            .expect("one message");
        assert_ok(&ack_batch(&b, G, vec![ack_item(&popped.messages[0], "completed")]).await[0]);
        sources.push(popped.messages[0].clone());
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (b, sources) = (b.clone(), sources.clone());
            tokio::spawn(async move {
                for n in 0..BUNDLES {
                    let mut ops: Vec<Value> = sources
                        .iter()
                        .map(|m| {
                            let mut op = lease_less(m, "completed");
                            op["type"] = json!("ack");
                            op["consumerGroup"] = json!("g");
                            op
                        })
                        .collect();
                    ops.push(json!({ "type": "push", "queue": "lock-dst", "partition": format!("t{task}"),
                                     "transactionId": format!("t{task}-{n}"), "payload": n }));
                    if n % 3 == 0 {
                        ops.push(json!({ "type": "push", "queue": "lock-dst", "partition": "shared",
                                         "transactionId": format!("s{task}-{n}"), "payload": n }));
                    }
                    ops.shuffle(&mut rand::thread_rng());
                    let (status, answer) = b
                        .post("/api/v1/transaction", &json!({ "operations": ops }))
                        .await;
                    assert_eq!(status, StatusCode::OK, "{answer}");
                    assert_eq!(answer["success"], true, "{answer}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("no bundle failed");
    }
    println!(
        "{} concurrent bundles over two shared consumer rows in {:.2?}",
        TASKS * BUNDLES,
        started.elapsed()
    );
    let db = b.sql().await;
    let stored: i64 = db
        .query_one(
            "SELECT COALESCE(sum(s.end_offset - s.base_offset + 1), 0)::int8 FROM queen.log_segments s
             JOIN queen.log_partitions lp ON lp.id = s.partition_id
             JOIN queen.queues q ON q.id = lp.queue_id WHERE q.name = 'lock-dst'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        stored as usize,
        TASKS * BUNDLES + TASKS * BUNDLES.div_ceil(3)
    );
}
