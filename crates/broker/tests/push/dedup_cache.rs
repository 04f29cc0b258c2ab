//! The broker's dedup cache (docs/engine.md §4.2) against real PostgreSQL: with the cache on,
//! duplicates are still caught — across requests, across two brokers racing on one partition,
//! after a window raise or a queue re-creation done by another broker, under a budget that
//! forces evictions, and when transactions and binary pushes write the same partition — and
//! their answers carry the original ids; a lone push by a partition id gone stale still lands;
//! `/metrics` shows the tail-only probe (a vouched push) is taken. The last test prints the
//! cost of a push beside a partition holding 100 k in-window hashes, cache off vs on.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use queen_broker::engine::push::segment::build_segment;
use queen_proto::push_bin::encode_push_precompressed;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::common::TestBroker;
use crate::vouched::frames_of;
use crate::wire::{batch, item, post_bin};

/// Pushes `txns` to (queue, partition) in one request; returns the per-item answers.
pub(crate) async fn push(
    b: &TestBroker,
    queue: &str,
    partition: &str,
    txns: &[String],
) -> Vec<Value> {
    let items: Vec<Value> = txns
        .iter()
        .map(|t| json!({ "queue": queue, "partition": partition, "transactionId": t, "payload": { "t": t } }))
        .collect();
    let (status, body) = b.post("/api/v1/push", &json!({ "items": items })).await;
    assert_eq!(status, StatusCode::CREATED, "push: {body}");
    body.as_array().cloned().expect("push answer is an array")
}

/// Pushes one message; returns its answer.
pub(crate) async fn push_one(b: &TestBroker, queue: &str, partition: &str, txn: &str) -> Value {
    push(b, queue, partition, &[txn.to_string()])
        .await
        .remove(0)
}

/// The `dedupCache` counters of `/metrics`.
async fn cache_metrics(b: &TestBroker) -> Value {
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    body["dedupCache"].clone()
}

fn counter(m: &Value, name: &str) -> u64 {
    m[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {m}"))
}

/// Asserts every answer is `duplicate` with the id `originals` holds for its transactionId.
pub(crate) fn assert_duplicates_of(answers: &[Value], originals: &HashMap<String, String>) {
    for a in answers {
        let txn = a["transaction_id"].as_str().unwrap_or_default();
        assert_eq!(a["status"], "duplicate", "{txn} is a duplicate: {a}");
        assert_eq!(
            a["message_id"].as_str(),
            originals.get(txn).map(String::as_str),
            "{txn}: the duplicate answer carries the original's id"
        );
    }
}

/// transactionId -> message id of queued answers.
pub(crate) fn ids_of(answers: &[Value]) -> HashMap<String, String> {
    answers
        .iter()
        .inspect(|a| assert_eq!(a["status"], "queued", "{a}"))
        .map(|a| {
            let field = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (field("transaction_id"), field("message_id"))
        })
        .collect()
}

/// Stored hashes of the database: (all, distinct).
async fn stored_hashes(db: &tokio_postgres::Client) -> (i64, i64) {
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT h.h) FROM queen.log_txns t
             CROSS JOIN LATERAL queen.log_unnest_hashes(t.hashes) h",
            &[],
        )
        .await
        .expect("count hashes");
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn duplicates_across_requests_are_caught_and_fresh_pushes_take_the_tail_probe() {
    let b = common::broker().await;
    let db = b.sql().await;
    let first = push(&b, "dc.one", "p", &common::txns("a", 50)).await;
    let originals = ids_of(&first);

    let before = cache_metrics(&b).await;
    for i in 0..20 {
        let fresh = push_one(&b, "dc.one", "p", &format!("fresh-{i}")).await;
        assert_eq!(fresh["status"], "queued", "{fresh}");
    }
    let after = cache_metrics(&b).await;
    assert_eq!(
        counter(&after, "vouchedPushes") - counter(&before, "vouchedPushes"),
        20,
        "every fresh push vouched for its hash: {after}"
    );

    let dup = push_one(&b, "dc.one", "p", "a-3").await;
    assert_duplicates_of(&[dup], &originals);
    let mixed = push(
        &b,
        "dc.one",
        "p",
        &["new-1".into(), "a-7".into(), "a-49".into()],
    )
    .await;
    assert_eq!(mixed[0]["status"], "queued", "{mixed:?}");
    assert_duplicates_of(&mixed[1..], &originals);
    assert!(counter(&cache_metrics(&b).await, "hits") >= 2);
    assert_eq!(stored_hashes(&db).await, (71, 71));
}

