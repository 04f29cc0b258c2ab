//! Resources, message detail, traces and stats refresh (docs/wire.md §13–15), driven through the
//! real push, pop and ack routes and checked against what a user would count.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;

/// Pops from `queue` with extra query parameters; `Value::Null` on 204.
async fn pop(b: &common::TestBroker, queue: &str, params: &str) -> (StatusCode, Value) {
    b.get(&format!("/api/v1/pop/queue/{queue}?wait=false&{params}"))
        .await
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

async fn queue_stats(b: &common::TestBroker, queue: &str) -> Value {
    let (status, list) = b.get("/api/v1/resources/queues").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["queues"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["name"] == queue).cloned())
        .unwrap_or_else(|| panic!("queue {queue} missing from {list}"))
}

#[tokio::test]
async fn resource_counts_follow_pushes_pops_and_acks() {
    let b = common::broker().await;
    let five: Vec<Value> = (0..5).map(|i| json!({ "n": i })).collect();
    let three: Vec<Value> = (0..3).map(|i| json!({ "m": i })).collect();
    b.push("res.orders", "p1", &five).await;
    b.push("res.orders", "p2", &three).await;

    let q = queue_stats(&b, "res.orders").await;
    assert_eq!(q["partitions"], 2);
    assert_eq!(q["namespace"], "res");
    assert_eq!(q["task"], "orders");
    assert_eq!(
        q["messages"],
        json!({ "total": 8, "pending": 8, "processing": 0, "deadLetter": 0 })
    );
    assert!(
        q["id"].as_str().is_some_and(|id| id.parse::<i64>().is_ok()),
        "queue id is a decimal string: {q}"
    );

    // A leased pop of 2 from p1: still pending (not committed), and 2 processing.
    let (status, popped) = b
        .get("/api/v1/pop/queue/res.orders/partition/p1?wait=false&batch=2")
        .await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    let batch = messages(&popped);
    assert_eq!(batch.len(), 2);
    let q = queue_stats(&b, "res.orders").await;
    assert_eq!(q["messages"]["pending"], 8);
    assert_eq!(q["messages"]["processing"], 2);

    // Acking the batch commits it.
    let acks: Vec<Value> = batch
        .iter()
        .map(|m| {
            json!({ "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                         "leaseId": m["leaseId"], "status": "completed" })
        })
        .collect();
    let (status, acked) = b
        .post("/api/v1/ack/batch", &json!({ "acknowledgments": acks }))
        .await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    assert!(
        acked
            .as_array()
            .is_some_and(|a| a.iter().all(|r| r["success"] == true)),
        "{acked}"
    );
    let q = queue_stats(&b, "res.orders").await;
    assert_eq!(
        q["messages"],
        json!({ "total": 8, "pending": 6, "processing": 0, "deadLetter": 0 })
    );

    // Detail: config echo and per-partition counts.
    let (status, detail) = b.get("/api/v1/resources/queues/res.orders").await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["config"]["retryLimit"], 3);
    let parts = detail["partitions"].as_array().expect("partitions list");
    let by_name = |n: &str| {
        parts
            .iter()
            .find(|p| p["name"] == n)
            .cloned()
            .expect("partition")
    };
    assert_eq!(by_name("p1")["messages"]["pending"], 3);
    assert_eq!(by_name("p1")["lastOffset"], 4);
    assert_eq!(by_name("p2")["messages"]["pending"], 3);

    // Depth per group: queue mode has consumed 2; a group that never popped sees all 8.
    let (status, depth) = b.get("/api/v1/resources/queues/res.orders/depth").await;
    assert_eq!(status, StatusCode::OK, "{depth}");
    assert_eq!(depth["group"], "__QUEUE_MODE__");
    assert_eq!(depth["pending"], 6);
    assert_eq!(depth["partitionsPending"], 2);
    let (_, depth) = b
        .get("/api/v1/resources/queues/res.orders/depth?group=analytics")
        .await;
    assert_eq!(depth["pending"], 8);
    assert_eq!(
        depth["partitions"],
        json!([{ "partition": "p1", "pending": 5 }, { "partition": "p2", "pending": 3 }])
    );

    // The overview adds up every queue.
    b.push("res.other", "Default", &[json!(1)]).await;
    let (status, overview) = b.get("/api/v1/resources/overview").await;
    assert_eq!(status, StatusCode::OK, "{overview}");
    assert_eq!(overview["queues"], 2);
    assert_eq!(overview["partitions"], 3);
    assert_eq!(overview["messages"]["total"], 9);
    assert_eq!(overview["messages"]["pending"], 7);

    // stats/refresh accepts an empty body (the Python client sends none for `{}`).
    let r = b
        .http
        .post(b.at("/api/v1/stats/refresh"))
        .send()
        .await
        .expect("refresh");
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["success"], true);
    assert_eq!(body["stats"]["messages"]["total"], 9);
}

