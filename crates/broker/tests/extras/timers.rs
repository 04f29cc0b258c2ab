//! The timer routes (docs/wire.md §22) and the wheel's firing on one broker.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::{common, first_message, schedule};

#[tokio::test]
async fn schedule_upserts_lists_peeks_and_cancels() {
    let b = common::broker().await;
    let (status, body) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [schedule("tq", "a", &json!({"v": 1}), 60_000),
                                   schedule("tq", "b/c", &json!({"v": 2}), 60_000)]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first = &body["results"][0];
    assert_eq!(first["status"], "scheduled", "{body}");
    assert_eq!(first["ok"], true);
    assert_eq!(first["txn"], "txn-tq-a");
    assert_eq!(first["index"], 0);
    assert_eq!(body["results"][1]["timerKey"], "b/c");
    let at = first["deliverAt"].as_str().expect("deliverAt");
    assert_eq!(
        at.len(),
        "2026-12-06T21:00:00.000000Z".len(),
        "fixed width: {at}"
    );
    assert!(first["messageId"].as_str().is_some_and(|m| m.len() == 36));

    // The same key again is an upsert: rescheduled, sooner, still one row.
    let (_, again) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [schedule("tq", "a", &json!({"v": 3}), 30_000)]}),
        )
        .await;
    assert_eq!(again["results"][0]["status"], "rescheduled", "{again}");
    assert!(again["results"][0]["deliverAt"].as_str() < Some(at));

    let (_, page) = b.get("/api/v1/timers/tq?limit=1").await;
    assert_eq!(page["rows"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["truncated"], true);
    assert_eq!(page["nextAfter"], "a");
    let (_, rest) = b.get("/api/v1/timers/tq?limit=1&after=a").await;
    assert_eq!(rest["rows"][0]["timerKey"], "b/c", "{rest}");
    assert_eq!(rest["truncated"], false);

    let (_, seen) = b.get("/api/v1/timers/tq/b/c").await;
    assert_eq!(seen["found"], true, "{seen}");
    assert_eq!(seen["txn"], "txn-tq-b/c");

    let (_, gone) = b.delete("/api/v1/timers/tq/b/c?txn=mine").await;
    assert_eq!(gone["status"], "cancelled", "{gone}");
    assert_eq!(gone["ok"], true);
    assert_eq!(gone["txn"], "txn-tq-b/c");
    let (_, absent) = b.delete("/api/v1/timers/tq/b/c?txn=mine").await;
    assert_eq!(absent["status"], "absent", "{absent}");
    assert_eq!(absent["ok"], false);
    assert_eq!(absent["txn"], "mine");
    let (_, miss) = b.get("/api/v1/timers/tq/b/c").await;
    assert_eq!(miss["found"], false, "{miss}");
}

#[tokio::test]
async fn malformed_timer_calls_are_named_400s() {
    let b = common::broker().await;
    let mut owned = schedule("tq", "a", &json!({}), 1000);
    owned["messageId"] = json!("0198e4c2-0000-7000-8000-000000000000");
    let mut not_json = schedule("tq", "a", &json!({}), 1000);
    not_json["payload"] = json!("bm90IGpzb24=");
    let mut far = schedule("tq", "a", &json!({}), 1000);
    far["delayMs"] = json!(91_i64 * 24 * 3600 * 1000);
    for (what, ops) in [
        (
            "the same key twice",
            json!([
                schedule("tq", "a", &json!({}), 1000),
                schedule("tq", "a", &json!({}), 2)
            ]),
        ),
        ("a server-owned field", json!([owned])),
        ("a payload that is not JSON", json!([not_json])),
        ("a delay past the horizon", json!([far])),
        (
            "an unknown op",
            json!([{"op": "fire", "queue": "tq", "timerKey": "a"}]),
        ),
        ("no operations array", json!({"op": "schedule"})),
    ] {
        let (status, body) = b.post("/api/v1/timers", &json!({"operations": ops})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        assert_eq!(body["error"], "timers_bad_request", "{what}: {body}");
        assert_eq!(body["code"], "timers_bad_request", "{what}: {body}");
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    let db = b.sql().await;
    assert_eq!(common::count(&db, "queen.log_timers").await, 0);
}

#[tokio::test]
async fn a_due_timer_becomes_its_message_once_and_not_before() {
    let b = common::broker().await;
    let asked = Instant::now();
    let (_, body) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [schedule("fired", "k", &json!({"orderId": "9f1"}), 400)]}),
        )
        .await;
    let promised = body["results"][0]["messageId"].clone();
    let m = first_message(&b, "fired", 10)
        .await
        .expect("the timer fired");
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "fired early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "fired late: {waited:?}");
    assert_eq!(m["data"], json!({"orderId": "9f1"}));
    assert_eq!(m["transactionId"], "txn-fired-k");
    assert_eq!(m["id"], promised);
    let (_, peek) = b.get("/api/v1/timers/fired/k").await;
    assert_eq!(peek["found"], false, "no tombstone: {peek}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(common::pop(&b, "fired", None, None, 10, "").await.is_none());
}

#[tokio::test]
async fn a_cancelled_or_rescheduled_timer_never_fires_its_old_self() {
    let b = common::broker().await;
    b.post(
        "/api/v1/timers",
        &json!({"operations": [schedule("cq", "gone", &json!({"v": 1}), 300),
                               schedule("cq", "moved", &json!({"v": 1}), 60_000)]}),
    )
    .await;
    let (_, c) = b.delete("/api/v1/timers/cq/gone").await;
    assert_eq!(c["status"], "cancelled", "{c}");
    let (_, r) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [{"op": "reschedule", "queue": "cq", "timerKey": "moved",
                "payload": "eyJ2IjoyfQ==", "delayMs": 200, "txn": "t2"}]}),
        )
        .await;
    assert_eq!(r["results"][0]["status"], "rescheduled", "{r}");
    let m = first_message(&b, "cq", 10)
        .await
        .expect("the reschedule fired");
    assert_eq!(m["data"], json!({"v": 2}));
    assert_eq!(m["transactionId"], "t2");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(common::pop(&b, "cq", None, None, 10, "").await.is_none());
}

#[tokio::test]
async fn timers_belong_to_the_scheduling_tenant_only() {
    let b = common::broker().await;
    let db = b.sql().await;
    // Another tenant's pending timer under the same queue and key, written as its route would.
    db.execute(
        "SELECT queen.log_timers_apply_v1($1, 'acme')",
        &[
            &json!([{"op": "schedule", "queue": "shared", "timerKey": "k", "partition": "Default",
                   "payload": "e30=", "txn": "acme-txn",
                   "messageId": "0198e4c2-0000-7000-8000-000000000001", "delayMs": 60000}]),
        ],
    )
    .await
    .expect("acme's timer");
    let (_, peek) = b.get("/api/v1/timers/shared/k").await;
    assert_eq!(peek["found"], false, "{peek}");
    let (_, page) = b.get("/api/v1/timers/shared").await;
    assert_eq!(page["rows"], json!([]), "{page}");
    let (_, c) = b.delete("/api/v1/timers/shared/k").await;
    assert_eq!(c["status"], "absent", "{c}");
    assert_eq!(common::count(&db, "queen.log_timers").await, 1);
}