#[tokio::test]
async fn two_brokers_racing_on_one_partition_store_each_transaction_once() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    let db = a.sql().await;
    const ROUNDS: usize = 4;
    const SHARED: usize = 30;
    let mut ids: HashMap<String, HashSet<String>> = HashMap::new();
    let mut queued: HashMap<String, usize> = HashMap::new();
    for round in 0..ROUNDS {
        let mut tasks = Vec::new();
        for pusher in 0..8usize {
            let target = if pusher % 2 == 0 { &a } else { &b };
            let (url, http) = (target.url.clone(), target.http.clone());
            // The shared ids in a per-pusher rotation plus ids of its own, five per request.
            let mut txns: Vec<String> = (0..SHARED)
                .map(|i| format!("r{round}-s{}", (i + pusher * 7) % SHARED))
                .collect();
            txns.extend((0..10).map(|i| format!("r{round}-p{pusher}-{i}")));
            tasks.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for chunk in txns.chunks(5) {
                    let items: Vec<Value> = chunk
                        .iter()
                        .map(|t| json!({ "queue": "dc.race", "partition": "hot", "transactionId": t, "payload": 1 }))
                        .collect();
                    let r = http
                        .post(format!("{url}/api/v1/push"))
                        .json(&json!({ "items": items }))
                        .send()
                        .await
                        .expect("push");
                    assert_eq!(r.status(), StatusCode::CREATED);
                    let body: Vec<Value> = r.json().await.expect("json answer");
                    answers.extend(body);
                }
                answers
            }));
        }
        for task in tasks {
            for a in task.await.expect("pusher") {
                let txn = a["transaction_id"].as_str().unwrap_or_default().to_string();
                let status = a["status"].as_str().unwrap_or_default();
                assert!(["queued", "duplicate"].contains(&status), "{a}");
                if status == "queued" {
                    *queued.entry(txn.clone()).or_default() += 1;
                }
                let id = a["message_id"].as_str().unwrap_or_default().to_string();
                ids.entry(txn).or_default().insert(id);
            }
        }
    }
    let distinct = ROUNDS * (SHARED + 8 * 10);
    assert_eq!(ids.len(), distinct);
    for (txn, seen) in &ids {
        assert_eq!(
            seen.len(),
            1,
            "{txn}: every answer names one message: {seen:?}"
        );
        assert_eq!(queued.get(txn), Some(&1), "{txn} queued exactly once");
    }
    assert_eq!(stored_hashes(&db).await, (distinct as i64, distinct as i64));

    // Strict alternation: every push of one broker follows one of the other. A broker's
    // entry learns it is behind from its next commit's base offset and catches up at the push
    // after that; it vouches all along (a stale verified offset only lengthens the tail).
    let (ma, mb) = (cache_metrics(&a).await, cache_metrics(&b).await);
    let mut originals = HashMap::new();
    for i in 0..10 {
        for (who, broker) in [("a", &a), ("b", &b)] {
            let txn = format!("alt-{who}-{i}");
            originals.extend(ids_of(&[push_one(broker, "dc.race", "hot", &txn).await]));
        }
    }
    for (before, broker) in [(ma, &a), (mb, &b)] {
        let after = cache_metrics(broker).await;
        assert!(
            counter(&after, "catchUps") >= counter(&before, "catchUps") + 4,
            "the other broker's writes are caught up: {after}"
        );
        assert_eq!(
            counter(&after, "vouchedPushes"),
            counter(&before, "vouchedPushes") + 10,
            "every fresh push vouches: {after}"
        );
    }
    let a_of_b: Vec<String> = (0..10).map(|i| format!("alt-b-{i}")).collect();
    let b_of_a: Vec<String> = (0..10).map(|i| format!("alt-a-{i}")).collect();
    assert_duplicates_of(&push(&a, "dc.race", "hot", &a_of_b).await, &originals);
    assert_duplicates_of(&push(&b, "dc.race", "hot", &b_of_a).await, &originals);
}

