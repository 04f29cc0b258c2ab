//! The hot-list ring (docs/engine.md §7, §8): it delivers what the SQL candidate path
//! delivers; the wheel delivers a `delayedProcessing` message and a message whose lease
//! expired to a parked pop on time, with no re-poll; another broker's commits and acks reach
//! this broker's ring through the wake notifications (`QUEEN_PEER_WAKE=auto` with an
//! external database); and parked long-polls with nothing in their rings cost no SQL (counted
//! with `pg_stat_statements` on a cluster of the test's own).
//!
//! The brokers here re-check only when woken (a 20 s backoff), so a parked pop that delivers
//! before its timeout was served by a wake: a push, a peer's notification or the wheel.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use queen_broker::config::{Config, PeerWake};
use queen_embedded_pg::{EmbeddedOptions, EmbeddedPg};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, TestBroker};
use crate::support::{self, configure, push_txns, txns, Handle, Reply};

/// Re-checks so slow that only a wake can deliver within a test.
fn wake_only(cfg: &mut Config) {
    cfg.pop_wait_initial_ms = 20_000;
    cfg.pop_wait_max_ms = 20_000;
}

/// Long enough for a pop's first (empty) attempt to finish and the pop to park.
const SETTLE: Duration = Duration::from_millis(400);

/// A wait=true pop in the background, with when it answered.
fn parked(b: &TestBroker, path: &str) -> tokio::task::JoinHandle<(Reply, Instant)> {
    let h = Handle::of(b);
    let path = format!("{path}&wait=true&timeout=15000");
    tokio::spawn(async move { (h.get(&path).await, Instant::now()) })
}

/// The `hotlist` section of `/metrics`.
async fn ring_metrics(b: &TestBroker) -> Value {
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK, "metrics: {body}");
    assert_eq!(body["hotlist"]["enabled"], true, "{body}");
    body["hotlist"].clone()
}

/// Pops `queue` for `group` until empty, acking each batch; every delivered transactionId.
async fn drain(b: &TestBroker, queue: &str, group: &str, query: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    loop {
        let r = support::pop(b, queue, &format!("consumerGroup={group}&{query}")).await;
        if r.status == StatusCode::NO_CONTENT {
            return seen;
        }
        r.assert_delivered();
        for t in r.txns() {
            assert!(seen.insert(t.clone()), "{t} delivered twice");
        }
        if !query.contains("autoAck=true") {
            support::ack_all(b, group, &r).await;
        }
    }
}

#[tokio::test]
async fn the_ring_delivers_what_the_sql_path_delivers() {
    let ring = common::broker().await;
    let sql = common::broker_with(|cfg| cfg.hotlist = false).await;
    let mut expected = BTreeSet::new();
    for p in 0..6 {
        let names = txns(&format!("p{p}"), 7);
        for b in [&ring, &sql] {
            push_txns(b, "same", &format!("p{p}"), &names).await;
        }
        expected.extend(names);
    }
    let shapes = ["batch=3&partitions=2", "batch=10", "batch=1&autoAck=true"];
    // Queue mode drains for good, so it takes the first shape only.
    let runs = shapes
        .iter()
        .enumerate()
        .map(|(i, q)| (format!("g{i}"), *q))
        .chain([("__QUEUE_MODE__".to_string(), shapes[0])]);
    for (group, query) in runs {
        let on = drain(&ring, "same", &group, query).await;
        let off = drain(&sql, "same", &group, query).await;
        assert_eq!(on, expected, "ring, {group} {query}");
        assert_eq!(off, expected, "SQL path, {group} {query}");
    }
    let m = ring_metrics(&ring).await;
    assert!(m["claims"].as_u64() > Some(0), "the ring served: {m}");
}

#[tokio::test]
async fn a_parked_pop_receives_a_delayed_message_when_it_becomes_visible() {
    let b = common::broker_with(wake_only).await;
    configure(&b, "later", json!({ "delayedProcessing": 2 })).await;
    let waiter = parked(&b, "/api/v1/pop/queue/later?batch=5");
    tokio::time::sleep(SETTLE).await;
    let pushed = Instant::now();
    push_txns(&b, "later", "Default", &txns("d", 1)).await;
    let (reply, answered) = waiter.await.expect("waiter");
    reply.assert_delivered();
    assert_eq!(reply.txns(), txns("d", 1));
    let waited = answered - pushed;
    assert!(
        waited >= Duration::from_secs(2),
        "visible only after the delay: {waited:?}"
    );
    println!("delayedProcessing 2 s: delivered to the parked pop after {waited:?}");
    assert!(ring_metrics(&b).await["wheelPromotions"].as_u64() >= Some(1));
}

