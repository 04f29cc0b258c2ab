//! Competing consumers of one group on two brokers of one database: every message delivered
//! to exactly one of them, each acked once; and concurrent producers keep per-partition order.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::common;
use crate::{ack, acks_of, depth};

#[tokio::test]
async fn competing_consumers_on_two_brokers_share_the_work_exactly_once() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    const N: usize = 300;
    let producers: Vec<_> = (0..3)
        .map(|p| {
            let http = a.http.clone();
            let url = if p % 2 == 0 { a.at("/api/v1/ephemeral/push") } else { b.at("/api/v1/ephemeral/push") };
            tokio::spawn(async move {
                for chunk in 0..10 {
                    let messages: Vec<Value> = (0..N / 30)
                        .map(|i| json!({"payload": {"p": p, "n": chunk * (N / 30) + i}}))
                        .collect();
                    let r = http
                        .post(&url)
                        .json(&json!({"queue": "work", "partition": format!("p{p}"), "messages": messages}))
                        .send()
                        .await
                        .expect("push");
                    assert_eq!(r.status().as_u16(), 201);
                }
            })
        })
        .collect();
    for p in producers {
        p.await.expect("producer");
    }

    let brokers = [&a, &b];
    let consumers: Vec<_> = (0..8)
        .map(|c| {
            let url = brokers[c % 2].at("/api/v1/ephemeral/pop?queue=work&group=w&batch=7");
            let ack_url = brokers[c % 2].at("/api/v1/ephemeral/ack");
            let http = a.http.clone();
            tokio::spawn(async move {
                let mut seen: Vec<Value> = Vec::new();
                loop {
                    let body: Value = http
                        .get(&url)
                        .send()
                        .await
                        .expect("pop")
                        .json()
                        .await
                        .expect("json");
                    let messages = body["messages"].as_array().cloned().unwrap_or_default();
                    if messages.is_empty() {
                        return seen;
                    }
                    let acks: Vec<Value> =
                        messages.iter().map(|m| json!({"id": m["id"]})).collect();
                    let answer: Value = http
                        .post(&ack_url)
                        .json(&json!({"queue": "work", "group": "w", "acks": acks}))
                        .send()
                        .await
                        .expect("ack")
                        .json()
                        .await
                        .expect("json");
                    for r in answer["results"].as_array().expect("results") {
                        assert_eq!(r["outcome"], "acked", "{answer}");
                    }
                    seen.extend(messages);
                }
            })
        })
        .collect();
    let mut all: Vec<Value> = Vec::new();
    for c in consumers {
        all.extend(c.await.expect("consumer"));
    }
    let ids: HashSet<String> = all
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(all.len(), N, "every message once");
    assert_eq!(ids.len(), N, "no message twice");
    for m in &all {
        assert_eq!(m["attempts"], 1, "{m}");
    }
    // Per partition, ids (seq) are 1..=100 and payloads in push order.
    for p in 0..3 {
        let mut of_p: Vec<(i64, i64)> = all
            .iter()
            .filter(|m| m["payload"]["p"] == p)
            .map(|m| {
                let seq = m["id"]
                    .as_str()
                    .and_then(|id| id.rsplit(':').next())
                    .and_then(|s| s.parse().ok())
                    .expect("seq");
                (seq, m["payload"]["n"].as_i64().expect("n"))
            })
            .collect();
        of_p.sort_unstable();
        let expected: Vec<(i64, i64)> = (1..=100).map(|s| (s, s - 1)).collect();
        assert_eq!(of_p, expected, "partition p{p}: seq order is push order");
    }
    assert_eq!(depth(&a, "work").await["length"], 0);
    assert_eq!(
        ack(&b, "work", Some("w"), acks_of(&all[..1], None)).await,
        ["unknown"]
    );
}