#[tokio::test]
async fn a_window_raised_by_another_broker_counts_at_once() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    common::configure(&b, "dc.win", json!({ "dedupWindowSeconds": 1 })).await;
    let old = push_one(&b, "dc.win", "p", "old").await;
    // Past window + the 5 s hydration slack: `a` hydrates without "old".
    tokio::time::sleep(Duration::from_millis(6500)).await;
    push_one(&a, "dc.win", "p", "fresh-0").await;
    push_one(&a, "dc.win", "p", "fresh-1").await;
    let vouched = counter(&cache_metrics(&a).await, "vouchedPushes");
    assert!(vouched >= 1, "a's entry vouches under the 1 s window");

    common::configure(&b, "dc.win", json!({ "dedupWindowSeconds": 3600 })).await;
    let again = push_one(&a, "dc.win", "p", "old").await;
    assert_duplicates_of(&[again], &ids_of(&[old]));
}

#[tokio::test]
async fn a_queue_recreated_by_another_broker_is_probed_in_full() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    push(&a, "dc.re", "p", &common::txns("x", 5)).await; // a's entry: offsets 0..4
    let (status, body) = b.delete("/api/v1/resources/queues/dc.re").await;
    assert!(status.is_success(), "delete: {body}");
    // The new partition outgrows a's stale verified offset (4); "y-0" sits at offset 0,
    // below it, and a's cache has never seen it.
    let reborn = push(&b, "dc.re", "p", &common::txns("y", 8)).await;
    let again = push_one(&a, "dc.re", "p", "y-0").await;
    assert_duplicates_of(&[again], &ids_of(&reborn));
}

/// A lone segment goes by the partition id the cache holds (docs/engine.md §4.4); that id went
/// stale when another broker re-created the queue, and the push still lands, once, in the new
/// partition.
#[tokio::test]
async fn a_lone_push_by_a_stale_partition_id_lands_in_the_new_partition() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    for n in 0..3 {
        push_one(&a, "dc.gone", "p", &format!("old-{n}")).await;
    }
    let (status, body) = b.delete("/api/v1/resources/queues/dc.gone").await;
    assert!(status.is_success(), "delete: {body}");
    let fresh = push_one(&a, "dc.gone", "p", "fresh").await;
    assert_eq!(fresh["status"], "queued", "{fresh}");
    let popped = common::pop(&b, "dc.gone", Some("p"), None, 10, "")
        .await
        .expect("the new partition holds the push");
    assert_eq!(popped.txns(), vec!["fresh".to_string()]);
    let again = push_one(&a, "dc.gone", "p", "fresh").await;
    assert_duplicates_of(&[again], &ids_of(&[fresh]));
}

/// `log_push_one_v1` addressed by id alone answers `gone`, writing nothing, when the id names
/// another partition or none; the right id appends at the next offset.
#[tokio::test]
async fn a_push_by_an_id_that_names_another_partition_is_gone() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_one(&b, "dc.id", "p1", "a").await;
    push_one(&b, "dc.id", "p2", "b").await;
    let pid = |name: &'static str| {
        let db = &db;
        async move {
            db.query_one(
                "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                 WHERE q.name = 'dc.id' AND p.name = $1",
                &[&name],
            )
            .await
            .expect("partition id")
            .get::<_, i64>(0)
        }
    };
    let (p1, p2) = (pid("p1").await, pid("p2").await);
    let hash = queen_proto::hash::txn_hash("c").to_vec();
    let push_by_id = |id: i64| {
        let (db, hash) = (&db, &hash);
        async move {
            db.query_one(
                "SELECT queen.log_push_one_v1('dc.id', 'p2', 1, $1, -1, '\\x00'::bytea, $2, NULL)",
                &[hash, &id],
            )
            .await
            .expect("push by id")
            .get::<_, Value>(0)
        }
    };
    for wrong in [p1, p2 + 1_000_000] {
        let answer = push_by_id(wrong).await;
        assert_eq!(answer["status"], "gone", "{answer}");
    }
    let lasts: Vec<i64> = db
        .query(
            "SELECT last_offset FROM queen.log_partitions WHERE id = ANY($1) ORDER BY id",
            &[&vec![p1, p2]],
        )
        .await
        .expect("offsets")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(lasts, vec![0, 0], "a gone push writes nothing");
    let answer = push_by_id(p2).await;
    assert_eq!(answer["status"], "queued", "{answer}");
    assert_eq!(answer["baseOffset"], 1);
}

