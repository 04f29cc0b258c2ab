//! Where a group starts and what a pop may see: subscription modes decided on first contact,
//! `windowBuffer`, `delayedProcessing` and the minimum pop wait.

use std::time::Duration;

use serde_json::json;

use crate::common;
use crate::common::count;
use crate::support::{ack_all, configure, get, pop, push_txns, txns, Handle};

async fn metadata_modes(db: &tokio_postgres::Client, group: &str) -> Vec<String> {
    db.query(
        "SELECT subscription_mode FROM queen.consumer_groups_metadata WHERE consumer_group = $1",
        &[&group],
    )
    .await
    .expect("metadata")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test]
async fn subscription_new_skips_the_backlog_of_named_groups_only_and_is_decided_once() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "subs", "p1", &txns("old", 3)).await;

    // A named group subscribing with `new` skips the existing backlog…
    pop(
        &b,
        "subs",
        "consumerGroup=fresh&subscriptionMode=new&batch=10",
    )
    .await
    .assert_empty();
    pop(
        &b,
        "subs",
        "consumerGroup=nowish&subscriptionFrom=now&batch=10",
    )
    .await
    .assert_empty();
    // …but queue mode never does.
    let qm = pop(&b, "subs", "subscriptionMode=new&batch=10").await;
    assert_eq!(qm.txns(), vec!["old-0", "old-1", "old-2"]);

    push_txns(&b, "subs", "p1", &txns("late", 2)).await;
    let late = pop(
        &b,
        "subs",
        "consumerGroup=fresh&subscriptionMode=new&batch=10",
    )
    .await;
    assert_eq!(late.txns(), vec!["late-0", "late-1"]);
    ack_all(&b, "fresh", &late).await;

    // A partition created after the group subscribed delivers its whole backlog, although
    // this pop again says `new`: the stored subscription decides, not the request.
    push_txns(&b, "subs", "p2", &txns("newpart", 3)).await;
    let newpart = pop(
        &b,
        "subs",
        "consumerGroup=fresh&subscriptionMode=new&batch=10",
    )
    .await;
    assert_eq!(newpart.txns(), vec!["newpart-0", "newpart-1", "newpart-2"]);
    ack_all(&b, "fresh", &newpart).await;

    // Later hints are ignored: asking for everything now brings nothing old back.
    pop(
        &b,
        "subs",
        "consumerGroup=fresh&subscriptionMode=all&partitions=10&batch=100",
    )
    .await
    .assert_empty();
    pop(
        &b,
        "subs",
        "consumerGroup=fresh&subscriptionFrom=2000-01-01T00:00:00Z&partitions=10&batch=100",
    )
    .await
    .assert_empty();
    assert_eq!(
        metadata_modes(&db, "fresh").await,
        vec!["new"],
        "one durable record"
    );

    // A group whose first contact said `all` reads everything, whatever it says later.
    let all = pop(
        &b,
        "subs",
        "consumerGroup=everything&partitions=10&batch=100",
    )
    .await;
    let mut got = all.txns();
    got.sort();
    assert_eq!(got.len(), 8);
    assert_eq!(metadata_modes(&db, "everything").await, vec!["all"]);
}

#[tokio::test]
async fn subscription_from_a_timestamp_starts_at_the_first_segment_at_or_after_it() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "replay", "Default", &txns("before", 2)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let at: String = db
        .query_one("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')", &[])
        .await
        .expect("now")
        .get(0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    push_txns(&b, "replay", "Default", &txns("after", 2)).await;
    // Python-style microseconds with Z, and the same instant as a numeric offset.
    let r = pop(
        &b,
        "replay",
        &format!("consumerGroup=replayer&subscriptionFrom={at}&batch=10"),
    )
    .await;
    assert_eq!(r.txns(), vec!["after-0", "after-1"]);
    assert_eq!(metadata_modes(&db, "replayer").await, vec!["timestamp"]);
    let offset_form = at.replace('Z', "+00:00").replace('+', "%2B");
    let r = pop(
        &b,
        "replay",
        &format!("consumerGroup=other&subscriptionFrom={offset_form}&batch=10"),
    )
    .await;
    assert_eq!(r.txns(), vec!["after-0", "after-1"]);
}

#[tokio::test]
async fn a_targeted_pop_seeds_only_its_partition_from_its_own_intent() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "lanes", "l1", &txns("l1", 2)).await;
    push_txns(&b, "lanes", "l2", &txns("l2", 2)).await;
    get(
        &b,
        "/api/v1/pop/queue/lanes/partition/l1?consumerGroup=lane&subscriptionMode=new&batch=10",
    )
    .await
    .assert_empty();
    assert!(
        metadata_modes(&db, "lane").await.is_empty(),
        "a targeted pop registers nothing"
    );
    let rows: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'lane'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 1, "only the named partition is seeded");
    push_txns(&b, "lanes", "l1", &txns("next", 1)).await;
    let r = get(
        &b,
        "/api/v1/pop/queue/lanes/partition/l1?consumerGroup=lane&batch=10",
    )
    .await;
    assert_eq!(r.txns(), vec!["next-0"]);
    // Its first wildcard pop registers the group then: l2 is seeded from that request.
    let r = pop(&b, "lanes", "consumerGroup=lane&batch=10&partitions=5").await;
    assert_eq!(r.txns(), vec!["l2-0", "l2-1"]);
}

