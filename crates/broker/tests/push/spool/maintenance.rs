//! The maintenance routes, their reach across brokers, and pushes under push maintenance.

use std::time::{Duration, Instant};

use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{
    assert_delivers, ids, maintenance, push, spool_files, statuses, toggle, wait_no_spool_files,
    wait_stored,
};
use crate::common;
use crate::wire::{batch, item, post_bin};

#[tokio::test]
async fn bad_maintenance_bodies_are_400_and_the_state_reads_back() {
    let b = common::broker().await;
    for body in [
        json!({}),
        json!({"enabled": "yes"}),
        json!([true]),
        json!({"enabled": null}),
    ] {
        for path in [
            "/api/v1/system/maintenance",
            "/api/v1/system/maintenance/pop",
        ] {
            let (status, answer) = b.post(path, &body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {answer}");
            assert!(
                answer["error"].as_str().unwrap().contains("enabled"),
                "{answer}"
            );
        }
    }
    let (status, answer) = b
        .post_raw(
            "/api/v1/system/maintenance",
            "application/json",
            b"{".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().starts_with("bad body"),
        "{answer}"
    );

    let (status, state) = b.get("/api/v1/system/maintenance").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state["maintenanceMode"], false);
    assert_eq!(state["bufferedMessages"], 0);
    assert_eq!(state["bufferHealthy"], true);
    let on = maintenance(&b, true).await;
    assert_eq!(on["maintenanceMode"], true);
    let (_, state) = b.get("/api/v1/system/maintenance").await;
    assert_eq!(state["maintenanceMode"], true);
    let (_, pop) = b.get("/api/v1/system/maintenance/pop").await;
    assert_eq!(pop["popMaintenanceMode"], false);
    let pop = toggle(&b.http, &b.url, "/pop", true).await;
    assert_eq!(pop["popMaintenanceMode"], true);
    let db = b.sql().await;
    let rows: Vec<(String, Value)> = db
        .query(
            "SELECT key, value FROM queen.system_state ORDER BY key",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("maintenance_mode".to_string(), json!(true)),
            ("pop_maintenance_mode".to_string(), json!(true)),
        ]
    );
}

