//! The round trip: push, pop, ack; payload bytes kept; groups (competing and fan-out);
//! partitions; commit on delivery; the long poll and the window buffer; reset, delete, the
//! listing and depth.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::{ack, acks_of, configure, depth, pop, push, pushed};

#[tokio::test]
async fn push_pop_ack_round_trip() {
    let b = common::broker().await;
    pushed(&b, "inbox", &[json!({"n": 1}), json!("two"), json!(null)]).await;

    let got = pop(&b, "inbox", "batch=10").await;
    assert_eq!(
        crate::payloads(&got),
        vec![json!({"n": 1}), json!("two"), json!(null)]
    );
    for (i, m) in got.iter().enumerate() {
        let id = m["id"].as_str().expect("id");
        let fields: Vec<&str> = id.split(':').collect();
        assert_eq!(fields.len(), 4, "{id}");
        assert_eq!((fields[0], fields[2]), ("e", "Default"), "{id}");
        assert!(u64::from_str_radix(fields[1], 16).is_ok(), "{id}");
        assert_eq!(fields[3], (i + 1).to_string(), "{id}");
        assert_eq!(
            (m["partition"].as_str(), m["attempts"].as_i64()),
            (Some("Default"), Some(1))
        );
    }
    assert!(pop(&b, "inbox", "batch=10").await.is_empty(), "leased");
    let d = depth(&b, "inbox").await;
    assert_eq!(
        (d["length"].as_i64(), d["declared"].as_bool()),
        (Some(3), Some(false)),
        "{d}"
    );

    let outcomes = ack(&b, "inbox", None, acks_of(&got, None)).await;
    assert_eq!(outcomes, ["acked", "acked", "acked"]);
    assert!(pop(&b, "inbox", "batch=10").await.is_empty());
    assert_eq!(
        depth(&b, "inbox").await["length"],
        0,
        "retired messages are freed"
    );
    let again = ack(&b, "inbox", None, acks_of(&got[..1], None)).await;
    assert_eq!(again, ["unknown"], "already acked");
}

