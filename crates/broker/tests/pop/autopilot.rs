//! The pop autopilot (docs/engine.md §5.7, docs/wire.md §7.4): a wildcard pop that sends
//! `autopilot=true` and leaves `partitions`/`batch` unset takes many shallow partitions in one
//! answer and echoes the sizes it used; a pop without the flag, with `autopilot=false`, with
//! its knobs set, on a broker with `QUEEN_POP_AUTOPILOT=false` or without the hot-list keeps
//! the defaults (one partition) — the last two with, respectively, no echo and the defaults
//! echoed; and concurrent autopilot consumers get every message once, in each partition's
//! order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_proto::pop_framed::decode;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, TestBroker};
use crate::support::{self, Handle, Reply};

/// Pushes `depth` messages to each of `partitions` partitions `p0…` of `queue`, in one
/// request per 100 partitions; transactionIds `p{i}-{offset}`.
async fn push_shallow(b: &TestBroker, queue: &str, partitions: usize, depth: usize) {
    for chunk in (0..partitions).collect::<Vec<_>>().chunks(100) {
        let items: Vec<Value> = chunk
            .iter()
            .flat_map(|p| {
                (0..depth).map(move |m| {
                    json!({ "queue": queue, "partition": format!("p{p}"),
                            "transactionId": format!("p{p}-{m}"), "payload": m })
                })
            })
            .collect();
        let (status, body) = b.post("/api/v1/push", &json!({ "items": items })).await;
        assert_eq!(status, StatusCode::CREATED, "push: {body}");
    }
}

