//! The set-based claim against its reference. `log_pop_candidates_v1` claims an ordered list of
//! candidates a round at a time (a lock-free read, one lock of the claimable prefix, one segment
//! statement, one lease update); its contract is the per-candidate loop over
//! `log_pop_claim_v1`, the claim of one partition. Both run, each in a transaction rolled back,
//! on the same state for many (order, budget, partition cap, group, autoAck) draws over
//! candidates of every kind: fresh, leased, locked by another transaction, drained,
//! mid-segment, emptied by retention, behind a window or a delay, expired by ttl, unknown. The
//! deliveries (partitions, attempts, segments, blobs) and the verdicts must be identical.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::common::{self, TestBroker};
use crate::support::configure;

/// The per-candidate loop the set-based claim replaced, kept here as its specification: each
/// candidate in order gets the one-partition claim with what is left of the budget.
const REFERENCE: &str = "
CREATE FUNCTION pg_temp.reference_claim(
    p_pids bigint[], p_group text, p_budget int, p_worker text, p_auto_ack bool, p_max int)
RETURNS TABLE(meta jsonb, blobs bytea[], states jsonb) LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
    v_left int := p_budget;
    v_claimed int := 0;
    r record;
    v_meta jsonb[] := '{}';
    v_states jsonb[] := '{}';
    v_blobs bytea[] := '{}';
BEGIN
    FOREACH v_pid IN ARRAY p_pids LOOP
        EXIT WHEN v_left <= 0 OR v_claimed >= GREATEST(p_max, 1);
        SELECT * INTO r FROM queen.log_pop_claim_v1(v_pid, p_group, v_left, 30, p_worker,
                                                    p_auto_ack, 'all', '', false);
        CONTINUE WHEN r.r_partition IS NULL;
        v_states := v_states || jsonb_strip_nulls(jsonb_build_object(
            'p', r.r_partition, 's', r.r_state, 'until', r.r_until, 'lastOff', r.r_last_off));
        IF r.r_state = 'took' THEN
            v_claimed := v_claimed + 1;
            v_left := v_left - r.r_taken;
            v_meta := v_meta || jsonb_build_object(
                'partition', r.r_partition, 'partitionId', v_pid, 'queue', r.r_queue,
                'deliveryAttempt', r.r_attempt,
                'segments', queen.log_pop_segments_json_v1(r.r_bases, r.r_starts, r.r_takes,
                                                            r.r_counts, r.r_created));
            v_blobs := v_blobs || r.r_blobs;
        END IF;
    END LOOP;
    meta := jsonb_build_object('partitions', to_jsonb(v_meta));
    states := to_jsonb(v_states);
    blobs := v_blobs;
    RETURN NEXT;
END $$;";

/// Fills six queues with partitions of several segments (1–3 messages each).
async fn fill(b: &TestBroker) {
    let queues = [
        ("sc-plain", json!({})),
        ("sc-more", json!({})),
        ("sc-window", json!({ "windowBuffer": 60 })),
        ("sc-delay", json!({ "delayedProcessing": 60 })),
        ("sc-ttl", json!({ "ttl": 1 })),
    ];
    for (queue, options) in &queues {
        configure(b, queue, options.clone()).await;
        for p in 0..6 {
            for round in 0..3 {
                let payloads: Vec<Value> = (0..1 + (p + round) % 3).map(|i| json!(i)).collect();
                b.push(queue, &format!("p{p}"), &payloads).await;
            }
        }
    }
    // sc-ttl's messages must be older than its ttl.
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
}

