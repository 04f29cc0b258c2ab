//! The issue-38 loss, replayed: a broker pinned to one node that is demoted to a standby for a
//! while and then promoted again. The node restarts in recovery (`standby.signal`), a hot
//! standby that answers every write with SQLSTATE 25006; pushes meanwhile answer `buffered`,
//! pops 503, `/health` shows the standby; after `pg_promote()` every buffered push is stored,
//! in order, none quarantined.

use std::time::{Duration, Instant};

use queen_broker::spool::QUARANTINE_FILE;
use reqwest::StatusCode;
use serde_json::json;

use super::{drain, ids, push, statuses, wait_no_spool_files, wait_stored};
use crate::common;
use crate::common::faults::OwnCluster;

#[tokio::test]
async fn a_node_turned_standby_then_primary_again_loses_nothing() {
    let mut node = OwnCluster::new("standby").await;
    let spool_dir = common::scratch_spool_dir();
    let dir = spool_dir.clone();
    let b = common::broker_on(node.config(), move |cfg| {
        cfg.db_pool_size = 4;
        cfg.file_buffer_flush_ms = 50;
        cfg.file_buffer_dir = Some(dir);
    })
    .await;
    let mut want = ids(&push(&b, "sb", &[("p", "primary-0")]).await);
    let get = json!({"operations": [{"op": "get", "ns": "sb", "key": "k"}]});
    let put =
        json!({"operations": [{"op": "put", "ns": "sb", "key": "k", "value": 1, "forever": true}]});
    assert_eq!(b.post("/api/v1/kv", &put).await.0, StatusCode::OK);

    // Demoted: the node restarts in recovery, a hot standby.
    node.stop().await;
    std::fs::write(node.data_dir().join("standby.signal"), b"").unwrap();
    node.start().await;
    let admin = common::connect(&node.config()).await;
    let in_recovery: bool = admin
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(in_recovery, "the node is a standby now");

    for i in 0..10 {
        let answer = push(&b, "sb", &[("p", &format!("standby-{i}"))]).await;
        assert_eq!(statuses(&answer), ["buffered"], "{answer}");
        want.extend(ids(&answer));
    }
    let r = b
        .http
        .get(b.at("/api/v1/pop/queue/sb/partition/p?batch=10&wait=false"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key("retry-after"));
    // A key-value read would be stale on a standby (the history checker saw versions go
    // backwards under failovers): unavailable, like a write.
    let (status, body) = b.post("/api/v1/kv", &get).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, health) = b.get("/health").await;
    assert_eq!(status, StatusCode::OK, "{health}");
    assert_eq!(health["server"]["writable"], false, "{health}");
    assert_eq!(health["server"]["inRecovery"], true, "{health}");
    assert!(health["server"]["switches"].as_u64() >= Some(1), "{health}");
    // The drain meets the standby round after round meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !spool_dir.join(QUARANTINE_FILE).exists(),
        "nothing quarantined"
    );

    // Promoted again.
    admin.query_one("SELECT pg_promote()", &[]).await.unwrap();
    wait_stored(&admin, "sb", 11, Duration::from_secs(20)).await;
    let got = drain(&b.http, &b.url, "sb", "p").await;
    assert_eq!(got, want, "every push, in order, under its answered id");
    assert!(
        !spool_dir.join(QUARANTINE_FILE).exists(),
        "nothing quarantined"
    );
    wait_no_spool_files(&spool_dir).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, health) = b.get("/health").await;
        if health["server"]["writable"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "{health}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.stop().await;
    node.stop().await;
}
