//! The SDK's ephemeral-queue calls against a real broker (a `queen` process on its own embedded
//! PostgreSQL): a declaration and its bounds (429 with `Retry-After`, 413), pops in a group with
//! payloads byte for byte, acks and nacks with their typed outcomes until the retry budget
//! drops a message, the gauges, a malformed ack, reset and delete.

mod common;

use common::Broker;
use std::time::Duration;

use queen_client::ephemeral::{AckOutcome, EphemeralAck, EphemeralOptions, EphemeralPop, Policy};
use queen_client::{Error, Queen};
use serde_json::value::RawValue;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_queue_round_trip_against_a_real_broker() {
    let broker = Broker::start("ephemeral").await;
    let url = broker.url.clone();
    let outcome =
        tokio::time::timeout(Duration::from_secs(120), round_trip(&Queen::new(&url))).await;
    broker.stop();
    outcome.expect("the round trip finished within 120 s");
}

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).expect("JSON")
}

async fn round_trip(sdk: &Queen) {
    let q = sdk.ephemeral("sdk-eph");
    let options = EphemeralOptions {
        max_length: Some(3),
        policy: Some(Policy::Reject),
        retry_limit: Some(1),
        ..Default::default()
    };
    let in_force = q.configure(&options).await.expect("configure");
    assert_eq!(
        (in_force.max_length, in_force.policy, in_force.retry_limit),
        (Some(3), Some(Policy::Reject), Some(1))
    );
    assert_eq!(
        in_force.lease_seconds,
        Some(30),
        "the defaults are filled in"
    );

    let payloads = [raw(r#"{"z":1,"a":1.50}"#), raw("null")];
    let pushed = q.push(None, &payloads).await.expect("push");
    assert_eq!((pushed.pushed, pushed.dropped), (2, 0));
    match q.push(None, &[raw("1"), raw("2")]).await {
        Err(Error::Api {
            status,
            message,
            retry_after,
        }) => {
            assert_eq!(status.as_u16(), 429);
            assert!(message.starts_with("queue_full"), "{message}");
            assert!(retry_after.is_some());
        }
        other => panic!("a full queue answered {other:?}"),
    }
    match q
        .push(None, &[raw("1"), raw("2"), raw("3"), raw("4")])
        .await
    {
        Err(Error::Api {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 413);
            assert!(
                message.starts_with("ephemeral_batch_too_large"),
                "{message}"
            );
        }
        other => panic!("a push past the bounds answered {other:?}"),
    }
    let gauges = q.gauges().await.expect("gauges").expect("the queue exists");
    assert_eq!((gauges.declared, gauges.length), (true, 2));

    let pop = EphemeralPop {
        batch: Some(10),
        group: Some("g".into()),
        ..Default::default()
    };
    let got = q.pop(&pop).await.expect("pop");
    let seen: Vec<(&str, u32)> = got.iter().map(|m| (m.payload.get(), m.attempts)).collect();
    assert_eq!(
        seen,
        [(r#"{"z":1,"a":1.50}"#, 1), ("null", 1)],
        "byte for byte"
    );
    let acks = [
        EphemeralAck::completed(&got[0].id),
        EphemeralAck::failed(&got[1].id, Some("later".into())),
    ];
    let outcomes = q.ack(Some("g"), &acks).await.expect("ack");
    assert_eq!(outcomes, [AckOutcome::Acked, AckOutcome::Redelivered]);
    assert_eq!(
        q.ack(Some("g"), &acks[..1]).await.expect("ack again"),
        [AckOutcome::Unknown]
    );

    let again = q.pop(&pop).await.expect("pop again");
    assert_eq!((again.len(), again[0].attempts), (1, 2));
    let spent = q
        .ack(Some("g"), &[EphemeralAck::failed(&again[0].id, None)])
        .await
        .expect("nack");
    assert_eq!(
        spent,
        [AckOutcome::Acked],
        "its deliveries were spent: dropped"
    );
    let waited = EphemeralPop {
        wait: Some(Duration::from_millis(200)),
        ..pop.clone()
    };
    assert!(q.pop(&waited).await.expect("empty pop").is_empty());
    let gauges = q.gauges().await.expect("gauges").expect("exists");
    assert_eq!(gauges.dropped.retry, 1);

    match q
        .ack(Some("g"), &[EphemeralAck::completed("not-an-id")])
        .await
    {
        Err(Error::Api {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 400);
            assert!(message.starts_with("ephemeral_bad_request"), "{message}");
        }
        other => panic!("a malformed id answered {other:?}"),
    }

    q.push(Some("p2"), &[raw("7")]).await.expect("push to p2");
    let (listed, truncated) = sdk.ephemeral_queues().await.expect("queues");
    assert!(
        !truncated && listed.iter().any(|g| g.queue == "sdk-eph"),
        "{listed:?}"
    );
    assert_eq!(q.reset().await.expect("reset"), 1);
    assert!(q.delete().await.expect("delete"));
    assert!(q.gauges().await.expect("gauges").is_none());
}
