//! The pop routes over real HTTP and PostgreSQL: the three shapes, the bodiless 204, the JSON
//! envelope, parameter validation, per-partition order and the global batch cap.

use std::collections::HashSet;

use reqwest::StatusCode;
use serde_json::json;

use crate::common;
use crate::support::{ack_all, get, pop, push_txns, txns};

#[tokio::test]
async fn the_three_shapes_and_the_bodiless_empty_answer() {
    let b = common::broker().await;
    // Nothing pushed yet: every shape answers 204 with no body and no Content-Length.
    pop(&b, "shapes.alpha", "batch=5").await.assert_empty();
    get(&b, "/api/v1/pop/queue/shapes.alpha/partition/p1?batch=5")
        .await
        .assert_empty();
    get(&b, "/api/v1/pop?namespace=shapes").await.assert_empty();

    // Discovery without namespace or task is refused rather than scanning every queue.
    let bare = get(&b, "/api/v1/pop").await;
    assert_eq!(bare.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bare.body,
        json!({"success": false, "error": "namespace or task is required", "messages": []})
    );
    let blank = get(&b, "/api/v1/pop?namespace=&task=&batch=3").await;
    assert_eq!(blank.status, StatusCode::BAD_REQUEST);

    push_txns(&b, "shapes.alpha", "p1", &txns("a", 3)).await;
    push_txns(&b, "shapes.alpha", "p2", &txns("b", 2)).await;
    push_txns(&b, "shapes.beta", "Default", &txns("c", 1)).await;

    // Targeted: only the named partition.
    let targeted = get(&b, "/api/v1/pop/queue/shapes.alpha/partition/p2?batch=10").await;
    targeted.assert_delivered();
    assert_eq!(targeted.txns(), vec!["b-0", "b-1"]);
    let env = &targeted.body;
    assert_eq!(env["success"], true);
    assert_eq!(env["queue"], "shapes.alpha");
    assert_eq!(env["partition"], "p2");
    assert_eq!(env["consumerGroup"], "__QUEUE_MODE__");
    assert_eq!(env["partitionsClaimed"], 1);
    let lease = uuid::Uuid::parse_str(env["leaseId"].as_str().expect("leaseId"))
        .expect("leaseId is a UUID");
    assert_eq!(
        lease.get_version_num(),
        7,
        "the leaseId is a fresh UUIDv7 worker id"
    );
    let pid = env["partitionId"]
        .as_str()
        .expect("partitionId is a string");
    assert!(
        pid.parse::<i64>().is_ok(),
        "partitionId is a decimal id: {pid}"
    );
    for (i, m) in targeted.messages().iter().enumerate() {
        assert_eq!(m["partitionId"], pid);
        assert_eq!(m["partition"], "p2");
        assert_eq!(m["leaseId"], env["leaseId"]);
        assert_eq!(m["consumerGroup"], "__QUEUE_MODE__");
        assert_eq!(m["deliveryAttempt"], 1);
        assert_eq!(m["offset"], i as i64);
        assert_eq!(
            m["data"],
            json!({ "txn": format!("b-{i}") }),
            "payload spliced verbatim"
        );
        assert_eq!(m["traceId"], serde_json::Value::Null);
        assert_eq!(m["producerSub"], serde_json::Value::Null);
        let created = m["createdAt"].as_str().expect("createdAt");
        assert_eq!(created.len(), 24, "millisecond ISO-8601: {created}");
        assert!(created.ends_with('Z'));
        uuid::Uuid::parse_str(m["id"].as_str().expect("id")).expect("message id is a UUID");
        assert!(
            m.get("queue").is_none(),
            "only discovery answers carry a per-message queue"
        );
    }
    // All messages of one push share the segment's timestamp.
    let stamps: HashSet<String> = targeted
        .messages()
        .iter()
        .map(|m| m["createdAt"].to_string())
        .collect();
    assert_eq!(stamps.len(), 1);

    // Wildcard: the other partition of the queue (p2 is leased now).
    let wildcard = pop(&b, "shapes.alpha", "batch=10").await;
    wildcard.assert_delivered();
    assert_eq!(wildcard.txns(), vec!["a-0", "a-1", "a-2"]);
    assert_eq!(wildcard.body["partition"], "p1");

    // Discovery by namespace (derived from the dotted name) spans queues: top-level queue is
    // empty and each message names its own.
    let discovered = get(&b, "/api/v1/pop?namespace=shapes&batch=10").await;
    discovered.assert_delivered();
    assert_eq!(discovered.body["queue"], "");
    assert_eq!(discovered.txns(), vec!["c-0"]);
    assert_eq!(discovered.messages()[0]["queue"], "shapes.beta");
    assert!(discovered.messages()[0]["partitionId"].as_str().is_some());

    // Discovery by task alone, for a named group reading everything again.
    let by_task = get(
        &b,
        "/api/v1/pop?task=alpha&consumerGroup=audit&batch=10&partitions=5",
    )
    .await;
    by_task.assert_delivered();
    let mut seen = by_task.txns();
    seen.sort();
    assert_eq!(seen, vec!["a-0", "a-1", "a-2", "b-0", "b-1"]);
    assert_eq!(by_task.body["partitionsClaimed"], 2);
    assert!(by_task
        .messages()
        .iter()
        .all(|m| m["queue"] == "shapes.alpha"));

    // Nothing left for queue mode: 204 again, still bodiless.
    pop(&b, "shapes.alpha", "batch=10").await.assert_empty();
}

