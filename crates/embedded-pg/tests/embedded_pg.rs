//! Tests of the embedded PostgreSQL launcher (`queen_embedded_pg`) against the machine's
//! real server binaries: first run (initdb), restart on the same directory, reuse of a live
//! server, crash (SIGKILL) with a stale `postmaster.pid` and recovery, stale pid files naming
//! dead or unrelated processes, and shutdown on drop.
//!
//! Data directories live under /tmp, not under the (possibly root-only) home or target dir:
//! when the tests run as root the server runs as the `postgres` user, who must reach them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use queen_embedded_pg::{self as embedded_pg, EmbeddedOptions, EmbeddedPg};

/// A fresh, empty directory for one test; removed again by `Drop` (even on failure, so reruns
/// start clean; a failing test's log is printed by the assertions that need it).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = PathBuf::from(format!(
            "/tmp/queen-embedded-pg-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn opts(dir: &Path) -> EmbeddedOptions {
    EmbeddedOptions::new(dir).shared_buffers_mb(128)
}

async fn select_one(pg: &EmbeddedPg, db: &str) -> i32 {
    let client = pg.connect(db).await.expect("connect");
    client
        .query_one("SELECT 1", &[])
        .await
        .expect("SELECT 1")
        .get(0)
}

async fn count_rows(pg: &EmbeddedPg, db: &str) -> i64 {
    let client = pg.connect(db).await.expect("connect");
    client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .expect("count")
        .get(0)
}

fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap();
            state != 'Z' && state != 'X'
        }
        Err(_) => false,
    }
}

