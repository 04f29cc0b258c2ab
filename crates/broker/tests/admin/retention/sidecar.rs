//! The hash-sidecar purge (docs/engine.md §2.4, §10.1): rows past the horizon go, `txns_start`
//! follows, and from then on an ack and a dedup probe on a partition with a long purged
//! history read what they read on a fresh partition. Measured with EXPLAIN (ANALYZE, BUFFERS)
//! of every statement inside the SQL functions (auto_explain with nested statements, plans as
//! JSON notices), counting what the scans of `queen.log_txns` returned and the buffers they
//! touched — rows and pages, not time.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use super::*;
use crate::common::{configure, partition_id, push_txns, txns};

/// What the `log_txns` scans of one call read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reads {
    rows: u64,
    buffers: u64,
}

/// A session that sends back the plan of every statement it runs, nested ones included.
struct Explained {
    client: Client,
    notices: Arc<Mutex<Vec<String>>>,
}

impl Explained {
    async fn connect(pg: &tokio_postgres::Config) -> Self {
        let (client, mut connection) = pg.connect(NoTls).await.expect("connect");
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notice(n) = message {
                    sink.lock().unwrap().push(n.message().to_string());
                }
            }
        });
        client
            .batch_execute(
                "LOAD 'auto_explain';
                 SET auto_explain.log_min_duration = 0;
                 SET auto_explain.log_analyze = on;
                 SET auto_explain.log_buffers = on;
                 SET auto_explain.log_timing = off;
                 SET auto_explain.log_nested_statements = on;
                 SET auto_explain.log_format = 'json';
                 SET auto_explain.log_level = 'notice'",
            )
            .await
            .expect("auto_explain");
        Explained { client, notices }
    }

    /// Runs `sql` in a transaction that is rolled back, and sums what its statements' scans
    /// of `queen.log_txns` read. Returns the first column of its row too.
    async fn reads(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> (Reads, Value) {
        self.client.batch_execute("BEGIN").await.expect("begin");
        self.notices.lock().unwrap().clear();
        let row = self
            .client
            .query_one(sql, params)
            .await
            .expect("measured call");
        self.client
            .batch_execute("ROLLBACK")
            .await
            .expect("rollback");
        let answer: Value = row.get(0);
        let mut reads = Reads {
            rows: 0,
            buffers: 0,
        };
        for notice in self.notices.lock().unwrap().iter() {
            let Some(start) = notice.find('{') else {
                continue;
            };
            let plan: Value = serde_json::from_str(&notice[start..]).expect("JSON plan");
            add_txns_reads(&plan["Plan"], &mut reads);
        }
        (reads, answer)
    }

    /// A lease-less completed ack of `txn` on (pid, queue mode), as the broker calls it.
    async fn ack(&self, pid: i64, txn: &str) -> (Reads, Value) {
        let hash = queen_proto::txn_hash(txn).to_vec();
        self.reads(
            "SELECT queen.log_ack_by_hash_v1($1, '__QUEUE_MODE__', '', ARRAY[$2::bytea], ARRAY['completed'])",
            &[&pid, &hash],
        )
        .await
    }

    /// The full-window dedup probe of a push of `txn` (nothing is written: rolled back).
    async fn probe(&self, queue: &str, partition: &str, txn: &str) -> (Reads, Value) {
        let hash = queen_proto::txn_hash(txn).to_vec();
        self.reads(
            "SELECT queen.log_push_one_v1($1, $2, 1, $3, -1, '\\x00'::bytea)",
            &[&queue, &partition, &hash],
        )
        .await
    }
}

/// Adds the rows and buffers of every scan of `log_txns` in a plan tree: the rows a scan
/// visited, whether its filter kept them or not (both per loop in the plan).
fn add_txns_reads(node: &Value, reads: &mut Reads) {
    if node["Relation Name"] == "log_txns" {
        let n = |k: &str| node[k].as_u64().unwrap_or(0);
        let visited = n("Actual Rows") + n("Rows Removed by Filter");
        reads.rows += visited * n("Actual Loops").max(1);
        reads.buffers += n("Shared Hit Blocks") + n("Shared Read Blocks");
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        add_txns_reads(child, reads);
    }
}

/// What a call on the purged partition read against the same call on a fresh one: the same
/// give or take two rows and two pages (the planner may pick another index path after an
/// autoanalyze between the two calls; the unpurged history is 150 rows).
fn about_as_much(deep: Reads, fresh: Reads) -> bool {
    deep.rows <= fresh.rows + 2 && deep.buffers <= fresh.buffers + 2
}