#[tokio::test]
async fn invalid_parameters_are_400_naming_the_parameter_and_claim_nothing() {
    let b = common::broker().await;
    push_txns(&b, "params", "Default", &txns("m", 2)).await;
    for (query, name) in [
        ("batch=0", "batch"),
        ("batch=ten", "batch"),
        ("partitions=0", "partitions"),
        ("wait=maybe", "wait"),
        ("timeout=-1", "timeout"),
        ("autoAck=yes", "autoAck"),
        ("subscriptionFrom=last-tuesday", "subscriptionFrom"),
        ("leaseSeconds=soon", "leaseSeconds"),
        ("conflation=true", "conflation"),
    ] {
        let r = pop(&b, "params", query).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{query} answered {}",
            r.status
        );
        let error = r.body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(name),
            "{query}: error {error:?} does not name {name}"
        );
    }
    let db = b.sql().await;
    assert_eq!(
        common::count(&db, "queen.log_consumers").await,
        0,
        "a refused pop writes nothing"
    );

    // Accepted extras of the official client are ignored; conflation=false is fine.
    // (frames=true changes the answer's form: tests/pop/framed.rs.)
    let ok = pop(
        &b,
        "params",
        "autopilot=true&namespace=x&task=y&conflation=false&batch=1",
    )
    .await;
    ok.assert_delivered();
    assert_eq!(ok.txns(), vec!["m-0"]);
}

/// A `HEAD` answer has no body, so a pop through it would claim messages nobody receives.
#[tokio::test]
async fn head_on_a_pop_route_is_405_and_claims_nothing() {
    let b = common::broker().await;
    push_txns(&b, "headed", "p1", &txns("h", 2)).await;
    common::configure(&b, "headed", json!({ "namespace": "heads" })).await;
    for path in [
        "/api/v1/pop/queue/headed?batch=5&autoAck=true",
        "/api/v1/pop/queue/headed/partition/p1?batch=5",
        "/api/v1/pop?namespace=heads&consumerGroup=g&batch=5",
    ] {
        let r = b.http.head(b.at(path)).send().await.expect("HEAD");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
        let allow = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap_or_default().to_string());
        assert_eq!(allow.as_deref(), Some("GET"), "{path}");
    }
    for query in ["batch=5", "batch=5&consumerGroup=g"] {
        let r = pop(&b, "headed", query).await;
        r.assert_delivered();
        assert_eq!(
            r.txns(),
            txns("h", 2),
            "nothing was claimed by a HEAD ({query})"
        );
    }
}

