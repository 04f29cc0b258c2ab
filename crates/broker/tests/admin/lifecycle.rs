//! Broker lifecycle against real PostgreSQL: the `queen` binary with its embedded cluster
//! survives crashes of itself and of PostgreSQL without losing an acknowledged message, and
//! several brokers can boot on one database at the same time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use crate::common::free_port;

/// A `queen serve` child that is killed if a failing test leaves it running (it would keep its
/// PostgreSQL, and the test's inherited stderr, alive).
struct Queen(Child);

impl std::ops::Deref for Queen {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Queen {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Queen {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn_queen(data_dir: &Path, port: u16) -> Queen {
    Queen(
        Command::new(env!("CARGO_BIN_EXE_queen"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QUEEN_DATA_DIR", data_dir)
            .env("PORT", port.to_string())
            .env("HOST", "127.0.0.1")
            .env("LOG_LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn queen serve"),
    )
}

async fn wait_healthy(http: &reqwest::Client, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await
        {
            if r.status() == 200 {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "broker on port {port} never became healthy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn postmaster_pid(data_dir: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(data_dir.join("pg").join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

async fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/queen-test/{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Pops everything of `queue` with autoAck and returns the payloads' `n` values.
async fn drain(http: &reqwest::Client, port: u16, queue: &str) -> Vec<i64> {
    let mut seen = Vec::new();
    loop {
        let r = http
            .get(format!("http://127.0.0.1:{port}/api/v1/pop/queue/{queue}?batch=500&partitions=10&autoAck=true"))
            .send()
            .await
            .unwrap();
        if r.status() == 204 {
            return seen;
        }
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        for m in body["messages"].as_array().unwrap() {
            seen.push(m["data"]["n"].as_i64().unwrap());
        }
    }
}

#[tokio::test]
async fn acknowledged_pushes_survive_broker_and_postgres_crashes() {
    let dir = scratch_dir("crash");
    let http = reqwest::Client::new();
    let port = free_port();
    let mut queen = spawn_queen(&dir, port);
    wait_healthy(&http, port).await;

    let items: Vec<Value> = (0..300)
        .map(|n| json!({ "queue": "durable", "partition": format!("p{}", n % 7), "payload": { "n": n } }))
        .collect();
    for chunk in items.chunks(50) {
        let r = http
            .post(format!("http://127.0.0.1:{port}/api/v1/push"))
            .json(&json!({ "items": chunk }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }

    // Crash the broker (no graceful shutdown) and PostgreSQL (no checkpoint): the next boot
    // must recover a stale postmaster.pid and replay the WAL. The broker is frozen first so
    // its supervisor cannot restart PostgreSQL in between (a restarted cluster would then
    // stop cleanly on the parent-death signal), and PostgreSQL dies before the broker so
    // that signal finds nothing to shut down.
    let pg_pid = postmaster_pid(&dir).expect("embedded PostgreSQL is running");
    unsafe { libc::kill(queen.id() as i32, libc::SIGSTOP) };
    unsafe { libc::kill(pg_pid, libc::SIGKILL) };
    wait_gone(pg_pid).await;
    queen.kill().unwrap();
    queen.wait().unwrap();
    assert!(
        dir.join("pg").join("postmaster.pid").exists(),
        "a stale postmaster.pid stays behind"
    );

    let port2 = free_port();
    let mut queen2 = spawn_queen(&dir, port2);
    wait_healthy(&http, port2).await;
    let mut seen = drain(&http, port2, "durable").await;
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..300).collect::<Vec<_>>(),
        "every acknowledged push survives, once"
    );

    // A clean stop (SIGTERM) also stops the embedded cluster, leaving no server behind.
    let pg_pid2 = postmaster_pid(&dir).expect("embedded PostgreSQL is running again");
    unsafe { libc::kill(queen2.id() as i32, libc::SIGTERM) };
    let status = queen2.wait().unwrap();
    assert!(status.success(), "queen exits cleanly on SIGTERM: {status}");
    wait_gone(pg_pid2).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The broker's own embedded PostgreSQL is killed (`kill -9` of the postmaster only, so its
/// backends linger for a moment) while the broker keeps running: the supervisor reaps it (no
/// zombie), starts it again, the pool reconnects, and acknowledged work is intact.
#[tokio::test]
async fn the_broker_restarts_its_embedded_postgres_after_a_kill9() {
    let dir = scratch_dir("pgkill");
    let http = reqwest::Client::new();
    let port = free_port();
    let mut queen = spawn_queen(&dir, port);
    wait_healthy(&http, port).await;
    let base = format!("http://127.0.0.1:{port}");

    let items: Vec<Value> = (0..5)
        .map(|n| json!({ "queue": "survivor", "payload": { "n": n } }))
        .collect();
    let r = http
        .post(format!("{base}/api/v1/push"))
        .json(&json!({ "items": items }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = http
        .get(format!(
            "{base}/api/v1/pop/queue/survivor?batch=2&autoAck=true"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let acked: Value = r.json().await.unwrap();
    assert_eq!(acked["messages"].as_array().unwrap().len(), 2);

    let old = postmaster_pid(&dir).expect("embedded PostgreSQL is running");
    unsafe { libc::kill(old, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(90);
    while postmaster_pid(&dir).is_none_or(|pid| pid == old || !alive(pid)) {
        assert!(
            Instant::now() < deadline,
            "embedded PostgreSQL was never restarted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_healthy(&http, port).await;
    let stat = std::fs::read_to_string(format!("/proc/{old}/stat")).unwrap_or_default();
    assert!(
        !stat.contains(") Z "),
        "the dead postmaster was reaped: {stat}"
    );

    let r = http
        .post(format!("{base}/api/v1/push"))
        .json(&json!({ "items": [{ "queue": "survivor", "payload": { "n": 5 } }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "pushes work again");
    let mut seen = drain(&http, port, "survivor").await;
    seen.sort_unstable();
    assert_eq!(
        seen,
        vec![2, 3, 4, 5],
        "acked messages stay acked, the rest is there"
    );

    let pg_pid = postmaster_pid(&dir).expect("embedded PostgreSQL is running");
    unsafe { libc::kill(queen.id() as i32, libc::SIGTERM) };
    let status = queen.wait().unwrap();
    assert!(status.success(), "queen exits cleanly on SIGTERM: {status}");
    wait_gone(pg_pid).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn two_brokers_booting_at_once_on_one_database_both_come_up() {
    let pg = common::fresh_database().await;
    let (a, b) = tokio::join!(
        common::broker_on(pg.clone(), |_| {}),
        common::broker_on(pg.clone(), |_| {})
    );
    for broker in [&a, &b] {
        let (status, body) = broker.get("/health").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["database"], "connected");
    }
    // Both serve the same data.
    a.push("shared", "Default", &[json!({"x": 1})]).await;
    let (status, body) = b.get("/api/v1/pop/queue/shared?autoAck=true").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["messages"][0]["data"]["x"], 1);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn health_reports_an_unreachable_database_as_503() {
    // A broker whose database is gone: build it on a fresh database, then drop that database.
    let pg = common::fresh_database().await;
    let broker = common::broker_on(pg.clone(), |cfg| cfg.db_pool_size = 2).await;
    let (status, _) = broker.get("/health").await;
    assert_eq!(status, 200);
    let mut admin_cfg = pg.clone();
    admin_cfg.dbname("postgres");
    let admin = common::connect(&admin_cfg).await;
    let name = pg.get_dbname().unwrap().to_string();
    admin
        .batch_execute(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .await
        .unwrap();
    let (status, body) = broker.get("/health").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["database"], "disconnected");
    broker.stop().await;
}
