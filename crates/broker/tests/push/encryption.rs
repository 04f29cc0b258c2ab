//! Encryption at rest (docs/engine.md §3.1, docs/wire.md §3.2): with `QUEEN_ENCRYPTION_KEY`,
//! no plaintext of an encrypted queue's payload reaches any table, whatever wrote it (JSON,
//! binary and pre-compressed binary pushes, transactions, DLQ filing and replay), while pop,
//! DLQ listing and message detail return it intact; without a key encryption cannot be turned
//! on; another key or a damaged envelope is a per-message error.

use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed};
use queen_proto::segment;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, ack_item, configure, TestBroker};
use crate::wire::{batch, item, post_bin};

pub(crate) const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const OTHER_KEY: &str = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfefff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

pub(crate) async fn keyed(key: &str) -> TestBroker {
    let key = queen_broker::config::EncryptionKey::from_hex(key).expect("test key");
    common::broker_with(|c| c.encryption_key = Some(key)).await
}

/// Rows of every `queen.*` table whose text form holds `marker` (as text, or as the hex a
/// bytea column renders), plus segment blobs whose decompressed frames hold it.
pub(crate) async fn plaintext_hits(db: &tokio_postgres::Client, marker: &str) -> Vec<String> {
    let hex: String = marker.bytes().map(|b| format!("{b:02x}")).collect();
    let tables: Vec<String> = db
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'queen' AND table_type = 'BASE TABLE' ORDER BY 1",
            &[],
        )
        .await
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.len() > 10, "the scan sees the schema: {tables:?}");
    let mut hits = Vec::new();
    for table in &tables {
        let n: i64 = db
            .query_one(
                &format!(
                    "SELECT count(*) FROM queen.{table} AS x
                     WHERE x::text LIKE '%' || $1 || '%' OR x::text LIKE '%' || $2 || '%'"
                ),
                &[&marker, &hex],
            )
            .await
            .expect("scan")
            .get(0);
        if n > 0 {
            hits.push(format!("{table}: {n} rows"));
        }
    }
    for row in db
        .query(
            "SELECT partition_id, base_offset, blob FROM queen.log_segments",
            &[],
        )
        .await
        .expect("segments")
    {
        let blob: Vec<u8> = row.get(2);
        let raw = segment::decompress(&blob, segment::MAX_SEGMENT_BYTES).expect("a blob");
        if raw.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            hits.push(format!(
                "segment {}@{}",
                row.get::<_, i64>(0),
                row.get::<_, i64>(1)
            ));
        }
    }
    hits
}

