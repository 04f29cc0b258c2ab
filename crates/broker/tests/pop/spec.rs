//! Rules of docs/spec/life-of-a-pop.md and docs/spec/consuming.md that the feature tests left unpinned: the shape of
//! the claim's reads (the head probe and a forward scan that stop at the budget), the raw rows
//! of `log_pop_v1`, the visibility gates' bypass rules, the seal's guard, the creation path's
//! try-lock, subscription seeding, the SQL candidate scan's cap, horizon and spread, the
//! envelope, autoAck bookkeeping, per-queue delivery metrics, and targeted pops racing the
//! push that creates their partition.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::{ack_all, configure, cursor, get, pop, push_txns, txns, Handle};

/// `(base, start_idx, take, msg_count)` of each raw row `log_pop_v1` answers.
type RawRow = (i64, i32, i32, i32);

/// Calls `queen.log_pop_v1` for one partition (leased, 30 s) and returns its raw rows.
async fn raw_pop(
    db: &impl tokio_postgres::GenericClient,
    queue: &str,
    partition: &str,
    group: &str,
    budget: i32,
    skip_window: bool,
) -> Vec<RawRow> {
    db.query(
        "SELECT r_base, r_start_idx, r_take, r_msg_count
         FROM queen.log_pop_v1($1, $2, $3, $4, 30, 'spec-worker', false, 'all', '', $5)",
        &[&queue, &partition, &group, &budget, &skip_window],
    )
    .await
    .expect("log_pop_v1")
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

#[tokio::test]
async fn a_claim_on_a_deep_backlog_reads_only_what_it_delivers() {
    // Ten partitions of 4 000 ten-message segments each, interleaved on the heap the way
    // concurrent pushes leave them. The claim's reads are one backward primary-key step for
    // the head and an ordered walk that stops at the budget, whatever the planner knows
    // about the backlog's depth.
    let b = common::broker().await;
    let mut db = b.sql().await;
    db.batch_execute(
        "INSERT INTO queen.queues (name) VALUES ('deep');
         INSERT INTO queen.log_partitions (queue_id, name, last_offset, log_start)
         SELECT q.id, 'd' || g, 39999, 0 FROM queen.queues q, generate_series(0, 9) g
         WHERE q.name = 'deep';
         INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
         SELECT p.id, s * 10, s * 10 + 9, now() - interval '1 hour', repeat('x', 300)::bytea
         FROM generate_series(0, 3999) s, queen.log_partitions p ORDER BY s, p.id;
         ANALYZE queen.log_segments;",
    )
    .await
    .expect("deep backlog");
    let pid = common::partition_id(&db, "deep", "d3").await;
    db.execute(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
         VALUES ($1, 'consumed', 39999)",
        &[&pid],
    )
    .await
    .expect("a fully consumed cursor");

    for (group, budget, expected) in [
        (
            "fresh",
            25,
            vec![(0, 0, 10, 10), (10, 0, 10, 10), (20, 0, 5, 10)],
        ),
        ("consumed", 25, vec![]),
    ] {
        // The backend's pending counters may still hold earlier transactions' reads (they
        // are flushed at most once a second), so measure the difference inside one.
        let tx = db.transaction().await.expect("begin");
        let blocks = "SELECT pg_stat_get_xact_blocks_fetched('queen.log_segments'::regclass)";
        let before: i64 = tx.query_one(blocks, &[]).await.expect("blocks").get(0);
        let rows = raw_pop(&tx, "deep", "d3", group, budget, false).await;
        let after: i64 = tx.query_one(blocks, &[]).await.expect("blocks").get(0);
        tx.commit().await.expect("commit");
        let fetched = after - before;
        println!("claim of {budget} for {group}: {fetched} log_segments blocks read");
        assert_eq!(rows, expected, "{group}");
        // The partition's backlog spans ~1 800 heap blocks, which a bitmap scan reads in full.
        assert!(
            fetched < 200,
            "{group}: the claim read {fetched} blocks for {budget} messages"
        );
    }
    // The fully consumed cursor was not sealed: its partition still holds segments.
    let committed: i64 = db
        .query_one(
            "SELECT committed FROM queen.log_consumers WHERE consumer_group = 'consumed'",
            &[],
        )
        .await
        .expect("cursor")
        .get(0);
    assert_eq!(committed, 39999);
}

#[tokio::test]
async fn log_pop_v1_starts_mid_segment_at_the_cursor_and_takes_later_segments_from_frame_zero() {
    let b = common::broker().await;
    let db = b.sql().await;
    for chunk in txns("m", 12).chunks(4) {
        push_txns(&b, "raw", "Default", chunk).await;
    }
    // Cursor at 1: the head segment [0, 3] covers wanted = 2.
    let first = pop(&b, "raw", "batch=2").await;
    ack_all(&b, "__QUEUE_MODE__", &first).await;
    assert_eq!(
        raw_pop(&db, "raw", "Default", "__QUEUE_MODE__", 7, false).await,
        vec![(0, 2, 2, 4), (4, 0, 4, 4), (8, 0, 1, 4)],
        "min(end - wanted + 1, budget) from the head, then whole segments until the budget"
    );

    // A cursor in a retention gap: the head probe misses, the forward scan starts at the
    // first live segment.
    let pid = common::partition_id(&db, "raw", "Default").await;
    db.execute(
        "DELETE FROM queen.log_segments WHERE partition_id = $1 AND base_offset = 0",
        &[&pid],
    )
    .await
    .expect("retention");
    db.execute(
        "UPDATE queen.log_partitions SET log_start = 4 WHERE id = $1",
        &[&pid],
    )
    .await
    .expect("log_start");
    assert_eq!(
        raw_pop(&db, "raw", "Default", "gap", 6, false).await,
        vec![(4, 0, 4, 4), (8, 0, 2, 4)]
    );
}

#[tokio::test]
async fn delayed_processing_is_never_bypassed_and_its_deferral_is_never_sealed() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "debounced", json!({ "windowBuffer": 60 })).await;
    configure(&b, "deferred", json!({ "delayedProcessing": 60 })).await;
    push_txns(&b, "debounced", "Default", &txns("w", 2)).await;
    push_txns(&b, "deferred", "Default", &txns("d", 2)).await;

    // windowBuffer: the SQL debounce holds by default; the hot-list path may bypass it.
    assert_eq!(
        raw_pop(&db, "debounced", "Default", "g", 10, false).await,
        vec![]
    );
    assert_eq!(
        raw_pop(&db, "debounced", "Default", "g", 10, true).await,
        vec![(0, 0, 2, 2)]
    );
    // delayedProcessing: held even when the debounce is bypassed.
    assert_eq!(
        raw_pop(&db, "deferred", "Default", "g", 10, true).await,
        vec![]
    );

    // A pop that takes nothing because every segment is deferred does not seal the cursor
    // past them (the seal fires only on a partition without segments).
    pop(&b, "deferred", "batch=10").await.assert_empty();
    for group in ["g", "__QUEUE_MODE__"] {
        let c = cursor(&db, "deferred", "Default", group)
            .await
            .expect("cursor row");
        assert_eq!(
            (c.0, c.1, c.2, c.3),
            (-1, None, None, 0),
            "{group}: untouched"
        );
    }
}

