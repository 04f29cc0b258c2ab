//! A flush PostgreSQL could not take is spooled by the flush itself (docs/engine.md §4.6): a
//! push that arrived behind it while it was in flight lands behind it in the spool, never ahead
//! of it in PostgreSQL, and a write whose commit was in doubt (the connection lost after
//! PostgreSQL committed it) is not stored a second time by the replay, even with dedup off.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

use super::{drain, ids, push, statuses, stored, wait_no_spool_files, wait_stored};
use crate::common::{self, configure};

/// Waits until a backend of `db_name` waits on a lock; its pid.
async fn lock_waiter(admin: &tokio_postgres::Client, db_name: &str) -> i32 {
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
        if let Some(row) = row {
            return row.get(0);
        }
        assert!(Instant::now() < deadline, "no push waits on the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Push `a` is written while a lock holds its partition; push `b` to the same partition
/// arrives meanwhile and waits behind it in the fusion. `a`'s connection is killed (its write
/// fails as an outage) and the lock released at once, so PostgreSQL takes `b`'s flush: `b`
/// must still be stored after `a`, as it arrived after it.
#[tokio::test]
async fn a_push_behind_a_rescued_flush_is_stored_after_it() {
    let b = common::broker_with(|c| c.db_pool_size = 4).await;
    let dir = b.server.as_ref().unwrap().state.cfg.spool_dir();
    let before = push(&b, "ord", &[("p", "before")]).await;
    assert_eq!(statuses(&before), ["queued"]);

    let db_name = b.pg.get_dbname().unwrap().to_string();
    let mut locker = b.sql().await;
    let admin = b.sql().await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM queen.log_partitions WHERE name = 'p' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();

    let (http, url) = (b.http.clone(), b.url.clone());
    let a = tokio::spawn(async move { super::push_at(&http, &url, "ord", &[("p", "a")]).await });
    let waiter = lock_waiter(&admin, &db_name).await;
    let (http, url) = (b.http.clone(), b.url.clone());
    let later =
        tokio::spawn(async move { super::push_at(&http, &url, "ord", &[("p", "b")]).await });
    // `b` reaches the fusion and waits behind `a`'s flush.
    tokio::time::sleep(Duration::from_millis(300)).await;
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&waiter])
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let a = a.await.unwrap();
    let later = later.await.unwrap();
    assert_eq!(statuses(&a), ["buffered"], "{a}");
    let mut want = ids(&before);
    want.extend(ids(&a));
    want.extend(ids(&later));
    let db = b.sql().await;
    wait_stored(&db, "ord", 3, Duration::from_secs(15)).await;
    wait_no_spool_files(&dir).await;
    let got = drain(&b.http, &b.url, "ord", "p").await;
    assert_eq!(got, want, "delivered in arrival order: before, a, b");
}

/// A TCP proxy in front of PostgreSQL that, once armed, swallows the answer of the next push
/// write that PostgreSQL stored (a data row saying `queued`), waits for the end of that
/// statement (its commit), and then drops the connection: the broker sees a lost connection
/// for a write that committed.
struct CutProxy {
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU32>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl CutProxy {
    /// Starts the proxy for `upstream`; returns it and the settings that connect through it.
    async fn start(upstream: &tokio_postgres::Config) -> (CutProxy, tokio_postgres::Config) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = CutProxy {
            armed: Arc::new(AtomicBool::new(false)),
            cuts: Arc::new(AtomicU32::new(0)),
        };
        let (armed, cuts) = (proxy.armed.clone(), proxy.cuts.clone());
        let target = upstream.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = connect_upstream(&target).await;
                tokio::spawn(pump(client, server, armed.clone(), cuts.clone()));
            }
        });
        // `host` adds to the hosts: build the settings anew, with the proxy as the only one.
        let mut through = tokio_postgres::Config::new();
        through.host("127.0.0.1").port(port);
        if let Some(user) = upstream.get_user() {
            through.user(user);
        }
        if let Some(password) = upstream.get_password() {
            through.password(password);
        }
        if let Some(db) = upstream.get_dbname() {
            through.dbname(db);
        }
        (proxy, through)
    }
}

async fn connect_upstream(cfg: &tokio_postgres::Config) -> Box<dyn Io> {
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    match cfg.get_hosts().first().expect("a host") {
        tokio_postgres::config::Host::Tcp(host) => {
            Box::new(TcpStream::connect((host.as_str(), port)).await.unwrap())
        }
        tokio_postgres::config::Host::Unix(dir) => Box::new(
            UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))
                .await
                .unwrap(),
        ),
    }
}

/// Relays one connection; the server's side message by message, to see the cut coming.
async fn pump(
    client: TcpStream,
    server: Box<dyn Io>,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU32>,
) {
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = tokio::io::split(server);
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_r, &mut server_w).await;
    });
    let mut cutting = false;
    loop {
        let mut head = [0u8; 5];
        if server_r.read_exact(&mut head).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if server_r.read_exact(&mut body).await.is_err() {
            break;
        }
        if !cutting
            && head[0] == b'D'
            && body.windows(8).any(|w| w == b"\"queued\"")
            && armed.swap(false, Ordering::SeqCst)
        {
            cutting = true;
            cuts.fetch_add(1, Ordering::SeqCst);
        }
        if cutting {
            if head[0] == b'Z' {
                break; // the statement is over: committed
            }
            continue;
        }
        if client_w.write_all(&head).await.is_err() || client_w.write_all(&body).await.is_err() {
            break;
        }
    }
    upstream.abort();
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

    proxy.armed.store(true, Ordering::SeqCst);
    let answer = push(&b, "doubt-q", &[("p", "once")]).await;
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the proxy cut a committed write"
    );
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
