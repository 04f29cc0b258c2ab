//! Long-poll over real HTTP and PostgreSQL: a parked pop is woken by a push on the same broker
//! and on a second broker sharing the database (LISTEN/NOTIFY), answers by its timeout and at
//! shutdown, and holds no pooled connection while parked.

use std::time::{Duration, Instant};

use queen_broker::config::{Config, PeerWake};
use reqwest::StatusCode;

use crate::common;
use crate::support::{self, percentile_ms, push_txns, txns, Handle, Reply};

/// Re-checks so slow that only a wake can deliver within a second.
fn wake_only(cfg: &mut Config) {
    cfg.pop_wait_initial_ms = 20_000;
    cfg.pop_wait_max_ms = 20_000;
}

/// Push-to-delivery timings of one wake.
struct Wake {
    /// From sending the push to the parked pop's answer (includes the push's commit).
    from_push: Duration,
    /// From the push's 201 to the parked pop's answer (zero when the pop answered first).
    after_commit: Duration,
}

/// Parks a wait=true pop on `waiter`, pushes through `pusher`, and times the pop's answer,
/// `rounds` times.
async fn wake_latencies(
    waiter: &common::TestBroker,
    pusher: &common::TestBroker,
    queue: &str,
    rounds: usize,
) -> Vec<Wake> {
    let mut samples = Vec::new();
    for i in 0..rounds {
        let h = Handle::of(waiter);
        let path =
            format!("/api/v1/pop/queue/{queue}?batch=1&wait=true&timeout=15000&autoAck=true");
        let parked = tokio::spawn(async move { (h.get(&path).await, Instant::now()) });
        // Let the pop find nothing and park.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let pushed = Instant::now();
        push_txns(pusher, queue, "Default", &[format!("w{i}")]).await;
        let committed = Instant::now();
        let (reply, answered): (Reply, Instant) = parked.await.expect("pop task");
        reply.assert_delivered();
        assert_eq!(reply.txns(), vec![format!("w{i}")]);
        let from_push = answered - pushed;
        assert!(
            from_push < Duration::from_secs(5),
            "woken long before the 20 s re-check: {from_push:?}"
        );
        samples.push(Wake {
            from_push,
            after_commit: answered.saturating_duration_since(committed),
        });
    }
    samples
}

/// Two wake-only brokers on one database, waking each other through LISTEN/NOTIFY.
async fn peer_pair() -> (common::TestBroker, common::TestBroker) {
    let peer = |cfg: &mut Config| {
        wake_only(cfg);
        cfg.peer_wake = PeerWake::On;
    };
    let first = common::broker_with(peer).await;
    let second = first.sibling(peer).await;
    (first, second)
}

fn report(what: &str, samples: &[Wake]) {
    let from_push: Vec<Duration> = samples.iter().map(|w| w.from_push).collect();
    let after_commit: Vec<Duration> = samples.iter().map(|w| w.after_commit).collect();
    println!(
        "{what}: push-to-delivery p50 {:.1} ms (p90 {:.1}, max {:.1}); after the push's 201: p50 {:.1} ms (max {:.1}); {} wakes",
        percentile_ms(&from_push, 50),
        percentile_ms(&from_push, 90),
        percentile_ms(&from_push, 100),
        percentile_ms(&after_commit, 50),
        percentile_ms(&after_commit, 100),
        samples.len()
    );
}

#[tokio::test]
async fn a_waiting_pop_is_woken_by_a_push_within_milliseconds() {
    let b = common::broker_with(wake_only).await;
    report("single broker", &wake_latencies(&b, &b, "wake", 25).await);
}

#[tokio::test]
async fn a_push_through_a_second_broker_wakes_pops_parked_on_the_first() {
    let (first, second) = peer_pair().await;
    // The listener connects asynchronously; a first round trip proves it is up.
    wake_latencies(&first, &second, "peer-warmup", 1).await;
    report(
        "second broker via LISTEN/NOTIFY",
        &wake_latencies(&first, &second, "peer", 20).await,
    );
    report(
        "second broker, reverse direction",
        &wake_latencies(&second, &first, "peer-back", 5).await,
    );
}