#[tokio::test]
async fn a_missing_cursor_row_whose_creation_lock_is_taken_is_skipped_without_waiting() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "creation", "p1", &txns("a", 1)).await;
    let p1 = common::partition_id(&db, "creation", "p1").await;
    let hold = "SELECT pg_advisory_lock(hashtextextended($1::bigint::text || '/' || $2, 42))";
    let release = "SELECT pg_advisory_unlock(hashtextextended($1::bigint::text || '/' || $2, 42))";
    let lane = "lane".to_string();
    db.execute(hold, &[&p1, &lane]).await.expect("hold p1");

    // Targeted: the one pop that may create the row is elsewhere, so this one skips the
    // partition for a cycle instead of waiting, and creates nothing.
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        get(
            &b,
            "/api/v1/pop/queue/creation/partition/p1?consumerGroup=lane&batch=5",
        ),
    )
    .await
    .expect("the creation path never waits");
    r.assert_empty();
    assert_eq!(cursor(&db, "creation", "p1", "lane").await, None);
    db.execute(release, &[&p1, &lane])
        .await
        .expect("release p1");
    assert_eq!(
        get(
            &b,
            "/api/v1/pop/queue/creation/partition/p1?consumerGroup=lane&batch=5"
        )
        .await
        .txns(),
        vec!["a-0"]
    );

    // Wildcard: a partition created after the group registered is created lazily, through
    // the same try-lock.
    let group = "wide".to_string();
    assert_eq!(
        pop(
            &b,
            "creation",
            &format!("consumerGroup={group}&batch=5&autoAck=true")
        )
        .await
        .txns(),
        vec!["a-0"]
    );
    push_txns(&b, "creation", "p2", &txns("b", 1)).await;
    let p2 = common::partition_id(&db, "creation", "p2").await;
    db.execute(hold, &[&p2, &group]).await.expect("hold p2");
    pop(&b, "creation", &format!("consumerGroup={group}&batch=5"))
        .await
        .assert_empty();
    assert_eq!(cursor(&db, "creation", "p2", &group).await, None);
    db.execute(release, &[&p2, &group])
        .await
        .expect("release p2");
    assert_eq!(
        pop(&b, "creation", &format!("consumerGroup={group}&batch=5"))
            .await
            .txns(),
        vec!["b-0"],
        "seeded from the stored subscription: the whole backlog of the late partition"
    );
}

