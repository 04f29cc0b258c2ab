//! `POST /api/v1/configure` (create, echo, merge, `null` reset, `replace`, labels, refusals)
//! and `DELETE /api/v1/resources/queues/:queue` (every row of the queue goes, nothing else).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;

async fn configure(b: &common::TestBroker, body: Value) -> Value {
    let (status, out) = b.post("/api/v1/configure", &body).await;
    assert_eq!(status, StatusCode::OK, "{body} -> {out}");
    assert_eq!(out["configured"], true);
    assert!(
        out.get("error").is_none(),
        "a 2xx must not carry error: {out}"
    );
    out
}

#[tokio::test]
async fn create_echoes_every_option_with_its_default() {
    let b = common::broker().await;
    let db = b.sql().await;
    // What the Python client sends for queue("orders").config({...}).create().
    let out = configure(
        &b,
        json!({"queue":"orders","namespace":null,"task":null,
               "options":{"leaseTime":300,"retryLimit":3,"priority":0,"delayedProcessing":0,"windowBuffer":0,
                          "maxSize":0,"retentionSeconds":0,"completedRetentionSeconds":0,"encryptionEnabled":false}}),
    )
    .await;
    let id: i64 = db
        .query_one("SELECT id FROM queen.queues WHERE name = 'orders'", &[])
        .await
        .expect("row")
        .get(0);
    assert_eq!(
        out["queueId"],
        id.to_string(),
        "queueId is the decimal string of the row id"
    );
    assert_eq!(
        out,
        json!({"configured":true,"queueId":id.to_string(),"partitionId":null,"queue":"orders","namespace":"","task":"",
               "storage":"segments",
               "options":{"priority":0,"leaseTime":300,"retryLimit":3,"retryDelay":0,"maxSize":0,"ttl":0,
                          "deadLetterQueue":true,"dlqAfterMaxRetries":true,"delayedProcessing":0,"windowBuffer":0,
                          "retentionSeconds":0,"completedRetentionSeconds":0,"retentionEnabled":false,
                          "encryptionEnabled":false,"maxWaitTimeSeconds":0,"minPopWaitTime":0,
                          "dedupWindowSeconds":3600}})
    );
    // A bare create gets the /configure lease default, not the column's.
    let bare = configure(&b, json!({ "queue": "bare" })).await;
    assert_eq!(bare["options"]["leaseTime"], 300);
}

#[tokio::test]
async fn updates_merge_null_resets_and_replace_starts_over() {
    let b = common::broker().await;
    let out = configure(
        &b,
        json!({"queue":"m","options":{"leaseTime":30,"retryLimit":7,"priority":4,"maxSize":10,
                                       "deadLetterQueue":false,"minPopWaitTime":250}}),
    )
    .await;
    let o = &out["options"];
    assert_eq!(
        (
            o["leaseTime"].clone(),
            o["retryLimit"].clone(),
            o["priority"].clone(),
            o["maxSize"].clone()
        ),
        (json!(30), json!(7), json!(4), json!(10))
    );

    // Absent keys keep their values.
    let out = configure(&b, json!({"queue":"m","options":{"priority":9}})).await;
    let o = &out["options"];
    assert_eq!(
        (
            o["leaseTime"].clone(),
            o["retryLimit"].clone(),
            o["priority"].clone()
        ),
        (json!(30), json!(7), json!(9))
    );
    assert_eq!(o["deadLetterQueue"], false);

    // A present null resets that key to its default, and only that key.
    let out = configure(
        &b,
        json!({"queue":"m","options":{"leaseTime":null,"deadLetterQueue":null}}),
    )
    .await;
    let o = &out["options"];
    assert_eq!(
        (
            o["leaseTime"].clone(),
            o["deadLetterQueue"].clone(),
            o["retryLimit"].clone()
        ),
        (json!(300), json!(true), json!(7))
    );

    // replace: everything not given goes back to its default; the directive is not echoed.
    let out = configure(
        &b,
        json!({"queue":"m","options":{"retryLimit":1,"replace":true}}),
    )
    .await;
    let o = &out["options"];
    assert_eq!(
        (
            o["retryLimit"].clone(),
            o["priority"].clone(),
            o["maxSize"].clone(),
            o["minPopWaitTime"].clone()
        ),
        (json!(1), json!(0), json!(0), json!(0))
    );
    assert!(o.get("replace").is_none());

    // Clamps rather than refusals where the contract says so.
    let out = configure(
        &b,
        json!({"queue":"m","options":{"minPopWaitTime":120000,"dedupWindowSeconds":-3}}),
    )
    .await;
    assert_eq!(
        (
            out["options"]["minPopWaitTime"].clone(),
            out["options"]["dedupWindowSeconds"].clone()
        ),
        (json!(60000), json!(0))
    );
}

