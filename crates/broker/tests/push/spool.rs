//! The maintenance routes and the disk spool (docs/engine.md §4.6, docs/wire.md §19) against real
//! PostgreSQL: toggles reach a sibling broker within a second; pushes under push maintenance,
//! during an outage and with PostgreSQL stopped answer `buffered`, write nothing, and are
//! replayed in order under their ids once PostgreSQL takes writes again; a broker killed with
//! a full spool replays it at its next start, torn tail cut off; replay loses and duplicates
//! nothing; pop maintenance answers 204 at once.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::faults::{OwnCluster, QueenProcess};
use crate::common::{self, TestBroker};
use crate::wire::{batch, item, post_bin};

/// `POST /api/v1/system/maintenance[/pop]` with `{"enabled": on}` at `url`.
async fn toggle(http: &reqwest::Client, url: &str, path: &str, on: bool) -> Value {
    let r = http
        .post(format!("{url}/api/v1/system/maintenance{path}"))
        .json(&json!({ "enabled": on }))
        .send()
        .await
        .expect("POST maintenance");
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.expect("JSON answer")
}

async fn maintenance(b: &TestBroker, on: bool) -> Value {
    toggle(&b.http, &b.url, "", on).await
}

/// One JSON push request of `(partition, transactionId)` items to `queue` at `url`.
async fn push_at(http: &reqwest::Client, url: &str, queue: &str, items: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, t)| json!({ "queue": queue, "partition": p, "transactionId": t, "payload": { "t": t } }))
        .collect();
    let r = http
        .post(format!("{url}/api/v1/push"))
        .json(&json!({ "items": items }))
        .send()
        .await
        .expect("POST push");
    let status = r.status();
    let body: Value = r.json().await.expect("JSON answer");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

async fn push(b: &TestBroker, queue: &str, items: &[(&str, &str)]) -> Value {
    push_at(&b.http, &b.url, queue, items).await
}