#[tokio::test]
async fn queue_mode_ignores_subscription_hints_on_every_shape() {
    let b = common::broker().await;
    let db = b.sql().await;
    for p in ["a", "b", "c"] {
        push_txns(&b, "qm.x", p, &txns(p, 1)).await;
    }
    let future = "2100-01-01T00:00:00Z";
    let targeted = get(
        &b,
        "/api/v1/pop/queue/qm.x/partition/a?subscriptionMode=new&autoAck=true&batch=5",
    )
    .await;
    assert_eq!(targeted.txns(), vec!["a-0"]);
    let wildcard = pop(
        &b,
        "qm.x",
        &format!("subscriptionFrom={future}&autoAck=true&batch=5&partitions=5"),
    )
    .await;
    let discovery = get(
        &b,
        "/api/v1/pop?namespace=qm&subscriptionFrom=now&autoAck=true&batch=5&partitions=5",
    )
    .await;
    let mut rest = [wildcard.txns(), discovery.txns()].concat();
    rest.sort();
    assert_eq!(rest, vec!["b-0", "c-0"], "queue mode reads every backlog");

    // A named group asking for a future instant subscribes future-only: nothing that recent
    // exists, so each cursor sits at last_offset.
    pop(
        &b,
        "qm.x",
        &format!("consumerGroup=later&subscriptionFrom={future}&batch=5&partitions=5"),
    )
    .await
    .assert_empty();
    for p in ["a", "b", "c"] {
        assert_eq!(cursor(&db, "qm.x", p, "later").await.map(|c| c.0), Some(0));
    }
}