/// Pops everything of `queue` for `group`, leased, JSON; the messages.
async fn pop(b: &TestBroker, queue: &str, group: &str, extra: &str) -> Vec<Value> {
    let (status, body) = b
        .get(&format!(
            "/api/v1/pop/queue/{queue}?batch=100&partitions=10&consumerGroup={group}{extra}"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "pop {queue}: {body}");
    body["messages"].as_array().cloned().expect("messages")
}

fn data_of(messages: &[Value]) -> Vec<Value> {
    sorted(messages.iter().map(|m| m["data"].clone()).collect())
}

fn sorted(mut values: Vec<Value>) -> Vec<Value> {
    values.sort_by_key(|d| d.to_string());
    values
}

#[tokio::test]
async fn no_plaintext_of_an_encrypted_queue_reaches_any_table() {
    let b = keyed(KEY).await;
    let db = b.sql().await;
    let marker = "SECRET-MARKER-9f27c1";
    let plain_marker = "PLAIN-MARKER-3b81aa";
    let (status, out) = b
        .post(
            "/api/v1/configure",
            &json!({"queue":"vault","options":{"encryptionEnabled":true,"retryLimit":0}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["options"]["encryptionEnabled"], true);
    configure(&b, "open", json!({ "retryLimit": 0 })).await;

    // Every writer: JSON push, binary plain and pre-compressed bodies, a transaction.
    let payload = |n: u32| format!("{{\"secret\":\"{marker}\",\"n\":{n}}}");
    let mut sent: Vec<Value> = Vec::new();
    b.push("vault", "p1", &[json!({"secret": marker, "n": 0})])
        .await;
    sent.push(json!({"secret": marker, "n": 0}));
    for (body, n) in [
        (
            encode_push_plain(
                &[batch(
                    "vault",
                    "p1",
                    vec![item(Some("bin-1"), payload(1).as_bytes())],
                )],
                false,
                false,
            )
            .expect("encodes"),
            1,
        ),
        (
            encode_push_precompressed(
                &[batch(
                    "vault",
                    "p2",
                    vec![item(Some("pre-2"), payload(2).as_bytes())],
                )],
                false,
            )
            .expect("encodes"),
            2,
        ),
    ] {
        let (status, out) = post_bin(&b, "/api/v1/push", body).await;
        assert_eq!(status, StatusCode::CREATED, "{out}");
        assert_eq!(out[0]["status"], "queued", "{out}");
        sent.push(serde_json::from_str(&payload(n)).unwrap());
    }
    let (status, out) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations":[{"type":"push","items":[
                {"queue":"vault","partition":"p3","payload":{"secret":marker,"n":3},"transactionId":"tx-3"}]}]}),
        )
        .await;
    assert_eq!(
        (status, &out["success"]),
        (StatusCode::OK, &json!(true)),
        "{out}"
    );
    sent.push(json!({"secret": marker, "n": 3}));
    // The positive control: the same scan finds a plaintext queue's payloads.
    b.push("open", "p", &[json!({ "secret": plain_marker })])
        .await;

    // Pops open every envelope, JSON and framed (whose records then ship opened, raw).
    let sent = sorted(sent);
    let popped = pop(&b, "vault", "g", "").await;
    assert_eq!(data_of(&popped), sent);
    assert!(popped.iter().all(|m| m.get("payloadError").is_none()));
    let r = b
        .http
        .get(b.at("/api/v1/pop/queue/vault?batch=100&partitions=10&consumerGroup=f&frames=true"))
        .send()
        .await
        .expect("framed pop");
    let body = r.bytes().await.expect("body");
    let framed = queen_proto::pop_framed::decode(&body).expect("a QPF1 answer");
    assert_eq!(
        sorted(framed.messages.iter().map(|m| m.data.clone()).collect()),
        sent
    );

    // Message detail opens it too.
    let first = &popped[0];
    let (status, detail) = b
        .get(&format!(
            "/api/v1/messages/{}/{}",
            first["partitionId"].as_str().unwrap(),
            first["transactionId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["data"], first["data"]);
    assert_eq!(detail["isEncrypted"], true);

    // A nack with retryLimit 0 files the dead letter: its copy is the envelope.
    let nacked: Vec<Value> = popped.iter().map(|m| ack_item(m, "failed")).collect();
    let answers = common::ack_batch(&b, Some("g"), nacked).await;
    assert!(answers.iter().any(|a| a["dlq"] == true), "{answers:?}");
    let open = pop(&b, "open", "g", "").await;
    common::ack_batch(&b, Some("g"), vec![ack_item(&open[0], "failed")]).await;
    let (_, dlq) = b.get("/api/v1/dlq?queue=vault&limit=50").await;
    let letters = dlq["messages"].as_array().expect("dead letters");
    assert!(!letters.is_empty(), "{dlq}");
    for letter in letters {
        assert_eq!(letter["data"]["secret"], marker, "{letter}");
        assert!(letter.get("payloadError").is_none(), "{letter}");
    }

    // A trace row of the same message, so that table is scanned with content too.
    let (status, _) = b
        .post(
            "/api/v1/traces",
            &json!({"transactionId": first["transactionId"], "partitionId": first["partitionId"],
                    "consumerGroup":"g","eventType":"info","data":{"step":"handled"}}),
        )
        .await;
    assert!(status.is_success());

    // A replay of the dead letter writes the envelope back, not the plaintext.
    let letter = &letters[0];
    let (status, replayed) = b
        .post(
            &format!(
                "/api/v1/messages/{}/{}/retry",
                letter["partitionId"].as_str().unwrap(),
                letter["transactionId"].as_str().unwrap()
            ),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{replayed}");
    let again = pop(&b, "vault", "g", "").await;
    assert!(
        again.iter().any(|m| m["data"] == letter["data"]),
        "the replayed message reads back: {again:?}"
    );

    assert_eq!(plaintext_hits(&db, marker).await, Vec::<String>::new());
    let control = plaintext_hits(&db, plain_marker).await;
    assert!(
        control.iter().any(|h| h.starts_with("segment"))
            && control.iter().any(|h| h.starts_with("log_dlq")),
        "the scan finds plaintext where it is stored: {control:?}"
    );
}

#[tokio::test]
async fn enabling_encryption_without_a_key_is_refused() {
    let b = common::broker().await;
    let db = b.sql().await;
    let (status, out) = b
        .post(
            "/api/v1/configure",
            &json!({"queue":"nokey","options":{"encryptionEnabled":true}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{out}");
    assert_eq!(out["invalid"], "encryptionEnabled");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_ENCRYPTION_KEY"),
        "{out}"
    );
    assert_eq!(
        common::count(&db, "queen.queues").await,
        0,
        "nothing created"
    );
    configure(&b, "nokey", json!({ "encryptionEnabled": false })).await;
}

#[tokio::test]
async fn another_key_is_a_per_message_error_and_a_keyless_push_is_refused() {
    let a = keyed(KEY).await;
    configure(&a, "k", json!({})).await;
    // One message stored before encryption was turned on stays plaintext and readable.
    a.push("k", "p", &[json!({"n": "before"})]).await;
    configure(&a, "k", json!({ "encryptionEnabled": true })).await;
    a.push("k", "p", &[json!({"n": "sealed"})]).await;

    let key = queen_broker::config::EncryptionKey::from_hex(OTHER_KEY).unwrap();
    let b = a.sibling(|c| c.encryption_key = Some(key)).await;
    let popped = pop(&b, "k", "g", "").await;
    assert_eq!(popped.len(), 2, "the whole batch is answered: {popped:?}");
    assert_eq!(popped[0]["data"], json!({"n": "before"}));
    assert!(popped[0].get("payloadError").is_none());
    assert_eq!(popped[1]["data"], Value::Null);
    let error = popped[1]["payloadError"]
        .as_str()
        .expect("per-message error");
    assert!(error.contains("another QUEEN_ENCRYPTION_KEY"), "{error}");
    // The message is leased like any other: its holder can ack it.
    let acks = common::ack_batch(&b, Some("g"), vec![ack_item(&popped[1], "completed")]).await;
    assert_eq!(acks[0]["success"], true, "{acks:?}");
    let (status, detail) = b
        .get(&format!(
            "/api/v1/messages/{}/{}",
            popped[1]["partitionId"].as_str().unwrap(),
            popped[1]["transactionId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert!(detail["payloadError"].as_str().is_some(), "{detail}");

    // A broker without any key cannot seal: each item is refused, the rest stored.
    let c = a.sibling(|_| {}).await;
    let (status, out) = c
        .post(
            "/api/v1/push",
            &json!({"items":[{"queue":"k","partition":"p","payload":{"n":1}},
                             {"queue":"other","partition":"p","payload":{"n":2}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(out[0]["status"], "failed");
    assert!(
        out[0]["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_ENCRYPTION_KEY"),
        "{out}"
    );
    assert_eq!(out[1]["status"], "queued");
    // Alone, the refusal is still a per-item answer, not a server error.
    let (status, out) = c
        .post(
            "/api/v1/push",
            &json!({"items":[{"queue":"k","partition":"p","payload":{"n":3}}]}),
        )
        .await;
    assert_eq!(
        (status, &out[0]["status"]),
        (StatusCode::CREATED, &json!("failed"))
    );
    let popped = pop(&c, "k", "h", "").await;
    assert_eq!(popped[1]["data"], Value::Null);
    assert!(popped[1]["payloadError"]
        .as_str()
        .unwrap()
        .contains("no QUEEN_ENCRYPTION_KEY"));
}

#[tokio::test]
async fn a_corrupted_envelope_is_a_per_message_error() {
    let b = keyed(KEY).await;
    let db = b.sql().await;
    configure(
        &b,
        "dmg",
        json!({ "encryptionEnabled": true, "retryLimit": 0 }),
    )
    .await;
    b.push("dmg", "p", &[json!({"n": 0}), json!({"n": 1})])
        .await;
    b.push("dmg", "p", &[json!({"n": 2})]).await;

    // Flip one byte of the first segment's first envelope's ciphertext, through SQL.
    let row = db
        .query_one(
            "SELECT partition_id, base_offset, blob FROM queen.log_segments ORDER BY base_offset LIMIT 1",
            &[],
        )
        .await
        .expect("segment");
    let (pid, base, blob): (i64, i64, Vec<u8>) = (row.get(0), row.get(1), row.get(2));
    let mut raw = segment::decompress(&blob, segment::MAX_SEGMENT_BYTES).expect("blob");
    let at = raw
        .windows(14)
        .position(|w| w == br#"{"encrypted":""#)
        .expect("an envelope")
        + 14;
    raw[at] = if raw[at] == b'A' { b'B' } else { b'A' };
    db.execute(
        "UPDATE queen.log_segments SET blob = $3 WHERE partition_id = $1 AND base_offset = $2",
        &[&pid, &base, &segment::compress(&raw, 3)],
    )
    .await
    .expect("corrupt");

    let popped = pop(&b, "dmg", "g", "").await;
    assert_eq!(popped.len(), 3, "{popped:?}");
    assert_eq!(popped[0]["data"], Value::Null);
    assert!(
        popped[0]["payloadError"]
            .as_str()
            .unwrap()
            .contains("corrupt"),
        "{popped:?}"
    );
    assert_eq!(popped[1]["data"], json!({"n": 1}));
    assert_eq!(popped[2]["data"], json!({"n": 2}));

    // Dead-lettered, the damaged copy lists with its error; the listing still answers.
    let answers = common::ack_batch(&b, Some("g"), vec![ack_item(&popped[0], "failed")]).await;
    assert_eq!(answers[0]["dlq"], true, "{answers:?}");
    let (status, dlq) = b.get("/api/v1/dlq?queue=dmg").await;
    assert_eq!(status, StatusCode::OK, "{dlq}");
    assert_eq!(dlq["messages"][0]["data"], Value::Null);
    assert!(
        dlq["messages"][0]["payloadError"].as_str().is_some(),
        "{dlq}"
    );
}

#[tokio::test]
async fn a_broker_that_has_not_learned_the_option_is_corrected_by_the_sql() {
    // Encryption is turned on through `a`; `b` shares the key but never saw the configure, so
    // its first write of each kind goes out plaintext and the SQL refuses it.
    let a = keyed(KEY).await;
    let key = queen_broker::config::EncryptionKey::from_hex(KEY).unwrap();
    let b = a.sibling(|c| c.encryption_key = Some(key)).await;
    let db = a.sql().await;
    let marker = "LATE-MARKER-51c0de";
    b.push("late", "p0", &[json!({"warm": 1})]).await; // b now knows the queue, unencrypted
    configure(&a, "late", json!({ "encryptionEnabled": true })).await;

    let (status, out) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations":[{"type":"push","items":[
                {"queue":"late","partition":"p1","payload":{"secret":marker}}]}]}),
        )
        .await;
    assert_eq!(
        (status, &out["success"]),
        (StatusCode::OK, &json!(true)),
        "{out}"
    );
    let body = encode_push_precompressed(
        &[batch(
            "late",
            "p2",
            vec![item(
                Some("pre"),
                format!("{{\"secret\":\"{marker}\"}}").as_bytes(),
            )],
        )],
        false,
    )
    .expect("encodes");
    // Learned from the transaction's refusal; forget it by using a fresh sibling for the rest.
    let key = queen_broker::config::EncryptionKey::from_hex(KEY).unwrap();
    let c = a.sibling(|cfg| cfg.encryption_key = Some(key)).await;
    let (status, out) = post_bin(&c, "/api/v1/push", body).await;
    assert_eq!(
        (status, &out[0]["status"]),
        (StatusCode::CREATED, &json!("queued")),
        "{out}"
    );
    let key = queen_broker::config::EncryptionKey::from_hex(KEY).unwrap();
    let d = a.sibling(|cfg| cfg.encryption_key = Some(key)).await;
    d.push("late", "p3", &[json!({ "secret": marker })]).await;

    assert_eq!(plaintext_hits(&db, marker).await, Vec::<String>::new());
    let popped = pop(&a, "late", "g", "").await;
    let secrets = popped
        .iter()
        .filter(|m| m["data"]["secret"] == marker)
        .count();
    assert_eq!(secrets, 3, "{popped:?}");
}
