//! Read-only amplification (issue 36 §4): a read route does the work of its own caller only.
//! Message detail checks the partition's tenant before it locates, reads or decodes a segment
//! (a damaged segment of another tenant answers 404, not the 500 of decoding it), and the
//! listings are filtered by tenant in SQL (docs/wire.md §11–14). The page caps live with the
//! listings' own tests (`ack/dlq.rs`, `admin/resources.rs`).

use reqwest::StatusCode;
use serde_json::json;

use crate::auth::{claims, get, hs256, hs_broker, post};

/// An admin token acting for `tenant` (none: the default tenant).
fn tenant_token(sub: &str, tenant: Option<&str>) -> String {
    let mut c = claims(sub, Some("admin"));
    if let Some(t) = tenant {
        c["tenant"] = t.into();
    }
    hs256(&c)
}

/// Pushes one message to `queue` as `tok`; answers its partition id.
async fn push_one(b: &crate::common::TestBroker, tok: &str, queue: &str, txn: &str) -> String {
    let items = json!({"items": [{"queue": queue, "partition": "p", "transactionId": txn,
                                  "payload": {"who": txn}}]});
    let r = post(b, "/api/v1/push", tok, &items).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let db = b.sql().await;
    let row = db
        .query_one(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1 AND p.name = 'p'",
            &[&format!("acme\u{1}{queue}")],
        )
        .await
        .expect("partition id");
    row.get::<_, i64>(0).to_string()
}

#[tokio::test]
async fn message_detail_checks_the_tenant_before_reading_a_segment() {
    let b = hs_broker(|_| {}).await;
    let (acme, bolt) = (
        tenant_token("a", Some("acme")),
        tenant_token("b", Some("bolt")),
    );
    let pid = push_one(&b, &acme, "orders", "t-1").await;
    let path = format!("/api/v1/messages/{pid}/t-1");
    let own = get(&b, &path, &acme).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    assert_eq!(own.body["data"], json!({"who": "t-1"}));

    // Damage the stored segment: decoding it fails, so only a caller whose request reaches
    // the decoder can tell.
    let db = b.sql().await;
    let damaged = db
        .execute(
            "UPDATE queen.log_segments SET blob = '\\x00ff00ff'::bytea WHERE partition_id = $1",
            &[&pid.parse::<i64>().expect("pid")],
        )
        .await
        .expect("damage the segment");
    assert_eq!(damaged, 1);
    let mine = get(&b, &path, &acme).await;
    assert_eq!(
        mine.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        mine.body
    );

    // Another tenant: the partition is not its own, so nothing is read and the answer is the
    // 404 of a message that does not exist, for a known transactionId and an unknown one alike.
    for txn in ["t-1", "never-pushed"] {
        let other = get(&b, &format!("/api/v1/messages/{pid}/{txn}"), &bolt).await;
        assert_eq!(other.status, StatusCode::NOT_FOUND, "{txn}: {}", other.body);
        assert_eq!(other.error(), "Message not found");
    }
}

/// Text of `GET path` as `token` (none: anonymous), with its status.
async fn read_text(
    b: &crate::common::TestBroker,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, String) {
    let mut req = b.http.get(b.at(path));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let r = req.send().await.expect("GET");
    (r.status(), r.text().await.expect("body"))
}

/// Tenant `acme` pushes to `orders-a` and pops it once; the default tenant pushes to `plain`.
async fn two_tenants_with_traffic(b: &crate::common::TestBroker) -> (String, String) {
    let (acme, default) = (tenant_token("a", Some("acme")), tenant_token("ops", None));
    push_one(b, &acme, "orders-a", "a-1").await;
    let r = get(b, "/api/v1/pop/queue/orders-a?wait=false", &acme).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let plain = json!({"items": [{"queue": "plain", "payload": 1}]});
    let r = post(b, "/api/v1/push", &default, &plain).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    (acme, default)
}

#[tokio::test]
async fn public_metrics_show_no_other_tenants_names() {
    let b = hs_broker(|_| {}).await;
    two_tenants_with_traffic(&b).await;
    for path in ["/metrics/prometheus", "/metrics"] {
        let (status, text) = read_text(&b, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path} stays public by default");
        assert!(
            !text.contains("orders-a"),
            "{path} leaks a tenant's queue: {text}"
        );
        assert!(!text.contains("acme"), "{path} leaks a tenant: {text}");
    }
    let (_, text) = read_text(&b, "/metrics/prometheus", None).await;
    assert!(
        text.contains("queue=\"plain\""),
        "the default tenant's own series stay"
    );
}

#[tokio::test]
async fn metrics_access_names_a_role_and_each_tenant_sees_its_own_series() {
    let b = hs_broker(|cfg| {
        cfg.metrics_access = queen_broker::config::MetricsAccess::ReadOnly;
        cfg.metrics_cache_ms = 0;
    })
    .await;
    let (acme, default) = two_tenants_with_traffic(&b).await;
    for path in ["/metrics/prometheus", "/metrics"] {
        let (status, text) = read_text(&b, path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {text}");
    }
    let (status, text) = read_text(&b, "/metrics/prometheus", Some(&acme)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(
        text.contains("queue=\"orders-a\"") && text.contains("tenant=\"acme\""),
        "{text}"
    );
    assert!(
        !text.contains("plain"),
        "acme sees another tenant's queue: {text}"
    );
    let (_, json) = read_text(&b, "/metrics", Some(&acme)).await;
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert!(json["pop"]["queues"]["orders-a"].is_object(), "{json}");

    let (status, text) = read_text(&b, "/metrics/prometheus", Some(&default)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("queue=\"plain\""), "{text}");
    assert!(
        !text.contains("orders-a") && !text.contains("acme"),
        "{text}"
    );
    let (_, json) = read_text(&b, "/metrics", Some(&default)).await;
    assert!(!json.contains("orders-a"), "{json}");
}

#[tokio::test]
async fn listings_compute_only_the_callers_tenants_statistics() {
    let b = hs_broker(|_| {}).await;
    let (acme, bolt) = (
        tenant_token("a", Some("acme")),
        tenant_token("b", Some("bolt")),
    );
    let pid = push_one(&b, &acme, "orders", "t-1").await;
    let r = get(
        &b,
        "/api/v1/pop/queue/orders?wait=false&consumerGroup=g",
        &acme,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mine = json!({"items": [{"queue": "own", "payload": 1}]});
    let r = post(&b, "/api/v1/push", &bolt, &mine).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    // A partition of acme's whose counts cannot be computed (its offset arithmetic overflows
    // bigint): a listing that computes acme's statistics fails, one that does not, answers.
    b.sql()
        .await
        .execute(
            "UPDATE queen.log_partitions SET last_offset = 9223372036854775807 WHERE id = $1",
            &[&pid.parse::<i64>().expect("pid")],
        )
        .await
        .expect("set the trap");
    let listings = [
        "/api/v1/resources/queues",
        "/api/v1/resources/overview",
        "/api/v1/consumer-groups",
        "/api/v1/consumer-groups/lagging?minLagSeconds=0",
    ];
    let r = get(&b, "/api/v1/resources/queues", &acme).await;
    assert_eq!(
        r.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "the trap: {}",
        r.body
    );
    for path in listings {
        let r = get(&b, path, &bolt).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(
            !r.raw.windows(6).any(|w| w == b"orders"),
            "{path}: {}",
            r.body
        );
    }
    let r = get(&b, "/api/v1/resources/queues", &bolt).await;
    assert_eq!(r.body["queues"][0]["name"], "own", "{}", r.body);
    let r = get(&b, "/api/v1/consumer-groups/g", &bolt).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}
