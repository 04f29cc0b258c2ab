//! The SDK against a real broker (a `queen` process on its own embedded PostgreSQL): the
//! examples (the producer pushes 100 messages, the transactional pipeline moves them to the
//! next queue, the worker consumes them there), then the consume loop's nack, lease renewal,
//! limit and stop, and a rejected transaction.

mod common;

use common::Broker;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use queen_client::{AckRef, AckStatus, ConsumeOptions, Error, PushItem, Queen, RawPush};
use serde_json::json;

/// The examples `cargo test` built for this package, beside the test binary's directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(path.is_file(), "{} not built", path.display());
    path
}

fn run(name: &str, url: &str, queue: &str) -> String {
    let out = Command::new(example(name))
        .env("QUEEN_URL", url)
        .env("QUEUE", queue)
        .env("COUNT", "100")
        .output()
        .expect("run example");
    assert!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_and_consume_loop_against_a_real_broker() {
    let broker = Broker::start("examples").await;
    let url = broker.url.clone();

    let sdk = Queen::new(&url);
    let examples = tokio::task::spawn_blocking(move || {
        let produced = run("producer", &url, "sdk-demo");
        let moved = run("pipeline", &url, "sdk-demo");
        let handled = run("worker", &url, "sdk-demo-out");
        (produced, moved, handled)
    });
    let scenarios = async {
        let examples = examples.await.expect("examples ran");
        a_failed_message_is_nacked_and_delivered_again(&sdk).await;
        renewal_keeps_a_slow_handler_s_lease(&sdk).await;
        limit_is_exact_across_parallel_loops(&sdk).await;
        stop_ends_a_waiting_loop(&sdk).await;
        a_transaction_under_a_foreign_lease_is_rejected(&sdk).await;
        framed_pops_read_like_json_pops(&sdk).await;
        lean_push_pop_and_ack_round_trip(&sdk).await;
        examples
    };
    let outcome = tokio::time::timeout(Duration::from_secs(300), scenarios).await;
    broker.stop();
    let (produced, moved, handled) = outcome.expect("scenarios finished within 300 s");
    assert_eq!(produced, "queued 100\n");
    assert_eq!(moved, "moved 100\n");
    assert_eq!(handled, "handled 100 failed 0\n");
}

/// The lean paths (`RawPush`, `PopBody::view`, `ack_refs`) against the broker: every message
/// comes back once with its payload verbatim, the acks take, and a payload that is not JSON
/// is refused by the broker (the client does not check it).
async fn lean_push_pop_and_ack_round_trip(sdk: &Queen) {
    let queue = sdk.queue("sdk-lean").partition("p1");
    let mut push = RawPush::new(&queue, 5, 16);
    for i in 0..5 {
        let id = format!("lean-{i}");
        push.item(Some(&id), |out| {
            out.extend_from_slice(format!(r#"{{"i": {i}, "s": "a\"b"}}"#).as_bytes())
        });
    }
    let tally = queue.push_raw(push).await.expect("push");
    assert_eq!((tally.queued, tally.total()), (5, 5), "{tally:?}");

    let popper = queue.clone().batch(10).wait(false);
    let body = popper.pop_body().await.expect("pop").expect("a batch");
    let view = body.view().expect("view");
    assert_eq!(view.messages.len(), 5);
    for (i, m) in view.messages.iter().enumerate() {
        assert_eq!(m.transaction_id, format!("lean-{i}"));
        let data: serde_json::Value = serde_json::from_slice(m.data).expect("payload");
        assert_eq!(data, json!({"i": i, "s": "a\"b"}));
        assert_eq!(m.delivery_attempt, Some(1));
    }
    let acks: Vec<AckRef<'_>> = view.messages.iter().map(|m| m.completed()).collect();
    assert_eq!(sdk.ack_refs(&acks, None).await.expect("ack"), 0);
    let again = popper.pop_body().await.expect("pop");
    let left = match &again {
        Some(body) => body.view().expect("view").messages.len(),
        None => 0,
    };
    assert_eq!(left, 0, "acked messages are not delivered again");

    let mut bad = RawPush::new(&queue, 1, 8);
    bad.item(None, |out| out.extend_from_slice(b"{not json"));
    match queue.push_raw(bad).await {
        Err(Error::Api { status, .. }) => assert_eq!(status.as_u16(), 400),
        other => panic!("a payload that is not JSON must be refused: {other:?}"),
    }
}

async fn push(sdk: &Queen, queue: &str, n: usize) {
    let items: Vec<PushItem> = (0..n)
        .map(|i| PushItem::json(&json!({ "i": i }), None).expect("item"))
        .collect();
    let results = sdk.queue(queue).push(&items).await.expect("push");
    assert!(results.iter().all(|r| r.is_queued()), "{results:?}");
}

async fn a_failed_message_is_nacked_and_delivered_again(sdk: &Queen) {
    let queue = sdk.queue("sdk-nack");
    queue
        .configure(json!({"retryLimit": 5}))
        .await
        .expect("configure");
    push(sdk, "sdk-nack", 10).await;
    let done = Arc::new(Mutex::new(HashSet::new()));
    let failed_once = Arc::new(Mutex::new(false));
    let options = ConsumeOptions {
        idle: Some(Duration::from_millis(1500)),
        ..Default::default()
    };
    let (consumer, _stop) = queue.batch(4).consumer(options);
    let seen = done.clone();
    let report = consumer
        .each(move |m| {
            let (seen, failed_once) = (seen.clone(), failed_once.clone());
            async move {
                let i = serde_json::from_str::<serde_json::Value>(m.data.get()).unwrap()["i"]
                    .as_i64()
                    .unwrap();
                let mut first = failed_once.lock().unwrap();
                if i == 3 && !*first {
                    *first = true;
                    return Err("boom");
                }
                seen.lock().unwrap().insert(i);
                Ok(())
            }
        })
        .await
        .expect("consume");
    assert_eq!(*done.lock().unwrap(), (0..10).collect::<HashSet<i64>>());
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(report.acks_refused, 0, "{report:?}");
}

async fn renewal_keeps_a_slow_handler_s_lease(sdk: &Queen) {
    let queue = sdk.queue("sdk-renew");
    queue
        .configure(json!({"leaseTime": 1}))
        .await
        .expect("configure");
    push(sdk, "sdk-renew", 1).await;
    let options = ConsumeOptions {
        idle: Some(Duration::from_millis(1500)),
        renew_every: Some(Duration::from_millis(300)),
        renew_seconds: 2,
        ..Default::default()
    };
    let (consumer, _stop) = queue.consumer(options);
    let report = consumer
        .each(|_| async {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            Ok::<_, String>(())
        })
        .await
        .expect("consume");
    // Without renewal the 1 s lease expires, the ack is refused and the message comes back.
    assert_eq!((report.handled, report.acks_refused), (1, 0), "{report:?}");
}

async fn limit_is_exact_across_parallel_loops(sdk: &Queen) {
    push(sdk, "sdk-limit", 50).await;
    let options = ConsumeOptions {
        concurrency: 3,
        limit: Some(20),
        idle: Some(Duration::from_secs(3)),
        ..Default::default()
    };
    let (consumer, _stop) = sdk.queue("sdk-limit").batch(7).consumer(options);
    let report = consumer
        .batch(|_| async { Ok::<_, String>(()) })
        .await
        .expect("consume");
    assert_eq!(report.handled, 20, "{report:?}");
}

async fn stop_ends_a_waiting_loop(sdk: &Queen) {
    sdk.queue("sdk-stop")
        .configure(json!({}))
        .await
        .expect("configure");
    let (consumer, stop) = sdk.queue("sdk-stop").consumer(ConsumeOptions::default());
    let started = Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.stop();
    });
    let report = consumer
        .each(|_| async { Ok::<_, String>(()) })
        .await
        .expect("consume");
    assert_eq!(report.handled, 0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        started.elapsed()
    );
}

async fn a_transaction_under_a_foreign_lease_is_rejected(sdk: &Queen) {
    push(sdk, "sdk-tx", 1).await;
    let mut msg = sdk
        .queue("sdk-tx")
        .pop()
        .await
        .expect("pop")
        .expect("a message")
        .messages
        .remove(0);
    msg.lease_id = "not-the-lease".into();
    let next = PushItem::json(&json!({"n": 1}), None).expect("item");
    let err = sdk
        .transaction()
        .push("sdk-tx-out", "Default", vec![next])
        .ack(&msg, AckStatus::Completed, None)
        .commit()
        .await
        .expect_err("rolled back");
    match err {
        Error::Rejected { reason, message } => {
            assert_eq!(reason, "rejected_ack");
            assert!(message.contains("rolled back"), "{message}");
        }
        other => panic!("expected a rejection, got {other}"),
    }
    let out = sdk.queues().await.expect("queues").to_string();
    assert!(
        !out.contains("sdk-tx-out\""),
        "the rolled-back push created its queue: {out}"
    );
}

async fn framed_pops_read_like_json_pops(sdk: &Queen) {
    let queue = sdk.queue("sdk-framed");
    let items: Vec<PushItem> = (0..6)
        .map(|i| {
            PushItem::json(&json!({ "i": i, "s": "é\"x" }), Some(format!("f{i}"))).expect("item")
        })
        .collect();
    queue.push(&items[..3]).await.expect("json push");
    queue
        .push_binary(&items[3..], true)
        .await
        .expect("binary push");
    let framed = queue.clone().group("framed").batch(10).framed(true);
    let json = queue.clone().group("json").batch(10);
    let a = framed.pop().await.expect("framed pop").expect("messages");
    let b = json.pop().await.expect("json pop").expect("messages");
    let view = |p: &queen_client::PopResponse| -> Vec<(String, String, String, Option<i64>)> {
        p.messages
            .iter()
            .map(|m| {
                (
                    m.id.clone(),
                    m.transaction_id.clone(),
                    m.data.get().to_string(),
                    m.offset,
                )
            })
            .collect()
    };
    assert_eq!(view(&a).len(), 6);
    assert_eq!(
        view(&a),
        view(&b),
        "the framed answer reads as the JSON one"
    );
    assert!(!a.lease_id.is_empty());
    let acks: Vec<_> = a
        .messages
        .iter()
        .map(queen_client::AckItem::completed)
        .collect();
    let results = sdk.ack_batch(&acks, Some("framed")).await.expect("ack");
    assert!(results.iter().all(|r| r.success), "{results:?}");
    assert!(framed
        .clone()
        .wait(false)
        .pop()
        .await
        .expect("pop")
        .is_none());
}