#[tokio::test]
async fn timestamp_seeding_lands_on_the_first_retained_segment() {
    let b = common::broker().await;
    let db = b.sql().await;
    for chunk in txns("r", 6).chunks(2) {
        push_txns(&b, "retained", "Default", chunk).await;
    }
    // Retention removed the first segment: the retention watermark is 2.
    let pid = common::partition_id(&db, "retained", "Default").await;
    db.execute(
        "DELETE FROM queen.log_segments WHERE partition_id = $1 AND base_offset = 0",
        &[&pid],
    )
    .await
    .expect("retention");
    db.execute(
        "UPDATE queen.log_partitions SET log_start = 2 WHERE id = $1",
        &[&pid],
    )
    .await
    .expect("log_start");
    let r = pop(
        &b,
        "retained",
        "consumerGroup=replay&subscriptionFrom=2000-01-01T00:00:00Z&batch=10",
    )
    .await;
    assert_eq!(r.txns(), vec!["r-2", "r-3", "r-4", "r-5"]);
    // A leased pop leaves the cursor where the seed put it.
    let seeded: i64 = db
        .query_one(
            "SELECT committed FROM queen.log_consumers WHERE consumer_group = 'replay'",
            &[],
        )
        .await
        .expect("cursor")
        .get(0);
    assert_eq!(
        seeded, 1,
        "just before the first retained segment, not at -1"
    );
}

#[tokio::test]
async fn the_sql_candidate_scan_caps_spreads_and_honours_the_write_horizon() {
    let b = common::broker().await;
    let db = b.sql().await;
    for (partitions, cap) in [
        (1, 64),
        (16, 64),
        (17, 68),
        (100, 400),
        (127, 508),
        (128, 512),
        (500, 512),
    ] {
        let got: i32 = db
            .query_one("SELECT queen.log_pop_candidate_cap_v1($1)", &[&partitions])
            .await
            .expect("cap")
            .get(0);
        assert_eq!(got, cap, "candidate cap for partitions={partitions}");
    }

    // ORDER BY random(): sixteen groups' first pops do not convoy onto one partition.
    for p in 0..16 {
        push_txns(
            &b,
            "spread",
            &format!("p{p:02}"),
            &txns(&format!("s{p}"), 1),
        )
        .await;
    }
    let mut first_claims = HashSet::new();
    for g in 0..16 {
        let r = pop(&b, "spread", &format!("consumerGroup=g{g}&batch=1")).await;
        first_claims.insert(r.body["partition"].as_str().unwrap_or_default().to_string());
    }
    println!(
        "16 groups' first pops claimed {} distinct partitions",
        first_claims.len()
    );
    assert!(
        first_claims.len() > 1,
        "every first pop claimed {first_claims:?}"
    );

    // The write horizon: with the empty-scan floor at now, a pending partition last written
    // more than two minutes before it is not a candidate; one inside the slack is.
    push_txns(&b, "horizon", "old", &txns("old", 1)).await;
    push_txns(&b, "horizon", "recent", &txns("recent", 1)).await;
    db.batch_execute(
        "INSERT INTO queen.consumer_watermarks (queue_id, consumer_group, last_empty_scan_at, updated_at)
         SELECT id, 'h', now(), now() FROM queen.queues WHERE name = 'horizon';
         UPDATE queen.log_partitions p SET last_write_at = now() - CASE p.name
             WHEN 'old' THEN interval '3 minutes' ELSE interval '90 seconds' END
         FROM queen.queues q WHERE q.id = p.queue_id AND q.name = 'horizon'",
    )
    .await
    .expect("floor and write times");
    let r = pop(&b, "horizon", "consumerGroup=h&batch=10&partitions=10").await;
    assert_eq!(r.txns(), vec!["recent-0"]);
}

#[tokio::test]
async fn the_envelope_names_the_first_claimed_partition_and_one_lease_covers_all() {
    let b = common::broker().await;
    let db = b.sql().await;
    for p in ["x", "y", "z"] {
        push_txns(&b, "envelope", p, &txns(p, 2)).await;
    }
    let r = pop(&b, "envelope", "batch=100&partitions=3").await;
    r.assert_delivered();
    let messages = r.messages();
    assert_eq!(r.body["partition"], messages[0]["partition"]);
    assert_eq!(r.body["partitionId"], messages[0]["partitionId"]);
    // Partitions appear in claim order, each contiguous and in offset order.
    let order: Vec<&str> = messages
        .iter()
        .map(|m| m["partition"].as_str().expect("partition"))
        .collect();
    let mut runs: Vec<&str> = order.clone();
    runs.dedup();
    assert_eq!(
        runs.len(),
        3,
        "each partition's messages are contiguous: {order:?}"
    );
    for p in runs {
        let c = cursor(&db, "envelope", p, "__QUEUE_MODE__")
            .await
            .expect("cursor");
        assert_eq!(
            c.2.as_deref(),
            Some(r.lease_id().as_str()),
            "{p} leased to the pop's one worker id"
        );
    }
}

