//! Every route refuses what it cannot store or round-trip — a NUL or other control character,
//! an oversize or whitespace-edged name, a non-string where a name belongs, a timestamp
//! PostgreSQL cannot take — with 400 and a JSON `{"error"}` naming the field, and leaves
//! every table as it was.

use queen_broker::http::HttpStatus;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common;

const TABLES: [&str; 8] = [
    "queen.queues",
    "queen.log_partitions",
    "queen.log_segments",
    "queen.log_txns",
    "queen.log_consumers",
    "queen.consumer_groups_metadata",
    "queen.log_dlq",
    "queen.message_traces",
];

/// One refused request: method, path (with its query), JSON body, a word of the error.
struct Case {
    method: Method,
    path: String,
    body: Option<Value>,
    needle: &'static str,
}

fn get(path: impl Into<String>, needle: &'static str) -> Case {
    Case {
        method: Method::GET,
        path: path.into(),
        body: None,
        needle,
    }
}

fn delete(path: impl Into<String>, needle: &'static str) -> Case {
    Case {
        method: Method::DELETE,
        path: path.into(),
        body: None,
        needle,
    }
}

fn post(path: impl Into<String>, body: Value, needle: &'static str) -> Case {
    Case {
        method: Method::POST,
        path: path.into(),
        body: Some(body),
        needle,
    }
}