#[tokio::test]
async fn discovery_pops_long_poll_too() {
    let b = common::broker_with(wake_only).await;
    let h = Handle::of(&b);
    let parked = tokio::spawn(async move {
        h.get("/api/v1/pop?namespace=disc&wait=true&timeout=15000")
            .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    push_txns(&b, "disc.work", "Default", &txns("d", 1)).await;
    let r = parked.await.expect("pop task");
    r.assert_delivered();
    assert_eq!(r.body["queue"], "");
    assert_eq!(r.messages()[0]["queue"], "disc.work");
    println!("discovery pop woken after {:?} (parked ~150 ms)", r.elapsed);
    assert!(r.elapsed < Duration::from_secs(5));
}

#[tokio::test]
async fn an_empty_long_poll_answers_204_by_its_timeout() {
    let b = common::broker().await;
    let r = support::pop(&b, "quiet", "wait=true&timeout=600").await;
    r.assert_empty();
    println!("timeout=600 answered after {:?}", r.elapsed);
    assert!(
        r.elapsed >= Duration::from_millis(550),
        "it waited: {:?}",
        r.elapsed
    );
    assert!(
        r.elapsed < Duration::from_secs(5),
        "it answered by the timeout: {:?}",
        r.elapsed
    );
}

#[tokio::test]
async fn shutdown_answers_parked_pops_at_once() {
    let b = common::broker().await;
    let parked: Vec<_> = (0..5)
        .map(|_| {
            let h = Handle::of(&b);
            tokio::spawn(async move {
                h.get("/api/v1/pop/queue/closing?wait=true&timeout=60000")
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    b.stop().await;
    for p in parked {
        p.await.expect("pop task").assert_empty();
    }
    println!("shutdown drained 5 parked pops in {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not held until the 60 s deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_parked_pops_hold_no_pooled_connection() {
    const PARKED: usize = 200;
    let b = common::broker_with(|cfg| {
        wake_only(cfg);
        cfg.db_pool_size = 8;
    })
    .await;
    let db = b.sql().await;
    let parked: Vec<_> = (0..PARKED)
        .map(|i| {
            let h = Handle::of(&b);
            let path = format!(
                "/api/v1/pop/queue/parked?batch=1&wait=true&timeout=8000&consumerGroup=g{}",
                i % 4
            );
            tokio::spawn(async move { h.get(&path).await })
        })
        .collect();
    // Every pop has probed once and parked (the next re-check is 20 s away). Were a parked
    // pop holding a connection, all 8 would be checked out and ~190 pops would queue for one.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let state = &b.server.as_ref().expect("running").state;
    let mut checked_out = Vec::new();
    for _ in 0..5 {
        let pool = state.store.pool().status();
        assert_eq!(pool.waiting, 0, "nothing waits for a connection: {pool:?}");
        checked_out.push(pool.size - pool.available);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("pool while {PARKED} pops are parked: checked out {checked_out:?} of 8");
    assert!(
        checked_out.contains(&0),
        "no pooled connection is held by a parked pop"
    );
    let row = db
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE state LIKE 'idle in transaction%')
             FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'queen-rs'",
            &[],
        )
        .await
        .expect("pg_stat_activity");
    let (backends, in_transaction): (i64, i64) = (row.get(0), row.get(1));
    println!("broker backends: {backends} open, {in_transaction} idle in a transaction");
    assert!(backends <= 8, "at most the pool: {backends}");
    assert_eq!(in_transaction, 0, "no parked pop keeps a transaction open");

    // The broker still serves: a push and a pop elsewhere go through the small pool.
    push_txns(&b, "elsewhere", "Default", &txns("e", 1)).await;
    support::pop(&b, "elsewhere", "batch=1")
        .await
        .assert_delivered();

    // One push to the parked queue: every parked group gets it once; the rest time out.
    push_txns(&b, "parked", "Default", &txns("p", 1)).await;
    let mut delivered = 0;
    for p in parked {
        let r = p.await.expect("pop task");
        match r.status {
            StatusCode::OK => delivered += 1,
            StatusCode::NO_CONTENT => r.assert_empty(),
            other => panic!("parked pop answered {other}"),
        }
    }
    assert_eq!(delivered, 4, "one delivery per consumer group");
}

#[tokio::test]
async fn peer_wake_survives_a_lost_listener_connection() {
    let (first, second) = peer_pair().await;
    wake_latencies(&first, &second, "lost-warmup", 1).await;
    let db = first.sql().await;
    let killed: i64 = db
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
             FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'queen-rs-wake'",
            &[],
        )
        .await
        .expect("terminate the listeners")
        .get(0);
    assert_eq!(killed, 2, "one listener connection per broker");
    // The listeners reconnect with backoff; wakes flow again afterwards.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    report(
        "after reconnecting",
        &wake_latencies(&first, &second, "lost", 3).await,
    );
}
