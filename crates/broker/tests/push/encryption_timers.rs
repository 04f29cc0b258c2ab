//! Timers of a queue that encrypts (docs/engine.md §16.1): a pending timer's payload is sealed
//! at schedule — through the timer route and the transaction's rider, by a broker that knew the
//! option and by one the SQL corrects — so no plaintext sits in `log_timers`; peek shows the
//! envelope and says `encrypted`; the fire delivers the plaintext.

use base64::Engine as _;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::encryption::{keyed, plaintext_hits, KEY};
use crate::common::{self, configure, TestBroker};

fn schedule(queue: &str, key: &str, secret: &str, delay_ms: i64) -> Value {
    let payload = json!({ "secret": secret }).to_string();
    json!({"op": "schedule", "queue": queue, "timerKey": key, "delayMs": delay_ms,
           "payload": base64::engine::general_purpose::STANDARD.encode(payload),
           "txn": format!("txn-{key}")})
}

async fn timers(b: &TestBroker, ops: Vec<Value>) {
    let (status, body) = b
        .post("/api/v1/timers", &json!({ "operations": ops }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["results"]
            .as_array()
            .is_some_and(|r| r.iter().all(|r| r["ok"] == true)),
        "{body}"
    );
}

/// The peeked payload, decoded, and whether it says it is encrypted.
async fn peek(b: &TestBroker, queue: &str, key: &str) -> (Vec<u8>, Value) {
    let (status, seen) = b.get(&format!("/api/v1/timers/{queue}/{key}")).await;
    assert_eq!(
        (status, &seen["found"]),
        (StatusCode::OK, &json!(true)),
        "{seen}"
    );
    let payload = seen["payload"].as_str().expect("peek shows the payload");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .expect("base64");
    (bytes, seen["encrypted"].clone())
}

#[tokio::test]
async fn a_pending_timer_of_an_encrypted_queue_is_sealed_at_rest() {
    let a = keyed(KEY).await;
    let key = queen_broker::config::EncryptionKey::from_hex(KEY).unwrap();
    let late = a.sibling(|c| c.encryption_key = Some(key)).await;
    let db = a.sql().await;
    let marker = "TIMER-MARKER-5ea1ed";
    configure(&a, "tsealed", json!({ "encryptionEnabled": true })).await;

    // `a` configured the queue; `late` never heard of the option, so its plaintext schedule
    // is refused by the SQL, and it seals and calls again.
    timers(&a, vec![schedule("tsealed", "route", marker, 60_000)]).await;
    timers(&late, vec![schedule("tsealed", "late", marker, 60_000)]).await;
    let (status, out) = a
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [
                        {"queue": "tplain", "partition": "p", "payload": {"n": 1}}]}],
                    "timers": [schedule("tsealed", "rider", marker, 60_000)]}),
        )
        .await;
    assert_eq!(
        (status, &out["success"]),
        (StatusCode::OK, &json!(true)),
        "{out}"
    );
    timers(&a, vec![schedule("tplain", "open", marker, 60_000)]).await;

    let hits = plaintext_hits(&db, marker).await;
    assert_eq!(
        hits,
        ["log_timers: 1 rows"],
        "only the plain queue's timer is readable"
    );
    for key in ["route", "late", "rider"] {
        let (bytes, encrypted) = peek(&a, "tsealed", key).await;
        assert_eq!(encrypted, true, "{key}");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(marker),
            "{key}: peek shows the envelope, not {text}"
        );
    }
    let (bytes, encrypted) = peek(&a, "tplain", "open").await;
    assert_eq!(encrypted, false);
    assert!(String::from_utf8_lossy(&bytes).contains(marker));

    // Due now: the fire opens each envelope and the push seals the message for the queue.
    let due = ["route", "late", "rider"].map(|k| schedule("tsealed", k, marker, 0));
    let resealed: Vec<Value> = due
        .iter()
        .map(|op| {
            let mut op = op.clone();
            op["op"] = json!("reschedule");
            op
        })
        .collect();
    timers(&late, resealed).await;
    let mut delivered = Vec::new();
    for _ in 0..100 {
        // Either broker's wheel may fire; without peer wake (one embedded database) only
        // the firing broker's pops hear of it at once.
        for b in [&a, &late] {
            if let Some(p) = common::pop(b, "tsealed", None, None, 10, "&autoAck=true").await {
                delivered.extend(p.messages);
            }
        }
        if delivered.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let left = db
        .query(
            "SELECT timer_key::text, COALESCE(last_error, '') FROM queen.log_timers",
            &[],
        )
        .await
        .expect("timers")
        .iter()
        .map(|r| format!("{}: {}", r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect::<Vec<_>>();
    let secrets = delivered
        .iter()
        .filter(|m| m["data"]["secret"] == marker)
        .count();
    assert_eq!(
        secrets, 3,
        "every fired timer delivers its plaintext: {delivered:?}; pending: {left:?}"
    );
    assert_eq!(
        plaintext_hits(&db, marker).await,
        ["log_timers: 1 rows"],
        "the fired messages are sealed in their segments"
    );
}
