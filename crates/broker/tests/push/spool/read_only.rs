//! A server that answers but refuses writes (docs/engine.md §12.5): a standby, a demoted
//! primary, a database put in read-only mode. Here the broker's database is made read-only
//! (`ALTER DATABASE … SET default_transaction_read_only`, which binds each session at its
//! start, and its backends terminated), so every write meets SQLSTATE 25006. That is an outage,
//! not a refusal: pushes answer `buffered`, pops, acks and transactions 503 with `Retry-After`,
//! the spool keeps everything — none of it quarantined — and the broker finds the database
//! writable again on its own (its connections that met the read-only server are retired).

use std::time::Duration;

use queen_broker::spool::QUARANTINE_FILE;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{drain, ids, maintenance, push, statuses, wait_no_spool_files, wait_stored};
use crate::common;
use crate::common::TestBroker;

/// Sets (or resets) `default_transaction_read_only` on the broker's database and terminates
/// its sessions but `keep` (a backend pid), through `admin` (a session of another database).
async fn read_only(admin: &tokio_postgres::Client, b: &TestBroker, on: bool, keep: i32) {
    let name = b.pg.get_dbname().expect("a database name");
    let setting = match on {
        true => "SET default_transaction_read_only = on",
        false => "RESET default_transaction_read_only",
    };
    admin
        .batch_execute(&format!("ALTER DATABASE \"{name}\" {setting}"))
        .await
        .expect("alter database");
    if on {
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> $2",
                &[&name, &keep],
            )
            .await
            .expect("terminate the broker's sessions");
    }
}

/// A session of the cluster's `postgres` database (which stays writable).
async fn admin_of(b: &TestBroker) -> tokio_postgres::Client {
    let mut cfg = b.pg.clone();
    cfg.dbname("postgres");
    common::connect(&cfg).await
}

/// GET or POST `path`; asserts a 503 with `Retry-After` and a JSON `error`.
async fn assert_503(b: &TestBroker, path: &str, body: Option<Value>) {
    let request = match &body {
        Some(body) => b.http.post(b.at(path)).json(body),
        None => b.http.get(b.at(path)),
    };
    let r = request.send().await.expect("request");
    let status = r.status();
    let retry_after = r.headers().get("retry-after").cloned();
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {answer}");
    assert!(retry_after.is_some(), "{path}: a 503 carries Retry-After");
    assert!(
        answer["error"].is_string(),
        "{path}: a JSON error: {answer}"
    );
}

/// A broker with a small pool whose spool (in a scratch directory, returned) flushes often.
async fn spooling_broker() -> (common::TestBroker, std::path::PathBuf) {
    let spool_dir = common::scratch_spool_dir();
    let dir = spool_dir.clone();
    let b = common::broker_with(move |cfg| {
        cfg.db_pool_size = 2;
        cfg.file_buffer_flush_ms = 50;
        cfg.file_buffer_dir = Some(dir);
    })
    .await;
    (b, spool_dir)
}

#[tokio::test]
async fn a_read_only_server_spools_pushes_and_answers_503_until_it_is_writable() {
    let (b, spool_dir) = spooling_broker().await;
    let mut want = ids(&push(&b, "ro", &[("p", "before-0"), ("p", "before-1")]).await);
    let leased = common::pop(&b, "ro", Some("p"), Some("g"), 1, "").await;
    let leased = leased.expect("a message to ack later");
    let admin = admin_of(&b).await;
    read_only(&admin, &b, true, 0).await;

    for i in 0..10 {
        let answer = push(&b, "ro", &[("p", &format!("during-{i}"))]).await;
        assert_eq!(statuses(&answer), ["buffered"], "{answer}");
        want.extend(ids(&answer));
    }
    assert_503(
        &b,
        "/api/v1/pop/queue/ro/partition/p?batch=1&wait=false&consumerGroup=other",
        None,
    )
    .await;
    assert_503(&b, "/api/v1/pop/queue/ro?batch=1&wait=false", None).await;
    let ack = common::ack_item(&leased.messages[0], "completed");
    let acks = json!({ "acknowledgments": [ack.clone()], "consumerGroup": "g" });
    assert_503(&b, "/api/v1/ack/batch", Some(acks)).await;
    let mut op = ack;
    op["type"] = json!("ack");
    op["consumerGroup"] = json!("g");
    assert_503(
        &b,
        "/api/v1/transaction",
        Some(json!({ "operations": [op] })),
    )
    .await;
    let (status, health) = b.get("/health").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the broker itself is fine: {health}"
    );
    assert_eq!(health["server"]["writable"], false, "{health}");
    // Far more than five drain rounds meet the read-only server meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    read_only(&admin, &b, false, 0).await;
    let db = b.sql().await;
    wait_stored(&db, "ro", 12, Duration::from_secs(20)).await;
    let got = drain(&b.http, &b.url, "ro", "p").await;
    assert_eq!(got, want, "every push, in order, under its answered id");
    let (_, health) = b.get("/health").await;
    assert_eq!(health["server"]["writable"], true, "{health}");
    assert!(
        !spool_dir.join(QUARANTINE_FILE).exists(),
        "nothing answered buffered is quarantined"
    );
    wait_no_spool_files(&spool_dir).await;
}

/// The issue-38 case: the spool holds pushes (here from push maintenance) when the server
/// turns read-only and maintenance ends; the drain's rounds meet 25006 again and again.
/// They wait for a writable server instead of being quarantined after five rounds.
#[tokio::test]
async fn the_drain_never_quarantines_for_a_read_only_server() {
    let (b, spool_dir) = spooling_broker().await;
    maintenance(&b, true).await;
    let mut want = Vec::new();
    for i in 0..20 {
        let answer = push(&b, "drain-ro", &[("p", &format!("m-{i}"))]).await;
        assert_eq!(statuses(&answer), ["buffered"], "{answer}");
        want.extend(ids(&answer));
    }
    // A session opened before the database turns read-only stays writable: it ends
    // maintenance behind the broker's back.
    let db = b.sql().await;
    let keep: i32 = db
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let admin = admin_of(&b).await;
    read_only(&admin, &b, true, keep).await;
    db.batch_execute(
        "UPDATE queen.system_state SET value = 'false' WHERE key = 'maintenance_mode'",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !spool_dir.join(QUARANTINE_FILE).exists(),
        "rounds refused as read-only are never quarantined"
    );

    read_only(&admin, &b, false, 0).await;
    wait_stored(&db, "drain-ro", 20, Duration::from_secs(20)).await;
    let got = drain(&b.http, &b.url, "drain-ro", "p").await;
    assert_eq!(got, want, "every push, in order, under its answered id");
    assert!(!spool_dir.join(QUARANTINE_FILE).exists());
    wait_no_spool_files(&spool_dir).await;
}