#[tokio::test]
async fn a_payload_comes_back_byte_for_byte() {
    let b = common::broker().await;
    let raw = r#"{"queue":"raw","messages":[{"payload":{"z":1,"a":[1.50,2e3],"m":"é\u00e9"}}]}"#;
    let (status, body) = b
        .post_raw("/api/v1/ephemeral/push", "application/json", raw.into())
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let text = b
        .http
        .get(b.at("/api/v1/ephemeral/pop?queue=raw"))
        .send()
        .await
        .expect("pop")
        .text()
        .await
        .expect("body");
    assert!(
        text.contains(r#""payload":{"z":1,"a":[1.50,2e3],"m":"é\u00e9"}"#),
        "key order and number spelling kept: {text}"
    );
    let parsed: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(parsed["messages"][0]["payload"]["m"], "éé");
}

#[tokio::test]
async fn groups_compete_within_and_fan_out_across() {
    let b = common::broker().await;
    pushed(&b, "feed", &[json!(1), json!(2), json!(3), json!(4)]).await;

    let w1 = pop(&b, "feed", "group=workers&batch=2").await;
    let w2 = pop(&b, "feed", "group=workers&batch=2").await;
    assert_eq!(crate::payloads(&w1), [json!(1), json!(2)]);
    assert_eq!(
        crate::payloads(&w2),
        [json!(3), json!(4)],
        "one cursor per group"
    );
    let tail = pop(&b, "feed", "group=tail&batch=10").await;
    assert_eq!(
        crate::payloads(&tail).len(),
        4,
        "another group sees everything"
    );
    let plain = pop(&b, "feed", "batch=10&autoAck=true").await;
    assert_eq!(
        crate::payloads(&plain).len(),
        4,
        "queue mode is a group of its own"
    );

    let wrong = ack(&b, "feed", Some("tail"), acks_of(&w1, None)).await;
    assert_eq!(wrong, ["acked", "acked"], "same ids, leased to tail too");
    let by_workers = ack(&b, "feed", Some("workers"), acks_of(&w1, None)).await;
    assert_eq!(by_workers, ["acked", "acked"]);
    let not_leased = ack(&b, "feed", Some("nobody"), acks_of(&w2, None)).await;
    assert_eq!(
        not_leased,
        ["unknown", "unknown"],
        "a group that never popped them"
    );
    assert_eq!(
        depth(&b, "feed").await["length"],
        2,
        "messages 1 and 2 are retired by every group that read them"
    );
}

#[tokio::test]
async fn partitions_are_rings_of_their_own() {
    let b = common::broker().await;
    let (s, body) = push(&b, "rooms", Some("room-7"), &[json!("a1"), json!("a2")]).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    assert_eq!(body["partition"], "room-7");
    let (s, body) = push(&b, "rooms", Some("room-9"), &[json!("b1")]).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");

    let nine = pop(&b, "rooms", "partition=room-9&batch=10").await;
    assert_eq!(crate::payloads(&nine), [json!("b1")]);
    assert_eq!(nine[0]["partition"], "room-9");
    assert!(nine[0]["id"].as_str().expect("id").ends_with(":room-9:1"));
    let any = pop(&b, "rooms", "batch=10").await;
    assert_eq!(
        crate::payloads(&any),
        [json!("a1"), json!("a2")],
        "one ring per pop"
    );
    let d = depth(&b, "rooms").await;
    assert_eq!(d["partitions"], 2, "{d}");
    assert_eq!(d["rings"].as_array().map(Vec::len), Some(2), "{d}");
}

#[tokio::test]
async fn commit_on_delivery_leaves_nothing_to_ack() {
    let b = common::broker().await;
    pushed(&b, "fire", &[json!(1), json!(2)]).await;
    let got = pop(&b, "fire", "autoAck=true&batch=10").await;
    assert_eq!(got.len(), 2);
    assert_eq!(
        ack(&b, "fire", None, acks_of(&got, None)).await,
        ["unknown", "unknown"]
    );
    assert!(pop(&b, "fire", "batch=10").await.is_empty());
    assert_eq!(depth(&b, "fire").await["length"], 0);
}

#[tokio::test]
async fn a_waiting_pop_answers_a_push_and_times_out_empty() {
    let b = common::broker().await;
    let started = Instant::now();
    let empty = pop(&b, "quiet", "wait=true&timeout=300").await;
    assert!(empty.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");

    let other = b.sibling(|_| {}).await;
    let waiter = {
        let url = b.at("/api/v1/ephemeral/pop?queue=bell&wait=true&timeout=20000");
        let http = b.http.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let body: Value = http
                .get(url)
                .send()
                .await
                .expect("pop")
                .json()
                .await
                .expect("json");
            (body, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    pushed(&other, "bell", &[json!("ding")]).await;
    let (body, took) = waiter.await.expect("waiter");
    assert_eq!(body["messages"][0]["payload"], "ding", "{body}");
    assert!(
        took < Duration::from_secs(5),
        "woken by the push, not the timeout: {took:?}"
    );
}

#[tokio::test]
async fn a_window_buffer_fattens_a_waiting_pop() {
    let b = common::broker().await;
    configure(
        &b,
        "fat",
        json!({"windowBuffer": {"ms": 10000, "count": 3}}),
    )
    .await;
    pushed(&b, "fat", &[json!(1)]).await;
    let waiter = {
        let url = b.at("/api/v1/ephemeral/pop?queue=fat&batch=10&wait=true&timeout=20000");
        let http = b.http.clone();
        tokio::spawn(async move {
            let body: Value = http
                .get(url)
                .send()
                .await
                .expect("pop")
                .json()
                .await
                .expect("json");
            body
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    pushed(&b, "fat", &[json!(2)]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    pushed(&b, "fat", &[json!(3)]).await;
    let body = waiter.await.expect("waiter");
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(3), "{body}");

    configure(
        &b,
        "thin",
        json!({"windowBuffer": {"ms": 500, "count": 50}}),
    )
    .await;
    pushed(&b, "thin", &[json!(1)]).await;
    let started = Instant::now();
    let got = pop(&b, "thin", "batch=10&wait=true&timeout=20000").await;
    let took = started.elapsed();
    assert_eq!(got.len(), 1);
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "held for the window's ms, then delivered: {took:?}"
    );
    let started = Instant::now();
    pushed(&b, "thin", &[json!(2)]).await;
    let got = pop(&b, "thin", "batch=10").await;
    assert_eq!(got.len(), 1, "a pop that does not wait is never held");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn reset_delete_and_the_listing() {
    let b = common::broker().await;
    let c = configure(&b, "kept", json!({"maxLength": 50, "policy": "dropOldest"})).await;
    assert_eq!(c["options"]["maxLength"], 50, "{c}");
    assert_eq!(
        c["options"]["leaseSeconds"], 30,
        "the defaults fill the rest: {c}"
    );
    assert_eq!(c["created"], true);
    pushed(&b, "kept", &[json!(1), json!(2)]).await;
    pushed(&b, "implicit", &[json!(1)]).await;
    let got = pop(&b, "kept", "batch=1").await;

    let (status, list) = b.get("/api/v1/ephemeral/queues").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let names: Vec<&str> = list["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["queue"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["implicit", "kept"], "{list}");
    assert_eq!(list["queues"][0]["declared"], false);
    assert_eq!(list["queues"][1]["declared"], true);
    assert_eq!(list["queues"][1]["length"], 2);

    let (status, r) = b
        .post("/api/v1/ephemeral/reset", &json!({"queue": "kept"}))
        .await;
    assert_eq!((status, &r["dropped"]), (StatusCode::OK, &json!(2)), "{r}");
    assert_eq!(ack(&b, "kept", None, acks_of(&got, None)).await, ["stale"]);
    let d = depth(&b, "kept").await;
    assert_eq!(
        (d["length"].as_i64(), d["declared"].as_bool()),
        (Some(0), Some(true)),
        "{d}"
    );
    assert_eq!(
        d["options"]["policy"], "dropOldest",
        "reset keeps the declaration: {d}"
    );
    pushed(&b, "kept", &[json!(3)]).await;
    let fresh = pop(&b, "kept", "batch=1").await;
    assert_ne!(
        fresh[0]["id"], got[0]["id"],
        "a new incarnation mints new ids"
    );

    let (status, r) = b.delete("/api/v1/ephemeral/queue/kept").await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        (r["deleted"].as_bool(), r["declared"].as_bool()),
        (Some(true), Some(true))
    );
    let (status, r) = b.get("/api/v1/ephemeral/queues/kept/depth").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{r}");
    assert_eq!(
        (r["error"].as_str(), r["code"].as_str()),
        (
            Some("ephemeral_queue_not_found"),
            Some("ephemeral_queue_not_found")
        )
    );
    let (_, r) = b.delete("/api/v1/ephemeral/queue/kept").await;
    assert_eq!(
        (r["deleted"].as_bool(), r["declared"].as_bool()),
        (Some(false), Some(false))
    );
    let (_, r) = b
        .post("/api/v1/ephemeral/reset", &json!({"queue": "never"}))
        .await;
    assert_eq!(r["dropped"], 0, "{r}");
    let (_, r) = b.delete("/api/v1/ephemeral/queue/implicit").await;
    assert_eq!(
        (r["deleted"].as_bool(), r["declared"].as_bool()),
        (Some(true), Some(false))
    );
}

#[tokio::test]
async fn a_group_that_read_one_partition_keeps_the_others_for_it() {
    let b = common::broker().await;
    let (s, _) = push(&b, "halls", Some("a"), &[json!("a1"), json!("a2")]).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = push(&b, "halls", Some("b"), &[json!("b1")]).await;
    assert_eq!(s, StatusCode::CREATED);
    let workers_b = pop(&b, "halls", "partition=b&group=workers").await;
    assert_eq!(crate::payloads(&workers_b), [json!("b1")]);
    let tail_a = pop(&b, "halls", "partition=a&group=tail&autoAck=true&batch=10").await;
    assert_eq!(crate::payloads(&tail_a), [json!("a1"), json!("a2")]);
    let workers_a = pop(&b, "halls", "partition=a&group=workers&batch=10").await;
    assert_eq!(
        crate::payloads(&workers_a),
        [json!("a1"), json!("a2")],
        "tail retiring them does not take them from workers"
    );
    ack(&b, "halls", Some("workers"), acks_of(&workers_a, None)).await;
    assert_eq!(depth(&b, "halls").await["length"], 1, "b1 is still leased");
}
