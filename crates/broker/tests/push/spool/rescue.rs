//! A flush PostgreSQL could not take is spooled by the flush itself (docs/engine.md §4.6): a
//! push that arrived behind it while it was in flight lands behind it in the spool, never ahead
//! of it in PostgreSQL, and a write whose commit was in doubt (the connection lost after
//! PostgreSQL committed it) is not stored a second time by the replay, even with dedup off.

use std::time::{Duration, Instant};

use serde_json::json;

use super::proxy::{Cut, CutProxy};
use super::{drain, ids, push, statuses, stored, wait_no_spool_files, wait_stored};
use crate::common::{self, configure};

/// Waits until a backend of `db_name` waits on a lock.
async fn lock_waiter(admin: &tokio_postgres::Client, db_name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = admin
            .query_opt(
                "SELECT pid FROM pg_stat_activity
                 WHERE datname = $1 AND wait_event_type = 'Lock' LIMIT 1",
                &[&db_name],
            )
            .await
            .unwrap();
        if row.is_some() {
            return;
        }
        assert!(Instant::now() < deadline, "no push waits on the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Push `a` is written while a lock holds its partition; push `b` to the same partition
/// arrives meanwhile and waits behind it in the fusion. When the lock goes, `a`'s write runs
/// and its connection breaks before the commit (an outage for that write alone), while
/// PostgreSQL takes `b`'s flush: `b` must still be stored after `a`, as it arrived after it.
#[tokio::test]
async fn a_push_behind_a_rescued_flush_is_stored_after_it() {
    let pg = common::fresh_database().await;
    let (proxy, through) = CutProxy::start(&pg).await;
    let b = common::broker_on(through, |c| c.db_pool_size = 4).await;
    let dir = b.server.as_ref().unwrap().state.cfg.spool_dir();
    let before = push(&b, "ord", &[("p", "before")]).await;
    assert_eq!(statuses(&before), ["queued"]);

    let db_name = pg.get_dbname().unwrap().to_string();
    let mut locker = common::connect(&pg).await;
    let admin = common::connect(&pg).await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM queen.log_partitions WHERE name = 'p' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();

    // Armed before `a` is sent: its `Sync` is held back, so no commit happens before the cut.
    proxy.arm(Cut::BeforeCommit);
    let (http, url) = (b.http.clone(), b.url.clone());
    let a = tokio::spawn(async move { super::push_at(&http, &url, "ord", &[("p", "a")]).await });
    lock_waiter(&admin, &db_name).await;
    let (http, url) = (b.http.clone(), b.url.clone());
    let later =
        tokio::spawn(async move { super::push_at(&http, &url, "ord", &[("p", "b")]).await });
    // `b` reaches the fusion and waits behind `a`'s flush.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.rollback().await.unwrap();

    let a = a.await.unwrap();
    let later = later.await.unwrap();
    assert_eq!(proxy.cuts(), 1, "the proxy broke `a`'s write");
    assert_eq!(statuses(&a), ["buffered"], "{a}");
    let mut want = ids(&before);
    want.extend(ids(&a));
    want.extend(ids(&later));
    let db = common::connect(&pg).await;
    wait_stored(&db, "ord", 3, Duration::from_secs(15)).await;
    wait_no_spool_files(&dir).await;
    let got = drain(&b.http, &b.url, "ord", "p").await;
    assert_eq!(got, want, "delivered in arrival order: before, a, b");
}

/// With `dedupWindowSeconds: 0`, a push whose connection is lost after PostgreSQL committed
/// it is spooled in doubt (answered `buffered`); the replay finds it stored and does not store
/// it again.
#[tokio::test]
async fn an_in_doubt_commit_is_not_stored_twice_without_dedup() {
    let pg = common::fresh_database().await;
    let (proxy, through) = CutProxy::start(&pg).await;
    let b = common::broker_on(through, |c| c.db_pool_size = 4).await;
    let dir = b.server.as_ref().unwrap().state.cfg.spool_dir();
    configure(&b, "doubt-q", json!({ "dedupWindowSeconds": 0 })).await;
    // A first push provisions the partition (and warms the caches) the plain way.
    assert_eq!(
        statuses(&push(&b, "doubt-q", &[("p", "first")]).await),
        ["queued"]
    );

    proxy.arm(Cut::AfterCommit);
    let answer = push(&b, "doubt-q", &[("p", "once")]).await;
    assert_eq!(proxy.cuts(), 1, "the proxy cut a committed write");
    assert_eq!(statuses(&answer), ["buffered"], "{answer}");

    let db = common::connect(&pg).await;
    wait_no_spool_files(&dir).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stored(&db, "doubt-q").await, 2, "`once` is stored once");
    let got = drain(&b.http, &b.url, "doubt-q", "p").await;
    let txns: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(txns, ["first", "once"]);
    assert_eq!(got[1], ids(&answer)[0], "under the id it was answered with");
}