/// A toggle through one broker changes what a sibling on the same database does within a
/// second: its pushes answer `buffered`, its pops 204 (and back when turned off).
#[tokio::test]
async fn toggles_reach_a_sibling_broker_within_a_second() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    let items: Vec<(String, String)> = (0..100).map(|i| ("p".into(), format!("m-{i}"))).collect();
    let refs: Vec<(&str, &str)> = items
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    push(&a, "sib", &refs).await;
    // Warm b's cached flags, so the toggle has a stale read to overcome.
    assert_eq!(
        statuses(&push(&b, "sib-w", &[("p", "w-0")]).await),
        ["queued"]
    );

    let toggled = Instant::now();
    toggle(&a.http, &a.url, "/pop", true).await;
    let mut n = 0;
    loop {
        let (status, _) = b.get("/api/v1/pop/queue/sib?batch=1&autoAck=true").await;
        if status == StatusCode::NO_CONTENT {
            break;
        }
        n += 1;
        assert!(
            toggled.elapsed() < Duration::from_secs(1),
            "pop maintenance not seen in 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "pop maintenance seen by the sibling after {:?}",
        toggled.elapsed()
    );
    assert!(
        n < 100,
        "204 while messages wait: maintenance, not an empty queue"
    );

    let toggled = Instant::now();
    maintenance(&a, true).await;
    let mut i = 0;
    loop {
        let answer = push(&b, "sib-w", &[("p", &format!("v-{i}"))]).await;
        if statuses(&answer) == ["buffered"] {
            break;
        }
        i += 1;
        assert!(
            toggled.elapsed() < Duration::from_secs(1),
            "push maintenance not seen in 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "push maintenance seen by the sibling after {:?}",
        toggled.elapsed()
    );

    let toggled = Instant::now();
    toggle(&a.http, &a.url, "/pop", false).await;
    maintenance(&a, false).await;
    loop {
        let (status, _) = b.get("/api/v1/pop/queue/sib?batch=1&autoAck=true").await;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            toggled.elapsed() < Duration::from_secs(1),
            "pop maintenance end not seen in 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // b's spooled push reaches PostgreSQL once b sees the end of push maintenance.
    wait_stored(&a.sql().await, "sib-w", i + 2, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn pop_maintenance_answers_a_waiting_pop_204_at_once() {
    let b = common::broker().await;
    push(&b, "pm", &[("p", "x")]).await;
    toggle(&b.http, &b.url, "/pop", true).await;
    let started = Instant::now();
    let (status, body) = b
        .get("/api/v1/pop/queue/pm?batch=1&wait=true&timeout=10000")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    toggle(&b.http, &b.url, "/pop", false).await;
    let (status, body) = b.get("/api/v1/pop/queue/pm?batch=1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["messages"][0]["transactionId"], "x");
}

/// Under push maintenance JSON pushes, plain and pre-compressed binary pushes answer
/// `buffered` and nothing reaches PostgreSQL (transactions with pushes are refused); when it
/// ends the spool is replayed in push order under the answered ids, and its files go.
#[tokio::test]
async fn pushes_under_maintenance_are_buffered_then_replayed_in_order() {
    let b = common::broker().await;
    let db = b.sql().await;
    let dir = b.server.as_ref().unwrap().state.cfg.spool_dir();
    maintenance(&b, true).await;

    let mut want_a: Vec<(String, String)> = Vec::new();
    let mut want_b: Vec<(String, String)> = Vec::new();
    let first = push(&b, "mq", &[("a", "1"), ("b", "2"), ("a", "3"), ("a", "1")]).await;
    assert_eq!(statuses(&first), ["buffered"; 4]);
    assert_eq!(
        first[3]["message_id"], first[0]["message_id"],
        "a repeat copies its leader"
    );
    let first = ids(&first);
    want_a.extend([first[0].clone(), first[2].clone()]);
    want_b.push(first[1].clone());

    let plain = encode_push_plain(
        &[
            batch("mq", "a", vec![item(Some("4"), b"{}")]),
            batch("mq", "b", vec![item(Some("5"), b"[5]")]),
        ],
        false,
        false,
    )
    .unwrap();
    let (status, answer) = post_bin(&b, "/api/v1/push", plain).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(statuses(&answer), ["buffered"; 2]);
    let answer = ids(&answer);
    want_a.push(answer[0].clone());
    want_b.push(answer[1].clone());

    let sent = encode_push_precompressed(
        &[batch(
            "mq",
            "a",
            vec![item(Some("6"), b"6"), item(None, b"7")],
        )],
        true,
    )
    .unwrap();
    let (status, counts) = post_bin(&b, "/api/v1/push", sent.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{counts}");
    assert_eq!(
        counts,
        json!({"count": 2, "queued": 0, "duplicate": 0, "error": 0, "buffered": 2})
    );
    let mut no_counts = sent;
    no_counts[4] &= !2;
    let (_, answer) = post_bin(&b, "/api/v1/push", no_counts).await;
    // The client's retry of the same body: spooled again, a duplicate on replay.
    assert_eq!(statuses(&answer), ["buffered"; 2]);
    want_a.extend(ids(&answer));

    let (status, refused) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"queue": "mq", "payload": 1}]}]}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("spooled"),
        "{refused}"
    );

    assert_eq!(
        common::count(&db, "queen.queues").await,
        0,
        "nothing reached PostgreSQL"
    );
    assert_eq!(common::count(&db, "queen.log_segments").await, 0);
    let (_, state) = b.get("/api/v1/system/maintenance").await;
    assert_eq!(state["bufferedMessages"], 9, "{state}"); // the repeat of "1" is no message
    assert!(!spool_files(&dir).is_empty());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        common::count(&db, "queen.log_segments").await,
        0,
        "still nothing"
    );

    maintenance(&b, false).await;
    wait_stored(&db, "mq", 7, Duration::from_secs(5)).await;
    assert_delivers(&b, "mq", "a", &want_a).await;
    assert_delivers(&b, "mq", "b", &want_b).await;
    wait_no_spool_files(&dir).await;
    let (_, state) = b.get("/api/v1/system/maintenance").await;
    assert_eq!(state["bufferedMessages"], 0, "{state}");
    // Drained: pushes go straight to PostgreSQL again.
    assert_eq!(statuses(&push(&b, "mq", &[("a", "8")]).await), ["queued"]);
}

