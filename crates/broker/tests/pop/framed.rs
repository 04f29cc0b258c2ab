//! Framed pop (`frames=true`, `QPF1`, docs/wire.md §7.7) over real HTTP and PostgreSQL: decoded
//! with queen_proto's decoder (the official Python decoder's twin) it yields exactly the
//! messages the JSON pop does; stored blobs ship byte for byte and the client trims claims
//! that start or end inside a segment; empty is a bodiless 204; multi-partition claims;
//! every pop route; acks of a framed delivery work.

use queen_proto::pop_framed::{decode, PopAnswer};
use queen_proto::push_bin::{encode_push_precompressed, Batch, BatchItem};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::wire::{post_bin, push_groups, segments, z_of, POP_CONTENT_TYPE};

/// A framed pop answer, as received.
struct Framed {
    status: StatusCode,
    content_type: String,
    content_length: Option<String>,
    raw: Vec<u8>,
}

impl Framed {
    fn answer(&self) -> PopAnswer {
        assert_eq!(self.status, StatusCode::OK, "expected a delivery");
        assert_eq!(self.content_type, POP_CONTENT_TYPE);
        decode(&self.raw).expect("a whole QPF1 answer")
    }

    fn assert_empty(&self) {
        assert_eq!(self.status, StatusCode::NO_CONTENT);
        assert!(self.raw.is_empty(), "a 204 has no body");
        assert_eq!(
            self.content_length, None,
            "a 204 announces no Content-Length"
        );
    }

    fn ships(&self, blob: &[u8]) -> bool {
        self.raw.windows(blob.len()).any(|w| w == blob)
    }
}

async fn get_framed(b: &common::TestBroker, path: &str) -> Framed {
    let sep = if path.contains('?') { '&' } else { '?' };
    let r = b
        .http
        .get(b.at(&format!("{path}{sep}frames=true")))
        .send()
        .await
        .expect("GET");
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or_default().to_string())
    };
    let (content_type, content_length) = (header("content-type"), header("content-length"));
    Framed {
        status: r.status(),
        content_type: content_type.unwrap_or_default(),
        content_length,
        raw: r.bytes().await.expect("body").to_vec(),
    }
}

