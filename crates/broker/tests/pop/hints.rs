//! Long-poll scheduling on the SQL candidate path (docs/spec/life-of-a-pop.md Step 7, docs/engine.md §5.2
//! and §8.1, docs/wire.md §7.6): a woken wildcard pop first claims from the partitions its wake
//! gate was told were pushed (locally or by a peer broker), falls through to the wildcard scan
//! when they hold nothing, never lets a hint create the cursors of an unregistered group, and
//! starts no claim after a park inside the deadline margin.
//!
//! The brokers here run that path (`QUEEN_HOTLIST=false`; the hot-list ring serves wildcard
//! pops by default, see hotlist.rs) and re-check only when woken (the backoff interval is ten
//! minutes), so every delivery of a parked pop is the work of one wake; the `/metrics` `pop`
//! counters tell which path served it.

use std::time::{Duration, Instant};

use queen_broker::config::{Config, PeerWake};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::common::TestBroker;

/// The SQL candidate path, with re-checks so slow that only a wake makes a parked pop look
/// again.
fn wake_only(cfg: &mut Config) {
    cfg.hotlist = false;
    cfg.pop_wait_initial_ms = 600_000;
    cfg.pop_wait_max_ms = 600_000;
}

/// Long enough for a pop's first (empty) attempt to finish and the pop to park.
const SETTLE: Duration = Duration::from_millis(400);

/// The `pop` section of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PopStats {
    hint_claims: u64,
    hint_fallthroughs: u64,
    margin_skips: u64,
}

impl PopStats {
    async fn of(b: &TestBroker) -> PopStats {
        let (status, body) = b.get("/metrics").await;
        assert_eq!(status, StatusCode::OK, "metrics: {body}");
        let n = |k: &str| {
            body["pop"][k]
                .as_u64()
                .unwrap_or_else(|| panic!("/metrics lacks pop.{k}: {body}"))
        };
        PopStats {
            hint_claims: n("hintClaims"),
            hint_fallthroughs: n("hintFallthroughs"),
            margin_skips: n("deadlineMarginSkips"),
        }
    }

    fn since(self, before: PopStats) -> PopStats {
        PopStats {
            hint_claims: self.hint_claims - before.hint_claims,
            hint_fallthroughs: self.hint_fallthroughs - before.hint_fallthroughs,
            margin_skips: self.margin_skips - before.margin_skips,
        }
    }
}

/// Starts a GET in the background; resolves to (status, body, when it answered).
fn spawn_get(b: &TestBroker, path: &str) -> tokio::task::JoinHandle<(StatusCode, Value, Instant)> {
    let (http, url) = (b.http.clone(), b.at(path));
    tokio::spawn(async move {
        let r = http.get(url).send().await.expect("pop");
        let status = r.status();
        let text = r.text().await.expect("pop body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, body, Instant::now())
    })
}

/// A `wait=true` pop that parks for up to 15 s.
fn parked(b: &TestBroker, path: &str) -> tokio::task::JoinHandle<(StatusCode, Value, Instant)> {
    spawn_get(b, &format!("{path}&wait=true&timeout=15000"))
}

/// Keeps `queue`'s wake gate alive (a gate lives only while someone waits on it, and with it
/// the hints pushes leave): a targeted pop parked on a partition nobody pushes to, which
/// takes no hints. Abort it when done.
fn hold_gate(b: &TestBroker, queue: &str) -> tokio::task::JoinHandle<(StatusCode, Value, Instant)> {
    parked(
        b,
        &format!("/api/v1/pop/queue/{queue}/partition/never?batch=1"),
    )
}

/// Pushes one message per `(partition, payload)` in one request.
async fn push_many(b: &TestBroker, queue: &str, messages: &[(String, Value)]) {
    let items: Vec<Value> = messages
        .iter()
        .map(|(p, data)| json!({"queue": queue, "partition": p, "payload": data}))
        .collect();
    let (status, body) = b.post("/api/v1/push", &json!({ "items": items })).await;
    assert_eq!(status, StatusCode::CREATED, "push: {body}");
}

/// The (partition, payload) pairs of a 200 pop answer.
fn delivered(body: &Value) -> Vec<(String, Value)> {
    body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("not a pop answer: {body}"))
        .iter()
        .map(|m| {
            (
                m["partition"].as_str().expect("partition").to_string(),
                m["data"].clone(),
            )
        })
        .collect()
}

