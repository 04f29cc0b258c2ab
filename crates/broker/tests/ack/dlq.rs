//! Retries and dead letters (docs/wire.md §8.4, §11): the retry budget, immediate `dlq`, the DLQ
//! hand-off and its guards, skipping with the DLQ disabled, and `GET /api/v1/dlq`.

use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

/// `failed` for the head of `popped`, the rest of it left unacked; the answer's items.
async fn nack_head(b: &common::TestBroker, popped: &Popped) -> Vec<Value> {
    ack_batch(b, G, vec![ack_item(&popped.messages[0], "failed")]).await
}

/// Nacks the head message until it leaves the partition; returns how often it was delivered.
async fn deliveries_until_gone(b: &common::TestBroker, queue: &str, poison: &str) -> usize {
    let mut deliveries = 0;
    loop {
        let popped = pop(b, queue, Some("p"), G, 1, "")
            .await
            .expect("a message is always pending");
        if popped.txns()[0] != poison {
            return deliveries;
        }
        deliveries += 1;
        assert!(deliveries < 10, "{queue}: the poison message never left");
        let mut nack = ack_item(&popped.messages[0], "failed");
        nack["error"] = json!(format!("Test error #{deliveries}"));
        let r = ack_batch(b, G, vec![nack]).await;
        assert_ok(&r[0]);
        assert_eq!(r[0]["leaseReleased"], true);
    }
}

#[tokio::test]
async fn retry_limits_give_one_more_delivery_than_the_limit_before_the_dlq() {
    let b = common::broker().await;
    for limit in 0..=3usize {
        let queue = format!("limit{limit}");
        configure(&b, &queue, json!({ "retryLimit": limit })).await;
        push_txns(&b, &queue, "p", &["poison".to_string(), "next".to_string()]).await;
        let deliveries = deliveries_until_gone(&b, &queue, "poison").await;
        assert_eq!(deliveries, limit + 1, "retryLimit {limit}");

        let listing = dlq(&b, &format!("queue={queue}")).await;
        assert_eq!(listing["total"], 1, "{listing}");
        let row = &listing["messages"][0];
        assert_eq!(row["transactionId"], "poison");
        assert_eq!(row["retryCount"], limit, "the budget consumed is recorded");
        assert_eq!(
            row["errorMessage"],
            format!("Test error #{}", limit + 1),
            "the last nack's reason"
        );
        assert_eq!(row["data"], json!({ "txn": "poison" }));
        assert_eq!(row["consumerGroup"], "g");
        assert_eq!(row["queue"], queue.as_str());
        assert_eq!(row["partition"], "p");
    }
}

#[tokio::test]
async fn the_dlq_status_files_at_once_and_the_next_message_follows() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "now", "p", &txns("now", 2)).await;
    let popped = pop(&b, "now", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    let mut poison = ack_item(&popped.messages[0], "dlq");
    poison["error"] = json!("unparseable");
    let answer = ack_batch(
        &b,
        G,
        vec![poison, ack_item(&popped.messages[1], "completed")],
    )
    .await;
    assert_eq!(
        (answer[0]["dlq"].clone(), answer[1]["dlq"].clone()),
        (json!(true), json!(false))
    );
    assert!(answer
        .iter()
        .all(|r| r["success"] == true && r["leaseReleased"] == true));

    let c = cursor(&db, pid, "g").await;
    assert_eq!(
        (c.committed, c.worker, c.retries),
        (0, None, 0),
        "past the dead letter, lease released"
    );
    let listing = dlq(&b, "queue=now&consumerGroup=g").await;
    assert_eq!(listing["total"], 1);
    assert_eq!(listing["messages"][0]["errorMessage"], "unparseable");
    assert_eq!(listing["messages"][0]["retryCount"], 0);
    let next = pop(&b, "now", Some("p"), G, 2, "")
        .await
        .expect("the completed ack above the dlq redelivers");
    assert_eq!(next.txns(), vec!["now-1".to_string()]);
}