/// Distinct partitions an answer delivered from.
fn partitions_of(r: &Reply) -> BTreeSet<String> {
    r.messages()
        .iter()
        .map(|m| m["partition"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn one_autopilot_pop_drains_many_shallow_partitions_and_echoes_its_sizes() {
    let b = common::broker().await;
    push_shallow(&b, "wide", 500, 2).await;
    let mut seen = BTreeSet::new();
    let mut pops = 0;
    loop {
        let r = support::pop(&b, "wide", "autopilot=true&wait=false").await;
        if r.status == StatusCode::NO_CONTENT {
            break;
        }
        r.assert_delivered();
        pops += 1;
        let echo = &r.body["autopilot"];
        let claimed = r.body["partitionsClaimed"].as_i64().expect("claimed");
        assert!(
            echo["partitions"].as_i64() >= Some(claimed) && echo["waitMs"] == 0,
            "echo {echo} vs {claimed} partitions claimed"
        );
        assert!(
            echo["batch"].as_i64() >= Some(r.messages().len() as i64),
            "{echo}"
        );
        if pops == 1 {
            assert!(
                claimed >= 100,
                "one consumer, 500 ready partitions: a wide pop, got {claimed} ({echo})"
            );
            assert_eq!(partitions_of(&r).len() as i64, claimed);
        }
        for t in r.txns() {
            assert!(seen.insert(t.clone()), "{t} delivered twice");
        }
        support::ack_all(&b, "__QUEUE_MODE__", &r).await;
    }
    assert_eq!(seen.len(), 1000, "every message once");
    assert!(pops <= 10, "1000 messages in {pops} pops");
}

#[tokio::test]
async fn framed_autopilot_answers_carry_the_echo_in_their_header() {
    let b = common::broker().await;
    push_shallow(&b, "wide-framed", 50, 2).await;
    let r = b
        .http
        .get(b.at("/api/v1/pop/queue/wide-framed?autopilot=true&frames=true"))
        .send()
        .await
        .expect("pop");
    assert_eq!(r.status(), StatusCode::OK);
    let answer = decode(&r.bytes().await.expect("body")).expect("QPF1");
    let echo = &answer.extra["autopilot"];
    assert!(answer.partitions_claimed > 1, "{answer:?}");
    assert!(echo["partitions"].as_u64() >= Some(u64::from(answer.partitions_claimed)));
    assert!(echo["batch"].as_u64() >= Some(answer.messages.len() as u64));
}

#[tokio::test]
async fn without_autopilot_sizing_a_pop_claims_one_partition() {
    let b = common::broker().await;
    push_shallow(&b, "narrow", 20, 2).await;
    for query in [
        "autopilot=false",
        "batch=100",
        "autopilot=true&partitions=1",
    ] {
        let r = support::pop(&b, "narrow", query).await;
        r.assert_delivered();
        assert_eq!(r.body["partitionsClaimed"], 1, "{query}: {}", r.body);
        assert_eq!(r.messages().len(), 2, "{query}");
        assert_eq!(
            r.body.get("autopilot").is_some(),
            query.contains("autopilot=true"),
            "{query}: the echo rides only on autopilot=true"
        );
    }
    // partitions set, batch left to the broker: all 6 messages of 3 partitions at once.
    let r = support::pop(&b, "narrow", "autopilot=true&partitions=3").await;
    assert_eq!(
        (r.body["partitionsClaimed"].as_i64(), r.messages().len()),
        (Some(3), 6)
    );
    assert_eq!(r.body["autopilot"]["partitions"], 3, "{}", r.body);

    // The switch: the flag is ignored and nothing echoed.
    let off = b.sibling(|cfg| cfg.pop_autopilot = false).await;
    let r = support::pop(&off, "narrow", "autopilot=true").await;
    assert_eq!(r.body["partitionsClaimed"], 1, "{}", r.body);
    assert!(r.body.get("autopilot").is_none(), "{}", r.body);

    // No ring to size from: the defaults, echoed.
    let scan = b.sibling(|cfg| cfg.hotlist = false).await;
    let r = support::pop(&scan, "narrow", "autopilot=true").await;
    assert_eq!(r.body["partitionsClaimed"], 1, "{}", r.body);
    assert_eq!(
        r.body["autopilot"],
        json!({"partitions": 1, "batch": 200, "waitMs": 0})
    );
}

const RACE_PARTITIONS: usize = 300;
const RACE_DEPTH: usize = 3;
const RACE_CONSUMERS: usize = 6;

/// One consumer: autopilot pops and batch acks until every message was received (or the
/// deadline); each answer as (receipt sequence, partition → offsets in answer order).
async fn consume(
    h: Handle,
    seq: Arc<AtomicU64>,
    received: Arc<AtomicUsize>,
    widest: Arc<AtomicUsize>,
) -> Vec<(u64, BTreeMap<String, Vec<i64>>)> {
    let total = RACE_PARTITIONS * RACE_DEPTH;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    while received.load(Ordering::SeqCst) < total && Instant::now() < deadline {
        let r = h.get("/api/v1/pop/queue/race-wide?autopilot=true").await;
        if r.status == StatusCode::NO_CONTENT {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        r.assert_delivered();
        let at = seq.fetch_add(1, Ordering::SeqCst);
        let mut offsets: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for m in r.messages() {
            let p = m["partition"].as_str().expect("partition").to_string();
            offsets
                .entry(p)
                .or_default()
                .push(m["offset"].as_i64().expect("offset"));
        }
        widest.fetch_max(offsets.len(), Ordering::SeqCst);
        received.fetch_add(r.messages().len(), Ordering::SeqCst);
        h.ack_all("__QUEUE_MODE__", &r.body).await;
        out.push((at, offsets));
    }
    out
}

#[tokio::test]
async fn concurrent_autopilot_consumers_get_each_partition_once_and_in_order() {
    let b = common::broker().await;
    push_shallow(&b, "race-wide", RACE_PARTITIONS, RACE_DEPTH).await;
    let (seq, received, widest) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let tasks: Vec<_> = (0..RACE_CONSUMERS)
        .map(|_| {
            tokio::spawn(consume(
                Handle::of(&b),
                seq.clone(),
                received.clone(),
                widest.clone(),
            ))
        })
        .collect();
    let mut batches = Vec::new();
    for t in tasks {
        batches.extend(t.await.expect("consumer"));
    }
    batches.sort_by_key(|(at, _)| *at);
    let mut per_partition: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (_, offsets) in batches {
        for (p, o) in offsets {
            per_partition.entry(p).or_default().extend(o);
        }
    }
    assert_eq!(per_partition.len(), RACE_PARTITIONS);
    let expected: Vec<i64> = (0..RACE_DEPTH as i64).collect();
    for (p, offsets) in &per_partition {
        assert_eq!(
            offsets, &expected,
            "{p}: every offset once, in order, across consumers"
        );
    }
    assert!(
        widest.load(Ordering::SeqCst) > 10,
        "autopilot pops took many partitions at once (widest {})",
        widest.load(Ordering::SeqCst)
    );
}
