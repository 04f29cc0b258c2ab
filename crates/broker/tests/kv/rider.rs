//! The transaction's `kv` rider: applied in the bundle's own PostgreSQL transaction, its
//! results after every push item and ack in the flat index space, and a lost `required`
//! precondition rolling everything back (answered 200 with `kv_precondition`).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{common, kv1, lock1};

const NS: &str = "tx";

fn push(queue: &str, txn: &str) -> Value {
    json!({"type": "push", "items": [{"queue": queue, "transactionId": txn, "payload": {"t": txn}}]})
}

async fn depth(db: &tokio_postgres::Client, queue: &str) -> i64 {
    db.query_one(
        "SELECT COALESCE(sum(lp.last_offset + 1), 0)::bigint FROM queen.log_partitions lp
         JOIN queen.queues q ON q.id = lp.queue_id WHERE q.name = $1",
        &[&queue],
    )
    .await
    .expect("depth")
    .get(0)
}

#[tokio::test]
async fn the_gate_and_the_push_are_one_transaction() {
    let b = common::broker().await;
    let db = b.sql().await;
    let once = json!({"op": "putIfAbsent", "ns": NS, "key": "evt-1", "value": true,
                      "ttlSeconds": 300, "required": true});
    let (status, first) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [push("q", "m1"), push("q", "m2")], "kv": [once]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["success"], true, "{first}");
    let kv = &first["results"][2];
    assert_eq!(
        (
            kv["type"].clone(),
            kv["index"].clone(),
            kv["opIndex"].clone(),
            kv["applied"].clone()
        ),
        (json!("kv"), json!(2), json!(0), json!(true)),
        "{first}"
    );

    let (status, second) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [push("q", "m3")],
              "kv": [{"op": "put", "ns": NS, "key": "side", "value": 1, "ttlSeconds": 60}, once]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            second["success"].clone(),
            second["reason"].clone(),
            second["kvReason"].clone(),
            second["failedIndex"].clone(),
            second["error"].clone()
        ),
        (
            json!(false),
            json!("kv_precondition"),
            json!("exists"),
            json!(2),
            json!("kv_precondition_failed")
        ),
        "{second}"
    );
    assert!(second["transactionId"].is_string());
    assert_eq!(depth(&db, "q").await, 2, "the losing bundle pushed nothing");
    assert_eq!(
        kv1(&b, json!({"op": "get", "ns": NS, "key": "side"})).await["found"],
        false
    );
}

#[tokio::test]
async fn a_kv_write_shares_the_fate_of_its_ack_and_a_kv_only_bundle_commits() {
    let b = common::broker().await;
    let (status, answer) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [
            {"type": "ack", "transactionId": "nope", "partitionId": "1", "status": "completed"}],
            "kv": [{"op": "put", "ns": NS, "key": "fate", "value": 1, "ttlSeconds": 60}]}),
        )
        .await;
    assert_ne!(answer["success"], true, "{status} {answer}");
    assert_eq!(
        kv1(&b, json!({"op": "get", "ns": NS, "key": "fate"})).await["found"],
        false
    );

    let (status, solo) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [],
              "kv": [{"op": "put", "ns": NS, "key": "solo", "value": {"b": 2}, "ttlSeconds": 60}]}),
        )
        .await;
    assert_eq!(
        (status, solo["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{solo}"
    );
    assert_eq!(solo["results"][0]["index"], 0);
    assert_eq!(
        kv1(&b, json!({"op": "get", "ns": NS, "key": "solo"})).await["value"],
        json!({"b": 2})
    );

    let (status, refused) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [],
              "kv": [{"op": "getPrefix", "ns": NS, "prefix": "s"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
}

#[tokio::test]
async fn a_stale_lock_guard_commits_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    let old = lock1(
        &b,
        json!({"op": "acquire", "name": "L", "owner": "old", "ttlSeconds": 30}),
    )
    .await;
    let guard = old["guard"].clone();
    let (_, ok) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [push("g", "a")], "kv": [guard.clone()]}),
        )
        .await;
    assert_eq!(ok["success"], true, "{ok}");
    lock1(
        &b,
        json!({"op": "release", "name": "L", "token": old["token"]}),
    )
    .await;
    let new = lock1(
        &b,
        json!({"op": "acquire", "name": "L", "owner": "new", "ttlSeconds": 30}),
    )
    .await;
    assert!(new["token"].as_i64() > old["token"].as_i64());
    let (_, stale) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [push("g", "b")], "kv": [guard]}),
        )
        .await;
    assert_eq!(
        (
            stale["reason"].clone(),
            stale["kvReason"].clone(),
            stale["failedIndex"].clone()
        ),
        (json!("kv_precondition"), json!("version"), json!(1)),
        "{stale}"
    );
    assert_eq!(stale["value"]["owner"], "new");
    assert_eq!(depth(&db, "g").await, 1);
}
