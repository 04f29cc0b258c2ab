//! The producer identity (docs/wire.md §1): with auth on, the validated `sub` of the pusher is
//! stamped on every message — JSON push, binary push (plain and pre-compressed groups),
//! transactions (JSON and `QTB1`) — whatever `producerSub` the body sends, and comes back on
//! JSON and framed pops, message detail and the DLQ listing, and survives a DLQ replay. With
//! auth off it is always null.

use queen_proto::pop_framed::decode;
use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed, encode_txn};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{call, get, hs_broker, post, send, token};
use crate::common::wire::{batch, item, PUSH_CONTENT_TYPE};
use crate::common::{self, TestBroker};

/// Every message of one wildcard pop of `queue` (group `g`), as JSON.
async fn pop_json(b: &TestBroker, queue: &str, tok: Option<&str>) -> Vec<Value> {
    let path = format!("/api/v1/pop/queue/{queue}?batch=50&consumerGroup=g");
    let r = call(b, reqwest::Method::GET, &path, tok, None).await;
    assert_eq!(r.status, StatusCode::OK, "pop {queue}: {}", r.body);
    r.body["messages"].as_array().cloned().expect("messages")
}

/// `(transactionId, producerSub)` of each message.
fn subs(messages: &[Value]) -> Vec<(String, Value)> {
    messages
        .iter()
        .map(|m| {
            (
                m["transactionId"].as_str().expect("txn").to_string(),
                m["producerSub"].clone(),
            )
        })
        .collect()
}

async fn post_binary(b: &TestBroker, path: &str, tok: &str, body: Vec<u8>) -> super::Reply {
    let req = b
        .http
        .post(b.at(path))
        .bearer_auth(tok)
        .header("content-type", PUSH_CONTENT_TYPE)
        .body(body);
    send(req).await
}

#[tokio::test]
async fn json_push_stamps_the_token_sub_and_ignores_the_body() {
    let b = hs_broker(|_| {}).await;
    let alice = token("alice", "read-write");
    let push = json!({"items": [
        {"queue": "stamp", "partition": "p", "transactionId": "t1", "payload": {"n": 1},
         "producerSub": "mallory"},
        {"queue": "stamp", "partition": "p", "transactionId": "t2", "payload": {"n": 2}},
    ]});
    let r = post(&b, "/api/v1/push", &alice, &push).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // Another producer on the same partition, coalesced into the same flush or not.
    let bob = token("bob", "read-write");
    let push = json!({"items": [{"queue": "stamp", "partition": "p", "transactionId": "t3",
                                 "payload": 3, "producerSub": "alice"}]});
    assert_eq!(
        post(&b, "/api/v1/push", &bob, &push).await.status,
        StatusCode::CREATED
    );

    let messages = pop_json(&b, "stamp", Some(&bob)).await;
    assert_eq!(
        subs(&messages),
        vec![
            ("t1".into(), json!("alice")),
            ("t2".into(), json!("alice")),
            ("t3".into(), json!("bob")),
        ]
    );
    let pid = messages[0]["partitionId"].as_str().expect("pid");
    let detail = get(&b, &format!("/api/v1/messages/{pid}/t1"), &bob).await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.body);
    assert_eq!(detail.body["producerSub"], "alice");

    // The framed pop carries it in the stored frame.
    let more = json!({"items": [{"queue": "stamp", "partition": "p", "transactionId": "t4",
                                  "payload": 4}]});
    assert_eq!(
        post(&b, "/api/v1/push", &alice, &more).await.status,
        StatusCode::CREATED
    );
    let r = get(
        &b,
        "/api/v1/pop/queue/stamp?consumerGroup=framed&frames=true",
        &bob,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let framed = decode(&r.raw).expect("QPF1");
    let framed_subs: Vec<Option<&str>> = framed
        .messages
        .iter()
        .map(|m| m.producer_sub.as_deref())
        .collect();
    assert_eq!(
        framed_subs,
        vec![Some("alice"), Some("alice"), Some("bob"), Some("alice")]
    );
}