/// Pushes one message per (transactionId, payload) to (queue, partition) as one JSON push.
async fn push<T: AsRef<str>>(
    b: &common::TestBroker,
    queue: &str,
    partition: &str,
    items: &[(T, Value)],
) {
    let items: Vec<Value> = items
        .iter()
        .map(|(t, p)| json!({"queue": queue, "partition": partition, "transactionId": t.as_ref(), "payload": p}))
        .collect();
    let (status, body) = b.post("/api/v1/push", &json!({ "items": items })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// The messages of a JSON answer and of a framed answer, without the keys that differ by
/// request (leaseId, consumerGroup).
fn comparable(messages: Vec<Value>) -> Vec<Value> {
    messages
        .into_iter()
        .map(|mut m| {
            let o = m.as_object_mut().expect("message object");
            o.remove("leaseId");
            o.remove("consumerGroup");
            m
        })
        .collect()
}

fn txns(answer: &PopAnswer) -> Vec<String> {
    answer
        .messages
        .iter()
        .map(|m| m.transaction_id.clone())
        .collect()
}

#[tokio::test]
async fn a_framed_pop_yields_exactly_what_the_json_pop_does() {
    let b = common::broker().await;
    push(
        &b,
        "fr.same",
        "p",
        &[
            ("a", json!({"n": 1, "nested": {"list": [1, 2.5, "x"]}})),
            ("b", Value::Null),
            ("c", json!({})),
            ("d", json!("ünïcode \"quoted\" \\ slash")),
        ],
    )
    .await;
    let (status, _) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "fr.same", "partition": "p", "transactionId": "e",
                    "traceId": "2b7e1516-28ae-4d2a-a6ab-f7158809cf4f", "payload": [true, false]}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // Two groups at the same position of the same data: one pops JSON, the other framed.
    let (status, json_answer) = b
        .get("/api/v1/pop/queue/fr.same?batch=10&consumerGroup=json")
        .await;
    assert_eq!(status, StatusCode::OK);
    let framed = get_framed(
        &b,
        "/api/v1/pop/queue/fr.same?batch=10&consumerGroup=framed",
    )
    .await;
    let answer = framed.answer();
    let decoded = answer.to_json();

    let json_messages = json_answer["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(json_messages.len(), 5);
    assert_eq!(
        comparable(decoded["messages"].as_array().cloned().unwrap_or_default()),
        comparable(json_messages)
    );
    for key in [
        "success",
        "queue",
        "partition",
        "partitionId",
        "partitionsClaimed",
    ] {
        assert_eq!(decoded[key], json_answer[key], "top-level {key}");
    }
    assert_eq!(answer.consumer_group, "framed");
    assert_eq!(
        answer.messages[4]
            .trace_id
            .map(|t| t.to_string())
            .as_deref(),
        Some("2b7e1516-28ae-4d2a-a6ab-f7158809cf4f")
    );
    let lease = answer.lease_id.clone();
    assert!(answer
        .messages
        .iter()
        .all(|m| m.lease_id == lease && !lease.is_empty()));

    // The stored blob went out byte for byte.
    let db = b.sql().await;
    let segs = segments(&db, "fr.same", "p").await;
    assert!(segs.iter().all(|(_, _, blob)| framed.ships(blob)));

    // The framed delivery is acked like any other: its lease, its partitionId.
    let acks: Vec<Value> = answer
        .messages
        .iter()
        .map(|m| {
            json!({"transactionId": m.transaction_id, "partitionId": m.partition_id,
                        "leaseId": m.lease_id, "status": "completed"})
        })
        .collect();
    let (status, acked) = b
        .post(
            "/api/v1/ack/batch",
            &json!({"acknowledgments": acks, "consumerGroup": "framed"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        acked
            .as_array()
            .expect("array")
            .iter()
            .all(|r| r["success"] == true),
        "{acked}"
    );
    get_framed(
        &b,
        "/api/v1/pop/queue/fr.same?batch=10&consumerGroup=framed",
    )
    .await
    .assert_empty();
}

#[tokio::test]
async fn claims_that_start_and_end_inside_segments_are_trimmed_by_the_client() {
    let b = common::broker().await;
    let db = b.sql().await;
    let first: Vec<(String, Value)> = (0..6).map(|i| (format!("m{i}"), json!(i))).collect();
    let second: Vec<(String, Value)> = (6..10).map(|i| (format!("m{i}"), json!(i))).collect();
    push(&b, "fr.trim", "p", &first).await;
    push(&b, "fr.trim", "p", &second).await;
    let segs = segments(&db, "fr.trim", "p").await;
    assert_eq!(segs.len(), 2, "two pushes, two segments");

    // Offsets 0..=3: the head of segment one.
    let r = get_framed(&b, "/api/v1/pop/queue/fr.trim?batch=4&autoAck=true").await;
    let a = r.answer();
    assert_eq!(txns(&a), ["m0", "m1", "m2", "m3"]);
    assert!(
        r.ships(&segs[0].2),
        "the whole segment ships; the client trims its tail"
    );
    assert_eq!(a.lease_id, "", "autoAck has no lease");

    // Offsets 4..=7: from inside segment one into segment two.
    let r = get_framed(&b, "/api/v1/pop/queue/fr.trim?batch=4&autoAck=true").await;
    let a = r.answer();
    assert_eq!(txns(&a), ["m4", "m5", "m6", "m7"]);
    assert_eq!(
        a.messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
        [4, 5, 6, 7]
    );
    assert!(r.ships(&segs[0].2) && r.ships(&segs[1].2));

    // Offsets 8..=9: the tail of segment two; then nothing.
    let r = get_framed(&b, "/api/v1/pop/queue/fr.trim?batch=4&autoAck=true").await;
    assert_eq!(txns(&r.answer()), ["m8", "m9"]);
    get_framed(&b, "/api/v1/pop/queue/fr.trim?batch=4&autoAck=true")
        .await
        .assert_empty();
}

#[tokio::test]
async fn empty_framed_pops_are_bodiless_204_on_every_route() {
    let b = common::broker().await;
    for path in [
        "/api/v1/pop/queue/fr.none?batch=5",
        "/api/v1/pop/queue/fr.none/partition/p?batch=5",
        "/api/v1/pop?namespace=fr&batch=5",
        "/api/v1/pop/queue/fr.none?batch=5&wait=true&timeout=200",
    ] {
        get_framed(&b, path).await.assert_empty();
    }
}

#[tokio::test]
async fn targeted_and_discovery_routes_answer_framed() {
    let b = common::broker().await;
    push(&b, "frd.one", "p1", &[("t1", json!(1))]).await;
    push(&b, "frd.one", "p2", &[("t2", json!(2))]).await;

    let r = get_framed(&b, "/api/v1/pop/queue/frd.one/partition/p2?batch=5").await;
    let a = r.answer();
    assert_eq!(
        (txns(&a), a.partition.as_str()),
        (vec!["t2".to_string()], "p2")
    );
    assert_eq!(a.queue, "frd.one");

    let r = get_framed(&b, "/api/v1/pop?namespace=frd&batch=5").await;
    let a = r.answer();
    assert_eq!(txns(&a), ["t1"]);
    assert_eq!(a.queue, "", "a discovery answer names no queue at the top");
}

#[tokio::test]
async fn one_pop_claims_several_partitions() {
    let b = common::broker().await;
    for p in 0..3 {
        let items: Vec<(&str, Value)> = vec![("x", json!(p)), ("y", json!(p * 10))];
        push(&b, "fr.multi", &format!("p{p}"), &items).await;
    }
    let (_, json_answer) = b
        .get("/api/v1/pop/queue/fr.multi?batch=10&partitions=3&consumerGroup=json")
        .await;
    let r = get_framed(
        &b,
        "/api/v1/pop/queue/fr.multi?batch=10&partitions=3&consumerGroup=framed",
    )
    .await;
    let a = r.answer();
    assert_eq!(a.partitions_claimed, 3);
    assert_eq!(a.messages.len(), 6);
    // Per partition: its own partitionId and push order.
    let mut by_partition: Vec<(String, String, Vec<i64>)> = Vec::new();
    for m in &a.messages {
        match by_partition.last_mut() {
            Some((name, _, data)) if *name == m.partition => {
                data.push(m.data.as_i64().unwrap_or(-1))
            }
            _ => by_partition.push((
                m.partition.clone(),
                m.partition_id.clone(),
                vec![m.data.as_i64().unwrap_or(-1)],
            )),
        }
    }
    let db = b.sql().await;
    by_partition.sort();
    for (k, (name, pid, data)) in by_partition.iter().enumerate() {
        assert_eq!(name, &format!("p{k}"));
        let want = common::partition_id(&db, "fr.multi", name).await;
        assert_eq!(pid, &want.to_string());
        assert_eq!(data, &vec![k as i64, k as i64 * 10]);
    }
    // The same messages as the JSON pop of another group.
    let in_partition_order = |answer: &Value| {
        let mut keyed: Vec<Value> =
            comparable(answer["messages"].as_array().cloned().unwrap_or_default())
                .into_iter()
                .map(|m| json!([m["partition"], m["offset"], m]))
                .collect();
        keyed.sort_by_key(|v| v.to_string());
        keyed
    };
    assert_eq!(
        in_partition_order(&a.to_json()),
        in_partition_order(&json_answer)
    );
}

#[tokio::test]
async fn a_group_pushed_pre_compressed_reaches_the_consumer_as_the_producer_compressed_it() {
    let b = common::broker().await;
    let text: String = (0..300).map(|i| format!("{i},")).collect();
    let payload = format!("{{\"t\":\"{text}\"}}");
    let body = encode_push_precompressed(
        &[Batch {
            queue: "fr.e2e",
            partition: "p",
            items: vec![
                BatchItem {
                    transaction_id: Some("k1"),
                    payload: payload.as_bytes(),
                },
                BatchItem {
                    transaction_id: Some("k2"),
                    payload: b"2",
                },
            ],
        }],
        false,
    )
    .expect("encodes");
    let z = z_of(&push_groups(&body)[0]);
    let (status, _) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED);
    let r = get_framed(&b, "/api/v1/pop/queue/fr.e2e?batch=1").await;
    assert!(
        r.ships(&z),
        "the producer's zstd frame reaches the consumer unchanged"
    );
    let a = r.answer();
    assert_eq!(
        txns(&a),
        ["k1"],
        "batch=1: the client trims the second frame"
    );
    assert_eq!(a.messages[0].data["t"], json!(text));
}

#[tokio::test]
async fn framed_answers_are_smaller_than_json_and_their_costs_are_printed() {
    let b = common::broker().await;
    let payloads: Vec<String> = (0..2000)
        .map(|i| json!({"order": i, "customer": format!("c-{}", i % 37), "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]}).to_string())
        .collect();
    for chunk in payloads.chunks(500) {
        let items = chunk
            .iter()
            .map(|p| BatchItem {
                transaction_id: None,
                payload: p.as_bytes(),
            })
            .collect();
        let body = encode_push_precompressed(
            &[Batch {
                queue: "fr.size",
                partition: "p",
                items,
            }],
            true,
        )
        .expect("encodes");
        let (status, _) = post_bin(&b, "/api/v1/push", body).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    // Each group claims everything once; alternate the order so neither form always pays the
    // first claim's warm-up.
    let (mut json_ms, mut framed_ms, mut json_bytes, mut framed_bytes) = (0.0, 0.0, 0, 0);
    for (k, json_first) in [true, false].into_iter().enumerate() {
        for json_form in [json_first, !json_first] {
            let path =
                format!("/api/v1/pop/queue/fr.size?batch=2000&consumerGroup=g{k}{json_form}");
            let started = std::time::Instant::now();
            if json_form {
                let r = b.http.get(b.at(&path)).send().await.expect("GET");
                json_bytes = r.bytes().await.expect("body").len();
                json_ms += started.elapsed().as_secs_f64() * 500.0;
            } else {
                let framed = get_framed(&b, &path).await;
                framed_ms += started.elapsed().as_secs_f64() * 500.0;
                assert_eq!(framed.answer().messages.len(), 2000);
                framed_bytes = framed.raw.len();
            }
        }
    }
    println!(
        "2000-message pop (mean of 2): JSON {json_bytes} bytes in {json_ms:.1} ms, \
         QPF1 {framed_bytes} bytes in {framed_ms:.1} ms"
    );
    assert!(
        framed_bytes < json_bytes,
        "the framed answer ships compressed blobs"
    );
}