async fn wait_dead(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while pid_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn first_run_restart_reuse_crash_and_recovery() {
    let tmp = TempDir::new("lifecycle");

    // First run: initdb + settings + start.
    let pg = embedded_pg::start(opts(&tmp.0)).await.expect("first start");
    assert!(pg.is_supervised());
    assert!(pg.data_dir().join("PG_VERSION").is_file());
    assert!(pg
        .socket_dir()
        .join(format!(".s.PGSQL.{}", pg.port()))
        .exists());
    assert_eq!(select_one(&pg, "postgres").await, 1);
    let auto_conf =
        std::fs::read_to_string(pg.data_dir().join("postgresql.auto.conf")).expect("auto.conf");
    assert!(auto_conf.contains("listen_addresses = ''"), "{auto_conf}");
    assert!(
        auto_conf.contains("shared_buffers = '128MB'"),
        "{auto_conf}"
    );
    assert!(auto_conf.contains("fsync = 'on'"), "{auto_conf}");

    // Settings as the server sees them: no TCP, our buffers, durable.
    let admin = pg.connect("postgres").await.unwrap();
    for (name, want) in [
        ("listen_addresses", ""),
        ("shared_buffers", "128MB"),
        ("fsync", "on"),
        ("synchronous_commit", "on"),
        ("max_connections", "300"),
    ] {
        let got: String = admin
            .query_one(&format!("SHOW {name}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, want, "{name}");
    }
    drop(admin);

    // A fresh database, reachable through both config() and url().
    pg.create_database("queen_test").await.expect("create db");
    assert!(pg.create_database("queen_test").await.is_err(), "exists");
    assert!(!pg.ensure_database("queen_test").await.unwrap());
    let url = pg.url("queen_test");
    assert!(
        url.starts_with("postgresql://postgres@/queen_test?host=/"),
        "{url}"
    );
    let cfg: tokio_postgres::Config = url.parse().expect("url parses");
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .expect("url connects");
    tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 100)")
        .await
        .unwrap();
    drop(client);

    // A second launcher on the same live directory reuses the server and does not own it.
    let first_pid = pg.pid();
    let other = embedded_pg::start(opts(&tmp.0)).await.expect("reuse");
    assert!(!other.is_supervised());
    assert_eq!(other.pid(), first_pid);
    assert_eq!(count_rows(&other, "queen_test").await, 100);
    other.stop().await; // not ours: must leave it running
    assert!(pid_alive(first_pid));
    assert_eq!(select_one(&pg, "postgres").await, 1);

    // Clean stop, then start again on the same directory (no initdb this time).
    pg.stop().await;
    assert!(!pid_alive(first_pid), "postmaster still alive after stop");
    assert!(
        !tmp.0.join("postmaster.pid").exists(),
        "clean stop removes the pid file"
    );
    let mut pg = embedded_pg::start(opts(&tmp.0))
        .await
        .expect("second start");
    assert!(pg.is_supervised());
    assert_ne!(pg.pid(), first_pid);
    assert_eq!(count_rows(&pg, "queen_test").await, 100);

    // Crash: committed rows, SIGKILL to every server process, stale postmaster.pid left behind.
    let client = pg.connect("queen_test").await.unwrap();
    client
        .batch_execute("INSERT INTO t SELECT generate_series(101, 150)")
        .await
        .unwrap();
    drop(client);
    let crashed_pid = pg.pid();
    pg.kill9().await;
    assert!(!pid_alive(crashed_pid));
    let pidfile = std::fs::read_to_string(tmp.0.join("postmaster.pid")).expect("stale pid file");
    assert_eq!(
        pidfile.lines().next().unwrap().trim(),
        crashed_pid.to_string()
    );

    // Recovery through restart(): stale pid file removed, crash recovery, data intact.
    pg.restart()
        .await
        .unwrap_or_else(|e| panic!("restart after SIGKILL: {e}"));
    assert!(pg.is_supervised());
    assert_ne!(pg.pid(), crashed_pid);
    assert_eq!(count_rows(&pg, "queen_test").await, 150);

    // restart() of a healthy server: stop + start.
    let before = pg.pid();
    pg.restart().await.expect("restart");
    assert_ne!(pg.pid(), before);
    assert!(!pid_alive(before));
    assert_eq!(count_rows(&pg, "queen_test").await, 150);

    // Kill again and recover through a brand-new start() (what a restarted broker does).
    pg.kill9().await;
    drop(pg);
    let pg = embedded_pg::start(opts(&tmp.0))
        .await
        .expect("start after crash");
    assert_eq!(count_rows(&pg, "queen_test").await, 150);
    let log = std::fs::read_to_string(pg.log_path()).unwrap_or_default();
    pg.stop().await;
    assert!(!log.contains("PANIC"), "server log:\n{log}");
}

#[tokio::test]
async fn stale_pid_files_of_dead_or_unrelated_processes_are_removed() {
    let tmp = TempDir::new("stale");
    let pg = embedded_pg::start(opts(&tmp.0)).await.expect("first start");
    let data_dir = pg.data_dir().to_path_buf();
    pg.stop().await;

    // A pid file naming a process that no longer exists.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let fake = |pid: u32| {
        format!(
            "{pid}\n{}\n1700000000\n5432\n{}\n\n  5432001  0\nready   \n",
            data_dir.display(),
            data_dir.display()
        )
    };
    std::fs::write(data_dir.join("postmaster.pid"), fake(dead_pid)).unwrap();
    let pg = embedded_pg::start(opts(&tmp.0))
        .await
        .expect("start over a dead pid");
    assert!(pg.is_supervised());
    assert_eq!(select_one(&pg, "postgres").await, 1);
    pg.stop().await;

    // A pid file naming a live process that is not a postgres (PID reuse): this very test.
    std::fs::write(data_dir.join("postmaster.pid"), fake(std::process::id())).unwrap();
    let pg = embedded_pg::start(opts(&tmp.0))
        .await
        .expect("start over a reused pid");
    assert!(pg.is_supervised());
    assert_ne!(pg.pid(), std::process::id());
    assert_eq!(select_one(&pg, "postgres").await, 1);
    pg.stop().await;
}

#[tokio::test]
async fn dropping_without_stop_shuts_the_server_down() {
    let tmp = TempDir::new("drop");
    let pg = embedded_pg::start(opts(&tmp.0)).await.expect("start");
    let pid = pg.pid();
    assert_eq!(select_one(&pg, "postgres").await, 1);
    drop(pg);
    assert!(
        wait_dead(pid, Duration::from_secs(30)).await,
        "postmaster {pid} still alive after drop"
    );
    // And the directory is immediately usable again.
    let pg = embedded_pg::start(opts(&tmp.0)).await.expect("start again");
    assert_eq!(select_one(&pg, "postgres").await, 1);
    pg.stop().await;
}

#[tokio::test]
async fn long_data_dir_paths_get_a_short_socket_dir() {
    let tmp = TempDir::new(&format!("long-{}", "x".repeat(80)));
    let pg = embedded_pg::start(opts(&tmp.0)).await.expect("start");
    assert!(
        pg.socket_dir()
            .to_string_lossy()
            .starts_with("/tmp/queen-pg-"),
        "{}",
        pg.socket_dir().display()
    );
    assert_eq!(select_one(&pg, "postgres").await, 1);
    assert_eq!(
        pg.url("postgres")
            .parse::<tokio_postgres::Config>()
            .unwrap()
            .get_dbname(),
        Some("postgres")
    );
    let socket_dir = pg.socket_dir().to_path_buf();
    pg.stop().await;
    let _ = std::fs::remove_dir_all(socket_dir);
}

#[test]
fn binaries_are_found_on_this_machine() {
    let bins = embedded_pg::PgBinaries::locate(None).expect("PostgreSQL binaries");
    assert!(bins.initdb.ends_with("initdb") && bins.postgres.ends_with("postgres"));
    // Debian's /usr/bin has wrappers but no `postgres`: never accepted.
    assert!(embedded_pg::PgBinaries::from_dir(Path::new("/usr/bin")).is_none());
}

/// The broker process dies without any cleanup (SIGKILL): the parent-death signal must take
/// the server down. The test re-executes its own binary as the "broker".
#[tokio::test]
async fn a_killed_broker_does_not_orphan_its_server() {
    const ROLE: &str = "QUEEN_EMBEDDED_PG_CHILD_DIR";
    if let Some(dir) = std::env::var_os(ROLE) {
        // Child role: start a cluster from a short-lived task, report, then wait to be killed.
        let dir = PathBuf::from(dir);
        let pg = tokio::spawn(embedded_pg::start(opts(&dir)))
            .await
            .unwrap()
            .expect("child start");
        std::fs::write(dir.with_extension("pid"), pg.pid().to_string()).unwrap();
        std::future::pending::<()>().await;
    }
    let tmp = TempDir::new("orphan");
    let pid_file = tmp.0.with_extension("pid");
    let mut broker = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_broker_does_not_orphan_its_server",
            "--test-threads=1",
        ])
        .env(ROLE, &tmp.0)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let pg_pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "child never started its cluster");
        assert!(broker.try_wait().unwrap().is_none(), "child exited early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(pid_alive(pg_pid));
    broker.kill().unwrap();
    broker.wait().unwrap();
    let _ = std::fs::remove_file(&pid_file);
    assert!(
        wait_dead(pg_pid, Duration::from_secs(30)).await,
        "postmaster {pg_pid} survived its broker"
    );
}