#[tokio::test]
async fn path_segments_are_percent_decoded() {
    let b = common::broker().await;
    push_txns(&b, "odd queue/ü", "part ition", &txns("x", 1)).await;
    let r = get(
        &b,
        "/api/v1/pop/queue/odd%20queue%2F%C3%BC/partition/part%20ition?batch=1",
    )
    .await;
    r.assert_delivered();
    assert_eq!(r.body["queue"], "odd queue/ü");
    assert_eq!(r.body["partition"], "part ition");
}

#[tokio::test]
async fn per_partition_order_equals_push_order_across_segments() {
    let b = common::broker().await;
    let all = txns("o", 40);
    for chunk in all.chunks(7) {
        push_txns(&b, "ordered", "lane", chunk).await;
    }
    let mut delivered = Vec::new();
    let mut offsets = Vec::new();
    loop {
        let r = pop(&b, "ordered", "batch=6").await;
        if r.status == StatusCode::NO_CONTENT {
            break;
        }
        r.assert_delivered();
        offsets.extend(
            r.messages()
                .iter()
                .map(|m| m["offset"].as_i64().expect("offset")),
        );
        delivered.extend(r.txns());
        ack_all(&b, "__QUEUE_MODE__", &r).await;
    }
    assert_eq!(delivered, all, "delivery order is push order");
    assert_eq!(offsets, (0..40).collect::<Vec<i64>>());
}

#[tokio::test]
async fn batch_is_a_global_cap_across_claimed_partitions() {
    let b = common::broker().await;
    for p in 0..3 {
        push_txns(&b, "multi3", &format!("p{p}"), &txns(&format!("p{p}"), 2)).await;
    }
    // partitions=3 returns all six messages of three partitions in one wait=false pop.
    let r = pop(&b, "multi3", "batch=100&partitions=3").await;
    r.assert_delivered();
    assert_eq!(r.messages().len(), 6);
    assert_eq!(r.body["partitionsClaimed"], 3);
    let lease = r.lease_id();
    assert!(
        r.messages().iter().all(|m| m["leaseId"] == lease.as_str()),
        "one leaseId for every claimed partition"
    );
    // Within each partition, offset order.
    for p in 0..3 {
        let mine: Vec<String> = r
            .messages()
            .iter()
            .filter(|m| m["partition"] == format!("p{p}"))
            .map(|m| m["transactionId"].to_string())
            .collect();
        assert_eq!(mine, vec![format!("\"p{p}-0\""), format!("\"p{p}-1\"")]);
    }

    for p in 0..5 {
        push_txns(&b, "multi5", &format!("p{p}"), &txns(&format!("p{p}"), 4)).await;
    }
    let r = pop(&b, "multi5", "batch=10&partitions=5").await;
    r.assert_delivered();
    assert_eq!(r.messages().len(), 10, "batch caps the whole answer");
    // Default partitions=1 claims a single partition.
    let single = pop(&b, "multi5", "batch=100&consumerGroup=solo").await;
    single.assert_delivered();
    assert_eq!(single.body["partitionsClaimed"], 1);
    assert_eq!(single.messages().len(), 4);
}

#[tokio::test]
async fn without_the_pending_gate_every_pop_goes_straight_to_the_claim() {
    let b = common::broker_with(|cfg| cfg.pop_pending_gate = false).await;
    pop(&b, "ungated", "batch=1").await.assert_empty();
    get(&b, "/api/v1/pop?namespace=ungated&batch=1")
        .await
        .assert_empty();
    push_txns(&b, "ungated", "Default", &txns("u", 2)).await;
    assert_eq!(pop(&b, "ungated", "batch=1").await.txns(), vec!["u-0"]);
    assert_eq!(
        get(
            &b,
            "/api/v1/pop/queue/ungated/partition/Default?batch=5&consumerGroup=g"
        )
        .await
        .txns(),
        vec!["u-0", "u-1"]
    );
    pop(&b, "ungated", "batch=1").await.assert_empty();
}