#[tokio::test]
async fn dead_letters_keep_their_payload_after_the_segment_is_gone() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "keep", "p", &txns("keep", 1)).await;
    let popped = pop(&b, "keep", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let pid = popped.partition_id();
    ack_batch(&b, G, vec![ack_item(&popped.messages[0], "dlq")]).await;

    // What retention does to consumed data: the segment and its hash row disappear.
    db.execute(
        "DELETE FROM queen.log_segments WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .expect("delete");
    db.execute(
        "DELETE FROM queen.log_txns WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .expect("delete");
    let listing = dlq(&b, "queue=keep").await;
    assert_eq!(listing["total"], 1);
    let row = &listing["messages"][0];
    assert_eq!(row["data"], json!({ "txn": "keep-0" }));
    assert_eq!(
        row["errorMessage"], "Retries exhausted",
        "no nack reason: the fallback text"
    );
    assert_eq!(row["messageId"], popped.messages[0]["id"]);
    assert_eq!(row["partitionId"], pid.to_string());
}

#[tokio::test]
async fn with_the_dlq_disabled_an_exhausted_message_is_skipped() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(
        &b,
        "skip",
        json!({ "retryLimit": 0, "deadLetterQueue": false, "dlqAfterMaxRetries": false }),
    )
    .await;
    push_txns(&b, "skip", "p", &txns("skip", 2)).await;
    let popped = pop(&b, "skip", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "failed")]).await;
    assert_ok(&r[0]);
    assert_eq!(
        (r[0]["dlq"].clone(), r[0]["leaseReleased"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, 0);
    assert_eq!(dlq(&b, "queue=skip").await["total"], 0);
    let next = pop(&b, "skip", Some("p"), G, 5, "")
        .await
        .expect("the next message");
    assert_eq!(next.txns(), vec!["skip-1".to_string()]);
}

#[tokio::test]
async fn the_hand_off_is_guarded_and_a_second_call_is_a_no_op() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "guard", "p", &txns("guard", 3)).await;
    let popped = pop(&b, "guard", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    assert_ok(&ack_batch(&b, G, vec![ack_item(&popped.messages[1], "completed")]).await[0]);

    let file = |off: i64| {
        let db = &db;
        let lease = popped.lease_id.clone();
        async move {
            let row = db
                .query_one(
                    "SELECT queen.log_dlq_head_v1($1, 'g', $2, $3, NULL, 'guard-0', '{\"x\":1}', 'late')::text",
                    &[&pid, &lease, &off],
                )
                .await
                .expect("log_dlq_head_v1");
            serde_json::from_str::<Value>(row.get::<_, &str>(0)).expect("json")
        }
    };
    // A stale offset below the cursor files the row but never moves the cursor backwards.
    assert_eq!(file(0).await["ok"], true);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (1, None));
    // The lease is gone now: the second call changes nothing.
    assert_eq!(file(0).await["ok"], false);
    assert_eq!(common::count(&db, "queen.log_dlq").await, 1);
    assert_eq!(cursor(&db, pid, "g").await.committed, 1);
}

