//! What a full-batch completed ack costs PostgreSQL with the ack registry off (hash
//! resolution), on (one positional cover per ack) and on with ack fusion under concurrent
//! acks, counted by `pg_stat_statements` in the test cluster: top-level statements, the
//! statements run inside the SQL functions, buffers touched and execution time, per ack.
//! The counts are asserted; the times are printed only (the machine is shared). A warm-up
//! round first, so sessions the pool opens on demand do not bill their first plans and
//! catalog reads to the measured acks.

use serde_json::Value;

use queen_broker::config::PeerWake;

use crate::common::{self, TestBroker};
use crate::support::*;

const G: Option<&str> = Some("g");
const ACKS: usize = 20;
const BATCH: usize = 10;

/// Per-ack PostgreSQL work of the ack phase.
#[derive(Debug)]
struct Cost {
    statements: f64,
    nested: f64,
    buffers: f64,
    exec_ms: f64,
    by_hash: i64,
    cover: i64,
    multi: i64,
    /// The top-level statements counted, with their calls (shown when an assertion fails).
    seen: Vec<(String, i64)>,
}

/// A broker on a fresh database whose sessions also count the statements inside functions.
/// Its background statements are kept out of the measured window: the retention loop runs
/// once at boot and then hourly, and no peer wake notifications are sent.
async fn counted_broker(registry: bool, fusion: bool) -> TestBroker {
    let pg = common::fresh_database().await;
    let admin = common::connect(&pg).await;
    let name = pg.get_dbname().expect("a database name");
    admin
        .batch_execute(&format!(
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
             ALTER DATABASE \"{name}\" SET pg_stat_statements.track = 'all'"
        ))
        .await
        .expect("track nested statements");
    common::broker_on(pg, |cfg| {
        cfg.ack_registry = registry;
        cfg.ack_fusion = fusion;
        cfg.retention_interval_ms = 3_600_000;
        cfg.peer_wake = PeerWake::Off;
    })
    .await
}

/// Pops `ACKS` batches of `BATCH` (from partitions `p{round}-…`).
async fn pop_round(b: &TestBroker, round: usize) -> Vec<Popped> {
    let mut batches = Vec::new();
    for p in 0..ACKS {
        let partition = format!("p{round}-{p}");
        push_txns(b, "cost", &partition, &txns(&partition, BATCH)).await;
        batches.push(
            pop(b, "cost", Some(&partition), G, BATCH, "")
                .await
                .expect("a batch"),
        );
    }
    batches
}

/// Acks each batch in full (all at once when `concurrent`).
async fn ack_round(b: &TestBroker, batches: &[Popped], concurrent: bool) {
    let ack = |batch: &Popped| ack_batch(b, G, ack_all(batch, "completed"));
    let answers: Vec<Vec<Value>> = if concurrent {
        futures::future::join_all(batches.iter().map(ack)).await
    } else {
        let mut out = Vec::new();
        for batch in batches {
            out.push(ack(batch).await);
        }
        out
    };
    answers.iter().flatten().for_each(assert_ok);
}

/// A warm-up round (the pool's sessions plan and cache their functions), then `ACKS`
/// batches popped and acked in full (all at once when `concurrent`), counting only the acks.
async fn measure(b: &TestBroker, concurrent: bool) -> Cost {
    let db = b.sql().await;
    let warm_up = pop_round(b, 0).await;
    ack_round(b, &warm_up, concurrent).await;
    let batches = pop_round(b, 1).await;
    db.batch_execute(
        "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database
                                             WHERE datname = current_database()), 0)",
    )
    .await
    .expect("reset");
    ack_round(b, &batches, concurrent).await;
    let row = db
        // The timer wheel's probe (once a second per broker, engine/timer_wheel/) is no ack's
        // cost, nor is the identity question of a connection the pool opens meanwhile (under
        // load, concurrent flushes may need one more than the warm-up did; store/server.rs).
        .query_one(
            "SELECT COALESCE(sum(calls) FILTER (WHERE toplevel), 0)::float8,
                    COALESCE(sum(calls) FILTER (WHERE NOT toplevel), 0)::float8,
                    COALESCE(sum(shared_blks_hit + shared_blks_read) FILTER (WHERE toplevel), 0)::float8,
                    COALESCE(sum(total_exec_time) FILTER (WHERE toplevel), 0)::float8
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'
               AND s.query NOT LIKE '%queen.log_timers_next_v1%'
               AND s.query NOT LIKE '%pg_control_system%'",
            &[],
        )
        .await
        .expect("statement counts");
    let seen = db
        .query(
            "SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 120), s.calls
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = current_database() AND s.toplevel
               AND s.query NOT LIKE '%pg_stat_statements%'
               AND s.query NOT LIKE '%queen.log_timers_next_v1%'",
            &[],
        )
        .await
        .expect("statements")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let per = |v: f64| v / ACKS as f64;
    Cost {
        statements: per(row.get(0)),
        nested: per(row.get(1)),
        buffers: per(row.get(2)),
        exec_ms: per(row.get(3)),
        by_hash: calls(&db, "log_ack_by_hash_v1").await,
        cover: calls(&db, "log_ack_at_v1").await,
        multi: calls(&db, "log_ack_multi_v1").await,
        seen,
    }
}

