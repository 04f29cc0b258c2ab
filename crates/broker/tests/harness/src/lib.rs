//! Integration-test harness of the broker: one private PostgreSQL cluster per test binary
//! (started with the broker's own embedded launcher), a fresh database per test, and
//! in-process brokers on free ports talking to it over real HTTP; plus the helpers that more
//! than one test binary uses. A library rather than a module each binary includes, so every
//! binary links one copy and none of them has to use every helper.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use clap::Parser;
use queen_broker::config::Config;
use queen_broker::server::{self, RunningServer};
use queen_embedded_pg::{self as embedded_pg, EmbeddedOptions};
use reqwest::StatusCode;
use serde_json::Value;

pub mod faults;
pub mod wire;

/// Parses a `Config` the way `queen serve` would, with test-friendly overrides.
#[derive(Parser)]
struct ConfigOnly {
    #[command(flatten)]
    cfg: Config,
}

/// Default configuration for a test broker: loopback, free port, small pool.
pub fn test_config() -> Config {
    let mut cfg = ConfigOnly::parse_from(["queen"]).cfg;
    cfg.host = "127.0.0.1".into();
    cfg.port = 0;
    cfg.database_url = None;
    cfg.pg_host = None;
    cfg.db_pool_size = 32;
    cfg.file_buffer_dir = Some(scratch_spool_dir());
    // The push door refuses pushes during a stall longer than its budget; the suite's many
    // brokers share two cores, and a test that asserts 201 must not meet a 429 for a slow
    // fsync. The door's own tests turn it on.
    cfg.push_wait_budget_ms = 0;
    cfg
}

static NEXT_SPOOL: AtomicU32 = AtomicU32::new(0);

/// A disk-spool directory of one test broker's own. (The default, `<data dir>/spool/<port>`,
/// would be one directory for every in-process broker: they all ask for port 0.) A later test
/// process removes it once this one is gone.
pub fn scratch_spool_dir() -> PathBuf {
    PathBuf::from(format!(
        "/tmp/queen-test/spool-{}/{}",
        std::process::id(),
        NEXT_SPOOL.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Connection settings of the binary's cluster (its `postgres` database).
static CLUSTER: OnceLock<tokio_postgres::Config> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// The binary's cluster, started on first use. It runs under a dedicated thread that lives
/// until the process exits, because the launcher ties the server's lifetime to the thread
/// that spawned it (parent-death signal), and each `#[tokio::test]` has its own runtime.
fn cluster() -> &'static tokio_postgres::Config {
    CLUSTER.get_or_init(|| {
        let root = PathBuf::from("/tmp/queen-test");
        std::fs::create_dir_all(&root).expect("create /tmp/queen-test");
        remove_dead_clusters(&root);
        let exe = std::env::current_exe().ok();
        let name = exe
            .as_ref()
            .and_then(|p| p.file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tests".into());
        let dir = root.join(format!("{}-{}", name, std::process::id()));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("test-postgres".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let mut opts = EmbeddedOptions::new(dir);
                    opts.shared_buffers_mb = Some(128);
                    let pg = embedded_pg::start(opts)
                        .await
                        .expect("start the test PostgreSQL cluster");
                    tx.send(pg.config("postgres"))
                        .expect("hand over the cluster");
                    std::future::pending::<()>().await;
                    drop(pg);
                })
            })
            .expect("spawn the cluster thread");
        rx.recv().expect("test PostgreSQL cluster failed to start")
    })
}