#[tokio::test]
async fn the_sidecar_purge_bounds_what_acks_and_dedup_probes_read() {
    const HISTORY: usize = 150;
    let b = broker(|cfg| cfg.sidecar_purge_floor_s = 1).await;
    let db = b.sql().await;
    let session = Explained::connect(&b.pg).await;
    configure(&b, "deep", json!({ "dedupWindowSeconds": 3600 })).await;
    for t in txns("h", HISTORY) {
        push_txns(&b, "deep", "old", &[t]).await;
    }
    let old = partition_id(&db, "deep", "old").await;
    assert_eq!(consume(&b, "deep", "old", None).await.len(), HISTORY);

    // Before any purge, a retried ack explodes the whole consumed history.
    let (before, answer) = session.ack(old, "h-149").await;
    assert_eq!(
        answer["noopHashes"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    assert!(before.rows >= HISTORY as u64, "{before:?}");
    let (probe_before, _) = session.probe("deep", "old", "h-0").await;
    assert!(probe_before.rows >= HISTORY as u64, "{probe_before:?}");

    // A one-second horizon purges the history; txns_start follows.
    configure(&b, "deep", json!({ "dedupWindowSeconds": 1 })).await;
    eventually("the purge of the history", || async {
        crate::common::count(&db, "queen.log_txns").await == 0
    })
    .await;
    assert_eq!(
        marks(&db, old).await,
        (0, HISTORY as i64, HISTORY as i64 - 1)
    );
    let s = stats(&b).await;
    assert!(
        s["sidecarRowsPurged"].as_u64() >= Some(HISTORY as u64),
        "{s}"
    );
    assert_eq!(
        bases(&db, old).await.len(),
        HISTORY,
        "the purge keeps the segments"
    );

    // The same message in the long-history partition and in a fresh one.
    configure(&b, "deep", json!({ "dedupWindowSeconds": 3600 })).await;
    push_txns(&b, "deep", "old", &["x".to_string()]).await;
    push_txns(&b, "deep", "fresh", &["x".to_string()]).await;
    let fresh = partition_id(&db, "deep", "fresh").await;
    assert_eq!(consume(&b, "deep", "old", None).await, vec!["x"]);
    assert_eq!(consume(&b, "deep", "fresh", None).await, vec!["x"]);

    let (deep_ack, answer) = session.ack(old, "x").await;
    assert_eq!(
        answer["noopHashes"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    let (fresh_ack, _) = session.ack(fresh, "x").await;
    assert!(
        about_as_much(deep_ack, fresh_ack),
        "{deep_ack:?} vs {fresh_ack:?}"
    );

    let (deep_probe, answer) = session.probe("deep", "old", "x").await;
    assert_eq!(answer["status"], "duplicate", "{answer}");
    let (fresh_probe, _) = session.probe("deep", "fresh", "x").await;
    assert!(
        about_as_much(deep_probe, fresh_probe),
        "{deep_probe:?} vs {fresh_probe:?}"
    );
}

/// A group whose delivered batch lost its hash rows to the purge (issue 36 §2): the leased
/// ack resolves by position, so it succeeds, the cursor moves and nothing redelivers; a nack
/// of such a message redelivers it (docs/engine.md §6.2, "purged span").
#[tokio::test]
async fn an_ack_of_a_purged_message_under_its_lease_moves_the_cursor() {
    let b = broker(|cfg| cfg.sidecar_purge_floor_s = 0).await;
    let db = b.sql().await;
    configure(&b, "gone", json!({ "dedupWindowSeconds": 0 })).await;
    push_txns(&b, "gone", "p", &txns("m", 3)).await;
    let pid = partition_id(&db, "gone", "p").await;
    let popped = pop(&b, "gone", Some("p"), None, 10, "").await;
    eventually("the purge", || async { marks(&db, pid).await.1 == 3 }).await;
    let mut items: Vec<Value> = popped
        .iter()
        .map(|m| crate::common::ack_item(m, "completed"))
        .collect();
    items[2]["status"] = json!("failed");
    let answer = crate::common::ack_batch(&b, None, items).await;
    assert!(
        answer.iter().all(|a| a["success"] == true),
        "a purged hash resolves by position under the lease: {answer:?}"
    );
    assert_eq!(committed(&db, pid, "__QUEUE_MODE__").await, Some(1));
    let again = pop(&b, "gone", Some("p"), None, 10, "").await;
    assert_eq!(txn_ids(&again), ["m-2"], "the nacked message redelivers");
    let items = again
        .iter()
        .map(|m| crate::common::ack_item(m, "completed"))
        .collect();
    let answer = crate::common::ack_batch(&b, None, items).await;
    assert_eq!(answer[0]["success"], true, "{answer:?}");
    assert_eq!(committed(&db, pid, "__QUEUE_MODE__").await, Some(2));
    assert!(pop(&b, "gone", Some("p"), None, 10, "").await.is_empty());
}