#[tokio::test]
async fn a_full_batch_ack_costs_one_cover_instead_of_a_hash_resolution() {
    let off = measure(&counted_broker(false, false).await, false).await;
    let on = measure(&counted_broker(true, false).await, false).await;
    let fused = measure(&counted_broker(true, true).await, true).await;
    for (name, c) in [
        ("registry off", &off),
        ("registry on, fusion off", &on),
        ("registry and fusion on, 20 acks at once", &fused),
    ] {
        println!(
            "{name:>42}: {:.2} statements/ack ({:.1} inside functions), {:.1} buffers/ack, \
             {:.3} ms/ack; calls: by_hash {}, ack_at {}, ack_multi {}",
            c.statements, c.nested, c.buffers, c.exec_ms, c.by_hash, c.cover, c.multi
        );
    }
    assert_eq!((off.by_hash, off.cover, off.multi), (ACKS as i64, 0, 0));
    assert_eq!(off.statements, 1.0);
    assert_eq!((on.by_hash, on.cover, on.multi), (0, ACKS as i64, 0));
    assert_eq!(on.statements, 1.0);
    assert!(on.nested < off.nested, "{on:?} against {off:?}");
    assert!(on.buffers < off.buffers, "{on:?} against {off:?}");
    // A flush of one row calls log_ack_at_v1 itself, a larger one log_ack_multi_v1.
    let flushes = fused.multi + fused.cover;
    assert_eq!(fused.by_hash, 0);
    assert!(flushes >= 1 && flushes <= ACKS as i64, "{fused:?}");
    assert_eq!(
        fused.statements,
        flushes as f64 / ACKS as f64,
        "{:?}",
        fused.seen
    );
}

/// One `/ack/batch` acking `ACKS` batches of as many partitions (what a wide autopilot answer
/// is acked with): with fusion on, their covers are submitted at once, so they commit in at
/// most one flush per fusion shard instead of one flush per partition, one after another.
#[tokio::test]
async fn a_wide_ack_batch_commits_its_covers_together() {
    let b = counted_broker(true, true).await;
    let db = b.sql().await;
    let batches = pop_round(&b, 0).await;
    let items: Vec<Value> = batches
        .iter()
        .flat_map(|batch| ack_all(batch, "completed"))
        .collect();
    db.batch_execute(
        "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database
                                             WHERE datname = current_database()), 0)",
    )
    .await
    .expect("reset");
    ack_batch(&b, G, items).await.iter().for_each(assert_ok);
    // A flush of one row calls log_ack_at_v1 itself, a larger one log_ack_multi_v1.
    let (multi, lone, by_hash) = (
        calls(&db, "log_ack_multi_v1").await,
        calls(&db, "log_ack_at_v1").await,
        calls(&db, "log_ack_by_hash_v1").await,
    );
    let shards = fusion_metrics(&b).await["shards"]
        .as_i64()
        .expect("fusion shards");
    let flushes = multi + lone;
    println!(
        "{ACKS} covers of one request: {flushes} flushes ({multi} log_ack_multi_v1, \
         {lone} log_ack_at_v1; {shards} shards)"
    );
    assert_eq!(by_hash, 0, "every group was a cover");
    assert!(
        (1..=shards).contains(&flushes),
        "{flushes} flushes for {ACKS} covers"
    );
    let acked: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.log_consumers WHERE committed = $1 AND worker_id IS NULL",
            &[&(BATCH as i64 - 1)],
        )
        .await
        .expect("cursors")
        .get(0);
    assert_eq!(acked, ACKS as i64, "every partition's batch is committed");
}
