//! The four ack outcomes, nacks and the retry limit, lease expiry and redelivery.

use std::time::Duration;

use serde_json::json;

use crate::common;
use crate::{ack, acks_of, configure, depth, pop, pushed};

#[tokio::test]
async fn a_nack_redelivers_until_the_retry_limit_then_drops() {
    let b = common::broker().await;
    configure(&b, "jobs", json!({"retryLimit": 1})).await;
    pushed(&b, "jobs", &[json!("j1"), json!("j2")]).await;

    let first = pop(&b, "jobs", "batch=1").await;
    assert_eq!(first[0]["attempts"], 1);
    let out = ack(&b, "jobs", None, acks_of(&first, Some("failed"))).await;
    assert_eq!(out, ["redelivered"]);
    assert_eq!(
        ack(&b, "jobs", None, acks_of(&first, None)).await,
        ["unknown"],
        "nacked: not leased"
    );

    let second = pop(&b, "jobs", "batch=10").await;
    assert_eq!(
        crate::payloads(&second),
        [json!("j1"), json!("j2")],
        "redelivery first, in order"
    );
    assert_eq!(
        second[0]["id"], first[0]["id"],
        "the same message, the same id"
    );
    assert_eq!(
        (
            second[0]["attempts"].as_i64(),
            second[1]["attempts"].as_i64()
        ),
        (Some(2), Some(1))
    );

    // j1's deliveries are spent (1 + retryLimit 1): its nack retires it, counted, as `acked`.
    let out = ack(
        &b,
        "jobs",
        None,
        vec![
            json!({"id": second[0]["id"], "status": "retry", "error": "boom"}),
            json!({"id": second[1]["id"], "status": "typo-means-failed"}),
        ],
    )
    .await;
    assert_eq!(out, ["acked", "redelivered"]);
    let third = pop(&b, "jobs", "batch=10").await;
    assert_eq!(crate::payloads(&third), [json!("j2")]);
    let d = depth(&b, "jobs").await;
    assert_eq!(d["dropped"]["retry"], 1, "{d}");
    assert_eq!(d["length"], 1, "{d}");
}

#[tokio::test]
async fn retry_limit_zero_drops_on_the_first_nack() {
    let b = common::broker().await;
    configure(&b, "once", json!({"retryLimit": 0})).await;
    pushed(&b, "once", &[json!(1)]).await;
    let got = pop(&b, "once", "").await;
    assert_eq!(
        ack(&b, "once", None, acks_of(&got, Some("failed"))).await,
        ["acked"]
    );
    assert!(pop(&b, "once", "").await.is_empty());
    assert_eq!(depth(&b, "once").await["dropped"]["retry"], 1);
}

#[tokio::test]
async fn an_expired_lease_redelivers_and_its_late_ack_is_unknown() {
    let b = common::broker().await;
    configure(&b, "slow", json!({"leaseSeconds": 1, "retryLimit": 1})).await;
    pushed(&b, "slow", &[json!("s")]).await;
    let first = pop(&b, "slow", "group=g").await;
    assert_eq!(first[0]["attempts"], 1);
    assert!(pop(&b, "slow", "group=g").await.is_empty(), "leased");

    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(
        ack(&b, "slow", Some("g"), acks_of(&first, None)).await,
        ["unknown"]
    );
    let again = pop(&b, "slow", "group=g").await;
    assert_eq!(
        (again[0]["id"].clone(), again[0]["attempts"].as_i64()),
        (first[0]["id"].clone(), Some(2))
    );

    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(
        pop(&b, "slow", "group=g").await.is_empty(),
        "deliveries spent: dropped"
    );
    let d = depth(&b, "slow").await;
    assert_eq!(
        (d["dropped"]["retry"].as_i64(), d["length"].as_i64()),
        (Some(1), Some(0)),
        "{d}"
    );
}

#[tokio::test]
async fn an_id_of_another_incarnation_is_stale() {
    let b = common::broker().await;
    pushed(&b, "inc", &[json!(1)]).await;
    let got = pop(&b, "inc", "").await;
    let id = got[0]["id"].as_str().expect("id");
    let (_, tail) = id.split_at(2);
    let (epoch, rest) = tail.split_once(':').expect("epoch");
    let epoch = u64::from_str_radix(epoch, 16).expect("hex");
    let older = format!("e:{:x}:{rest}", epoch + 1000);
    let out = ack(
        &b,
        "inc",
        None,
        vec![
            json!({"id": older}),
            json!({"id": "e:1:Nowhere:1"}),
            json!({"id": id}),
        ],
    )
    .await;
    assert_eq!(out, ["stale", "stale", "acked"]);
    let out = ack(&b, "no-such-queue", None, vec![json!({"id": id})]).await;
    assert_eq!(
        out,
        ["stale"],
        "a queue with no contents has no incarnation"
    );
}
