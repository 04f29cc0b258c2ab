//! The positional ack procedures (docs/engine.md §6.5–6.6, §6.8) that the accelerators and the
//! transaction wire call with a known leased span: `log_ack_at_v1`, `log_ack_v1`,
//! `log_ack_multi_v1` (verdicts realigned to input order, deterministic lock order) and the
//! positional form of `log_transaction_wire_v1`. Leases come from real HTTP pops.

use rand::seq::SliceRandom;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

async fn ack_at(
    db: &tokio_postgres::Client,
    pid: i64,
    group: &str,
    worker: &str,
    upto: i64,
    ok: bool,
) -> Value {
    call(
        db,
        "SELECT queen.log_ack_at_v1($1, $2, $3, $4, $5, 1)::text",
        &[&pid, &group, &worker, &upto, &ok],
    )
    .await
}

#[tokio::test]
async fn ack_at_validates_the_lease_and_the_span() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "pos", "p", &txns("pos", 3)).await;
    let popped = pop(&b, "pos", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let (pid, lease) = (popped.partition_id(), popped.lease_id.as_str());

    assert_eq!(
        ack_at(&db, pid, "g", "someone-else", 1, true).await["error"],
        "invalid or expired lease"
    );
    assert_eq!(
        ack_at(&db, pid, "g", lease, 2, true).await["error"],
        "position beyond leased batch"
    );
    assert_eq!(
        ack_at(&db, pid, "nobody", lease, 1, true).await["error"],
        "consumer not found"
    );
    assert_eq!(
        cursor(&db, pid, "g").await.committed,
        -1,
        "refusals change nothing"
    );

    // A partial positional ack still ends the lease; the rest redelivers.
    let v = ack_at(&db, pid, "g", lease, 0, true).await;
    assert_eq!(
        (v["ok"].clone(), v["acked"].clone()),
        (json!(true), json!(1))
    );
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (0, None));
    assert_eq!(
        ack_at(&db, pid, "g", "", 0, true).await["error"],
        "no leased batch"
    );

    // ok = false releases without advancing: the whole batch redelivers.
    let again = pop(&b, "pos", Some("p"), G, 2, "")
        .await
        .expect("redelivery");
    assert_eq!(again.txns(), vec!["pos-1", "pos-2"]);
    assert_eq!(
        ack_at(&db, pid, "g", &again.lease_id, 2, false).await["ok"],
        true
    );
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (0, None));

    // A stale position never moves the cursor backwards.
    let third = pop(&b, "pos", Some("p"), G, 2, "")
        .await
        .expect("redelivery");
    db.execute("UPDATE queen.log_consumers SET committed = 1 WHERE partition_id = $1 AND consumer_group = 'g'", &[&pid])
        .await
        .expect("move the cursor");
    let v = ack_at(&db, pid, "g", &third.lease_id, 0, true).await;
    assert_eq!(
        (v["ok"].clone(), v["acked"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(cursor(&db, pid, "g").await.committed, 1);

    // The name-addressed form.
    let fourth = pop(&b, "pos", Some("p"), G, 2, "")
        .await
        .expect("the last message");
    let by_name = "SELECT queen.log_ack_v1($1, $2, 'g', $3, 2)::text";
    let missing = call(&db, by_name, &[&"pos", &"nope", &fourth.lease_id]).await;
    assert_eq!(missing["error"], "partition not found");
    let v = call(&db, by_name, &[&"pos", &"p", &fourth.lease_id]).await;
    assert_eq!(
        (v["ok"].clone(), v["acked"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(cursor(&db, pid, "g").await.committed, 2);
}

#[tokio::test]
async fn ack_multi_realigns_verdicts_to_input_order() {
    let b = common::broker().await;
    let db = b.sql().await;
    let mut leases = Vec::new();
    for p in ["a", "b"] {
        push_txns(&b, "multi", p, &txns(&format!("m{p}"), 2)).await;
        let popped = pop(&b, "multi", Some(p), G, 2, "")
            .await
            .expect("two messages");
        leases.push((popped.partition_id(), popped.lease_id));
    }
    let ((pa, la), (pb, lb)) = (leases[0].clone(), leases[1].clone());
    // Input order b, a(forged), a: execution order is a(forged), a, b.
    let pids = vec![pb, pa, pa];
    let groups = vec!["g", "g", "g"];
    let ends = vec![1i64, 1, 1];
    let workers = vec![lb.as_str(), "forged", la.as_str()];
    let counts = vec![2i32, 2, 2];
    let v = call(
        &db,
        "SELECT queen.log_ack_multi_v1($1, $2, $3, $4, $5)::text",
        &[&pids, &groups, &ends, &workers, &counts],
    )
    .await;
    assert_eq!(v["ok"], true);
    assert_eq!(
        v["results"],
        json!([
            { "ok": true, "acked": 2, "error": null },
            { "ok": false, "acked": 0, "error": "invalid or expired lease" },
            { "ok": true, "acked": 2, "error": null },
        ])
    );
    assert_eq!(cursor(&db, pa, "g").await.committed, 1);
    assert_eq!(cursor(&db, pb, "g").await.committed, 1);

    let misaligned = db
        .query_one(
            "SELECT queen.log_ack_multi_v1($1, $2, $3, $4, $5)",
            &[&pids, &groups, &ends, &workers, &vec![1i32]],
        )
        .await;
    assert!(misaligned.is_err(), "misaligned arrays raise");
}

#[tokio::test]
async fn the_transaction_wire_takes_positional_acks() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "wirepos", "p", &txns("wp", 3)).await;
    let popped = pop(&b, "wirepos", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    let wire = "SELECT queen.log_transaction_wire_v1($1, '{}', '{}')::text";
    let beyond = json!({ "acks": [{ "partitionId": pid, "group": "g", "worker": popped.lease_id, "uptoOff": 2, "ok": true, "count": 3 }] });
    let err = db
        .query_one(wire, &[&beyond])
        .await
        .expect_err("beyond the batch");
    let message = err
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(
        message.starts_with("QTXN") && message.contains("position beyond leased batch"),
        "{message}"
    );
    assert!(message.ends_with("transaction rolled back"), "{message}");

    let within = json!({ "acks": [{ "partitionId": pid, "group": "g", "worker": popped.lease_id, "uptoOff": 1, "ok": true, "count": 2 }] });
    let v = call(&db, wire, &[&within]).await;
    assert_eq!(v["acks"], json!([{ "ok": true, "acked": 2 }]));
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker), (1, None));
}

/// Many multi-row flushes over the same 16 consumer rows, each in a random input order, run
/// concurrently: each call locks all of them in one transaction, so only the deterministic
/// (partition, group) order keeps them from deadlocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_multi_row_acks_in_random_input_orders_never_deadlock() {
    const ROWS: usize = 16;
    const TASKS: usize = 8;
    const CALLS: usize = 40;
    let b = common::broker().await;
    let mut rows = Vec::new();
    for p in 0..ROWS {
        let partition = format!("p{p}");
        push_txns(&b, "lockorder", &partition, &txns(&partition, 1)).await;
        let popped = pop(&b, "lockorder", Some(&partition), G, 1, "")
            .await
            .expect("one message");
        rows.push(popped.partition_id());
    }
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (pg, rows) = (b.pg.clone(), rows.clone());
            tokio::spawn(async move {
                let db = common::connect(&pg).await;
                let stmt = db
                    .prepare("SELECT queen.log_ack_multi_v1($1, $2, $3, $4, $5)::text")
                    .await
                    .expect("prepare");
                let mut committed = 0;
                for _ in 0..CALLS {
                    let mut order = rows.clone();
                    order.shuffle(&mut rand::thread_rng());
                    let groups = vec!["g"; ROWS];
                    let ends = vec![0i64; ROWS];
                    // Lease-less: every row is locked and judged, the first call commits them.
                    let workers = vec![""; ROWS];
                    let counts = vec![1i32; ROWS];
                    let row = db
                        .query_one(&stmt, &[&order, &groups, &ends, &workers, &counts])
                        .await
                        .unwrap_or_else(|e| {
                            panic!(
                                "flush failed: {}",
                                e.as_db_error().map(|d| d.message()).unwrap_or("?")
                            )
                        });
                    let v: Value = serde_json::from_str(row.get::<_, &str>(0)).expect("json");
                    committed += v["results"]
                        .as_array()
                        .expect("results")
                        .iter()
                        .filter(|r| r["ok"] == true)
                        .count();
                }
                committed
            })
        })
        .collect();
    let mut committed = 0;
    for t in tasks {
        committed += t.await.expect("no flush deadlocked");
    }
    println!(
        "{} multi-row flushes of {ROWS} rows in {:.2?}",
        TASKS * CALLS,
        started.elapsed()
    );
    assert_eq!(committed, ROWS, "each leased row committed exactly once");
}
