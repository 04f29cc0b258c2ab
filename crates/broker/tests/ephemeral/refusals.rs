//! Hostile and malformed input: every one a 4xx in the family's envelope naming the problem,
//! nothing stored.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;

/// Asserts a 400 `ephemeral_bad_request` whose detail mentions `word`.
fn refused(status: StatusCode, body: &Value, word: &str, what: &str) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
    assert_eq!(body["error"], "ephemeral_bad_request", "{what}: {body}");
    assert_eq!(body["code"], "ephemeral_bad_request", "{what}: {body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(word), "{what}: {word:?} not in {body}");
}

#[tokio::test]
async fn bad_bodies_are_400_with_the_field_named() {
    let b = common::broker().await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/api/v1/ephemeral/push",
            json!({"messages": [{"payload": 1}]}),
            "queue",
        ),
        (
            "/api/v1/ephemeral/push",
            json!({"queue": "q", "messages": [{"data": 1}]}),
            "data",
        ),
        (
            "/api/v1/ephemeral/push",
            json!({"queue": "q", "messages": []}),
            "messages",
        ),
        (
            "/api/v1/ephemeral/push",
            json!({"queue": "q", "messages": 5}),
            "bad body",
        ),
        (
            "/api/v1/ephemeral/push",
            json!({"queue": "q\u{7}", "messages": [{"payload": 1}]}),
            "queue",
        ),
        (
            "/api/v1/ephemeral/push",
            json!({"queue": "q", "partition": "", "messages": [{"payload": 1}]}),
            "partition",
        ),
        ("/api/v1/ephemeral/push", json!([1]), "bad body"),
        (
            "/api/v1/ephemeral/ack",
            json!({"queue": "q", "acks": [{"id": "not-an-id"}]}),
            "acks[0].id",
        ),
        (
            "/api/v1/ephemeral/ack",
            json!({"queue": "q", "acks": [{"id": "e:1:p:1", "status": 1}]}),
            "bad body",
        ),
        (
            "/api/v1/ephemeral/ack",
            json!({"queue": "q", "acks": [{"id": "e:1:p:1"}], "group": ""}),
            "group",
        ),
        (
            "/api/v1/ephemeral/ack",
            json!({"queue": "q", "acks": [{"id": "e:1:p:1", "lease": "x"}]}),
            "lease",
        ),
        (
            "/api/v1/ephemeral/configure",
            json!({"queue": "q", "options": {"ttl_seconds": 3}}),
            "ttl_seconds",
        ),
        (
            "/api/v1/ephemeral/configure",
            json!({"queue": "q", "options": {"maxLength": 0}}),
            "maxLength",
        ),
        (
            "/api/v1/ephemeral/configure",
            json!({"queue": "q", "options": {"policy": "dropNewest"}}),
            "policy",
        ),
        (
            "/api/v1/ephemeral/configure",
            json!({"queue": "q", "options": {"leaseSeconds": 1e9}}),
            "leaseSeconds",
        ),
        (
            "/api/v1/ephemeral/configure",
            json!({"queue": "q", "options": {"windowBuffer": {"count": -1}}}),
            "windowBuffer.count",
        ),
        (
            "/api/v1/ephemeral/configure",
            json!({"queue": "q", "options": "fast"}),
            "options",
        ),
        ("/api/v1/ephemeral/reset", json!({}), "queue"),
    ];
    for (path, body, word) in cases {
        let (status, answer) = b.post(path, &body).await;
        refused(status, &answer, word, &format!("{path} {body}"));
    }
    let (status, answer) = b
        .post_raw(
            "/api/v1/ephemeral/push",
            "application/json",
            b"{\"queue\":".to_vec(),
        )
        .await;
    refused(status, &answer, "bad body", "truncated JSON");

    let many: Vec<Value> = (0..10_001).map(|_| json!({"payload": 0})).collect();
    let (status, answer) = b
        .post(
            "/api/v1/ephemeral/push",
            &json!({"queue": "q", "messages": many}),
        )
        .await;
    refused(status, &answer, "10000", "too many messages");

    let (status, list) = b.get("/api/v1/ephemeral/queues").await;
    assert_eq!(
        (status, list["queues"].clone()),
        (StatusCode::OK, json!([])),
        "nothing was created: {list}"
    );
}

#[tokio::test]
async fn bad_pops_and_paths_are_refused() {
    let b = common::broker().await;
    for (query, word) in [
        ("", "queue"),
        ("queue=q&batch=0", "batch"),
        ("queue=q&batch=ten", "batch"),
        ("queue=q&wait=maybe", "wait"),
        ("queue=q&timeout=100", "timeout"),
        ("queue=q&wait=true&timeout=-5", "timeout"),
        ("queue=q&autoAck=yes", "autoAck"),
        ("queue=q&consumerGroup=g", "consumerGroup"),
        ("queue=%01", "queue"),
    ] {
        let (status, body) = b.get(&format!("/api/v1/ephemeral/pop?{query}")).await;
        refused(status, &body, word, query);
    }
    let (status, body) = b.get("/api/v1/ephemeral/queues/%20q/depth").await;
    refused(status, &body, "queue", "depth of a name with an edge space");
    let (status, body) = b.delete("/api/v1/ephemeral/queue/%01").await;
    refused(status, &body, "queue", "delete of a control character");
    let (status, body) = b.get("/api/v1/ephemeral/nothing").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("no_such_route"))
    );
    let (status, body) = b.get("/api/v1/ephemeral/queues/missing/depth").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "ephemeral_queue_not_found", "{body}");

    crate::pushed(&b, "headless", &[json!("kept")]).await;
    for query in ["", "&autoAck=true"] {
        let r = b
            .http
            .head(b.at(&format!("/api/v1/ephemeral/pop?queue=headless{query}")))
            .send()
            .await
            .expect("HEAD");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "HEAD{query}");
    }
    let got = crate::pop(&b, "headless", "").await;
    assert_eq!(
        (got[0]["payload"].clone(), got[0]["attempts"].as_i64()),
        (json!("kept"), Some(1)),
        "a HEAD claims nothing"
    );
    let (status, body) = b.get("/api/v1/ephemeral/queues/missing/depth").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "ephemeral_queue_not_found", "{body}");
}