/// `/configure` marks the caller's ring dirty, under the tenant-qualified name: a shortened
/// `delayedProcessing` reaches the ring at the tenant's next pop, not at the reseed floor.
#[tokio::test]
async fn a_tenants_reconfigured_delay_reaches_its_ring_at_once() {
    let b = common::broker_with(|cfg| {
        support::with_tenants(cfg);
        cfg.hotlist_reseed_ms = 600_000;
    })
    .await;
    for tenant in [None, Some("acme")] {
        let as_tenant = support::act_as(&b, tenant);
        configure(&as_tenant, "later", json!({ "delayedProcessing": 3600 })).await;
        push_txns(&as_tenant, "later", "Default", &txns("d", 1)).await;
        // The ring reseeds (cold) and parks the partition for an hour.
        support::pop(&as_tenant, "later", "batch=5")
            .await
            .assert_empty();
        configure(&as_tenant, "later", json!({ "delayedProcessing": 0 })).await;
        let r = support::pop(&as_tenant, "later", "batch=5").await;
        r.assert_delivered();
        assert_eq!(r.txns(), txns("d", 1), "tenant {tenant:?}");
    }
}

#[tokio::test]
async fn a_parked_pop_receives_a_message_whose_lease_expired() {
    let b = common::broker_with(wake_only).await;
    push_txns(&b, "expire", "Default", &txns("e", 3)).await;
    let first = support::pop(&b, "expire", "batch=10&leaseSeconds=2").await;
    first.assert_delivered();
    assert_eq!(first.txns(), txns("e", 3));
    let leased = Instant::now();
    // Never acked: the lease runs out and the wheel hands the batch to the parked pop.
    let waiter = parked(&b, "/api/v1/pop/queue/expire?batch=10");
    let (reply, answered) = waiter.await.expect("waiter");
    reply.assert_delivered();
    assert_eq!(reply.txns(), txns("e", 3));
    assert_ne!(reply.lease_id(), first.lease_id());
    let waited = answered - leased;
    assert!(
        waited >= Duration::from_secs(2),
        "not before expiry: {waited:?}"
    );
    println!("lease of 2 s: redelivered to the parked pop after {waited:?}");
}

/// Two wake-only brokers on one database, with peer wake on through `auto`: a set
/// `DATABASE_URL` (not used to connect; the harness hands both the cluster) makes the
/// database external.
async fn peers() -> (TestBroker, TestBroker) {
    let external = |cfg: &mut Config| {
        wake_only(cfg);
        cfg.database_url = Some("postgresql://shared.example/queen".into());
        assert_eq!(cfg.peer_wake, PeerWake::Auto);
    };
    let first = common::broker_with(external).await;
    let second = first.sibling(external).await;
    (first, second)
}

/// Parks a pop on `waiter`, runs `act`, and answers what the pop delivered.
async fn woken_by<F: std::future::Future<Output = ()>>(
    waiter: &TestBroker,
    queue: &str,
    act: F,
) -> Reply {
    let pop = parked(waiter, &format!("/api/v1/pop/queue/{queue}?batch=10"));
    tokio::time::sleep(SETTLE).await;
    act.await;
    let (reply, _) = pop.await.expect("waiter");
    reply
}