#[tokio::test]
async fn unknown_queues_answer_404() {
    let b = common::broker().await;
    for path in [
        "/api/v1/resources/queues/nope",
        "/api/v1/resources/queues/nope/depth?group=g",
    ] {
        let (status, body) = b.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body, json!({ "error": "Queue not found" }), "{path}");
    }
    let (status, body) = b.get("/api/v1/resources/queues").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "queues": [] }));
}

/// Pushes one message with a chosen transactionId; returns the push answer's message id.
async fn push_txn(b: &common::TestBroker, queue: &str, txn: &str, payload: Value) -> String {
    let item =
        json!({ "queue": queue, "partition": "Default", "transactionId": txn, "payload": payload });
    let (status, body) = b.post("/api/v1/push", &json!({ "items": [item] })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body[0]["message_id"]
        .as_str()
        .expect("message_id")
        .to_string()
}

#[tokio::test]
async fn message_detail_after_an_auto_ack_pop_shows_one_consumed_group() {
    let b = common::broker().await;
    let id = push_txn(&b, "detail-q", "order-1", json!({ "total": 42 })).await;
    let (status, popped) = pop(&b, "detail-q", "autoAck=true&batch=10").await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    let msg = &messages(&popped)[0];
    let pid = msg["partitionId"].as_str().expect("partitionId");

    let (status, detail) = b.get(&format!("/api/v1/messages/{pid}/order-1")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let groups = detail["consumerGroups"]
        .as_array()
        .expect("consumerGroups list");
    assert_eq!(groups.len(), 1, "{detail}");
    assert_eq!(groups[0]["consumed"], true);
    assert_eq!(groups[0]["leaseExpiresAt"], Value::Null);
    assert_eq!(groups[0]["name"], "__QUEUE_MODE__");
    assert_eq!(detail["status"], "completed");
    assert_eq!(detail["id"], id.as_str());
    assert_eq!(detail["id"], msg["id"]);
    assert_eq!(detail["transactionId"], "order-1");
    assert_eq!(detail["data"], json!({ "total": 42 }));
    assert_eq!(detail["payload"], json!({ "total": 42 }));
    assert_eq!(detail["partitionId"], pid);
    assert_eq!(detail["queue"], "detail-q");
    assert_eq!(detail["queuePath"], "detail-q/Default");
    assert_eq!(detail["createdAt"], msg["createdAt"]);
    assert_eq!(detail["producerSub"], Value::Null);
}

#[tokio::test]
async fn message_detail_tracks_pending_processing_and_dead_letter() {
    let b = common::broker().await;
    push_txn(&b, "state-q", "a", json!("first")).await;
    push_txn(&b, "state-q", "b", Value::Null).await;
    let db = b.sql().await;
    let pid = common::partition_id(&db, "state-q", "Default").await;

    let (_, detail) = b.get(&format!("/api/v1/messages/{pid}/b")).await;
    assert_eq!(detail["status"], "pending");
    assert_eq!(detail["consumerGroups"], json!([]));
    assert_eq!(detail["data"], Value::Null, "an empty payload renders null");

    // A leased pop of the first message: its detail shows the live lease.
    let (status, popped) = pop(&b, "state-q", "batch=1").await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    let (_, detail) = b.get(&format!("/api/v1/messages/{pid}/a")).await;
    assert_eq!(detail["status"], "processing", "{detail}");
    assert!(
        detail["leaseExpiresAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{detail}"
    );
    assert_eq!(detail["consumerGroups"][0]["consumed"], false);
    assert!(
        detail["consumerGroups"][0]["leaseExpiresAt"].is_string(),
        "{detail}"
    );
    // The second message is outside the leased span.
    let (_, detail) = b.get(&format!("/api/v1/messages/{pid}/b")).await;
    assert_eq!(detail["status"], "pending", "{detail}");

    // A dead letter filed for offset 1 wins over every cursor state.
    db.execute(
        "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\", error, retry_count) VALUES ($1, '__QUEUE_MODE__', 1, 'boom', 3)",
        &[&pid],
    )
    .await
    .expect("dlq row");
    let (_, detail) = b.get(&format!("/api/v1/messages/{pid}/b")).await;
    assert_eq!(detail["status"], "dead_letter");
    assert_eq!(detail["errorMessage"], "boom");
    assert_eq!(detail["retryCount"], 3);
}

#[tokio::test]
async fn message_detail_finds_messages_whose_hash_rows_were_purged() {
    let b = common::broker().await;
    for txn in ["old-1", "old-2"] {
        push_txn(&b, "purged-q", txn, json!({ "txn": txn })).await;
    }
    let db = b.sql().await;
    let pid = common::partition_id(&db, "purged-q", "Default").await;
    common::purge_hash_rows(&db, pid).await;
    let (status, detail) = b.get(&format!("/api/v1/messages/{pid}/old-1")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["data"], json!({ "txn": "old-1" }));
    assert_eq!(detail["offset"], 0);
    let (status, _) = b.get(&format!("/api/v1/messages/{pid}/never-pushed")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unknown_messages_answer_404() {
    let b = common::broker().await;
    push_txn(&b, "nf-q", "known", json!(1)).await;
    let db = b.sql().await;
    let pid = common::partition_id(&db, "nf-q", "Default").await;
    for path in [
        format!("/api/v1/messages/{pid}/unknown"),
        format!("/api/v1/messages/{}/known", pid + 1000),
        "/api/v1/messages/not-a-number/known".to_string(),
    ] {
        let (status, body) = b.get(&path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body, json!({ "error": "Message not found" }), "{path}");
    }
}

#[tokio::test]
async fn traces_are_stored_and_bad_bodies_rejected() {
    let b = common::broker().await;
    let trace = json!({ "transactionId": "t-1", "partitionId": "17", "consumerGroup": null,
                        "traceNames": ["checkout"], "eventType": "info", "data": { "step": 1 } });
    let (status, body) = b.post("/api/v1/traces", &trace).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    let trace_id: uuid::Uuid = body["traceId"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("traceId is a uuid");
    let db = b.sql().await;
    let row = db
        .query_one(
            "SELECT partition_id, transaction_id, consumer_group, trace_names, data FROM queen.message_traces WHERE id = $1",
            &[&trace_id],
        )
        .await
        .expect("stored trace");
    assert_eq!(row.get::<_, i64>(0), 17);
    assert_eq!(row.get::<_, String>(1), "t-1");
    assert_eq!(row.get::<_, String>(2), "__QUEUE_MODE__");
    assert_eq!(row.get::<_, Vec<String>>(3), vec!["checkout".to_string()]);
    assert_eq!(row.get::<_, Value>(4), json!({ "step": 1 }));

    for bad in [
        json!({ "partitionId": "17", "data": {} }),
        json!({ "transactionId": "t", "partitionId": "x17", "data": {} }),
        json!({ "transactionId": "t", "data": {} }),
    ] {
        let (status, body) = b.post("/api/v1/traces", &bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad} -> {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains("Id")),
            "{body}"
        );
    }
    let (status, _) = b
        .post_raw("/api/v1/traces", "application/json", b"{nope".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        common::count(&db, "queen.message_traces").await,
        1,
        "rejected traces wrote nothing"
    );
}

#[tokio::test]
async fn a_deleted_queue_leaves_no_delivery_metrics_behind() {
    let b = common::broker().await;
    for round in 0..3 {
        let queue = format!("metrics-churn-{round}");
        b.push(&queue, "Default", &[json!({ "round": round })])
            .await;
        let (status, _) = pop(&b, &queue, "batch=1&autoAck=true").await;
        assert_eq!(status, StatusCode::OK);
        let (_, metrics) = b.get("/metrics").await;
        assert!(metrics["pop"]["queues"][&queue].is_object(), "{metrics}");
        let (status, _) = b.delete(&format!("/api/v1/resources/queues/{queue}")).await;
        assert_eq!(status, StatusCode::OK);
        let (_, metrics) = b.get("/metrics").await;
        assert!(metrics["pop"]["queues"][&queue].is_null(), "{metrics}");
    }
}

/// One page of `queue`'s partitions after `after` (the first page when `None`).
async fn partition_page(
    b: &common::TestBroker,
    queue: &str,
    limit: usize,
    after: Option<&str>,
) -> Value {
    let mut url =
        reqwest::Url::parse(&b.at(&format!("/api/v1/resources/queues/{queue}"))).expect("url");
    url.query_pairs_mut()
        .append_pair("partitionLimit", &limit.to_string());
    if let Some(after) = after {
        url.query_pairs_mut().append_pair("partitionAfter", after);
    }
    let r = b.http.get(url).send().await.expect("GET");
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_partitions_page_by_name_each_exactly_once() {
    const PARTITIONS: usize = 10_000;
    const LIMIT: usize = 500;
    let b = common::broker().await;
    let names: Vec<String> = (0..PARTITIONS).map(|i| format!("p{i:05}")).collect();
    // The partitions in one statement (a push of 10 000 partitions takes a minute in a debug
    // build); a message in three of them, pushed for real, checks the per-page counts.
    common::configure(&b, "res-wide", json!({})).await;
    let made = b
        .sql()
        .await
        .execute(
            "INSERT INTO queen.log_partitions (queue_id, name) \
             SELECT q.id, 'p' || lpad(i::text, 5, '0') \
               FROM queen.queues q, generate_series(0, $1 - 1) i WHERE q.name = 'res-wide'",
            &[&(PARTITIONS as i32)],
        )
        .await
        .expect("partitions");
    assert_eq!(made as usize, PARTITIONS);
    let loaded = ["p00000", "p05000", "p09999"];
    for p in loaded {
        b.push("res-wide", p, &[json!(p)]).await;
    }

    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut slowest = std::time::Duration::ZERO;
    loop {
        let started = std::time::Instant::now();
        let page = partition_page(&b, "res-wide", LIMIT, after.as_deref()).await;
        slowest = slowest.max(started.elapsed());
        let parts = page["partitions"].as_array().expect("partitions");
        assert_eq!(
            page["partitionPage"]["total"],
            json!(PARTITIONS),
            "{}",
            page["partitionPage"]
        );
        assert_eq!(page["partitionPage"]["limit"], json!(LIMIT));
        assert_eq!(page["partitionPage"]["after"], json!(after));
        assert_eq!(page["messages"]["pending"], json!(loaded.len()));
        for p in parts {
            let name = p["name"].as_str().expect("name");
            let want = usize::from(loaded.contains(&name));
            assert_eq!(p["messages"]["pending"], json!(want), "{p}");
            seen.push(name.to_string());
        }
        match page["partitionPage"]["next"].as_str() {
            Some(next) => {
                assert_eq!(parts.len(), LIMIT, "only the last page is short");
                assert_eq!(Some(next), seen.last().map(String::as_str));
                after = Some(next.to_string());
            }
            None => break,
        }
    }
    assert_eq!(seen, names, "every partition once, in name order");
    eprintln!("10 000 partitions, pages of {LIMIT}: slowest page {slowest:?} (debug broker)");

    // Without a page: every partition, as the official clients expect.
    let (_, whole) = b.get("/api/v1/resources/queues/res-wide").await;
    assert_eq!(
        whole["partitions"].as_array().map(Vec::len),
        Some(PARTITIONS)
    );
    assert_eq!(whole["partitionPage"]["next"], Value::Null);
}

#[tokio::test]
async fn partition_page_parameters_are_validated() {
    let b = common::broker().await;
    b.push("res-paged", "a", &[json!(1)]).await;
    b.push("res-paged", "b", &[json!(2), json!(3)]).await;
    let page = partition_page(&b, "res-paged", 1, None).await;
    assert_eq!(page["partitions"][0]["name"], "a");
    assert_eq!(page["partitionPage"]["next"], "a");
    let last = partition_page(&b, "res-paged", 1, Some("a")).await;
    assert_eq!(last["partitions"][0]["name"], "b");
    assert_eq!(last["partitions"][0]["messages"]["pending"], 2);
    assert_eq!(last["partitionPage"]["next"], Value::Null);
    let past = partition_page(&b, "res-paged", 5, Some("zzz")).await;
    assert_eq!(past["partitions"], json!([]));
    assert_eq!(past["partitionPage"]["total"], 2);

    for (query, names) in [
        ("partitionLimit=0", "partitionLimit"),
        ("partitionLimit=-3", "partitionLimit"),
        ("partitionLimit=ten", "partitionLimit"),
        ("partitionLimit=99999999999", "partitionLimit"),
        // One past the page cap (MAX_PAGE_LIMIT, docs/wire.md §14).
        ("partitionLimit=1001", "1000"),
        ("partitionAfter=%20a", "partitionAfter"),
        ("partitionAfter=a%01b", "partitionAfter"),
    ] {
        let (status, body) = b
            .get(&format!("/api/v1/resources/queues/res-paged?{query}"))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(names), "{query}: {body}");
    }
}