fn statuses(answer: &Value) -> Vec<String> {
    answer
        .as_array()
        .expect("array answer")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// (transactionId → message_id) of an answer.
fn ids(answer: &Value) -> Vec<(String, String)> {
    answer
        .as_array()
        .expect("array answer")
        .iter()
        .map(|r| {
            (
                r["transaction_id"].as_str().unwrap_or_default().to_string(),
                r["message_id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Messages of `queue` PostgreSQL holds (from the hash sidecar, one row per segment).
async fn stored(db: &tokio_postgres::Client, queue: &str) -> i64 {
    db.query_one(
        "SELECT COALESCE(sum(t.end_offset - t.base_offset + 1), 0)::bigint
         FROM queen.log_txns t
         JOIN queen.log_partitions p ON p.id = t.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = $1",
        &[&queue],
    )
    .await
    .expect("count stored")
    .get(0)
}

/// Waits until `queue` holds `n` messages; fails after `within`.
async fn wait_stored(db: &tokio_postgres::Client, queue: &str, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let have = stored(db, queue).await;
        if have >= n {
            assert_eq!(have, n, "{queue}: no more than what was pushed");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{queue}: {have} of {n} messages stored after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Everything of (queue, partition), in delivery order: (transactionId, id).
async fn drain(
    http: &reqwest::Client,
    url: &str,
    queue: &str,
    partition: &str,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        let r = http
            .get(format!(
                "{url}/api/v1/pop/queue/{queue}/partition/{partition}?batch=1000&autoAck=true"
            ))
            .send()
            .await
            .expect("pop");
        if r.status() == StatusCode::NO_CONTENT {
            return out;
        }
        assert_eq!(r.status(), StatusCode::OK);
        let body: Value = r.json().await.expect("pop body");
        for m in body["messages"].as_array().expect("messages") {
            out.push((
                m["transactionId"].as_str().unwrap_or_default().to_string(),
                m["id"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
}

/// What (queue, partition) delivers is exactly `want`, in that order: nothing lost, nothing
/// twice, each under the id its push was answered with.
async fn assert_delivers(b: &TestBroker, queue: &str, partition: &str, want: &[(String, String)]) {
    let got = drain(&b.http, &b.url, queue, partition).await;
    assert_eq!(got, want, "{queue}/{partition}");
}

/// Spool files left in `dir`.
fn spool_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("spool-"))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_no_spool_files(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !spool_files(dir).is_empty() {
        assert!(
            Instant::now() < deadline,
            "spool files stay: {:?}",
            spool_files(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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

/// The database refuses connections: pushes are spooled rather than failed. While the spool
/// still holds them, a push made after the database is back joins the spool too (it must not
/// overtake them); everything is stored once, in push order.
#[tokio::test]
async fn an_outage_spools_pushes_and_later_pushes_wait_behind_them() {
    // A long first pause of the drain keeps the spool holding after the database is back.
    let b = common::broker_with(|cfg| {
        cfg.db_pool_size = 2;
        cfg.file_buffer_flush_ms = 3000;
    })
    .await;
    push(&b, "out", &[("p", "before")]).await;
    let name = b.pg.get_dbname().unwrap().to_string();
    let mut admin_cfg = b.pg.clone();
    admin_cfg.dbname("postgres");
    let admin = common::connect(&admin_cfg).await;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .await
        .unwrap();

    let mut want = Vec::new();
    for i in 0..3 {
        let answer = push(&b, "out", &[("p", &format!("during-{i}"))]).await;
        assert_eq!(statuses(&answer), ["buffered"], "{answer}");
        want.extend(ids(&answer));
    }
    admin
        .batch_execute(&format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS true"))
        .await
        .unwrap();
    let answer = push(&b, "out", &[("p", "after")]).await;
    assert_eq!(
        statuses(&answer),
        ["buffered"],
        "the spool still holds: {answer}"
    );
    want.extend(ids(&answer));

    let db = b.sql().await;
    wait_stored(&db, "out", 5, Duration::from_secs(15)).await;
    let got = drain(&b.http, &b.url, "out", "p").await;
    assert_eq!(got[0].0, "before");
    assert_eq!(&got[1..], &want[..]);
}

/// PostgreSQL itself is stopped: JSON and binary pushes answer `buffered`; once it runs again
/// the drain stores them, once each, in order.
#[tokio::test]
async fn pushes_while_postgres_is_stopped_are_replayed_after_it_restarts() {
    let mut cluster = OwnCluster::new("spool-stop").await;
    let b = common::broker_on(cluster.config(), |cfg| cfg.db_pool_size = 4).await;
    push(&b, "stop", &[("p", "0")]).await;
    cluster.stop().await;

    let mut want = Vec::new();
    for i in 1..=20 {
        let answer = push(&b, "stop", &[("p", &i.to_string())]).await;
        assert_eq!(statuses(&answer), ["buffered"], "{answer}");
        want.extend(ids(&answer));
    }
    let body = encode_push_plain(
        &[batch("stop", "p", vec![item(Some("21"), b"21")])],
        false,
        false,
    )
    .unwrap();
    let (status, answer) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(statuses(&answer), ["buffered"]);
    want.extend(ids(&answer));
    let (status, _) = b.get("/health").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "PostgreSQL is really down"
    );

    cluster.start().await;
    let db = common::connect(&cluster.config()).await;
    wait_stored(&db, "stop", 22, Duration::from_secs(20)).await;
    let got = drain(&b.http, &b.url, "stop", "p").await;
    assert_eq!(got[0].0, "0");
    assert_eq!(&got[1..], &want[..]);
}

/// A `queen serve` process killed with `kill -9` while its spool holds pushes: the next broker
/// on that spool directory replays them, minus a torn record a crash left at the end; those a
/// crash let reach PostgreSQL already are duplicates, so each transactionId is stored once.
#[tokio::test]
async fn a_killed_broker_spool_is_replayed_at_the_next_start() {
    let pg = common::fresh_database().await;
    let dir = common::scratch_spool_dir();
    let env = [("FILE_BUFFER_DIR", dir.display().to_string())];
    let queen = QueenProcess::start(env!("CARGO_BIN_EXE_queen"), &pg, &env).await;
    let http = reqwest::Client::new();
    toggle(&http, &queen.url, "", true).await;
    let mut want = Vec::new();
    for i in 0..10 {
        let txns: Vec<String> = (0..5).map(|k| format!("k-{}", i * 5 + k)).collect();
        let items: Vec<(&str, &str)> = txns.iter().map(|t| ("p", t.as_str())).collect();
        let answer = push_at(&http, &queen.url, "killed", &items).await;
        assert_eq!(statuses(&answer), ["buffered"; 5]);
        want.extend(ids(&answer));
    }
    queen.kill9();

    // A write the crash cut short: half a record at the end of the newest file.
    let mut files = spool_files(&dir);
    files.sort();
    let newest = dir.join(files.last().expect("a spool file"));
    let bytes = std::fs::read(&newest).unwrap();
    let mut torn = bytes.clone();
    torn.extend_from_slice(&bytes[..bytes.len().min(200) / 2]);
    std::fs::write(&newest, &torn).unwrap();

    // Maintenance ends while no broker runs; meanwhile the first three messages reached
    // PostgreSQL another way (as if the crash came after the drain stored them).
    let db = common::connect(&pg).await;
    db.batch_execute(
        "UPDATE queen.system_state SET value = 'false' WHERE key = 'maintenance_mode'",
    )
    .await
    .unwrap();
    let other = common::broker_on(pg.clone(), |_| {}).await;
    for (txn, _) in &want[..3] {
        assert_eq!(
            statuses(&push(&other, "killed", &[("p", txn)]).await),
            ["queued"]
        );
    }

    let b = common::broker_on(pg.clone(), |cfg| cfg.file_buffer_dir = Some(dir.clone())).await;
    wait_stored(&db, "killed", 50, Duration::from_secs(10)).await;
    let got = drain(&b.http, &b.url, "killed", "p").await;
    let txns: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
    let unique: HashSet<&str> = txns.iter().copied().collect();
    assert_eq!(unique.len(), 50, "each transactionId once: {txns:?}");
    let want_txns: Vec<&str> = want.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(txns, want_txns, "in push order");
    assert_eq!(
        &got[3..],
        &want[3..],
        "replayed under the ids they were answered with"
    );
    wait_no_spool_files(&dir).await;
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