async fn send(b: &common::TestBroker, case: &Case) -> (StatusCode, Value) {
    let mut req = b.http.request(case.method.clone(), b.at(&case.path));
    if let Some(body) = &case.body {
        req = req.json(body);
    }
    let r = req.send().await.expect("request");
    let status = r.status();
    let bytes = r.bytes().await.expect("body");
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

fn cases(pid: i64) -> Vec<Case> {
    let long = "x".repeat(65_536);
    let ack = |extra: Value| {
        let mut item = json!({ "transactionId": "t-0", "partitionId": pid.to_string() });
        item.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        item
    };
    let txn = |op: Value| json!({ "operations": [op] });
    let year0 = "0000-01-01T00:00:00Z";
    vec![
        // Resources and queues.
        get("/api/v1/resources/queues/q%00x", "queue"),
        get("/api/v1/resources/queues/%20q", "queue"),
        get("/api/v1/resources/queues/q%00x/depth", "queue"),
        get("/api/v1/resources/queues/edge/depth?group=g%00", "group"),
        delete("/api/v1/resources/queues/q%00x", "queue"),
        // (A URI is capped below 65 535 bytes by the HTTP layer, so oversize names travel
        // in bodies.)
        post("/api/v1/configure", json!({ "queue": long }), "65535"),
        post("/api/v1/configure", json!({ "queue": "q\u{0}" }), "queue"),
        post(
            "/api/v1/configure",
            json!({ "queue": "q ", "namespace": "n" }),
            "queue",
        ),
        post(
            "/api/v1/configure",
            json!({ "queue": "q", "namespace": "n\u{0}" }),
            "namespace",
        ),
        post(
            "/api/v1/configure",
            json!({ "queue": "q", "task": 7 }),
            "task",
        ),
        // Dead letters.
        get("/api/v1/dlq?queue=q%00", "queue"),
        get("/api/v1/dlq?consumerGroup=g%00", "consumerGroup"),
        get("/api/v1/dlq?partition=p%00", "partition"),
        get(format!("/api/v1/dlq?from={year0}"), "from"),
        // Consumer groups.
        get("/api/v1/consumer-groups/g%00x", "consumerGroup"),
        delete("/api/v1/consumer-groups/g%00x", "consumerGroup"),
        delete("/api/v1/consumer-groups/g/queues/q%00", "queue"),
        post(
            "/api/v1/consumer-groups/g%00/subscription",
            json!({ "subscriptionTimestamp": "2026-01-01T00:00:00Z" }),
            "consumerGroup",
        ),
        post(
            "/api/v1/consumer-groups/g/subscription",
            json!({ "subscriptionTimestamp": year0 }),
            "subscriptionTimestamp",
        ),
        post(
            "/api/v1/consumer-groups/g%00/queues/edge/seek",
            json!({ "toEnd": true }),
            "consumerGroup",
        ),
        post(
            "/api/v1/consumer-groups/g/queues/edge/seek",
            json!({ "timestamp": year0 }),
            "timestamp",
        ),
        post(
            "/api/v1/consumer-groups/g/queues/edge/partitions/p%00/seek",
            json!({ "toEnd": true }),
            "partition",
        ),
        // Pops.
        get("/api/v1/pop/queue/q%00x", "queue"),
        get("/api/v1/pop/queue/edge/partition/p%00", "partition"),
        get("/api/v1/pop?task=q%00x", "task"),
        get("/api/v1/pop?namespace=%20n", "namespace"),
        get("/api/v1/pop/queue/edge?consumerGroup=%20g", "consumerGroup"),
        get("/api/v1/pop/queue/edge?consumerGroup=g%00", "consumerGroup"),
        get(
            format!("/api/v1/pop/queue/edge?consumerGroup=g&subscriptionFrom={year0}"),
            "subscriptionFrom",
        ),
        get(
            "/api/v1/pop/queue/edge?consumerGroup=g&subscriptionFrom=0001-01-01T00:30:00%2B01:00",
            "subscriptionFrom",
        ),
        get("/api/v1/pop?task=t&leaseSeconds=2147483648", "leaseSeconds"),
        // Pushes.
        post(
            "/api/v1/push",
            json!({ "items": [{ "queue": " edge", "payload": 1 }] }),
            "queue",
        ),
        post(
            "/api/v1/push",
            json!({ "items": [{ "queue": "edge", "transactionId": "t\u{0}", "payload": 1 }] }),
            "transactionId",
        ),
        // Acks: the request's group is refused as a whole.
        post(
            "/api/v1/ack",
            ack(json!({ "consumerGroup": 7 })),
            "consumerGroup",
        ),
        post(
            "/api/v1/ack",
            ack(json!({ "consumerGroup": " g" })),
            "consumerGroup",
        ),
        post(
            "/api/v1/ack/batch",
            json!({ "acknowledgments": [ack(json!({}))], "consumerGroup": "g\u{0}" }),
            "consumerGroup",
        ),
        post(
            "/api/v1/ack/batch",
            json!({ "acknowledgments": [ack(json!({}))], "consumerGroup": ["g"] }),
            "consumerGroup",
        ),
        post(
            "/api/v1/ack/batch",
            json!({ "acknowledgments": [ack(json!({}))], "consumerGroup": long }),
            "65535",
        ),
        post("/api/v1/lease/l%00/extend", json!({}), "leaseId"),
        // Transactions.
        post(
            "/api/v1/transaction",
            txn(
                json!({ "type": "ack", "transactionId": "t\u{0}", "partitionId": pid.to_string() }),
            ),
            "transactionId",
        ),
        post(
            "/api/v1/transaction",
            txn(
                json!({ "type": "ack", "transactionId": "t", "partitionId": "1", "consumerGroup": 7 }),
            ),
            "consumerGroup",
        ),
        post(
            "/api/v1/transaction",
            txn(
                json!({ "type": "ack", "transactionId": "t", "partitionId": "1", "leaseId": "l\u{0}" }),
            ),
            "leaseId",
        ),
        post(
            "/api/v1/transaction",
            json!({ "operations": [{ "type": "push", "queue": "edge", "payload": 1 }],
                    "requiredLeases": ["l\u{0}"] }),
            "requiredLeases",
        ),
        post(
            "/api/v1/transaction",
            txn(json!({ "type": "push", "queue": "edge", "partition": "p\u{0}", "payload": 1 })),
            "partition",
        ),
        // Traces and message lookups.
        post(
            "/api/v1/traces",
            json!({ "transactionId": "t\u{0}", "partitionId": pid }),
            "transactionId",
        ),
        post(
            "/api/v1/traces",
            json!({ "transactionId": "t", "partitionId": pid, "traceNames": ["a\u{0}"] }),
            "traceNames",
        ),
        post(
            "/api/v1/traces",
            json!({ "transactionId": "t", "partitionId": pid, "consumerGroup": "g\u{0}" }),
            "consumerGroup",
        ),
        post(
            "/api/v1/traces",
            json!({ "transactionId": "t", "partitionId": pid, "data": { "k": ["\u{0}"] } }),
            "data",
        ),
        get(format!("/api/v1/messages/{pid}/t%00"), "transactionId"),
    ]
}

#[tokio::test]
async fn every_route_refuses_what_it_cannot_store() {
    let b = common::broker().await;
    let db = b.sql().await;
    // Non-empty tables, so "unchanged" is checked against rows that exist.
    b.push("edge", "p", &[json!(0), json!(1)]).await;
    let (status, _) = b.get("/api/v1/pop/queue/edge?consumerGroup=g").await;
    assert_eq!(status, StatusCode::OK);
    let pid = common::partition_id(&db, "edge", "p").await;

    for case in cases(pid) {
        let before = common::counts(&db, &TABLES).await;
        let shown = format!("{} {}", case.method, &case.path[..case.path.len().min(90)]);
        let (status, out) = send(&b, &case).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{shown} -> {out}");
        let error = out["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{shown}: no error text in {out}"));
        assert!(
            error.contains(case.needle),
            "{shown}: error {error:?} does not name {:?}",
            case.needle
        );
        assert_eq!(
            common::counts(&db, &TABLES).await,
            before,
            "{shown} wrote rows"
        );
    }
}

/// The largest accepted `leaseSeconds` is served, not failed inside PostgreSQL.
#[tokio::test]
async fn the_longest_lease_is_served() {
    let b = common::broker().await;
    b.push("edge", "p", &[json!(0)]).await;
    for path in [
        "/api/v1/pop/queue/edge?leaseSeconds=2147483647",
        "/api/v1/pop?task=none&leaseSeconds=2147483647",
    ] {
        let (status, out) = b.get(path).await;
        assert!(
            status == StatusCode::OK || status == StatusCode::NO_CONTENT,
            "{path} -> {status} {out}"
        );
    }
}

