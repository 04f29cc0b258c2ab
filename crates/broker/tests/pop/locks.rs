//! Pops never wait on pushes, and never deadlock with transactions or queue deletes: the
//! allocator's partition lock is FOR NO KEY UPDATE (compatible with the key-share lock a new
//! cursor row takes through its foreign key), and a pop only ever tries the key-share locks a
//! queue delete could hold (sql/functions/pop.sql, header).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::{get, pop, push_txns, txns, Handle};

/// Far longer than any of these pops takes; only a pop stuck behind a lock reaches it.
const STUCK: Duration = Duration::from_secs(20);

#[tokio::test]
async fn first_pops_complete_while_a_push_transaction_holds_the_partitions() {
    let b = common::broker().await;
    push_txns(&b, "held", "bundle", &txns("b", 2)).await;
    push_txns(&b, "held", "single", &txns("s", 2)).await;

    // An open push transaction: the bundle allocator's lock on one partition, a whole append
    // (dedup probe, allocator update, segment insert) on the other.
    let writer = b.sql().await;
    writer.batch_execute("BEGIN").await.expect("begin");
    writer
        .execute(
            "SELECT queen.log_lock_partitions_v1($1, $2)",
            &[&vec!["held"], &vec!["bundle"]],
        )
        .await
        .expect("allocator lock");
    let append = writer
        .query_one(
            "SELECT queen.log_push_one_v1('held', 'single', 1, $1, -1, '\\x00'::bytea)::text",
            &[&vec![7u8; 16]],
        )
        .await
        .expect("append")
        .get::<_, String>(0);
    assert!(append.contains("queued"), "{append}");

    // A named group's first wildcard pop registers and seeds cursor rows of both partitions;
    // a targeted pop of a fresh group creates its cursor row lazily.
    let wildcard = pop(
        &b,
        "held",
        "batch=10&partitions=2&consumerGroup=g&autoAck=true",
    );
    let wildcard = tokio::time::timeout(STUCK, wildcard)
        .await
        .expect("the wildcard pop waited on the push transaction");
    let mut got = wildcard.txns();
    got.sort();
    assert_eq!(got, ["b-0", "b-1", "s-0", "s-1"]);
    let targeted = get(
        &b,
        "/api/v1/pop/queue/held/partition/single?consumerGroup=t",
    );
    let targeted = tokio::time::timeout(STUCK, targeted)
        .await
        .expect("the targeted pop waited on the push transaction");
    assert_eq!(targeted.txns(), ["s-0", "s-1"]);

    writer.batch_execute("ROLLBACK").await.expect("rollback");
}

/// What a client saw: the route, the status and the body.
type Answer = (&'static str, StatusCode, Value);

/// Runs `rounds` iterations of `step` and returns every status it saw.
async fn run<F, Fut>(rounds: usize, mut step: F) -> Vec<Answer>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Vec<Answer>>,
{
    let mut seen = Vec::new();
    for i in 0..rounds {
        seen.extend(step(i).await);
    }
    seen
}

async fn post(h: &Handle, path: &'static str, body: Value) -> Answer {
    let r = h
        .http
        .post(format!("{}{path}", h.url))
        .json(&body)
        .send()
        .await
        .expect("POST");
    (path, r.status(), r.json().await.unwrap_or(Value::Null))
}

fn push_op(queue: &str, partition: &str, txn: &str) -> Value {
    json!({ "type": "push", "items": [
        { "queue": queue, "partition": partition, "transactionId": txn, "payload": { "t": txn } }
    ]})
}

/// A consumer: pops several partitions of a queue under a named group (first contacts,
/// cursor creation), then acks what it got in a transaction that also pushes to the other
/// queue, as a pipeline stage would.
async fn consume(h: Handle, me: usize, rounds: usize) -> Vec<Answer> {
    run(rounds, |i| {
        let h = h.clone();
        async move {
            let (queue, other) = if (me + i).is_multiple_of(2) {
                ("race-a", "race-b")
            } else {
                ("race-b", "race-a")
            };
            let group = format!("g{}", (me + i) % 3);
            let reply = h
                .get(&format!(
                    "/api/v1/pop/queue/{queue}?batch=4&partitions=4&consumerGroup={group}"
                ))
                .await;
            let mut seen = vec![("pop", reply.status, reply.body.clone())];
            let mut ops: Vec<Value> = reply
                .messages()
                .iter()
                .map(|m| {
                    json!({ "type": "ack", "transactionId": m["transactionId"],
                            "partitionId": m["partitionId"], "leaseId": m["leaseId"],
                            "status": "completed", "consumerGroup": group })
                })
                .collect();
            ops.push(push_op(
                other,
                &format!("p{}", i % 4),
                &format!("c{me}-{i}"),
            ));
            seen.push(post(&h, "/api/v1/transaction", json!({ "operations": ops })).await);
            let targeted = h
                .get(&format!(
                    "/api/v1/pop/queue/{other}/partition/p{}?consumerGroup=t{i}&autoAck=true",
                    i % 4
                ))
                .await;
            seen.push(("targeted pop", targeted.status, targeted.body));
            seen
        }
    })
    .await
}

/// A producer: one transaction pushing to every partition of both queues.
async fn produce(h: Handle, me: usize, rounds: usize) -> Vec<Answer> {
    run(rounds, |i| {
        let h = h.clone();
        async move {
            let ops: Vec<Value> = (0..8)
                .map(|k| {
                    let queue = if k % 2 == 0 { "race-a" } else { "race-b" };
                    push_op(queue, &format!("p{}", k / 2), &format!("p{me}-{i}-{k}"))
                })
                .collect();
            vec![post(&h, "/api/v1/transaction", json!({ "operations": ops })).await]
        }
    })
    .await
}

/// Deletes the queues over and over while the others work on them.
async fn delete(h: Handle, rounds: usize) -> Vec<Answer> {
    run(rounds, |i| {
        let h = h.clone();
        async move {
            let queue = if i % 2 == 0 { "race-a" } else { "race-b" };
            tokio::time::sleep(Duration::from_millis(15)).await;
            let r = h
                .http
                .delete(format!("{}/api/v1/resources/queues/{queue}", h.url))
                .send()
                .await
                .expect("DELETE");
            vec![("delete", r.status(), r.json().await.unwrap_or(Value::Null))]
        }
    })
    .await
}

#[tokio::test]
async fn pops_transactions_and_queue_deletes_race_without_a_server_error() {
    let b = common::broker().await;
    let h = Handle::of(&b);
    let mut tasks = Vec::new();
    for me in 0..6 {
        tasks.push(tokio::spawn(consume(h.clone(), me, 40)));
    }
    for me in 0..3 {
        tasks.push(tokio::spawn(produce(h.clone(), me, 40)));
    }
    tasks.push(tokio::spawn(delete(h.clone(), 60)));
    let mut answers = 0;
    for t in tasks {
        for (route, status, body) in t.await.expect("race task") {
            answers += 1;
            assert!(
                !status.is_server_error(),
                "{route}: a client saw {status}: {body}"
            );
            assert!(!body.to_string().contains("deadlock"), "{body}");
        }
    }
    assert_eq!(
        answers,
        6 * 40 * 3 + 3 * 40 + 60,
        "every request was answered"
    );
}