#[tokio::test]
async fn auto_ack_adds_what_it_took_to_total_consumed_and_a_lease_adds_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "consumed", "Default", &txns("c", 5)).await;
    let total = |group: &'static str| {
        let db = &db;
        async move {
            db.query_one(
                "SELECT total_consumed FROM queen.log_consumers WHERE consumer_group = $1",
                &[&group],
            )
            .await
            .expect("cursor")
            .get::<_, i64>(0)
        }
    };
    pop(&b, "consumed", "batch=3&autoAck=true&consumerGroup=auto")
        .await
        .assert_delivered();
    assert_eq!(total("auto").await, 3);
    pop(&b, "consumed", "batch=10&autoAck=true&consumerGroup=auto")
        .await
        .assert_delivered();
    assert_eq!(total("auto").await, 5);
    pop(&b, "consumed", "batch=10&consumerGroup=leased")
        .await
        .assert_delivered();
    assert_eq!(total("leased").await, 0, "a lease is not a commit");
}

#[tokio::test]
async fn metrics_record_deliveries_and_delivery_lag_per_queue() {
    let b = common::broker().await;
    push_txns(&b, "metered", "Default", &txns("m", 3)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    pop(&b, "metered", "batch=10").await.assert_delivered();
    pop(&b, "metered", "batch=10").await.assert_empty();
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let q = &body["pop"]["queues"]["metered"];
    println!("metrics of queue metered: {q}");
    assert_eq!(
        (q["pops"].as_u64(), q["messages"].as_u64()),
        (Some(1), Some(3))
    );
    let lag = q["lastLagMs"].as_u64().expect("lastLagMs");
    assert!(lag >= 300, "the messages waited at least 300 ms, lag {lag}");
    assert!(q["maxLagMs"].as_u64() >= Some(lag));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn targeted_pops_racing_the_partition_creating_push_always_name_the_partition() {
    const ROUNDS: usize = 20;
    const POLLERS: usize = 6;
    let b = common::broker().await;
    let db = b.sql().await;
    let started = Instant::now();
    let mut delivered = 0;
    for round in 0..ROUNDS {
        let partition = format!("r{round}");
        let pollers: Vec<_> = (0..POLLERS)
            .map(|k| {
                let h = Handle::of(&b);
                let path = format!(
                    "/api/v1/pop/queue/racing/partition/{partition}?consumerGroup=g{k}&batch=5"
                );
                tokio::spawn(async move {
                    let until = Instant::now() + Duration::from_secs(10);
                    loop {
                        let r = h.get(&path).await;
                        if r.status != StatusCode::NO_CONTENT || Instant::now() > until {
                            return r;
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        push_txns(&b, "racing", &partition, &txns(&partition, 1)).await;
        let pid = common::partition_id(&db, "racing", &partition)
            .await
            .to_string();
        for p in pollers {
            let r = p.await.expect("poller");
            r.assert_delivered();
            let ids: Vec<&Value> = vec![&r.body["partitionId"]]
                .into_iter()
                .chain(
                    r.body["messages"]
                        .as_array()
                        .expect("messages")
                        .iter()
                        .map(|m| &m["partitionId"]),
                )
                .collect();
            assert!(
                ids.iter().all(|id| id.as_str() == Some(pid.as_str())),
                "a leased batch named partition {ids:?}, not {pid}"
            );
            delivered += 1;
        }
    }
    println!(
        "{delivered} racing targeted deliveries in {:?}, every one naming its partition",
        started.elapsed()
    );
}
