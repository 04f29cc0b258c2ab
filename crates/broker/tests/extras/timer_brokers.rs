//! Timers across several brokers and restarts (docs/engine.md §16.2): each due timer is
//! pushed exactly once, whichever wheels race for it, and none is lost to a broker that dies.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use queen_test_harness::faults::QueenProcess;
use serde_json::{json, Value};

use super::{common, drain, first_message, schedule};

/// Waits until no timer row is left (or `secs` pass); true when none is.
async fn all_fired(db: &tokio_postgres::Client, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if common::count(db, "queen.log_timers").await == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn two_brokers_racing_fire_each_timer_exactly_once() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    const N: usize = 600;
    // Half scheduled through each broker, all due at about the same moment, so both wheels
    // are awake and claiming when they fall due.
    for (half, broker) in [(0, &a), (1, &b)] {
        let ops: Vec<Value> = (0..N / 2)
            .map(|i| {
                let k = half * N / 2 + i;
                let mut op = schedule("race", &format!("k{k}"), &json!({"k": k}), 700);
                op["partition"] = json!(format!("p{}", k % 4));
                op
            })
            .collect();
        for chunk in ops.chunks(200) {
            let (_, r) = broker
                .post("/api/v1/timers", &json!({"operations": chunk}))
                .await;
            assert_eq!(
                r["results"].as_array().map(Vec::len),
                Some(chunk.len()),
                "{r}"
            );
        }
    }
    let db = a.sql().await;
    assert!(all_fired(&db, 20).await, "timers left pending");
    let mut seen: HashMap<String, usize> = HashMap::new();
    for m in drain(&a, "race").await {
        *seen
            .entry(m["transactionId"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), N, "every timer fired");
    assert!(seen.values().all(|&n| n == 1), "a timer fired twice");
    let frames: i64 = db
        .query_one(
            "SELECT COALESCE(sum(end_offset - base_offset + 1), 0)::bigint FROM queen.log_segments",
            &[],
        )
        .await
        .expect("frames")
        .get(0);
    assert_eq!(frames, N as i64, "frames stored");
}

#[tokio::test]
async fn a_claim_left_by_a_dead_broker_runs_out_and_is_fired_once() {
    let a = common::broker().await;
    let mut db = a.sql().await;
    // A broker that claimed the timer and died before its fire committed: its claim hides
    // the row for a while and its token is never presented. Scheduled and claimed in one
    // transaction, so no live wheel sees the row unclaimed.
    let tx = db.transaction().await.expect("begin");
    tx.execute(
        "SELECT queen.log_timers_apply_v1($1, '')",
        &[
            &json!([{"op": "schedule", "queue": "orphan", "timerKey": "k", "partition": "Default",
                   "payload": "eyJ2IjoxfQ==", "txn": "orphan-txn",
                   "messageId": "0198e4c2-0000-7000-8000-000000000002", "delayMs": -1000}]),
        ],
    )
    .await
    .expect("schedule");
    let stale: uuid::Uuid = tx
        .query_one(
            "SELECT claim_token FROM queen.log_timers_claim_v1(10, 1500)",
            &[],
        )
        .await
        .expect("claim")
        .get(0);
    tx.commit().await.expect("commit");
    let (_, peek) = a.get("/api/v1/timers/orphan/k").await;
    assert_eq!(peek["firing"], true, "{peek}");
    let (_, late) = a.delete("/api/v1/timers/orphan/k").await;
    assert_eq!(late["status"], "too_late", "{late}");
    let m = first_message(&a, "orphan", 10)
        .await
        .expect("fired after the claim ran out");
    assert_eq!(m["data"], json!({"v": 1}));
    // The dead broker's fire, arriving late, is refused whole.
    let ghost = db
        .query_one(
            "SELECT queen.log_timers_apply_v1($1, '')",
            &[&json!([{"op": "fire", "queue": "orphan", "timerKey": "k",
                       "token": stale.to_string()}])],
        )
        .await;
    assert!(ghost.is_err_and(|e| format!("{e:?}").contains("QTIMER")));
    assert!(drain(&a, "orphan").await.is_empty(), "fired twice");
}

#[tokio::test]
async fn a_timer_outlives_a_kill_9_of_the_broker_that_scheduled_it() {
    let pg = common::fresh_database().await;
    let first = common::broker_on(pg.clone(), |_| {}).await;
    first.stop().await;
    let queen = QueenProcess::start(env!("CARGO_BIN_EXE_queen"), &pg, &[]).await;
    let http = reqwest::Client::new();
    let r: Value = http
        .post(format!("{}/api/v1/timers", queen.url))
        .json(&json!({"operations": [schedule("phoenix", "k", &json!({"alive": true}), 1500)]}))
        .send()
        .await
        .expect("schedule")
        .json()
        .await
        .expect("json");
    assert_eq!(r["results"][0]["status"], "scheduled", "{r}");
    queen.kill9();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let db = common::connect(&pg).await;
    assert_eq!(
        common::count(&db, "queen.log_timers").await,
        1,
        "nobody fired it"
    );
    let second = common::broker_on(pg, |_| {}).await;
    let m = first_message(&second, "phoenix", 10)
        .await
        .expect("fired after the restart");
    assert_eq!(m["data"], json!({"alive": true}));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(drain(&second, "phoenix").await.is_empty(), "fired twice");
}

#[tokio::test]
async fn a_fire_whose_claim_ran_out_and_was_retaken_is_refused_whole() {
    let b = common::broker().await;
    let db = b.sql().await;
    // No live wheel: the two claims below are the only ones.
    b.stop().await;
    db.execute(
        "SELECT queen.log_timers_apply_v1($1, '')",
        &[
            &json!([{"op": "schedule", "queue": "twice", "timerKey": "k", "partition": "Default",
                   "payload": "e30=", "txn": "twice-txn",
                   "messageId": "0198e4c2-0000-7000-8000-000000000003", "delayMs": -1000}]),
        ],
    )
    .await
    .expect("schedule");
    let claim = || async {
        db.query_one(
            "SELECT claim_token FROM queen.log_timers_claim_v1(10, 1)",
            &[],
        )
        .await
        .expect("claim")
        .get::<_, uuid::Uuid>(0)
    };
    let first = claim().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = claim().await;
    assert_ne!(first, second);
    let fire = |token: uuid::Uuid| {
        let db = &db;
        async move {
            db.query_one(
                "SELECT queen.log_timers_apply_v1($1, '')",
                &[&json!([{"op": "fire", "queue": "twice", "timerKey": "k",
                           "token": token.to_string()}])],
            )
            .await
        }
    };
    let stale = fire(first).await;
    assert!(stale.is_err_and(|e| format!("{e:?}").contains("QTIMER")));
    assert_eq!(
        common::count(&db, "queen.log_timers").await,
        1,
        "the stale fire took the row"
    );
    fire(second).await.expect("the live claim fires");
    assert_eq!(common::count(&db, "queen.log_timers").await, 0);
}
