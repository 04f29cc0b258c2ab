//! Pushes while PostgreSQL cannot take them, without any toggle: unreachable, stopped, or the
//! broker killed with a full spool.

use std::collections::HashSet;
use std::time::Duration;

use queen_proto::push_bin::encode_push_plain;
use reqwest::StatusCode;

use super::{
    drain, ids, push, push_at, spool_files, statuses, toggle, wait_no_spool_files, wait_stored,
};
use crate::common;
use crate::common::faults::{OwnCluster, QueenProcess};
use crate::wire::{batch, item, post_bin};

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
    common::faults::refuse_connections(&admin, &name).await;

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
