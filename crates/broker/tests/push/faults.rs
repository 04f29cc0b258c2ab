//! Push answers under real faults: what PostgreSQL committed is never reported `failed`, even
//! when a step after the commit fails; and a push of which nothing could be stored because the
//! database is unreachable answers 503 with `Retry-After`, not a 201 full of failures.

use std::sync::Arc;

use bytes::Bytes;
use queen_broker::accel::push_fusion::{FrameOutcome, FusionFrame, LaneFlush};
use queen_broker::engine::push::flush::{Prepared, SegmentWriter};
use queen_proto::hash::txn_hash;
use serde_json::{json, Value};

use crate::common;

fn frame(txn: &str) -> FusionFrame {
    FusionFrame {
        message_id: queen_proto::new_v7(),
        trace_id: None,
        transaction_id: txn.to_string(),
        producer_sub: None,
        payload: Bytes::from_static(b"{\"x\":1}"),
        hash: txn_hash(txn),
        replayed: false,
    }
}

fn lane(queue: &str, partition: &str, frames: Vec<FusionFrame>) -> LaneFlush<Prepared> {
    LaneFlush {
        queue: Arc::from(queue),
        partition: Arc::from(partition),
        frames: frames.into(),
        prepared: None,
    }
}

/// One flush round writes lane `a` (all duplicates: it commits nothing but needs the
/// originals read back) and lane `b` (new: committed). Reading the originals fails for real
/// (the SQL function raises): `b` is still reported queued, and `a` duplicate.
#[tokio::test]
async fn a_failing_post_commit_step_never_fails_committed_frames() {
    let b = common::broker().await;
    let stored = b.push("faults", "a", &[json!({"x": 0})]).await;
    let txn = stored[0]["transaction_id"].as_str().unwrap().to_string();
    let db = b.sql().await;
    db.batch_execute(
        "CREATE OR REPLACE FUNCTION queen.log_segment_at_v1(p_pid bigint, p_off bigint)
         RETURNS TABLE(r_base bigint, r_end bigint, r_created timestamptz, r_blob bytea)
         LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'segment read forced to fail'; END $$",
    )
    .await
    .unwrap();

    let state = &b.server.as_ref().unwrap().state;
    let writer = SegmentWriter::new(
        state.store.clone(),
        3,
        state.push.effects.clone(),
        state.encryption.clone(),
        None,
    );
    let new = frame("fresh");
    let outcomes = writer
        .write(&mut [
            lane("faults", "a", vec![frame(&txn)]),
            lane("faults", "b", vec![new.clone()]),
        ])
        .await;

    assert!(
        matches!(
            outcomes[0][0],
            FrameOutcome::Duplicate {
                offset: Some(0),
                ..
            }
        ),
        "the duplicate keeps its verdict: {:?}",
        outcomes[0]
    );
    assert_eq!(
        outcomes[1][0],
        FrameOutcome::Queued {
            message_id: new.message_id,
            offset: 0
        },
        "a committed frame is answered as committed"
    );
    let (status, body) = b
        .get("/api/v1/pop/queue/faults/partition/b?autoAck=true")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["messages"][0]["transactionId"], "fresh");
    b.stop().await;
}

/// Runs `sql` on the cluster's maintenance database (the test database may refuse us).
async fn admin(b: &common::TestBroker, sql: &str) {
    let mut cfg = b.pg.clone();
    cfg.dbname("postgres");
    common::connect(&cfg)
        .await
        .batch_execute(sql)
        .await
        .unwrap();
}

async fn push_one(b: &common::TestBroker, txn: &str) -> reqwest::Response {
    let item = json!({ "queue": "outage", "transactionId": txn, "payload": {"n": 1} });
    b.http
        .post(b.at("/api/v1/push"))
        .json(&json!({ "items": [item] }))
        .send()
        .await
        .unwrap()
}

/// The database refuses connections and the broker's are terminated: a push stores nothing
/// and answers 503 with `Retry-After` and a JSON error. Once the database is back the same
/// push is stored once: nothing of the refused one was half-written. (With the disk spool on,
/// the default, such a push is spooled instead: push/spool.rs.)
#[tokio::test]
async fn a_push_during_a_database_outage_answers_503_and_writes_nothing() {
    let b = common::broker_with(|cfg| {
        cfg.db_pool_size = 2;
        cfg.file_buffer_enabled = false;
    })
    .await;
    b.push("outage", "Default", &[json!({"n": 0})]).await;
    let name = b.pg.get_dbname().unwrap().to_string();
    let mut admin_cfg = b.pg.clone();
    admin_cfg.dbname("postgres");
    common::faults::refuse_connections(&common::connect(&admin_cfg).await, &name).await;

    for _ in 0..3 {
        let r = push_one(&b, "during-outage").await;
        assert_eq!(r.status(), 503);
        let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap());
        assert_eq!(retry, Some("1"));
        let body: Value = r.json().await.unwrap();
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("database unavailable"),
            "{body}"
        );
    }

    admin(
        &b,
        &format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS true"),
    )
    .await;
    // The pool may still hand out a connection the outage broke: like the client, retry 503.
    let mut answer = Value::Null;
    for _ in 0..5 {
        let r = push_one(&b, "during-outage").await;
        if r.status() == 201 {
            answer = r.json().await.unwrap();
            break;
        }
        assert_eq!(r.status(), 503);
    }
    assert_eq!(answer[0]["status"], "queued", "{answer}");
    let (status, body) = b
        .get("/api/v1/pop/queue/outage?batch=10&autoAck=true")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["messages"].as_array().unwrap().len(), 2, "{body}");
    b.stop().await;
}