/// Removes clusters left behind by test processes that no longer exist.
fn remove_dead_clusters(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// A fresh, empty database on the binary's cluster; returns its connection settings.
pub async fn fresh_database() -> tokio_postgres::Config {
    let base = cluster();
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    let admin = connect(base).await;
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .expect("create test database");
    let mut cfg = base.clone();
    cfg.dbname(&name);
    cfg
}

/// A plain client connection (its driver task runs on the current runtime).
pub async fn connect(cfg: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect to test PostgreSQL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A broker under test plus helpers to talk to it and to its database.
pub struct TestBroker {
    pub url: String,
    pub http: reqwest::Client,
    pub pg: tokio_postgres::Config,
    pub server: Option<RunningServer>,
}

/// A broker with default test settings on a fresh database.
pub async fn broker() -> TestBroker {
    broker_with(|_| {}).await
}

/// A broker on a fresh database, with `tweak` applied to its configuration.
pub async fn broker_with(tweak: impl FnOnce(&mut Config)) -> TestBroker {
    let pg = fresh_database().await;
    broker_on(pg, tweak).await
}

/// A broker on an existing database (e.g. a second broker sharing the first one's).
pub async fn broker_on(pg: tokio_postgres::Config, tweak: impl FnOnce(&mut Config)) -> TestBroker {
    let mut cfg = test_config();
    tweak(&mut cfg);
    let running = server::start(cfg, pg.clone()).await.expect("start broker");
    let url = format!("http://{}", running.addr);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("http client");
    TestBroker {
        url,
        http,
        pg,
        server: Some(running),
    }
}

impl TestBroker {
    /// A second broker on the same database.
    pub async fn sibling(&self, tweak: impl FnOnce(&mut Config)) -> TestBroker {
        broker_on(self.pg.clone(), tweak).await
    }

    /// A direct SQL connection to this broker's database.
    pub async fn sql(&self) -> tokio_postgres::Client {
        connect(&self.pg).await
    }

    pub fn at(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// The value of the series `name{labels}` (labels as rendered, `""` for none) in a scrape
    /// of `/metrics/prometheus`; `None` when the scrape has no such series.
    pub async fn series(&self, name: &str, labels: &str) -> Option<f64> {
        let text = self
            .http
            .get(self.at("/metrics/prometheus"))
            .send()
            .await
            .expect("GET /metrics/prometheus")
            .text()
            .await
            .expect("body");
        let head = if labels.is_empty() {
            format!("{name} ")
        } else {
            format!("{name}{{{labels}}} ")
        };
        text.lines()
            .find_map(|l| l.strip_prefix(&head))
            .map(|v| v.trim().parse().expect("a number"))
    }

    /// POSTs a JSON body; returns the status and the parsed body (Null when empty).
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.at(path))
            .json(body)
            .send()
            .await
            .expect("POST");
        read(r).await
    }

    /// POSTs raw bytes with a content type.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.at(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("POST");
        read(r).await
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self.http.get(self.at(path)).send().await.expect("GET");
        read(r).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .delete(self.at(path))
            .send()
            .await
            .expect("DELETE");
        read(r).await
    }

    /// Pushes `payloads` to one (queue, partition); returns the 201 body.
    pub async fn push(&self, queue: &str, partition: &str, payloads: &[Value]) -> Value {
        let items: Vec<Value> = payloads
            .iter()
            .map(|p| serde_json::json!({ "queue": queue, "partition": partition, "payload": p }))
            .collect();
        let (status, body) = self
            .post("/api/v1/push", &serde_json::json!({ "items": items }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "push failed: {body}");
        body
    }

    /// Stops the HTTP server (the database stays).
    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }
}