#[tokio::test]
async fn another_brokers_commits_and_acks_reach_this_brokers_ring() {
    let (first, second) = peers().await;
    configure(&first, "peer", json!({})).await;
    // The listener connects asynchronously; a first round trip proves it is up.
    let warm = woken_by(&first, "warm", async {
        push_txns(&second, "warm", "Default", &txns("w", 1)).await;
    })
    .await;
    warm.assert_delivered();

    // The first pop of `peer` reseeds its cold ring; from then on only marks feed it.
    let empty = support::pop(&first, "peer", "batch=10").await;
    empty.assert_empty();
    let reseeds = ring_metrics(&first).await["reseeds"].as_u64();
    for i in 0..3 {
        let txn = format!("peer-{i}");
        let r = woken_by(&first, "peer", async {
            push_txns(
                &second,
                "peer",
                &format!("p{i}"),
                std::slice::from_ref(&txn),
            )
            .await;
        })
        .await;
        r.assert_delivered();
        assert_eq!(r.txns(), vec![txn]);
        support::ack_all(&first, "__QUEUE_MODE__", &r).await;
    }
    assert_eq!(
        ring_metrics(&first).await["reseeds"].as_u64(),
        reseeds,
        "the pushes reached the ring as marks, not through a reseed"
    );

    // A lease taken on `first` and nacked through `second` redelivers at once, not when the
    // 60 s lease would have run out.
    push_txns(&first, "peer", "nacked", &txns("n", 2)).await;
    let leased = support::pop(&first, "peer", "batch=10").await;
    leased.assert_delivered();
    let items = leased
        .messages()
        .iter()
        .map(|m| common::ack_item(m, "retry"))
        .collect();
    let again = woken_by(&first, "peer", async {
        for r in common::ack_batch(&second, None, items).await {
            assert_eq!(r["success"], true, "{r}");
        }
    })
    .await;
    again.assert_delivered();
    assert_eq!(again.txns(), txns("n", 2));
}

/// A ring that met another broker's lease parks the partition until the lease's end. When
/// that lease is acked with nothing behind it, the broker holding it tells its peers, so the
/// next push reaches a pop parked here at once rather than when the 60 s lease would have
/// run out (the race the bench's `brokers` scenario found: a partition stranded for a lease).
#[tokio::test]
async fn a_lease_drained_on_another_broker_frees_the_partition_here() {
    let (first, second) = peers().await;
    configure(&first, "drained", json!({ "leaseTime": 60 })).await;
    let warm = woken_by(&first, "warm", async {
        push_txns(&second, "warm", "Default", &txns("w", 1)).await;
    })
    .await;
    warm.assert_delivered();

    push_txns(&first, "drained", "p", &txns("a", 1)).await;
    let held = support::pop(&second, "drained", "batch=10").await;
    held.assert_delivered();
    // This broker's cold ring reseeds and finds the partition leased: on its wheel.
    support::pop(&first, "drained", "batch=10")
        .await
        .assert_empty();
    support::ack_all(&second, "__QUEUE_MODE__", &held).await;
    tokio::time::sleep(SETTLE).await;

    // The parked pop re-checks only when woken: delivering within its 15 s means the push's
    // mark readied the partition.
    let next = woken_by(&first, "drained", async {
        push_txns(&second, "drained", "p", &txns("b", 1)).await;
    })
    .await;
    next.assert_delivered();
    assert_eq!(next.txns(), txns("b", 1));
}

/// `LIKE` patterns of the claim by id and the list claim, as the broker sends them.
const BY_ID: &str = "SELECT %FROM queen.log_pop_claim_v1(%";
const LIST: &str = "SELECT %FROM queen.log_pop_list_v1(%";

/// A message as both paths must render it: everything but the request's own lease and group.
fn delivered(reply: &Reply) -> Vec<Value> {
    reply
        .messages()
        .into_iter()
        .map(|mut m| {
            let fields = m.as_object_mut().expect("a message is an object");
            fields.remove("leaseId");
            fields.remove("consumerGroup");
            m
        })
        .collect()
}

