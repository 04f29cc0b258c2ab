//! Fencing of a primary whose postmaster was killed (`kill -9`) while its keeper is too busy
//! to act (SIGSTOPped here, as an overloaded machine does it for seconds): the keeper has
//! restarted PostgreSQL, which answers as a primary, and the monitor fails over. The new
//! primary must not take writes before the old one has stopped, or a client of the old one
//! reads what the new one has already overwritten (the kv linearizability violations of the
//! full failover chaos run). Every node is written to directly and node 0 is read directly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_formation::Formation;

/// Longer than the monitor's old `primary_demote_timeout` (5 s), shorter than its new one.
const STALL: Duration = Duration::from_secs(12);

struct Shared {
    stop: AtomicBool,
    /// The next value to write, and the highest value some node acknowledged.
    next: AtomicI64,
    known: AtomicI64,
    acked: Mutex<Vec<i64>>,
    stale: Mutex<Vec<String>>,
}

async fn connect(cfg: &tokio_postgres::Config) -> Option<tokio_postgres::Client> {
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// Runs `step` on a connection to `cfg` until told to stop; a failed step reconnects.
async fn on_node<F, Fut>(cfg: tokio_postgres::Config, s: Arc<Shared>, step: F)
where
    F: Fn(tokio_postgres::Client, Arc<Shared>) -> Fut,
    Fut: std::future::Future<Output = Option<tokio_postgres::Client>>,
{
    let mut client = None;
    while !s.stop.load(Ordering::Relaxed) {
        client = match client {
            Some(c) => tokio::time::timeout(Duration::from_secs(2), step(c, s.clone()))
                .await
                .ok()
                .flatten(),
            None => connect(&cfg).await,
        };
        if client.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Inserts the next value; an acknowledged one becomes known.
async fn write(c: tokio_postgres::Client, s: Arc<Shared>) -> Option<tokio_postgres::Client> {
    let n = s.next.fetch_add(1, Ordering::SeqCst);
    c.execute("INSERT INTO t VALUES ($1)", &[&n]).await.ok()?;
    s.acked.lock().unwrap().push(n);
    s.known.fetch_max(n, Ordering::SeqCst);
    Some(c)
}

/// Reads the highest value as a primary sees it (a standby's lag is no violation: the
/// broker refuses to read there); below what was known before the read is stale.
async fn read(c: tokio_postgres::Client, s: Arc<Shared>) -> Option<tokio_postgres::Client> {
    let known = s.known.load(Ordering::SeqCst);
    let row = c
        .query_one(
            "SELECT coalesce(max(x), 0), pg_is_in_recovery() FROM t",
            &[],
        )
        .await
        .ok()?;
    let (max, in_recovery): (i64, bool) = (row.get(0), row.get(1));
    if !in_recovery && max < known {
        s.stale
            .lock()
            .unwrap()
            .push(format!("saw {max} after {known} was acknowledged"));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    Some(c)
}

#[tokio::test]
async fn a_restarted_primary_is_fenced_before_the_new_one_takes_writes() {
    let dir = PathBuf::from(format!(
        "/tmp/queen-test/formation-fence-{}",
        std::process::id()
    ));
    let f = Formation::start(&dir, 3).await.expect("the formation");
    let c0 = connect(&f.node_config(0).unwrap()).await.expect("node 0");
    c0.batch_execute("CREATE TABLE t (x bigint PRIMARY KEY)")
        .await
        .unwrap();
    let s = Arc::new(Shared {
        stop: AtomicBool::new(false),
        next: AtomicI64::new(1),
        known: AtomicI64::new(0),
        acked: Mutex::new(Vec::new()),
        stale: Mutex::new(Vec::new()),
    });
    let mut tasks: Vec<_> = (0..3)
        .map(|i| tokio::spawn(on_node(f.node_config(i).unwrap(), s.clone(), write)))
        .collect();
    tasks.push(tokio::spawn(on_node(
        f.node_config(0).unwrap(),
        s.clone(),
        read,
    )));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let primary = f
        .kill9_postmaster_stalled_keeper(0, STALL)
        .await
        .expect("the formation settles");
    s.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let events = f.events().await.unwrap().join("\n");
    let stale = s.stale.lock().unwrap().clone();
    assert!(
        stale.is_empty(),
        "node 0 answered as a primary after the new primary node {primary} took writes: \
         {} stale reads, first {:?}\n{events}",
        stale.len(),
        stale.first()
    );
    let c = connect(&f.node_config(primary).unwrap()).await.unwrap();
    let rows = c.query("SELECT x FROM t", &[]).await.unwrap();
    let stored: std::collections::HashSet<i64> = rows.iter().map(|r| r.get(0)).collect();
    let acked = s.acked.lock().unwrap().clone();
    let lost: Vec<_> = acked.iter().filter(|n| !stored.contains(n)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged values lost: {lost:?}\n{events}",
        lost.len()
    );
    assert!(!acked.is_empty());
}