#[tokio::test]
async fn the_dlq_listing_filters_pages_and_counts() {
    let b = common::broker().await;
    // Dead letters in two queues, two partitions and two groups, filed oldest first.
    let mut filed = Vec::new();
    for (queue, partition, group) in [
        ("la", "p1", "g1"),
        ("la", "p2", "g1"),
        ("la", "p3", "g2"),
        ("lb", "p1", "g1"),
        ("la", "p1", "g1"),
    ] {
        let txn = format!("{queue}-{partition}-{group}-{}", filed.len());
        push_txns(&b, queue, partition, std::slice::from_ref(&txn)).await;
        let popped = pop(&b, queue, Some(partition), Some(group), 1, "")
            .await
            .expect("one message");
        assert_eq!(popped.txns(), vec![txn.clone()]);
        let r = ack_batch(&b, Some(group), vec![ack_item(&popped.messages[0], "dlq")]).await;
        assert_eq!(r[0]["dlq"], true);
        filed.push(txn);
    }
    let txns_of = |listing: &Value| -> Vec<String> {
        listing["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["transactionId"].as_str().unwrap_or_default().to_string())
            .collect()
    };

    let all_la = dlq(&b, "queue=la").await;
    assert_eq!(all_la["total"], 4);
    assert_eq!(
        txns_of(&all_la),
        vec![
            filed[4].clone(),
            filed[2].clone(),
            filed[1].clone(),
            filed[0].clone()
        ],
        "newest first"
    );
    assert_eq!(all_la["pagination"], json!({ "limit": 100, "offset": 0 }));

    let g1_p1 = dlq(&b, "queue=la&consumerGroup=g1&partition=p1").await;
    assert_eq!(txns_of(&g1_p1), vec![filed[4].clone(), filed[0].clone()]);
    assert_eq!(g1_p1["total"], 2);

    let page = dlq(&b, "queue=la&limit=2&offset=1").await;
    assert_eq!(txns_of(&page), vec![filed[2].clone(), filed[1].clone()]);
    assert_eq!(page["total"], 4, "total counts every match, not the page");
    let widest = dlq(&b, "queue=la&limit=1000").await;
    assert_eq!(txns_of(&widest).len(), 4, "the page cap itself is accepted");

    let future = dlq(&b, "queue=la&from=2999-01-01T00:00:00Z").await;
    assert_eq!(
        (future["total"].clone(), txns_of(&future).len()),
        (json!(0), 0)
    );
    let past = dlq(&b, "queue=la&to=2000-01-01T00:00:00Z").await;
    assert_eq!(past["total"], 0);
    let window = dlq(
        &b,
        "queue=lb&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z",
    )
    .await;
    assert_eq!(txns_of(&window), vec![filed[3].clone()]);

    for bad in [
        "queue=la&limit=0",
        // One past the page cap (MAX_PAGE_LIMIT, docs/wire.md §11).
        "queue=la&limit=1001",
        "queue=la&offset=-1",
        "queue=la&from=yesterday",
    ] {
        let (status, body) = b.get(&format!("/api/v1/dlq?{bad}")).await;
        assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}

#[tokio::test]
async fn a_payload_holding_a_nul_escape_is_dead_lettered_verbatim() {
    let b = common::broker().await;
    // Any JSON document the push accepted, `\u0000` included (jsonb cannot hold it).
    let payload = json!({ "a": "x\u{0000}y" });
    b.push("nul", "p", std::slice::from_ref(&payload)).await;
    let popped = pop(&b, "nul", Some("p"), G, 1, "")
        .await
        .expect("one message");
    assert_eq!(popped.messages[0]["data"], payload);
    let r = ack_batch(&b, G, vec![ack_item(&popped.messages[0], "dlq")]).await;
    assert_ok(&r[0]);
    assert_eq!(
        (r[0]["dlq"].clone(), r[0]["leaseReleased"].clone()),
        (json!(true), json!(true))
    );
    let listing = dlq(&b, "queue=nul").await;
    assert_eq!(listing["total"], 1, "{listing}");
    assert_eq!(listing["messages"][0]["data"], payload);
}

#[tokio::test]
async fn a_hand_off_the_database_refuses_is_not_answered_as_success() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "refuse", "p", &txns("refuse", 1)).await;
    // A real refusal by PostgreSQL of this one dead letter, after the ack has committed.
    db.batch_execute(
        "ALTER TABLE queen.log_dlq ADD CONSTRAINT refuse_one CHECK (error <> 'refuse me')",
    )
    .await
    .expect("constraint");
    let popped = pop(&b, "refuse", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let mut item = ack_item(&popped.messages[0], "dlq");
    item["error"] = json!("refuse me");
    let r = ack_batch(&b, G, vec![item]).await;
    assert_refused(&r[0], "dead-letter");
    assert_eq!(
        (r[0]["dlq"].clone(), r[0]["leaseReleased"].clone()),
        (json!(false), json!(false))
    );
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!(
        (c.committed, c.worker.as_deref()),
        (-1, Some(popped.lease_id.as_str())),
        "nothing moved: the message redelivers once its lease expires"
    );
    assert_eq!(dlq(&b, "queue=refuse").await["total"], 0);
}

#[tokio::test]
async fn a_hand_off_whose_connection_dies_is_answered_as_unknown() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "cut", "p", &txns("cut", 1)).await;
    // The backend filing this dead letter is terminated mid-statement: to the broker, the
    // connection is gone and the hand-off may or may not have committed.
    db.batch_execute(
        "CREATE FUNCTION queen.test_cut() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.error = 'cut me' THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER test_cut BEFORE INSERT ON queen.log_dlq
           FOR EACH ROW EXECUTE FUNCTION queen.test_cut();",
    )
    .await
    .expect("trigger");
    let popped = pop(&b, "cut", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let mut item = ack_item(&popped.messages[0], "dlq");
    item["error"] = json!("cut me");
    let body = json!({ "acknowledgments": [item], "consumerGroup": "g" });
    let (status, answer) = b.post("/api/v1/ack/batch", &body).await;
    assert_eq!(
        status.as_u16(),
        503,
        "neither dlq:true nor a refusal is known to be true: {answer}"
    );
    assert!(answer["error"].is_string(), "{answer}");
    // The client's retry meets the settled state and completes the hand-off. The pool may
    // first hand out the connection the server just closed (that retry is a 503 too), so
    // retry as a client does.
    db.batch_execute("DROP TRIGGER test_cut ON queen.log_dlq")
        .await
        .expect("drop trigger");
    let mut retried = None;
    for _ in 0..5 {
        let (status, answer) = b.post("/api/v1/ack/batch", &body).await;
        if status.as_u16() != 503 {
            assert_eq!(status.as_u16(), 200, "{answer}");
            retried = Some(answer);
            break;
        }
    }
    let r = retried.expect("a retry is answered once the dead connection is dropped");
    assert_ok(&r[0]);
    assert_eq!(r[0]["dlq"], true, "{}", r[0]);
    assert_eq!(dlq(&b, "queue=cut").await["total"], 1);
}