/// Every partition id of the `sc-*` queues plus two that do not exist.
async fn candidates(db: &Client) -> Vec<i64> {
    let mut ids: Vec<i64> = db
        .query(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
             WHERE q.name LIKE 'sc-%' ORDER BY p.id",
            &[],
        )
        .await
        .expect("partitions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    ids.extend([i64::MAX - 1, i64::MAX - 2]);
    ids
}

/// Gives the queue-mode cursors of `sc-plain` and `sc-more` every state a candidate can be in.
async fn vary(db: &Client) {
    let group = "__QUEUE_MODE__";
    let ids = |queue: &str, p: &str| {
        format!(
            "(SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = '{queue}' AND p.name = '{p}')"
        )
    };
    // Cursor rows for every partition of the two queues, then the variety.
    db.query(
        "SELECT claimed FROM queen.log_pop_candidates_v1(
             ARRAY(SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                   WHERE q.name IN ('sc-plain', 'sc-more')), $1, 1000, 30, 'seed', false, 100,
             'all', '', false)",
        &[&group],
    )
    .await
    .expect("seed cursors");
    db.batch_execute(&format!(
        "UPDATE queen.log_consumers SET worker_id = NULL, lease_expires_at = NULL, batch_end = NULL,
             committed = -1 WHERE consumer_group = '{group}';
         UPDATE queen.log_consumers SET worker_id = 'other', batch_end = 3,
             lease_expires_at = now() + interval '1 minute' WHERE partition_id = {leased};
         UPDATE queen.log_consumers SET worker_id = 'gone', batch_end = 3,
             lease_expires_at = now() - interval '1 second' WHERE partition_id = {expired};
         UPDATE queen.log_consumers c SET committed = p.last_offset FROM queen.log_partitions p
             WHERE p.id = c.partition_id AND c.partition_id = {drained};
         UPDATE queen.log_consumers SET committed = 1 WHERE partition_id = {mid};
         DELETE FROM queen.log_segments WHERE partition_id = {emptied};",
        leased = ids("sc-plain", "p1"),
        expired = ids("sc-plain", "p2"),
        drained = ids("sc-plain", "p3"),
        mid = ids("sc-more", "p4"),
        emptied = ids("sc-more", "p5"),
    ))
    .await
    .expect("vary the cursors");
}

/// One claim in a transaction that is rolled back: (meta, states, blobs), with what differs
/// between two claims of the same state (lease instants) taken out.
async fn claim(db: &mut Client, sql: &str, args: &Args) -> (Value, Value, Vec<Vec<u8>>) {
    let tx = db.transaction().await.expect("begin");
    let row = tx
        .query_one(
            sql,
            &[
                &args.pids,
                &args.group,
                &args.budget,
                &"w",
                &args.auto_ack,
                &args.max,
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    tx.rollback().await.expect("rollback");
    let mut meta: Value = row.get(0);
    for p in meta["partitions"].as_array_mut().expect("partitions") {
        p.as_object_mut()
            .expect("partition")
            .remove("leaseExpiresAt");
    }
    let mut states: Vec<Value> = serde_json::from_value(row.get(1)).expect("states");
    for s in &mut states {
        let s = s.as_object_mut().expect("state");
        let dated = s.remove("until").is_some();
        s.insert("dated".into(), json!(dated));
    }
    // Names repeat across queues and a verdict names no queue: compare them as a multiset.
    states.sort_by_key(|s| s.to_string());
    (meta, Value::from(states), row.get(2))
}

struct Args {
    pids: Vec<i64>,
    group: &'static str,
    budget: i32,
    max: i32,
    auto_ack: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_set_based_claim_answers_like_the_claim_of_one_partition_at_a_time() {
    let b = common::broker().await;
    fill(&b).await;
    let mut db = b.sql().await;
    db.batch_execute(REFERENCE).await.expect("reference");
    vary(&db).await;
    // Another transaction holds one cursor row: both claims must skip it.
    let mut holder = b.sql().await;
    let hold = holder.transaction().await.expect("begin");
    hold.execute(
        "SELECT 1 FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = 'sc-more' AND p.name = 'p0' FOR UPDATE OF c",
        &[],
    )
    .await
    .expect("hold a row");

    let all = candidates(&db).await;
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut took = 0;
    for draw in 0..60 {
        let mut pids = all.clone();
        pids.shuffle(&mut rng);
        pids.truncate(rng.gen_range(1..=all.len()));
        let args = Args {
            pids,
            group: ["__QUEUE_MODE__", "fresh-group"][draw % 2],
            budget: [1, 2, 3, 5, 8, 40, 1000][rng.gen_range(0..7)],
            max: [1, 2, 3, 10, 100][rng.gen_range(0..5)],
            auto_ack: rng.gen_bool(0.3),
        };
        let reference = claim(
            &mut db,
            "SELECT meta, states, blobs FROM pg_temp.reference_claim($1, $2, $3, $4, $5, $6)",
            &args,
        )
        .await;
        let set_based = claim(
            &mut db,
            "SELECT meta, states, blobs FROM queen.log_pop_candidates_v1(
                 $1, $2, $3, 30, $4, $5, $6, 'all', '', false)",
            &args,
        )
        .await;
        assert_eq!(
            set_based, reference,
            "seed {seed}, draw {draw}: budget {}, max {}, group {}, autoAck {}, candidates {:?}",
            args.budget, args.max, args.group, args.auto_ack, args.pids
        );
        took += reference.0["partitions"].as_array().map_or(0, Vec::len);
    }
    assert!(took > 30, "the draws claimed something ({took} partitions)");
    hold.rollback().await.expect("release");
}
