//! The transaction's `timers` rider (docs/wire.md §10, §22.3): applied in the same
//! PostgreSQL transaction as the bundle's pushes and acks, results in the flat index.

use reqwest::StatusCode;
use serde_json::json;

use super::{common, first_message, schedule};

#[tokio::test]
async fn a_timer_rides_a_push_and_fires() {
    let b = common::broker().await;
    let (status, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [
                        {"queue": "ride", "partition": "p", "payload": {"n": 1}},
                        {"queue": "ride", "partition": "p", "payload": {"n": 2}}]}],
                    "timers": [schedule("ride-later", "saga:1", &json!({"sagaId": "9f1"}), 300)]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true, "{body}");
    let timer = &body["results"][2];
    assert_eq!(timer["index"], 2, "flat index after two push items: {body}");
    assert_eq!(timer["opIndex"], 0);
    assert_eq!(timer["type"], "timer");
    assert_eq!(timer["status"], "scheduled");
    let m = first_message(&b, "ride-later", 10).await.expect("fired");
    assert_eq!(m["data"], json!({"sagaId": "9f1"}));
}

#[tokio::test]
async fn a_rolled_back_bundle_schedules_and_cancels_nothing() {
    let b = common::broker().await;
    b.post(
        "/api/v1/timers",
        &json!({"operations": [schedule("fate", "keep", &json!({}), 60_000)]}),
    )
    .await;
    let bogus_ack = json!({"type": "ack", "transactionId": "nope", "partitionId": "1",
                           "leaseId": "0198e4c2-0000-7000-8000-000000000000",
                           "status": "completed"});
    let (status, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [bogus_ack],
                    "timers": [schedule("fate", "new", &json!({}), 60_000),
                               {"op": "cancel", "queue": "fate", "timerKey": "keep"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], false, "{body}");
    let (_, new) = b.get("/api/v1/timers/fate/new").await;
    assert_eq!(
        new["found"], false,
        "the rolled-back schedule stayed: {new}"
    );
    let (_, keep) = b.get("/api/v1/timers/fate/keep").await;
    assert_eq!(
        keep["found"], true,
        "the rolled-back cancel took effect: {keep}"
    );
}

#[tokio::test]
async fn a_timers_only_bundle_commits_and_a_bad_rider_is_400() {
    let b = common::broker().await;
    b.post(
        "/api/v1/timers",
        &json!({"operations": [schedule("solo", "x", &json!({}), 60_000)]}),
    )
    .await;
    let (_, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [],
                    "timers": [{"op": "cancel", "queue": "solo", "timerKey": "x"}]}),
        )
        .await;
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["results"][0]["status"], "cancelled", "{body}");
    assert_eq!(body["results"][0]["index"], 0);
    let (status, bad) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [], "timers": [{"op": "schedule", "queue": "solo"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}