/// A spool at its byte limit refuses further pushes with 503; with the spool off, push
/// maintenance refuses every push with 503.
#[tokio::test]
async fn a_full_or_absent_spool_answers_503() {
    let b = common::broker_with(|cfg| cfg.file_buffer_max_bytes = 4096).await;
    maintenance(&b, true).await;
    let big = "x".repeat(1500);
    let mut refused = None;
    for i in 0..10 {
        let r = b
            .http
            .post(b.at("/api/v1/push"))
            .json(&json!({"items": [{"queue": "full", "transactionId": format!("f-{i}"), "payload": big}]}))
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(r.headers()["retry-after"], "1");
            refused = Some((i, r.json::<Value>().await.unwrap()));
            break;
        }
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let (i, body) = refused.expect("the spool fills up");
    assert!(i >= 2, "some pushes fit first");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("FILE_BUFFER_MAX_BYTES"),
        "{body}"
    );

    let off = b.sibling(|cfg| cfg.file_buffer_enabled = false).await;
    let (status, body) = off
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "full", "payload": 1}]}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("FILE_BUFFER_ENABLED"),
        "{body}"
    );
    let (_, state) = off.get("/api/v1/system/maintenance").await;
    assert_eq!(state["bufferHealthy"], false, "no spool: {state}");
}

/// What the spool costs (debug build, shared machine: orders of magnitude only): sequential
/// buffered pushes pay one `fdatasync` each; concurrent ones share syncs (group commit); then
/// the drain's replay rate. Everything pushed is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_cost_is_printed() {
    let b = common::broker().await;
    let db = b.sql().await;
    maintenance(&b, true).await;
    let request = |base: usize| -> Vec<(String, String)> {
        (0..10)
            .map(|k| (format!("p{}", k % 4), format!("c-{}", base + k)))
            .collect()
    };
    let started = Instant::now();
    for r in 0..200 {
        let items = request(r * 10);
        let refs: Vec<(&str, &str)> = items
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        assert_eq!(statuses(&push(&b, "cost", &refs).await), ["buffered"; 10]);
    }
    let sequential = started.elapsed();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (http, url) = (b.http.clone(), b.url.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..50 {
                let items = request(2000 + (w * 50 + r) * 10);
                let refs: Vec<(&str, &str)> = items
                    .iter()
                    .map(|(p, t)| (p.as_str(), t.as_str()))
                    .collect();
                let answer = super::push_at(&http, &url, "cost", &refs).await;
                assert_eq!(statuses(&answer), ["buffered"; 10]);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let concurrent = started.elapsed();
    let started = Instant::now();
    maintenance(&b, false).await;
    wait_stored(&db, "cost", 6000, Duration::from_secs(120)).await;
    let drained = started.elapsed();
    println!(
        "spool: 200 sequential requests of 10 in {sequential:?} ({:.0} req/s); \
         400 requests of 10 from 8 clients in {concurrent:?} ({:.0} req/s); \
         6000 messages replayed in {drained:?} ({:.0} msg/s)",
        200.0 / sequential.as_secs_f64(),
        400.0 / concurrent.as_secs_f64(),
        6000.0 / drained.as_secs_f64(),
    );
}
