//! Lease renewal (docs/wire.md §9): `POST /api/v1/lease/:leaseId/extend` extends every live lease of
//! the worker, never shortens one, never revives one, and always answers 200.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

async fn extend(b: &common::TestBroker, lease: &str, body: Option<Value>) -> Value {
    let path = format!("/api/v1/lease/{lease}/extend");
    let (status, answer) = match body {
        Some(body) => b.post(&path, &body).await,
        // The Python client sends no body at all for `{}`.
        None => {
            let r = b.http.post(b.at(&path)).send().await.expect("POST");
            let status = r.status();
            (status, r.json::<Value>().await.expect("JSON answer"))
        }
    };
    assert_eq!(
        status,
        StatusCode::OK,
        "extend always answers 200: {answer}"
    );
    answer
}

#[tokio::test]
async fn renewal_extends_and_never_shortens() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "renew", "p", &txns("renew", 1)).await;
    let popped = pop(&b, "renew", Some("p"), G, 1, "&leaseSeconds=5")
        .await
        .expect("one message");
    let pid = popped.partition_id();
    let initial = cursor(&db, pid, "g").await.expires_in.expect("leased");
    assert!(initial <= 5.0, "lease of 5 s, {initial} s left");

    let answer = extend(&b, &popped.lease_id, Some(json!({ "seconds": 120 }))).await;
    assert_eq!(
        (answer["success"].clone(), answer["renewed"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(answer["leaseId"], popped.lease_id.as_str());
    let expiry = answer["newExpiresAt"]
        .as_str()
        .expect("an expiry")
        .to_string();
    assert_eq!(answer["expiresAt"], expiry.as_str());
    assert_eq!(answer["lease_expires_at"], expiry.as_str());
    assert!(
        expiry.ends_with('Z') && expiry.len() == "2026-10-06T12:41:34.021000Z".len(),
        "{expiry}"
    );
    let extended = cursor(&db, pid, "g").await;
    let left = extended.expires_in.expect("leased");
    println!("lease left after renewing to 120 s: {left:.3} s");
    assert!(left > 100.0 && left <= 120.0, "{left}");
    let parsed = queen_proto::time::parse_iso(&expiry).expect("ISO expiry");
    assert_eq!(
        Some(parsed),
        extended.expires_at,
        "the answer reports the stored expiry"
    );

    // A shorter renewal keeps the longer expiry: GREATEST, never shorter.
    let answer = extend(&b, &popped.lease_id, Some(json!({ "seconds": 10 }))).await;
    assert_eq!(answer["renewed"], 1);
    assert_eq!(answer["newExpiresAt"], expiry.as_str());
    assert_eq!(cursor(&db, pid, "g").await.expires_at, extended.expires_at);

    // No body: 60 s, still below 120 s, so again nothing shrinks.
    let answer = extend(&b, &popped.lease_id, None).await;
    assert_eq!(
        (answer["success"].clone(), answer["newExpiresAt"].clone()),
        (json!(true), json!(expiry))
    );
}

#[tokio::test]
async fn an_empty_body_renews_for_sixty_seconds_and_small_values_become_one() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "dflt", "p", &txns("dflt", 1)).await;
    let popped = pop(&b, "dflt", Some("p"), G, 1, "&leaseSeconds=2")
        .await
        .expect("one message");
    let pid = popped.partition_id();

    let answer = extend(&b, &popped.lease_id, Some(json!({ "seconds": 0 }))).await;
    assert_eq!(
        answer["renewed"], 1,
        "a tiny renewal still renews (to at least 1 s)"
    );
    let answer = extend(&b, &popped.lease_id, None).await;
    assert_eq!(answer["success"], true);
    let left = cursor(&db, pid, "g").await.expires_in.expect("leased");
    assert!(
        left > 50.0 && left <= 60.0,
        "default renewal is 60 s, {left} s left"
    );
}

#[tokio::test]
async fn every_partition_of_a_multi_partition_pop_is_renewed() {
    let b = common::broker().await;
    for partition in ["a", "b", "c"] {
        push_txns(
            &b,
            "multi",
            partition,
            &txns(&format!("multi-{partition}"), 2),
        )
        .await;
    }
    let popped = pop(&b, "multi", None, G, 100, "&partitions=3&leaseSeconds=5")
        .await
        .expect("messages");
    let claimed: std::collections::HashSet<_> = popped
        .messages
        .iter()
        .map(|m| m["partitionId"].as_str().unwrap_or_default().to_string())
        .collect();
    let answer = extend(&b, &popped.lease_id, Some(json!({ "seconds": 90 }))).await;
    assert_eq!(
        answer["renewed"],
        claimed.len(),
        "one renewal per claimed partition"
    );
    assert_eq!(
        claimed.len(),
        3,
        "the wildcard pop claimed all three partitions"
    );
}

#[tokio::test]
async fn released_expired_and_unknown_leases_are_not_revived() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "gone", "p", &txns("gone", 2)).await;

    // Released by the ack of its whole batch.
    let popped = pop(&b, "gone", Some("p"), G, 1, "")
        .await
        .expect("one message");
    assert_ok(&ack_batch(&b, G, vec![ack_item(&popped.messages[0], "completed")]).await[0]);
    let answer = extend(&b, &popped.lease_id, None).await;
    assert_eq!(
        answer,
        json!({ "leaseId": popped.lease_id, "success": false, "renewed": 0,
                "newExpiresAt": null, "expiresAt": null, "lease_expires_at": null })
    );

    // Expired: the row still names the worker, but renewal never brings it back.
    let popped = pop(&b, "gone", Some("p"), G, 1, "&leaseSeconds=1")
        .await
        .expect("one message");
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    let answer = extend(&b, &popped.lease_id, Some(json!({ "seconds": 300 }))).await;
    assert_eq!(
        (answer["success"].clone(), answer["renewed"].clone()),
        (json!(false), json!(0))
    );
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert!(
        c.expires_in.expect("row keeps the stale expiry") < 0.0,
        "still expired"
    );

    let answer = extend(&b, "01a00000-0000-7000-8000-000000000000", None).await;
    assert_eq!(answer["renewed"], 0);

    let (status, body) = b
        .post_raw(
            &format!("/api/v1/lease/{}/extend", popped.lease_id),
            "application/json",
            b"{oops".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}