#[tokio::test]
async fn evictions_under_a_tiny_budget_keep_duplicates_caught() {
    let b = common::broker_with(|cfg| cfg.dedup_cache_mb = 1).await;
    // 2 × 72 k hashes (8 bytes each in the cache) do not fit 1 MiB together.
    let mut originals = HashMap::new();
    for partition in ["e1", "e2"] {
        for chunk in 0..8 {
            let txns = common::txns(&format!("{partition}-{chunk}"), 9_000);
            let answers = push(&b, "dc.evict", partition, &txns).await;
            if chunk == 0 {
                originals.extend(ids_of(&answers[..3]));
            }
        }
    }
    let m = cache_metrics(&b).await;
    assert!(counter(&m, "evictions") >= 1, "{m}");
    assert!(counter(&m, "bytes") <= 1 << 20, "{m}");
    let dups = push(&b, "dc.evict", "e1", &["e1-0-0".into(), "e1-0-2".into()]).await;
    assert_duplicates_of(&dups, &originals);
    let dup = push_one(&b, "dc.evict", "e2", "e2-0-1").await;
    assert_duplicates_of(&[dup], &originals);
    let m = cache_metrics(&b).await;
    assert!(counter(&m, "evictions") >= 2, "{m}");
}

#[tokio::test]
async fn transactions_and_binary_pushes_report_their_commits() {
    let b = common::broker().await;
    let fused = ids_of(&push(&b, "dc.mix", "p", &common::txns("j", 3)).await);

    let (status, txn) = b
        .post(
            "/api/v1/transaction",
            &json!({ "operations": [{ "type": "push", "items": [
                { "queue": "dc.mix", "partition": "p", "transactionId": "t-1", "payload": 1 }
            ]}]}),
        )
        .await;
    assert_eq!(
        (status, txn["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{txn}"
    );
    let sent = [batch("dc.mix", "p", vec![item(Some("bin-1"), b"2")])];
    let body = encode_push_precompressed(&sent, false).expect("encodes");
    let (status, bin) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED, "{bin}");
    assert_eq!(bin[0]["status"], "queued", "{bin}");

    let before = cache_metrics(&b).await;
    let fresh = push_one(&b, "dc.mix", "p", "j-fresh").await;
    assert_eq!(fresh["status"], "queued");
    let after = cache_metrics(&b).await;
    assert_eq!(
        counter(&after, "invalidations"),
        0,
        "every commit extended the entry: {after}"
    );
    assert_eq!(counter(&after, "catchUps"), counter(&before, "catchUps"));
    assert_eq!(
        counter(&after, "vouchedPushes"),
        counter(&before, "vouchedPushes") + 1
    );

    let mut originals = fused;
    originals.insert(
        "t-1".into(),
        txn["results"][0]["messageId"]
            .as_str()
            .unwrap_or_default()
            .into(),
    );
    originals.extend(ids_of(&bin.as_array().cloned().unwrap_or_default()));
    let dups = push(
        &b,
        "dc.mix",
        "p",
        &["t-1".into(), "bin-1".into(), "j-2".into()],
    )
    .await;
    assert_duplicates_of(&dups, &originals);
}

/// p50 and p99 of `samples`, in ms.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e3
    };
    (at(0.5), at(0.99))
}