/// The ack that spends the budget commits `dlq:true` and keeps the lease for the hand-off;
/// if the lease moves on in between (it expired and a pop claimed the span), nothing is
/// filed, so the `failed` signal had no effect. Answering it `success:true, dlq:false` told
/// the client a third retry was granted past `retryLimit` 2 (the far-behind full chaos run,
/// where slow acks often met their lease's end). It is refused; the message redelivers with
/// its budget still spent, and the next `failed` files it.
#[tokio::test]
async fn a_spent_failed_whose_lease_moved_on_before_the_hand_off_is_refused() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "moved", json!({ "retryLimit": 1, "leaseTime": 2 })).await;
    push_txns(&b, "moved", "p", &txns("moved", 2)).await;
    // The ack's own update of the dlq verdict (lease and batch kept, budget spent) hands the
    // row to another worker: what a pop claiming the expired span does after that commit.
    db.batch_execute(
        "CREATE FUNCTION queen.test_steal() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.consumer_group = 'g' AND OLD.batch_retry_count = 1
              AND OLD.batch_end IS NOT NULL AND NEW.batch_end = OLD.batch_end
              AND NEW.worker_id = OLD.worker_id AND NEW.committed = OLD.committed THEN
             NEW.worker_id := 'another-pop';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER test_steal BEFORE UPDATE ON queen.log_consumers
           FOR EACH ROW EXECUTE FUNCTION queen.test_steal();",
    )
    .await
    .expect("trigger");
    let first = pop(&b, "moved", Some("p"), G, 1, "").await.expect("head");
    assert_ok(&nack_head(&b, &first).await[0]);
    let second = pop(&b, "moved", Some("p"), G, 1, "").await.expect("again");
    assert_eq!(second.txns(), first.txns());
    let answer = nack_head(&b, &second).await;
    assert_eq!(answer[0]["success"], false, "nothing was filed: {answer:?}");
    let error = answer[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("dead letter"),
        "not a lease refusal: {error}"
    );
    assert_eq!(dlq(&b, "queue=moved").await["total"], 0);

    db.batch_execute("DROP TRIGGER test_steal ON queen.log_consumers")
        .await
        .expect("drop trigger");
    // The stolen lease expires; the message comes back with its budget spent.
    let mut third = None;
    for _ in 0..50 {
        third = pop(&b, "moved", Some("p"), G, 1, "").await;
        if third.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let third = third.expect("redelivered once the lease expired");
    assert_eq!(third.txns(), first.txns());
    let filed = nack_head(&b, &third).await;
    assert_ok(&filed[0]);
    assert_eq!(filed[0]["dlq"], true, "{filed:?}");
    assert_eq!(dlq(&b, "queue=moved").await["total"], 1);
}

#[tokio::test]
async fn a_jsonb_dead_letter_table_from_before_is_converted_at_boot() {
    let b = common::broker().await;
    let db = b.sql().await;
    let payload_type = || async {
        db.query_one(
            "SELECT data_type::text FROM information_schema.columns
             WHERE table_schema = 'queen' AND table_name = 'log_dlq' AND column_name = 'payload'",
            &[],
        )
        .await
        .expect("payload column")
        .get::<_, String>(0)
    };
    assert_eq!(payload_type().await, "json");
    // A database laid out before the fix (and before versioned migrations, so the baseline
    // migration runs on it), holding a dead letter.
    db.batch_execute(
        "ALTER TABLE queen.log_dlq ALTER COLUMN payload TYPE jsonb USING payload::jsonb;
         DELETE FROM queen.schema_migrations;
         INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\", payload)
         VALUES (1, 'g', 0, '{\"kept\": true}')",
    )
    .await
    .expect("old layout");
    let rebooted = b.sibling(|_| {}).await;
    assert_eq!(payload_type().await, "json");
    let again = rebooted.sibling(|_| {}).await;
    assert_eq!(payload_type().await, "json", "a later boot keeps it");
    let kept: String = db
        .query_one("SELECT payload::text FROM queen.log_dlq", &[])
        .await
        .expect("row")
        .get(0);
    assert_eq!(kept, r#"{"kept": true}"#);
    again.stop().await;
    rebooted.stop().await;
}
