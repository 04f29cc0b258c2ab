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