/// A pop that may claim one partition takes its ring candidate by id (docs/engine.md §7):
/// the answer is the one the SQL path renders for the same messages (offsets, createdAt,
/// partitionId, delivery attempts after a nack), and no list claim runs.
#[tokio::test]
async fn a_pop_of_one_partition_claims_its_candidate_by_id() {
    let ring = common::broker().await;
    let sql = ring.sibling(|cfg| cfg.hotlist = false).await;
    let db = ring.sql().await;
    push_txns(&ring, "byid", "p", &txns("m", 5)).await;
    for round in 0..3 {
        let on = support::pop(&ring, "byid", "consumerGroup=on&batch=2").await;
        let off = support::pop(&sql, "byid", "consumerGroup=off&batch=2").await;
        on.assert_delivered();
        off.assert_delivered();
        assert_eq!(delivered(&on), delivered(&off), "round {round}");
        if round == 0 {
            // A nack redelivers the same messages with the next attempt number.
            for (b, group, r) in [(&ring, "on", &on), (&sql, "off", &off)] {
                let items = r
                    .messages()
                    .iter()
                    .map(|m| common::ack_item(m, "retry"))
                    .collect();
                for a in common::ack_batch(b, Some(group), items).await {
                    assert_eq!(a["success"], true, "{a}");
                }
            }
            continue;
        }
        support::ack_all(&ring, "on", &on).await;
        support::ack_all(&sql, "off", &off).await;
    }
    assert!(
        common::statement_calls(&db, BY_ID).await >= 3,
        "the ring's pops went by id"
    );
    assert_eq!(
        common::statement_calls(&db, LIST).await,
        0,
        "no list claim ran"
    );
}

/// The ring's id of a partition goes stale when another broker deletes its queue and the
/// partition is created again: the claim by id finds no such partition and the pop claims by
/// name instead, delivering from the new partition; the next pop goes by the new id.
#[tokio::test]
async fn a_stale_partition_id_falls_back_to_the_claim_by_name() {
    // No peer notifications and no reseed on the floor: nothing corrects the id first.
    let quiet = |cfg: &mut Config| {
        cfg.peer_wake = PeerWake::Off;
        cfg.hotlist_reseed_ms = 600_000;
    };
    let ring = common::broker_with(quiet).await;
    let other = ring.sibling(quiet).await;
    let db = ring.sql().await;
    push_txns(&ring, "stale", "p", &txns("old", 1)).await;
    let old = support::pop(&ring, "stale", "consumerGroup=g&batch=5").await;
    old.assert_delivered();
    support::ack_all(&ring, "g", &old).await;
    let by_id = common::statement_calls(&db, BY_ID).await;
    assert!(by_id >= 1, "the first pop went by id");

    let (status, body) = other.delete("/api/v1/resources/queues/stale").await;
    assert!(status.is_success(), "delete: {body}");
    // This broker's own push marks the ring; nothing told it the old partition is gone.
    push_txns(&ring, "stale", "p", &txns("fresh", 1)).await;
    let fresh = support::pop(&ring, "stale", "consumerGroup=g&batch=5").await;
    fresh.assert_delivered();
    assert_eq!(fresh.txns(), txns("fresh", 1));
    assert_ne!(
        fresh.messages()[0]["partitionId"],
        old.messages()[0]["partitionId"]
    );
    assert_eq!(
        common::statement_calls(&db, BY_ID).await,
        by_id + 1,
        "tried by the old id"
    );
    assert_eq!(common::statement_calls(&db, LIST).await, 1, "then by name");
    support::ack_all(&ring, "g", &fresh).await;

    push_txns(&ring, "stale", "p", &txns("next", 1)).await;
    let next = support::pop(&ring, "stale", "consumerGroup=g&batch=5").await;
    assert_eq!(next.txns(), txns("next", 1));
    assert_eq!(
        common::statement_calls(&db, BY_ID).await,
        by_id + 2,
        "by the new id"
    );
    assert_eq!(common::statement_calls(&db, LIST).await, 1);
}

/// A private cluster that always loads `pg_stat_statements` (the harness's cluster loads it
/// only where the installation ships it), with one database per broker: the statements a
/// broker runs are counted exactly, and no other test's work or autovacuum run on the shared
/// cluster lands in the counts.
async fn counting_cluster() -> (EmbeddedPg, tokio_postgres::Client, PathBuf) {
    let dir = PathBuf::from(format!("/tmp/queen-test/idle-cost-{}", std::process::id()));
    let mut opts = EmbeddedOptions::new(&dir);
    opts.shared_buffers_mb = Some(64);
    opts.extra_settings = vec![(
        "shared_preload_libraries".into(),
        "pg_stat_statements".into(),
    )];
    let cluster = queen_embedded_pg::start(opts)
        .await
        .expect("start the counting cluster");
    let admin = common::connect(&cluster.config("postgres")).await;
    for ddl in [
        "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
        "CREATE DATABASE ring",
        "CREATE DATABASE scan",
    ] {
        admin.batch_execute(ddl).await.expect(ddl);
    }
    (cluster, admin, dir)
}

