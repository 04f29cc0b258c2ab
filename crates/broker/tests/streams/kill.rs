//! Cycles in flight when their broker is killed (`kill -9`): the client retries each cycle
//! whose answer it lost against a restarted broker, and every cycle commits exactly once —
//! its sink push stored once, its source batch acked once — whatever the kill interrupted.

use std::time::Duration;

use queen_test_harness::faults::QueenProcess;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{common, depth};

const N: usize = 24;

async fn post(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    body: &Value,
) -> reqwest::Result<Value> {
    http.post(format!("{url}{path}"))
        .json(body)
        .send()
        .await?
        .json()
        .await
}

#[tokio::test]
async fn cycles_cut_by_a_broker_kill_commit_once_after_retry() {
    let pg = common::fresh_database().await;
    let bin = env!("CARGO_BIN_EXE_queen");
    let first = QueenProcess::start(bin, &pg, &[]).await;
    let http = reqwest::Client::new();
    let reg = json!({"name": "q", "source_queue": "src", "config_hash": "h"});
    let query = post(&http, &first.url, "/streams/v1/queries", &reg)
        .await
        .expect("register")["query_id"]
        .as_str()
        .expect("query id")
        .to_string();

    // One leased message per partition, one cycle per lease.
    let mut cycles = Vec::new();
    for i in 0..N {
        let push = json!({"items": [{"queue": "src", "partition": format!("p{i}"), "payload": i}]});
        let r = http
            .post(format!("{}/api/v1/push", first.url))
            .json(&push)
            .send()
            .await;
        assert_eq!(r.expect("push").status(), StatusCode::CREATED);
        let popped: Value = http
            .get(format!(
                "{}/api/v1/pop/queue/src/partition/p{i}?batch=1&wait=false&consumerGroup=g",
                first.url
            ))
            .send()
            .await
            .expect("pop")
            .json()
            .await
            .expect("pop answer");
        let m = &popped["messages"][0];
        cycles.push(json!({
            "query_id": query, "partition_id": m["partitionId"], "consumer_group": "g",
            "state_ops": [{"type": "upsert", "key": "n", "value": i}],
            "push_items": [{"queue": "sink", "partition": "p", "payload": {"from": i}}],
            "ack": {"transactionId": m["transactionId"], "leaseId": popped["leaseId"],
                    "status": "completed", "count": 1},
        }));
    }

    // All cycles at once; the broker dies under them once a few have answered.
    let (done, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let in_flight: Vec<_> = cycles
        .iter()
        .map(|c| {
            let (http, url, c, done) = (http.clone(), first.url.clone(), c.clone(), done.clone());
            tokio::spawn(async move {
                let answer = post(&http, &url, "/streams/v1/cycle", &c).await;
                let _ = done.send(());
                answer
            })
        })
        .collect();
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(30), answered.recv())
            .await
            .expect("a cycle answers");
    }
    first.kill9();
    let mut lost = Vec::new();
    for (i, task) in in_flight.into_iter().enumerate() {
        match task.await.expect("join") {
            Ok(answer) if answer["success"] == true => {}
            _ => lost.push(i),
        }
    }

    // The client's retry, against a broker started again: every cycle is sent once more. One
    // whose answer arrived was committed, so it is a replay; one whose answer was lost may
    // have committed or not, and succeeds either way.
    let db = common::connect(&pg).await;
    let before: i64 = db
        .query_one("SELECT count(*) FROM queen.stream_cycles", &[])
        .await
        .expect("count")
        .get(0);
    eprintln!(
        "{} of {N} cycles lost their answer to the kill; {before} had committed",
        lost.len()
    );
    let second = QueenProcess::start(bin, &pg, &[]).await;
    for (i, cycle) in cycles.iter().enumerate() {
        let answer = post(&http, &second.url, "/streams/v1/cycle", cycle)
            .await
            .expect("retry");
        assert_eq!(answer["success"], true, "cycle {i}: {answer}");
        if !lost.contains(&i) {
            assert_eq!(
                answer["replayed"], true,
                "cycle {i} committed before: {answer}"
            );
        }
    }
    let db = common::connect(&pg).await;
    assert_eq!(
        depth(&db, "sink").await,
        N as i64,
        "each sink push stored once"
    );
    let committed: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'g'
             AND committed = 0 AND batch_end IS NULL",
            &[],
        )
        .await
        .expect("cursors")
        .get(0);
    assert_eq!(
        committed, N as i64,
        "each source batch acked once, its lease released"
    );
    let remembered: i64 = db
        .query_one("SELECT count(*) FROM queen.stream_cycles", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(remembered, N as i64);
    second.kill9();
}