/// Within an ack request the items are judged one by one (docs/wire.md §8.1): an item whose
/// strings PostgreSQL cannot hold fails alone, naming the field, and changes nothing.
#[tokio::test]
async fn ack_items_with_nul_fail_alone() {
    let b = common::broker().await;
    let db = b.sql().await;
    b.push("edge", "p", &[json!(0)]).await;
    let pid = common::partition_id(&db, "edge", "p").await.to_string();
    for (item, field) in [
        (
            json!({ "transactionId": "t\u{0}", "partitionId": pid }),
            "transactionId",
        ),
        (
            json!({ "transactionId": "t", "partitionId": pid, "leaseId": "l\u{0}" }),
            "leaseId",
        ),
        (
            json!({ "transactionId": "t", "partitionId": pid, "status": "failed", "error": "e\u{0}" }),
            "error",
        ),
    ] {
        let before = common::counts(&db, &TABLES).await;
        let (status, out) = b.post("/api/v1/ack", &item).await;
        assert_eq!(status, StatusCode::OK, "{item} -> {out}");
        assert_eq!(out[0]["success"], false, "{out}");
        let error = out[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(field), "{item}: {error:?}");
        assert_eq!(
            common::counts(&db, &TABLES).await,
            before,
            "{item} wrote rows"
        );
    }
}

/// A group name is the same string on every route: what a pop accepts, an ack accepts.
#[tokio::test]
async fn a_group_that_pops_can_ack() {
    let b = common::broker().await;
    b.push("edge", "p", &[json!(0)]).await;
    let (status, out) = b
        .get("/api/v1/pop/queue/edge?consumerGroup=g%20inner")
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let msg = &out["messages"][0];
    let acked = common::ack_batch(
        &b,
        Some("g inner"),
        vec![common::ack_item(msg, "completed")],
    )
    .await;
    assert_eq!(acked[0]["success"], true, "{acked:?}");
    let (status, _) = b
        .get("/api/v1/pop/queue/edge?consumerGroup=g%20inner")
        .await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "the ack moved the group's cursor"
    );
}

/// A transaction whose only operation acks under a lease on a partition nobody created
/// writes nothing: no queue, no partition, no cursor.
#[tokio::test]
async fn a_lease_check_on_an_unknown_partition_creates_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    b.push("edge", "p", &[json!(0)]).await;
    let pid = common::partition_id(&db, "edge", "p").await.to_string();
    let before = common::counts(&db, &TABLES).await;
    for (group, partition) in [
        (json!(null), "987654"),
        (json!("g"), "987654"),
        (json!(null), pid.as_str()),
        (json!("fresh"), pid.as_str()),
    ] {
        let bundle = json!({ "operations": [{
            "type": "ack", "transactionId": "t", "partitionId": partition, "leaseId": "L",
            "consumerGroup": group,
        }], "requiredLeases": ["L"] });
        let (status, out) = b.post("/api/v1/transaction", &bundle).await;
        assert_eq!(status, StatusCode::OK, "{out}");
        assert_eq!(out["success"], false, "{out}");
        assert_eq!(common::counts(&db, &TABLES).await, before, "{out}");
    }
}

/// An internal failure is logged with PostgreSQL's own words, not just "db error".
#[tokio::test]
async fn a_database_error_keeps_its_cause() {
    let b = common::broker().await;
    let db = b.sql().await;
    let cause = db
        .query("SELECT 1 / 0", &[])
        .await
        .expect_err("division by zero");
    let e = queen_broker::error::Error::Db(cause);
    assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!e.to_string().contains("division by zero"), "{e}");
    assert!(e.chain().contains("division by zero"), "{}", e.chain());
}

/// A body that is not UTF-8 is refused before it is parsed, with the offset of its first bad
/// byte, by every JSON route (push, ack, transaction and the rest share the check), and writes
/// nothing.
#[tokio::test]
async fn a_body_that_is_not_utf8_is_refused_whole() {
    let b = common::broker().await;
    let db = b.sql().await;
    b.push("edge", "p", &[json!(0)]).await;
    let before = common::counts(&db, &TABLES).await;
    let mut body = br#"{"items":[{"queue":"edge","payload":"caf"#.to_vec();
    let offset = body.len();
    body.extend_from_slice(b"\xe9\"}]}");
    for path in [
        "/api/v1/push",
        "/api/v1/ack/batch",
        "/api/v1/transaction",
        "/api/v1/configure",
    ] {
        let r = b
            .http
            .post(b.at(path))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
        let out: Value = r.json().await.expect("a JSON answer");
        let error = out["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("not UTF-8") && error.contains(&format!("offset {offset}")),
            "{path}: {error:?}"
        );
    }
    assert_eq!(
        common::counts(&db, &TABLES).await,
        before,
        "nothing written"
    );
}