#[tokio::test]
async fn labels_at_top_level_or_in_options_and_options_at_top_level() {
    let b = common::broker().await;
    let out = configure(
        &b,
        json!({"queue":"lab","namespace":"shop","task":"billing","options":{"priority":1}}),
    )
    .await;
    assert_eq!(
        (out["namespace"].clone(), out["task"].clone()),
        (json!("shop"), json!("billing"))
    );
    // options inside wins over the top level; a top-level null changes nothing.
    let out = configure(
        &b,
        json!({"queue":"lab","namespace":null,"task":"ignored","options":{"task":"ship"}}),
    )
    .await;
    assert_eq!(
        (out["namespace"].clone(), out["task"].clone()),
        (json!("shop"), json!("ship"))
    );
    let out = configure(&b, json!({"queue":"lab","options":{"namespace":null}})).await;
    assert_eq!(out["namespace"], "");
    // Without an options object the top level is the options.
    let out = configure(
        &b,
        json!({"queue":"lab","options":"n/a","leaseTime":45,"namespace":"flat"}),
    )
    .await;
    assert_eq!(
        (
            out["options"]["leaseTime"].clone(),
            out["namespace"].clone()
        ),
        (json!(45), json!("flat"))
    );

    // A pushed queue keeps its derived labels when the client reconfigures it with nulls.
    b.push("acme.mail", "Default", &[json!(1)]).await;
    let out = configure(
        &b,
        json!({"queue":"acme.mail","namespace":null,"task":null,"options":{"leaseTime":300}}),
    )
    .await;
    assert_eq!(
        (out["namespace"].clone(), out["task"].clone()),
        (json!("acme"), json!("mail"))
    );
}