/// Cursor rows of `group` on `queue`: (partition, committed, leased).
async fn cursors(b: &TestBroker, queue: &str, group: &str) -> Vec<(String, i64, bool)> {
    let db = b.sql().await;
    db.query(
        "SELECT p.name, c.committed, c.worker_id IS NOT NULL
         FROM queen.log_consumers c
         JOIN queen.log_partitions p ON p.id = c.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = $1 AND c.consumer_group = $2
         ORDER BY p.name",
        &[&queue, &group],
    )
    .await
    .expect("cursor rows")
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Live leases on `queue`, any group.
async fn leases(b: &TestBroker, queue: &str) -> i64 {
    let db = b.sql().await;
    db.query_one(
        "SELECT count(*) FROM queen.log_consumers c
         JOIN queen.log_partitions p ON p.id = c.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = $1 AND c.worker_id IS NOT NULL",
        &[&queue],
    )
    .await
    .expect("lease count")
    .get(0)
}

fn partition_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i:03}")).collect()
}

/// A queue with one consumed message in each of `n` partitions, so every partition exists and
/// the queue-mode group has registered; nothing is left to deliver.
async fn drained_queue(b: &TestBroker, queue: &str, n: usize) -> Vec<String> {
    let names = partition_names(n);
    let seed: Vec<(String, Value)> = names.iter().map(|p| (p.clone(), json!("seed"))).collect();
    push_many(b, queue, &seed).await;
    let (status, body) = b
        .get(&format!(
            "/api/v1/pop/queue/{queue}?batch={n}&partitions={n}&autoAck=true"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "drain: {body}");
    assert_eq!(delivered(&body).len(), n, "one call drains every partition");
    let (status, _) = b.get(&format!("/api/v1/pop/queue/{queue}")).await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "nothing left after the drain"
    );
    names
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

#[tokio::test]
async fn a_push_to_one_of_100_partitions_is_served_by_its_hint() {
    let b = common::broker_with(wake_only).await;
    let names = drained_queue(&b, "hundred", 100).await;
    let rounds = 5;
    let before = PopStats::of(&b).await;
    let mut latencies = Vec::new();
    for i in 0..rounds {
        let target = &names[(i * 37 + 11) % names.len()];
        let waiter = parked(&b, "/api/v1/pop/queue/hundred?batch=10&autoAck=true");
        tokio::time::sleep(SETTLE).await;
        let pushed = Instant::now();
        push_many(&b, "hundred", &[(target.clone(), json!(i))]).await;
        let (status, body, answered) = waiter.await.expect("waiter");
        assert_eq!(status, StatusCode::OK, "round {i}: not woken: {body}");
        assert_eq!(delivered(&body), vec![(target.clone(), json!(i))]);
        latencies.push(answered - pushed);
    }
    let used = PopStats::of(&b).await.since(before);
    assert_eq!(
        (used.hint_claims, used.hint_fallthroughs),
        (rounds as u64, 0),
        "every wake was served by a targeted claim on the pushed partition"
    );
    println!(
        "hinted wake on 100 partitions: push-to-delivery p50 {:.1} ms over {rounds} rounds",
        median_ms(&mut latencies)
    );
}

#[tokio::test]
async fn a_stale_hint_falls_through_to_the_wildcard_and_its_backlog() {
    let b = common::broker_with(wake_only).await;
    let q = "stale";
    let holder = hold_gate(&b, q);
    // Backlog on `b`, leased by consumer X.
    push_many(&b, q, &[("b".into(), json!("b1"))]).await;
    let (status, x) = b
        .get(&format!("/api/v1/pop/queue/{q}?batch=1&leaseSeconds=60"))
        .await;
    assert_eq!(status, StatusCode::OK, "X: {x}");
    assert_eq!(delivered(&x), vec![("b".to_string(), json!("b1"))]);

    // A parked pop creates the gate and is served from `a` through the hint of its push.
    let before = PopStats::of(&b).await;
    let waiter = parked(&b, &format!("/api/v1/pop/queue/{q}?batch=5&autoAck=true"));
    tokio::time::sleep(SETTLE).await;
    push_many(&b, q, &[("a".into(), json!("a1"))]).await;
    let (status, body, _) = waiter.await.expect("waiter");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(delivered(&body), vec![("a".to_string(), json!("a1"))]);
    assert_eq!(PopStats::of(&b).await.since(before).hint_claims, 1);

    // With nobody parked, `a` is pushed again (a hint is left on the gate) and consumed by a
    // pop that was never woken: the hint now points at nothing.
    push_many(&b, q, &[("a".into(), json!("a2"))]).await;
    let (status, body) = b
        .get(&format!("/api/v1/pop/queue/{q}?batch=5&autoAck=true"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(delivered(&body), vec![("a".to_string(), json!("a2"))]);

    // X's nack releases `b` and wakes the queue (no partition named). The parked pop tries the
    // stale hint first, finds nothing and still gets the backlog from the wildcard scan.
    let before = PopStats::of(&b).await;
    let waiter = parked(&b, &format!("/api/v1/pop/queue/{q}?batch=5&autoAck=true"));
    tokio::time::sleep(SETTLE).await;
    let m = &x["messages"][0];
    let nack = json!({
        "acknowledgments": [{
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "leaseId": m["leaseId"], "status": "retry"
        }],
        "consumerGroup": null
    });
    let (status, acked) = b.post("/api/v1/ack/batch", &nack).await;
    assert_eq!(status, StatusCode::OK, "nack: {acked}");
    assert_eq!(acked[0]["leaseReleased"], true, "{acked}");
    let (status, body, _) = waiter.await.expect("waiter");
    assert_eq!(status, StatusCode::OK, "the backlog was hidden: {body}");
    assert_eq!(delivered(&body), vec![("b".to_string(), json!("b1"))]);
    let used = PopStats::of(&b).await.since(before);
    assert_eq!(
        (used.hint_claims, used.hint_fallthroughs),
        (0, 1),
        "the stale hint was tried, came back empty, and the wildcard served"
    );
    holder.abort();
}

#[tokio::test]
async fn a_hint_never_creates_the_cursors_of_an_unregistered_group() {
    let b = common::broker_with(wake_only).await;
    let q = "fresh";
    let group_path = format!("/api/v1/pop/queue/{q}?consumerGroup=g&batch=10&autoAck=true");
    push_many(
        &b,
        q,
        &[("a".into(), json!("a1")), ("b".into(), json!("b1"))],
    )
    .await;
    let (status, body) = b.get(&format!("{group_path}&partitions=2")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(delivered(&body).len(), 2, "g registered and read both");

    // A waiter keeps the gate; a push to `a` then leaves a hint on it, and g consumes that
    // message with a pop that is never woken.
    let holder = hold_gate(&b, q);
    tokio::time::sleep(SETTLE).await;
    push_many(&b, q, &[("a".into(), json!("a2"))]).await;
    let (status, body) = b.get(&group_path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(delivered(&body), vec![("a".to_string(), json!("a2"))]);

    // g parks, then is deleted with its registration: g is now a group that never popped.
    // The delete wakes the parked pop, which holds the hint for `a`. A hint-targeted claim
    // would create g's cursor on `a` alone, seeded from the pop's own parameters; instead
    // the pop must go through registration, which seeds both partitions.
    let before = PopStats::of(&b).await;
    let waiter = parked(&b, &group_path);
    tokio::time::sleep(SETTLE).await;
    let (status, body) = b
        .delete(&format!(
            "/api/v1/consumer-groups/g/queues/{q}?deleteMetadata=true"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "delete: {body}");
    let (status, body, _) = waiter.await.expect("waiter");
    assert_eq!(
        status,
        StatusCode::OK,
        "re-registered g reads again: {body}"
    );

    let used = PopStats::of(&b).await.since(before);
    assert_eq!(
        (used.hint_claims, used.hint_fallthroughs),
        (0, 1),
        "the hint was tried and refused"
    );
    let db = b.sql().await;
    let registered: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.consumer_groups_metadata m
             JOIN queen.queues q ON q.id = m.queue_id
             WHERE q.name = $1 AND m.consumer_group = 'g'",
            &[&q],
        )
        .await
        .expect("registration")
        .get(0);
    assert_eq!(registered, 1, "the woken pop registered g again");
    let seeded: Vec<String> = cursors(&b, q, "g")
        .await
        .into_iter()
        .map(|(p, _, _)| p)
        .collect();
    assert_eq!(seeded, vec!["a", "b"], "the bulk seed, not one lazy cursor");
    holder.abort();
}

#[tokio::test]
async fn a_peer_broker_push_travels_with_its_partition_hint() {
    let peer = |cfg: &mut Config| {
        wake_only(cfg);
        cfg.peer_wake = PeerWake::On;
    };
    let waiter_broker = common::broker_with(peer).await;
    let pusher = waiter_broker.sibling(peer).await;
    let names = drained_queue(&waiter_broker, "mesh", 50).await;
    let rounds = 5;
    let before = PopStats::of(&waiter_broker).await;
    let mut latencies = Vec::new();
    for i in 0..rounds {
        let target = &names[(i * 13 + 7) % names.len()];
        let waiter = parked(
            &waiter_broker,
            "/api/v1/pop/queue/mesh?batch=10&autoAck=true",
        );
        tokio::time::sleep(SETTLE).await;
        let pushed = Instant::now();
        push_many(&pusher, "mesh", &[(target.clone(), json!(i))]).await;
        let (status, body, answered) = waiter.await.expect("waiter");
        assert_eq!(status, StatusCode::OK, "round {i}: not woken: {body}");
        assert_eq!(delivered(&body), vec![(target.clone(), json!(i))]);
        latencies.push(answered - pushed);
    }
    let used = PopStats::of(&waiter_broker).await.since(before);
    assert_eq!(
        (used.hint_claims, used.hint_fallthroughs),
        (rounds as u64, 0),
        "each notification named the pushed partition"
    );
    println!(
        "hinted cross-broker wake: push-to-delivery p50 {:.1} ms over {rounds} rounds",
        median_ms(&mut latencies)
    );
}

#[tokio::test]
async fn no_claim_starts_inside_the_deadline_margin() {
    let b = common::broker_with(wake_only).await;

    // A waiting pop whose whole timeout lies inside the margin still makes its first attempt
    // (what the client asked for); only the attempts after a park stop at the margin.
    push_many(&b, "margin-now", &[("p".into(), json!("m"))]).await;
    let before = PopStats::of(&b).await;
    let (status, body) = b
        .get("/api/v1/pop/queue/margin-now?batch=1&wait=true&timeout=30")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(PopStats::of(&b).await.since(before).margin_skips, 0);

    // A pop parked with 120 ms to live, woken by a push about 90 ms in: the wake lands inside
    // the last 50 ms, so the pop answers 204 and leases nothing. Scheduling may put a round's
    // wake outside the margin (then it claims, or times out first), so a few rounds are
    // allowed; one landing inside is enough, and every 204 must leave no lease.
    let mut outcomes = Vec::new();
    let mut inside = None;
    for round in 0..8 {
        let q = format!("margin-{round}");
        let before = PopStats::of(&b).await;
        let sent = Instant::now();
        let waiter = spawn_get(
            &b,
            &format!("/api/v1/pop/queue/{q}?batch=1&wait=true&timeout=120"),
        );
        tokio::time::sleep(Duration::from_millis(90)).await;
        push_many(&b, &q, &[("p".into(), json!(round))]).await;
        let (status, body, answered) = waiter.await.expect("waiter");
        let skipped = PopStats::of(&b).await.since(before).margin_skips;
        outcomes.push(format!(
            "{status} after {:.0?}, margin skips {skipped}",
            answered - sent
        ));
        if status == StatusCode::NO_CONTENT {
            assert_eq!(leases(&b, &q).await, 0, "a 204 stranded a lease");
        } else {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        if status == StatusCode::NO_CONTENT && skipped == 1 {
            let (status, body) = b.get(&format!("/api/v1/pop/queue/{q}?batch=1")).await;
            assert_eq!(status, StatusCode::OK, "the skipped message stayed: {body}");
            assert_eq!(delivered(&body), vec![("p".to_string(), json!(round))]);
            inside = Some(round);
            break;
        }
    }
    println!("deadline-margin rounds: {outcomes:?}");
    assert!(
        inside.is_some(),
        "no wake landed inside the margin and answered 204: {outcomes:?}"
    );
}