#[tokio::test]
async fn binary_pushes_are_stamped_plain_and_precompressed() {
    let b = hs_broker(|_| {}).await;
    let carol = token("carol", "read-write");
    let plain = encode_push_plain(
        &[batch("bin", "p", vec![item(Some("plain-1"), b"{\"a\":1}")])],
        false,
        false,
    )
    .expect("encode");
    let r = post_binary(&b, "/api/v1/push", &carol, plain).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let frames = encode_push_precompressed(
        &[batch(
            "bin",
            "p",
            vec![item(Some("pre-1"), b"1"), item(Some("pre-2"), b"2")],
        )],
        false,
    )
    .expect("encode");
    let r = post_binary(&b, "/api/v1/push", &carol, frames).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    let messages = pop_json(&b, "bin", Some(&carol)).await;
    assert_eq!(
        subs(&messages),
        vec![
            ("plain-1".into(), json!("carol")),
            ("pre-1".into(), json!("carol")),
            ("pre-2".into(), json!("carol")),
        ]
    );
}

#[tokio::test]
async fn transactions_are_stamped_json_and_binary() {
    let b = hs_broker(|_| {}).await;
    let dave = token("dave", "read-write");
    let bundle = json!({"operations": [{"type": "push", "items": [
        {"queue": "txn", "partition": "p", "transactionId": "json-1", "payload": 1,
         "producerSub": "mallory"}]}]});
    let r = post(&b, "/api/v1/transaction", &dave, &bundle).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["success"], true, "{}", r.body);
    let qtb1 = encode_txn(
        b"",
        &[batch("txn", "p", vec![item(Some("bin-1"), b"{\"b\":1}")])],
        false,
    )
    .expect("encode");
    let r = post_binary(&b, "/api/v1/transaction", &dave, qtb1).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["success"], true, "{}", r.body);

    let messages = pop_json(&b, "txn", Some(&dave)).await;
    assert_eq!(
        subs(&messages),
        vec![
            ("json-1".into(), json!("dave")),
            ("bin-1".into(), json!("dave"))
        ]
    );
}

#[tokio::test]
async fn dead_letters_keep_the_producer_and_a_replay_pushes_it_back() {
    let b = hs_broker(|_| {}).await;
    let (erin, admin) = (token("erin", "read-write"), token("ops", "admin"));
    let push = json!({"items": [{"queue": "dead", "partition": "p", "transactionId": "poison",
                                 "payload": {"x": 1}}]});
    assert_eq!(
        post(&b, "/api/v1/push", &erin, &push).await.status,
        StatusCode::CREATED
    );
    let popped = pop_json(&b, "dead", Some(&erin)).await;
    let ack =
        json!({"acknowledgments": [common::ack_item(&popped[0], "dlq")], "consumerGroup": "g"});
    let r = post(&b, "/api/v1/ack/batch", &erin, &ack).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    let listing = get(&b, "/api/v1/dlq?queue=dead", &erin).await;
    assert_eq!(listing.body["total"], 1, "{}", listing.body);
    assert_eq!(listing.body["messages"][0]["producerSub"], "erin");

    let pid = popped[0]["partitionId"].as_str().expect("pid");
    let r = post(
        &b,
        &format!("/api/v1/messages/{pid}/poison/retry"),
        &admin,
        &json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let again = pop_json(&b, "dead", Some(&erin)).await;
    assert_eq!(subs(&again), vec![("poison".into(), json!("erin"))]);
}

#[tokio::test]
async fn with_auth_off_producer_sub_is_always_null() {
    let b = common::broker().await;
    let push = json!({"items": [{"queue": "off", "partition": "p", "transactionId": "t1",
                                 "payload": 1, "producerSub": "mallory"}]});
    let (status, body) = b.post("/api/v1/push", &push).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A token is not even read with auth off.
    let tok = token("alice", "admin");
    let popped = pop_json(&b, "off", Some(&tok)).await;
    assert_eq!(subs(&popped), vec![("t1".into(), Value::Null)]);
    let pid = popped[0]["partitionId"].as_str().expect("pid");
    let (_, detail) = b.get(&format!("/api/v1/messages/{pid}/t1")).await;
    assert_eq!(detail["producerSub"], Value::Null, "{detail}");

    let ack =
        json!({"acknowledgments": [common::ack_item(&popped[0], "dlq")], "consumerGroup": "g"});
    let (status, _) = b.post("/api/v1/ack/batch", &ack).await;
    assert_eq!(status, StatusCode::OK);
    let (_, listing) = b.get("/api/v1/dlq?queue=off").await;
    assert_eq!(listing["total"], 1, "{listing}");
    assert_eq!(listing["messages"][0]["producerSub"], Value::Null);
}