#[tokio::test]
async fn invalid_configure_requests_are_refused_and_write_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    for (body, option) in [
        (
            json!({"queue":"bad","options":{"leaseTime":"soon"}}),
            "leaseTime",
        ),
        (
            json!({"queue":"bad","options":{"retryLimit":-1}}),
            "retryLimit",
        ),
        (
            json!({"queue":"bad","options":{"deadLetterQueue":1}}),
            "deadLetterQueue",
        ),
        (json!({"queue":"bad","options":{"ttl":2.5}}), "ttl"),
    ] {
        let (status, out) = b.post("/api/v1/configure", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(out["invalid"], option, "{out}");
        assert!(
            out["error"].as_str().is_some_and(|e| e.contains(option)),
            "{out}"
        );
    }
    for body in [
        json!({"options":{}}),
        json!({"queue":5}),
        json!({"queue":"a\u{7}b"}),
        json!({"queue":"x".repeat(65_536)}),
    ] {
        let (status, out) = b.post("/api/v1/configure", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(out["error"].is_string(), "{out}");
    }
    let (status, out) = b.post("/api/v1/configure", &json!({"options":{}})).await;
    assert_eq!(
        (status, out["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("queue is required"))
    );
    let (status, out) = b
        .post_raw(
            "/api/v1/configure",
            "application/json",
            b"{\"queue\":".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("bad body")),
        "{out}"
    );
    assert_eq!(common::count(&db, "queen.queues").await, 0);
}

/// Every table that can hold a row of `pids`.
async fn rows_of(
    db: &tokio_postgres::Client,
    pids: &[i64],
    queue_id: i64,
) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    for table in [
        "log_partitions",
        "log_segments",
        "log_txns",
        "log_consumers",
        "log_dlq",
        "message_traces",
    ] {
        let col = if table == "log_partitions" {
            "id"
        } else {
            "partition_id"
        };
        let n: i64 = db
            .query_one(
                &format!("SELECT count(*) FROM queen.{table} WHERE {col} = ANY($1)"),
                &[&pids],
            )
            .await
            .expect("count")
            .get(0);
        out.push((table, n));
    }
    for table in ["queues", "consumer_groups_metadata", "consumer_watermarks"] {
        let col = if table == "queues" { "id" } else { "queue_id" };
        let n: i64 = db
            .query_one(
                &format!("SELECT count(*) FROM queen.{table} WHERE {col} = $1"),
                &[&queue_id],
            )
            .await
            .expect("count")
            .get(0);
        out.push((table, n));
    }
    out
}

#[tokio::test]
async fn delete_removes_every_row_of_the_queue_and_nothing_else() {
    let b = common::broker().await;
    let db = b.sql().await;
    b.push("doomed", "p1", &[json!(1), json!(2)]).await;
    b.push("doomed", "p2", &[json!(3)]).await;
    b.push("kept", "p1", &[json!(4)]).await;
    // Cursors, registrations, watermarks, dead letters and traces on every queue.
    db.batch_execute(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
             SELECT id, 'g', 0 FROM queen.log_partitions;
         INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, subscription_mode, subscription_timestamp)
             SELECT 'g', id, 'all', now() FROM queen.queues;
         INSERT INTO queen.consumer_watermarks (queue_id, consumer_group, last_empty_scan_at)
             SELECT id, 'g', now() FROM queen.queues;
         INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\", error)
             SELECT id, 'g', 0, 'boom' FROM queen.log_partitions;
         INSERT INTO queen.message_traces (partition_id, transaction_id, event_type)
             SELECT id, 't', 'info' FROM queen.log_partitions;",
    )
    .await
    .expect("seed dependent rows");
    let ids = |name: &'static str| {
        let db = &db;
        async move {
            let qid: i64 = db
                .query_one("SELECT id FROM queen.queues WHERE name = $1", &[&name])
                .await
                .expect("queue")
                .get(0);
            let pids: Vec<i64> = db
                .query(
                    "SELECT id FROM queen.log_partitions WHERE queue_id = $1",
                    &[&qid],
                )
                .await
                .expect("pids")
                .iter()
                .map(|r| r.get(0))
                .collect();
            (qid, pids)
        }
    };
    let (doomed_q, doomed_p) = ids("doomed").await;
    let (kept_q, kept_p) = ids("kept").await;
    let kept_before = rows_of(&db, &kept_p, kept_q).await;
    assert!(
        rows_of(&db, &doomed_p, doomed_q)
            .await
            .iter()
            .all(|(_, n)| *n > 0),
        "seeded"
    );

    let (status, out) = b.delete("/api/v1/resources/queues/doomed").await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(
        out,
        json!({"deleted": true, "queue": "doomed", "partitionsDeleted": 2})
    );
    for (table, n) in rows_of(&db, &doomed_p, doomed_q).await {
        assert_eq!(n, 0, "{table} still holds rows of the deleted queue");
    }
    assert_eq!(
        rows_of(&db, &kept_p, kept_q).await,
        kept_before,
        "another queue is untouched"
    );

    let (status, out) = b.delete("/api/v1/resources/queues/doomed").await;
    assert_eq!(
        (status, out),
        (StatusCode::NOT_FOUND, json!({"error": "Queue not found"}))
    );

    // The name is free again: a push recreates it from scratch at offset 0.
    let again = b.push("doomed", "p1", &[json!(5)]).await;
    assert_eq!(again[0]["offset"], 0);
}

#[tokio::test]
async fn delete_decodes_the_queue_name_from_the_path() {
    let b = common::broker().await;
    b.push("with space.q", "Default", &[json!(1)]).await;
    let (status, out) = b.delete("/api/v1/resources/queues/with%20space.q").await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["queue"], "with space.q");
}