#[tokio::test]
async fn window_buffer_holds_a_partition_until_it_has_been_quiet() {
    let b = common::broker().await;
    configure(&b, "windowed", json!({ "windowBuffer": 3 })).await;
    push_txns(&b, "windowed", "Default", &txns("w", 1)).await;
    pop(&b, "windowed", "batch=10").await.assert_empty();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    push_txns(&b, "windowed", "Default", &txns("x", 1)).await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    // w-0 is 3.5 s old, but the partition heard x-0 2 s ago: still not quiet.
    pop(&b, "windowed", "batch=10").await.assert_empty();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        pop(&b, "windowed", "batch=10").await.txns(),
        vec!["w-0", "x-0"]
    );
}

#[tokio::test]
async fn delayed_processing_shows_only_segments_old_enough() {
    let b = common::broker().await;
    configure(&b, "delayed", json!({ "delayedProcessing": 3 })).await;
    push_txns(&b, "delayed", "Default", &txns("d", 1)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    push_txns(&b, "delayed", "Default", &txns("e", 1)).await;
    pop(&b, "delayed", "batch=10").await.assert_empty();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    // d-0 is 3.5 s old, e-0 only 2 s: the visible prefix is d-0.
    let r = pop(&b, "delayed", "batch=10").await;
    assert_eq!(r.txns(), vec!["d-0"]);
    ack_all(&b, "__QUEUE_MODE__", &r).await;
    pop(&b, "delayed", "batch=10").await.assert_empty();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pop(&b, "delayed", "batch=10").await.txns(), vec!["e-0"]);
}

#[tokio::test]
async fn min_pop_wait_holds_an_underfull_claim_in_the_broker() {
    let b = common::broker().await;
    configure(&b, "fill", json!({ "minPopWaitTime": 2500 })).await;
    // The broker learns the queue's setting from its first claim.
    push_txns(&b, "fill", "Default", &txns("warm", 1)).await;
    assert_eq!(
        pop(&b, "fill", "batch=5&autoAck=true").await.txns(),
        vec!["warm-0"]
    );

    // Under-full: the pop holds, a push lands, and the batch fills: one answer of five.
    push_txns(&b, "fill", "Default", &txns("a", 1)).await;
    let handle = Handle::of(&b);
    let waiting = tokio::spawn(async move {
        handle
            .get("/api/v1/pop/queue/fill?batch=5&autoAck=true")
            .await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    push_txns(&b, "fill", "Default", &txns("b", 4)).await;
    let r = waiting.await.expect("pop task");
    assert_eq!(
        r.txns(),
        vec!["a-0", "b-0", "b-1", "b-2", "b-3"],
        "one commit carries the whole batch"
    );
    println!("held pop filled its batch after {:?}", r.elapsed);

    // Never full: the hold ends with the window and delivers what is there.
    push_txns(&b, "fill", "Default", &txns("c", 1)).await;
    let r = pop(&b, "fill", "batch=5&autoAck=true").await;
    assert_eq!(r.txns(), vec!["c-0"]);
    println!("under-full pop answered after its window: {:?}", r.elapsed);
    assert!(
        r.elapsed < Duration::from_secs(20),
        "the window ends the hold"
    );
}

#[tokio::test]
async fn a_first_contact_on_an_empty_or_missing_queue_still_subscribes_at_that_moment() {
    let b = common::broker().await;
    let db = b.sql().await;
    // Existing but drained queue: the `new` subscription is stored by the empty pop itself…
    push_txns(&b, "drained", "Default", &txns("old", 1)).await;
    pop(&b, "drained", "batch=1&autoAck=true")
        .await
        .assert_delivered();
    pop(
        &b,
        "drained",
        "batch=5&consumerGroup=late&subscriptionMode=new",
    )
    .await
    .assert_empty();
    assert_eq!(metadata_modes(&db, "late").await, vec!["new"]);
    // …so a message pushed before its next pop is not skipped.
    push_txns(&b, "drained", "Default", &txns("next", 1)).await;
    assert_eq!(
        pop(
            &b,
            "drained",
            "batch=5&consumerGroup=late&subscriptionMode=new"
        )
        .await
        .txns(),
        vec!["next-0"]
    );

    // Missing queue, long-polling: the pop creates nothing (no queue, no subscription), yet
    // its `new` subscription counts from its arrival, so the push that creates the queue
    // wakes it with that message.
    let h = Handle::of(&b);
    let parked = tokio::spawn(async move {
        h.get("/api/v1/pop/queue/notyet?batch=5&consumerGroup=early&subscriptionMode=new&wait=true&timeout=10000").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        metadata_modes(&db, "early").await.is_empty(),
        "no subscription without a queue"
    );
    let queues = "queen.queues WHERE name = 'notyet'";
    assert_eq!(count(&db, queues).await, 0, "a pop creates no queue");
    push_txns(&b, "notyet", "p1", &txns("first", 1)).await;
    assert_eq!(parked.await.expect("pop task").txns(), vec!["first-0"]);

    // Discovery registers a label-wide subscription on first contact too.
    get(
        &b,
        "/api/v1/pop?namespace=labels&consumerGroup=disc&subscriptionMode=new",
    )
    .await
    .assert_empty();
    push_txns(&b, "labels.q", "Default", &txns("l", 1)).await;
    assert_eq!(
        get(
            &b,
            "/api/v1/pop?namespace=labels&consumerGroup=disc&subscriptionMode=new"
        )
        .await
        .txns(),
        vec!["l-0"]
    );
}
