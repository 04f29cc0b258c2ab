//! Binary push under load: every push form racing on one partition (each transaction stored
//! once, offsets dense, every answer naming the stored message), and the cost of the three
//! body forms printed side by side.

use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::wire::{self, batch, item, segments};

#[tokio::test]
async fn the_three_body_forms_cost_is_printed() {
    let b = common::broker().await;
    let payloads: Vec<String> = (0..500)
        .map(|i| {
            json!({"order": i, "customer": format!("c-{}", i % 37), "note": "x".repeat(64)})
                .to_string()
        })
        .collect();
    let rounds = 10;
    let mut report = Vec::new();
    for form in ["json", "QPB1 plain", "QPB1 pre-compressed"] {
        // Bodies are built before the clock starts: only the broker's work is timed.
        let queue = format!("bin.cost.{}", form.len());
        let bodies: Vec<(&str, Vec<u8>)> = (0..rounds)
            .map(|round| {
                let txns: Vec<String> = (0..payloads.len()).map(|i| format!("{round}-{i}")).collect();
                let items = payloads
                    .iter()
                    .zip(&txns)
                    .map(|(p, t)| item(Some(t), p.as_bytes()))
                    .collect();
                let batches = [batch(&queue, "p", items)];
                match form {
                    "json" => {
                        let items: Vec<String> = payloads
                            .iter()
                            .zip(&txns)
                            .map(|(p, t)| format!(
                                r#"{{"queue":"{queue}","partition":"p","transactionId":"{t}","payload":{p}}}"#
                            ))
                            .collect();
                        let body = format!(r#"{{"items":[{}]}}"#, items.join(","));
                        ("application/json", body.into_bytes())
                    }
                    "QPB1 plain" => (
                        wire::PUSH_CONTENT_TYPE,
                        encode_push_plain(&batches, false, true).expect("encodes"),
                    ),
                    _ => (
                        wire::PUSH_CONTENT_TYPE,
                        encode_push_precompressed(&batches, true).expect("encodes"),
                    ),
                }
            })
            .collect();
        let bytes: usize = bodies.iter().map(|(_, body)| body.len()).sum();
        let started = std::time::Instant::now();
        for (content_type, body) in bodies {
            let (status, answer) = b.post_raw("/api/v1/push", content_type, body).await;
            assert_eq!(status, StatusCode::CREATED, "{form}: {answer}");
        }
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let msgs = rounds * payloads.len();
        report.push(format!(
            "{form}: {msgs} messages in {ms:.0} ms ({:.0} msg/s), {bytes} request bytes",
            msgs as f64 / (ms / 1000.0)
        ));
    }
    println!(
        "sequential pushes of 500 messages (debug build):\n  {}",
        report.join("\n  ")
    );
}

#[tokio::test]
async fn concurrent_pushes_of_every_form_store_each_transaction_once() {
    let b = common::broker().await;
    let db = b.sql().await;
    let pool = 200;
    let requests = 60;
    let mut tasks = Vec::new();
    for r in 0..requests {
        let (url, http) = (b.url.clone(), b.http.clone());
        tasks.push(tokio::spawn(async move {
            // 12 distinct transactionIds per request, overlapping across requests.
            let txns: Vec<String> = (0..12).map(|k| format!("t{}", (r * 11 + k * 3) % pool)).collect();
            let payloads: Vec<String> = txns.iter().map(|_| format!("{r}")).collect();
            let items = txns
                .iter()
                .zip(&payloads)
                .map(|(t, p)| item(Some(t), p.as_bytes()))
                .collect();
            let batches = [batch("bin.race", "p", items)];
            let (content_type, body) = match r % 3 {
                0 => {
                    let items: Vec<Value> = txns
                        .iter()
                        .map(|t| json!({"queue": "bin.race", "partition": "p", "transactionId": t, "payload": r}))
                        .collect();
                    ("application/json", json!({ "items": items }).to_string().into_bytes())
                }
                1 => (wire::PUSH_CONTENT_TYPE, encode_push_plain(&batches, false, false).expect("encodes")),
                _ => (wire::PUSH_CONTENT_TYPE, encode_push_precompressed(&batches, false).expect("encodes")),
            };
            let answer: Value = http
                .post(format!("{url}/api/v1/push"))
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .expect("POST")
                .json()
                .await
                .expect("JSON answer");
            (txns, answer)
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("task"));
    }

    // Stored: each transactionId once, offsets dense from 0.
    let segs = segments(&db, "bin.race", "p").await;
    let mut next = 0;
    let mut stored: std::collections::HashMap<String, String> = Default::default();
    for (base, end, blob) in &segs {
        assert_eq!(*base, next, "offsets are dense");
        let raw = queen_proto::segment::decompress(blob, 1 << 30).expect("one zstd frame");
        let frames = queen_proto::frame::decode_all(&raw).expect("frames");
        assert_eq!(frames.len() as i64, end - base + 1);
        for f in &frames {
            let id = f.message_uuid().to_string();
            assert!(
                stored.insert(f.transaction_id.to_string(), id).is_none(),
                "{} stored twice",
                f.transaction_id
            );
        }
        next = end + 1;
    }
    let pushed: std::collections::HashSet<&String> =
        answers.iter().flat_map(|(txns, _)| txns).collect();
    assert_eq!(
        stored.len(),
        pushed.len(),
        "every transactionId stored once"
    );

    // Every answer names the stored message: its own when queued, the original when duplicate.
    let (mut queued, mut duplicate) = (0, 0);
    for (txns, answer) in &answers {
        for (txn, r) in txns.iter().zip(answer.as_array().expect("array")) {
            match r["status"].as_str() {
                Some("queued") => queued += 1,
                Some("duplicate") => duplicate += 1,
                other => panic!("{txn}: {other:?} in {r}"),
            }
            assert_eq!(r["message_id"], stored[txn].as_str(), "{txn}: {r}");
        }
    }
    println!(
        "{requests} racing requests: {queued} queued, {duplicate} duplicate, {} segments",
        segs.len()
    );
    assert_eq!(queued, pushed.len());
}