/// Times `n` sequential pushes of `per_push` fresh messages each; the first one is also
/// returned alone (with the cache on it includes the hydration).
async fn time_pushes(b: &TestBroker, tag: &str, n: usize, per_push: usize) -> (f64, (f64, f64)) {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let txns: Vec<String> = (0..per_push).map(|k| format!("{tag}-{i}-{k}")).collect();
        let started = Instant::now();
        let answers = push(b, "dc.cost", "hot", &txns).await;
        samples.push(started.elapsed());
        assert!(
            answers.iter().all(|a| a["status"] == "queued"),
            "{answers:?}"
        );
    }
    let first = samples[0].as_secs_f64() * 1e3;
    (first, percentiles(samples.split_off(1)))
}

/// Writes `segments` segments of `per` messages (`fill-<s>-<k>`, payload `1`) to
/// dc.cost/hot in one `log_push_multi_v1` call — the sidecar a partition gets from steady
/// traffic flushed a few messages at a time — and returns the stored message ids by
/// transactionId. Every id is new, so each segment truthfully vouches for the offsets
/// before it and the fill itself skips the probe.
async fn fill(db: &tokio_postgres::Client, segments: usize, per: usize) -> HashMap<String, String> {
    let mut ids = HashMap::new();
    let (mut counts, mut hashes, mut verified, mut blobs) = (vec![], vec![], vec![], vec![]);
    for s in 0..segments {
        let txns: Vec<String> = (0..per).map(|k| format!("fill-{s}-{k}")).collect();
        let minted: Vec<uuid::Uuid> = txns.iter().map(|_| queen_proto::new_v7()).collect();
        let seg = build_segment(&frames_of(&txns, &minted), 3).expect("segment");
        counts.push(seg.msg_count);
        hashes.push(seg.hashes);
        verified.push((s * per) as i64 - 1);
        blobs.push(seg.blob.to_vec());
        ids.extend(txns.into_iter().zip(minted.iter().map(|id| id.to_string())));
    }
    let queues = vec!["dc.cost"; segments];
    let partitions = vec!["hot"; segments];
    db.query_one(
        "SELECT queen.log_push_multi_v1($1, $2, $3, $4, $5, $6)",
        &[&queues, &partitions, &counts, &hashes, &verified, &blobs],
    )
    .await
    .expect("fill");
    ids
}

#[tokio::test]
async fn push_cost_beside_100k_in_window_hashes_cache_off_vs_on() {
    let off = common::broker_with(|cfg| cfg.dedup_cache = false).await;
    let on = off.sibling(|_| {}).await;
    let db = off.sql().await;
    const SEGMENTS: usize = 10_000;
    const PER: usize = 10;
    let stored = fill(&db, SEGMENTS, PER).await;
    assert_eq!(common::count(&db, "queen.log_txns").await, SEGMENTS as i64);

    const N: usize = 200;
    let (_, (off50, off99)) = time_pushes(&off, "off", N, 1).await;
    let (first, (on50, on99)) = time_pushes(&on, "on", N, 1).await;
    println!(
        "{N} sequential 1-message pushes beside {} in-window hashes in {SEGMENTS} sidecar rows: \
         cache off p50 {off50:.2} ms p99 {off99:.2} ms; cache on p50 {on50:.2} ms p99 \
         {on99:.2} ms (its first push, with the hydration: {first:.2} ms)",
        SEGMENTS * PER
    );
    const M: usize = 50;
    let (_, (off50, off99)) = time_pushes(&off, "off32", M, 32).await;
    let (_, (on50, on99)) = time_pushes(&on, "on32", M, 32).await;
    println!(
        "{M} sequential 32-message pushes (the probe explodes rows above 16 incoming hashes): \
         cache off p50 {off50:.2} ms p99 {off99:.2} ms; cache on p50 {on50:.2} ms p99 \
         {on99:.2} ms"
    );
    let m = cache_metrics(&on).await;
    println!("dedupCache metrics of the cache-on broker: {m}");
    assert_eq!(counter(&m, "vouchedPushes"), (N + M) as u64, "{m}");
    assert_eq!(counter(&cache_metrics(&off).await, "vouchedPushes"), 0);

    let dups = push(
        &on,
        "dc.cost",
        "hot",
        &["fill-17-3".into(), "fill-9999-9".into()],
    )
    .await;
    assert_duplicates_of(&dups, &stored);
}