async fn read(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    let bytes = r.bytes().await.expect("read body");
    if bytes.is_empty() {
        return (status, Value::Null);
    }
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

/// Counts rows of a table (for "nothing was written" checks).
pub async fn count(db: &tokio_postgres::Client, table: &str) -> i64 {
    db.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
        .get(0)
}

/// What the hash-sidecar purge leaves behind on partition `pid`: no `log_txns` rows, and
/// `txns_start` past every stored offset.
pub async fn purge_hash_rows(db: &tokio_postgres::Client, pid: i64) {
    db.execute(
        "DELETE FROM queen.log_txns WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .expect("purge hash rows");
    db.execute(
        "UPDATE queen.log_partitions SET txns_start = last_offset + 1 WHERE id = $1",
        &[&pid],
    )
    .await
    .expect("move txns_start");
}

/// Row counts of `tables`, in order (for "nothing was written" checks).
pub async fn counts(db: &tokio_postgres::Client, tables: &[&str]) -> Vec<i64> {
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        out.push(count(db, table).await);
    }
    out
}

/// Top-level statements whose text is `LIKE pattern` that ran in `db`'s own database, summed
/// over their calls: what a broker asked PostgreSQL, from `pg_stat_statements` (the embedded
/// cluster preloads it where the installation ships it; each test has a database of its own).
pub async fn statement_calls(db: &tokio_postgres::Client, pattern: &str) -> i64 {
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .expect("pg_stat_statements");
    db.query_one(
        "SELECT COALESCE(sum(s.calls), 0)::bigint
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database() AND s.toplevel AND s.query LIKE $1",
        &[&pattern],
    )
    .await
    .expect("statement calls")
    .get(0)
}

// Helpers the feature tests share (ack, pop, binary wire); their own modules re-export them.

/// Creates or reconfigures `queue` with `options` (wire names, e.g. `{"retryLimit": 0}`).
pub async fn configure(b: &TestBroker, queue: &str, options: Value) {
    let (status, body) = b
        .post(
            "/api/v1/configure",
            &serde_json::json!({ "queue": queue, "options": options }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "configure {queue}: {body}");
}

/// Pushes one message per transactionId to (queue, partition), payload `{"txn": id}`.
pub async fn push_txns(b: &TestBroker, queue: &str, partition: &str, txns: &[String]) {
    let items: Vec<Value> = txns
        .iter()
        .map(|t| serde_json::json!({ "queue": queue, "partition": partition, "transactionId": t, "payload": { "txn": t } }))
        .collect();
    let (status, body) = b
        .post("/api/v1/push", &serde_json::json!({ "items": items }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "push failed: {body}");
    for item in body.as_array().expect("push answer is an array") {
        assert_eq!(item["status"], "queued", "push item not queued: {item}");
    }
}

/// `prefix-0`, `prefix-1`, … as owned strings.
pub fn txns(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// One ack item for a popped message, carrying its lease.
pub fn ack_item(msg: &Value, status: &str) -> Value {
    serde_json::json!({
        "transactionId": msg["transactionId"],
        "partitionId": msg["partitionId"],
        "leaseId": msg["leaseId"],
        "status": status,
    })
}

/// `POST /api/v1/ack/batch`; returns the per-item answer array (asserting HTTP 200).
pub async fn ack_batch(b: &TestBroker, group: Option<&str>, items: Vec<Value>) -> Vec<Value> {
    let (status, body) = b
        .post(
            "/api/v1/ack/batch",
            &serde_json::json!({ "acknowledgments": items, "consumerGroup": group }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "ack batch: {body}");
    body.as_array().cloned().expect("ack answer is an array")
}

/// The id of (queue, partition).
pub async fn partition_id(db: &tokio_postgres::Client, queue: &str, partition: &str) -> i64 {
    db.query_one(
        "SELECT lp.id FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
         WHERE q.name = $1 AND lp.name = $2",
        &[&queue, &partition],
    )
    .await
    .expect("partition exists")
    .get(0)
}

/// A non-empty pop answer.
#[derive(Debug, Clone)]
pub struct Popped {
    pub lease_id: String,
    pub messages: Vec<Value>,
}

impl Popped {
    pub fn txns(&self) -> Vec<String> {
        self.messages
            .iter()
            .map(|m| m["transactionId"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub fn partition_id(&self) -> i64 {
        self.messages[0]["partitionId"]
            .as_str()
            .and_then(|p| p.parse().ok())
            .expect("decimal partitionId")
    }
}

/// A `wait=false` pop: the targeted route when `partition` is given, else the wildcard one.
/// `extra` is appended to the query (e.g. `&leaseSeconds=5`). `None` on 204.
pub async fn pop(
    b: &TestBroker,
    queue: &str,
    partition: Option<&str>,
    group: Option<&str>,
    batch: usize,
    extra: &str,
) -> Option<Popped> {
    let route = match partition {
        Some(p) => format!("/api/v1/pop/queue/{queue}/partition/{p}"),
        None => format!("/api/v1/pop/queue/{queue}"),
    };
    let group = group
        .map(|g| format!("&consumerGroup={g}"))
        .unwrap_or_default();
    let (status, body) = b
        .get(&format!("{route}?batch={batch}&wait=false{group}{extra}"))
        .await;
    match status {
        StatusCode::NO_CONTENT => None,
        StatusCode::OK => Some(Popped {
            lease_id: body["leaseId"].as_str().unwrap_or_default().to_string(),
            messages: body["messages"].as_array().cloned().unwrap_or_default(),
        }),
        other => panic!("pop answered {other}: {body}"),
    }
}

/// The `status` of each item of a push answer, in order.
pub fn statuses(answer: &Value) -> Vec<&str> {
    answer
        .as_array()
        .expect("an array answer")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or_default())
        .collect()
}

/// A TCP port that was free when asked (for brokers started as child processes).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