/// Statements run in database `db` since the last reset, and its committed transactions
/// (`xact_commit`, reported by a backend when it goes idle, at most once a second and, if it
/// stays idle, only after 10 s: PostgreSQL 15's `PGSTAT_IDLE_INTERVAL`).
async fn counts(admin: &tokio_postgres::Client, db: &str) -> (i64, i64) {
    let r = admin
        .query_one(
            "SELECT (SELECT COALESCE(sum(s.calls), 0)::bigint FROM pg_stat_statements s
                     JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1),
                    (SELECT xact_commit FROM pg_stat_database WHERE datname = $1)",
            &[&db],
        )
        .await
        .expect("statement counts");
    (r.get(0), r.get(1))
}

/// Parks 1 000 long-polls on 100 empty queues of `b` (its database `db`) and answers the
/// statements and the transactions per second PostgreSQL ran for it over `window`.
async fn idle_cost(
    b: &TestBroker,
    admin: &tokio_postgres::Client,
    db: &str,
    window: Duration,
) -> (f64, f64) {
    for q in 0..100 {
        configure(b, &format!("idle-{q}"), json!({})).await;
    }
    let h = Handle::of(b);
    let mut pops = Vec::new();
    for i in 0..1000 {
        let (h, q) = (h.clone(), i % 100);
        pops.push(tokio::spawn(async move {
            h.get(&format!(
                "/api/v1/pop/queue/idle-{q}?wait=true&timeout={}",
                window.as_millis() + 60_000
            ))
            .await
        }));
    }
    // Every pop parked, its first attempt behind it: with the ring, every queue's ring
    // reseeded once (cold) and the pops found it empty; on the SQL path, give them the same
    // 3 s. Then the backends' transaction reports of that burst must come in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, m) = b.get("/metrics").await;
        let ring = &m["hotlist"];
        if ring["enabled"] == false
            || (ring["rings"] == 100
                && ring["reseeds"].as_u64() >= Some(100)
                && ring["emptyPolls"].as_u64() >= Some(2000))
        {
            break;
        }
        assert!(Instant::now() < settled, "the pops never parked: {m}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    let reseeds = || async { b.get("/metrics").await.1["hotlist"]["reseeds"].as_u64() };
    let (reseeded, started) = (reseeds().await, Instant::now());
    let (statements, commits) = counts(admin, db).await;
    tokio::time::sleep(window).await;
    let (statements_after, commits_after) = counts(admin, db).await;
    let elapsed = started.elapsed().as_secs_f64();
    if let (Some(from), Some(to)) = (reseeded, reseeds().await) {
        println!("{} ring reseeds in the {window:?} window", to - from);
    }
    for p in &pops {
        assert!(!p.is_finished(), "a parked pop answered early");
    }
    for p in pops {
        p.abort();
    }
    (
        (statements_after - statements) as f64 / elapsed,
        (commits_after - commits) as f64 / elapsed,
    )
}

/// The ring's window spans a whole reseed floor (30 s), so its cost is in the numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_parked_long_polls_cost_almost_no_sql() {
    let (cluster, admin, dir) = counting_cluster().await;
    let ring = common::broker_on(cluster.config("ring"), |_| {}).await;
    let (on, on_tx) = idle_cost(&ring, &admin, "ring", Duration::from_secs(31)).await;
    ring.stop().await;
    let scan = common::broker_on(cluster.config("scan"), |cfg| cfg.hotlist = false).await;
    let (off, off_tx) = idle_cost(&scan, &admin, "scan", Duration::from_secs(10)).await;
    scan.stop().await;
    drop(admin);
    cluster.stop().await;
    let _ = std::fs::remove_dir_all(dir);
    println!(
        "1 000 parked long-polls on 100 empty queues: {on:.1} statements/s ({on_tx:.1} \
         transactions/s) with the ring, {off:.1} statements/s ({off_tx:.1} transactions/s) on \
         the SQL path"
    );
    assert!(
        on <= 10.0,
        "the ring's parked pops cost {on:.1} statements/s"
    );
    assert!(
        on * 10.0 < off,
        "the ring saves at least 10×: {on:.1} vs {off:.1}"
    );
}
