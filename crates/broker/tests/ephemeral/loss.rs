//! What survives what (docs/engine.md §17.1): a broker restart keeps the contents (they are
//! PostgreSQL's, not the broker's); a PostgreSQL crash empties them — crash recovery resets
//! every unlogged table — while the declarations stay; an id minted before the crash answers
//! `stale`, and the ring's next incarnation mints greater epochs.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, faults::OwnCluster};
use crate::{ack, acks_of, configure, depth, pop, pushed};

/// The epoch field of an id, as a number.
fn epoch(id: &Value) -> u64 {
    let id = id.as_str().expect("id");
    let hex = id.split(':').nth(1).expect("epoch");
    u64::from_str_radix(hex, 16).expect("hex")
}

/// Retries `GET path` until it answers 200 (the pool reconnecting after the crash).
async fn until_ok(b: &common::TestBroker, path: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = b.get(path).await;
        if status == StatusCode::OK {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still answers {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_broker_restart_keeps_contents_and_a_postgres_crash_loses_them() {
    let mut cluster = OwnCluster::new("ephemeral-crash").await;
    let first = common::broker_on(cluster.config(), |cfg| cfg.db_pool_size = 4).await;
    configure(
        &first,
        "survivor",
        json!({"maxLength": 50, "retryLimit": 7}),
    )
    .await;
    pushed(&first, "survivor", &[json!(1), json!(2), json!(3)]).await;
    let leased = pop(&first, "survivor", "batch=1").await;
    first.stop().await;

    // A broker restart: the contents, the cursor and the lease are PostgreSQL's.
    let b = common::broker_on(cluster.config(), |cfg| cfg.db_pool_size = 4).await;
    assert_eq!(
        crate::payloads(&pop(&b, "survivor", "batch=10").await),
        [json!(2), json!(3)]
    );
    assert_eq!(
        ack(&b, "survivor", None, acks_of(&leased, None)).await,
        ["acked"]
    );
    pushed(&b, "survivor", &[json!(4)]).await;
    let before = pop(&b, "survivor", "batch=1").await;
    assert_eq!(crate::payloads(&before), [json!(4)]);

    // A PostgreSQL crash: unlogged tables are reset by crash recovery.
    cluster.crash().await;
    let d = until_ok(&b, "/api/v1/ephemeral/queues/survivor/depth").await;
    assert_eq!(
        (d["length"].as_i64(), d["declared"].as_bool()),
        (Some(0), Some(true)),
        "{d}"
    );
    assert_eq!(
        d["options"]["retryLimit"], 7,
        "the declaration is logged: {d}"
    );
    assert_eq!(d["rings"], json!([]), "{d}");
    assert!(
        pop(&b, "survivor", "batch=10").await.is_empty(),
        "contents gone"
    );
    assert_eq!(
        ack(&b, "survivor", None, acks_of(&before, None)).await,
        ["stale"]
    );

    pushed(&b, "survivor", &[json!(5)]).await;
    let after = pop(&b, "survivor", "batch=1").await;
    assert_eq!(crate::payloads(&after), [json!(5)]);
    assert!(
        epoch(&after[0]["id"]) > epoch(&before[0]["id"]),
        "a new incarnation: {} after {}",
        after[0]["id"],
        before[0]["id"]
    );
    assert_eq!(
        ack(&b, "survivor", None, acks_of(&before, None)).await,
        ["stale"],
        "still stale"
    );
    assert_eq!(
        ack(&b, "survivor", None, acks_of(&after, None)).await,
        ["acked"]
    );
    let _ = depth(&b, "survivor").await;
}