/// As root the server runs as `postgres`, who cannot enter a 0700 /root: a clear error, and
/// nothing created.
#[tokio::test]
async fn unreachable_data_dir_as_root_is_refused_clearly() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let locked = std::fs::metadata("/root")
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o001 == 0)
        .unwrap_or(false);
    if !root || !locked {
        eprintln!("skipped: needs root and a /root without o+x");
        return;
    }
    let dir = PathBuf::from(format!(
        "/root/queen-embedded-pg-test-{}",
        std::process::id()
    ));
    let err = embedded_pg::start(opts(&dir))
        .await
        .expect_err("must refuse");
    let msg = err.to_string();
    assert!(
        msg.contains("is not reachable by the postgres user") && msg.contains("QUEEN_DATA_DIR"),
        "{msg}"
    );
    assert!(!dir.exists(), "nothing is created on refusal");
}

/// Two launchers racing on one brand-new directory: one runs initdb and starts the server, the
/// other waits for it and reuses it.
#[tokio::test]
async fn simultaneous_first_starts_share_one_server() {
    let tmp = TempDir::new("race");
    let (a, b) = tokio::join!(
        tokio::spawn(embedded_pg::start(opts(&tmp.0))),
        tokio::spawn(embedded_pg::start(opts(&tmp.0)))
    );
    let (a, b) = (a.unwrap().expect("a"), b.unwrap().expect("b"));
    assert_eq!(a.pid(), b.pid());
    assert!(a.is_supervised() != b.is_supervised(), "exactly one owner");
    assert_eq!(select_one(&a, "postgres").await, 1);
    assert_eq!(select_one(&b, "postgres").await, 1);
    let pid = a.pid();
    a.stop().await;
    b.stop().await;
    assert!(wait_dead(pid, Duration::from_secs(30)).await);
}

/// Only the postmaster is SIGKILLed (its backends live on for a moment and the dead postmaster
/// stays an unreaped zombie): a new start must wait out the old backends, not run beside them.
#[tokio::test]
async fn restart_after_only_the_postmaster_was_killed() {
    let tmp = TempDir::new("pmkill");
    let old = embedded_pg::start(opts(&tmp.0)).await.expect("start");
    let client = old.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)")
        .await
        .unwrap();
    // SAFETY: plain kill(2).
    unsafe { libc::kill(old.pid() as i32, libc::SIGKILL) };
    let pg = embedded_pg::start(opts(&tmp.0))
        .await
        .unwrap_or_else(|e| panic!("start after postmaster SIGKILL: {e}"));
    assert_ne!(pg.pid(), old.pid());
    assert!(pg.is_supervised());
    assert_eq!(count_rows(&pg, "postgres").await, 2);
    drop(client);
    drop(old);
    pg.stop().await;
}
