//! The binary transaction body (`QTB1`, docs/wire.md §10.4) over real HTTP and PostgreSQL: the
//! JSON head's acks and the pre-compressed pushes commit together, with the head's results
//! first; a refused ack rolls back everything; flag 2 counts; malformed bodies are 400 with
//! the failure shape and write nothing; the Python client's own body commits.

use queen_proto::push_bin::{encode_txn, Batch, BatchItem};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::{ack_op, cursor, pop, push_txns, result_kinds, txns};
use crate::wire::{frames_of, hex, post_bin, segments, txn_groups, written, PY_TXN};

const G: Option<&str> = Some("g");

/// A `QTB1` body: `head` as JSON, then one group of `txns` for (queue, partition).
fn body(head: &Value, queue: &str, partition: &str, txns: &[&str], counts: bool) -> Vec<u8> {
    let payloads: Vec<String> = txns
        .iter()
        .map(|t| json!({ "txn": t }).to_string())
        .collect();
    let items = txns
        .iter()
        .zip(&payloads)
        .map(|(t, p)| BatchItem {
            transaction_id: Some(t),
            payload: p.as_bytes(),
        })
        .collect();
    let batches = [Batch {
        queue,
        partition,
        items,
    }];
    encode_txn(head.to_string().as_bytes(), &batches, counts).expect("encodes")
}

#[tokio::test]
async fn pushes_and_acks_of_a_binary_bundle_commit_together() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "tb.in", "p", &txns("in", 2)).await;
    let popped = pop(&b, "tb.in", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let pid = popped.partition_id();

    let head = json!({
        "operations": [ack_op(&popped.messages[0], "completed", G), ack_op(&popped.messages[1], "completed", G)],
        "requiredLeases": [popped.lease_id],
    });
    let qtb1 = body(&head, "tb.out", "q", &["o-1", "o-2"], false);
    let sent = frames_of(&txn_groups(&qtb1)[0]);
    let (status, answer) = post_bin(&b, "/api/v1/transaction", qtb1).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["success"], true, "{answer}");
    let results = answer["results"].as_array().expect("results");
    let kinds = result_kinds(&answer);
    assert_eq!(
        kinds,
        ["ack", "ack", "push", "push"],
        "the head's operations first"
    );
    assert_eq!(
        results
            .iter()
            .map(|r| r["index"].as_u64())
            .collect::<Vec<_>>(),
        (0..4).map(Some).collect::<Vec<_>>()
    );
    for (r, (id, txn, _)) in results[2..].iter().zip(&sent) {
        assert_eq!(r["messageId"], id.as_str(), "the frame's own id");
        assert_eq!(r["transactionId"], txn.as_str());
        assert_eq!(r["queueName"], "tb.out");
    }
    assert_eq!(
        cursor(&db, pid, "g").await.committed,
        1,
        "both acks committed"
    );

    let out = pop(&b, "tb.out", Some("q"), G, 10, "")
        .await
        .expect("pushed");
    assert_eq!(out.txns(), ["o-1", "o-2"]);
    assert_eq!(out.messages[1]["data"], json!({"txn": "o-2"}));
}

#[tokio::test]
async fn a_refused_ack_rolls_back_the_binary_bundle_whole() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "tb.in", "p", &txns("in", 1)).await;
    let popped = pop(&b, "tb.in", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let pid = popped.partition_id();
    let mut forged = ack_op(&popped.messages[0], "completed", G);
    forged["leaseId"] = json!(queen_proto::new_v7().to_string());

    let before_cursor = cursor(&db, pid, "g").await.state();
    let before = written(&db).await;
    let qtb1 = body(
        &json!({ "operations": [forged] }),
        "tb.out",
        "q",
        &["o-1"],
        false,
    );
    let (status, answer) = post_bin(&b, "/api/v1/transaction", qtb1).await;
    assert_eq!(status, StatusCode::OK, "a rollback is a business outcome");
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["reason"], "rejected_ack");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rolled back"),
        "{answer}"
    );
    assert_eq!(
        written(&db).await,
        before,
        "the push rolled back with the ack"
    );
    assert!(segments(&db, "tb.out", "q").await.is_empty());
    assert_eq!(cursor(&db, pid, "g").await.state(), before_cursor);
}

#[tokio::test]
async fn flag_2_counts_pushes_duplicates_and_acks() {
    let b = common::broker().await;
    push_txns(&b, "tb.in", "p", &txns("in", 1)).await;
    let popped = pop(&b, "tb.in", Some("p"), G, 1, "")
        .await
        .expect("one message");
    let head = json!({ "operations": [ack_op(&popped.messages[0], "completed", G)] });
    let qtb1 = body(&head, "tb.cnt", "q", &["c-1", "c-2", "c-1"], true);
    let (status, answer) = post_bin(&b, "/api/v1/transaction", qtb1).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["results"], json!([]));
    assert_eq!(
        (&answer["pushed"], &answer["duplicate"], &answer["acked"]),
        (&json!(2), &json!(1), &json!(1))
    );
    let out = pop(&b, "tb.cnt", Some("q"), G, 10, "")
        .await
        .expect("pushed");
    assert_eq!(out.txns(), ["c-1", "c-2"]);
}

#[tokio::test]
async fn the_python_clients_body_commits() {
    let b = common::broker().await;
    let (status, answer) = post_bin(&b, "/api/v1/transaction", hex(PY_TXN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["results"][0]["transactionId"], "tx");
    let out = pop(&b, "q", Some("p"), None, 10, "").await.expect("pushed");
    assert_eq!(out.messages[0]["data"], json!([1, 2]));
}

#[tokio::test]
async fn malformed_binary_bundles_are_400_and_write_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    let good = body(&json!({ "operations": [] }), "tb.bad", "q", &["b-1"], false);
    let head_len = u32::from_le_bytes([good[5], good[6], good[7], good[8]]) as usize;
    let groups_at = 9 + head_len;
    let with_head = |head: &[u8]| -> Vec<u8> {
        let mut out = good[..5].to_vec();
        out.extend_from_slice(&(head.len() as u32).to_le_bytes());
        out.extend_from_slice(head);
        out.extend_from_slice(&good[groups_at..]);
        out
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad magic",
            [b"QPB1".as_slice(), &good[4..]].concat(),
            "bad magic",
        ),
        (
            "unknown flags",
            [&good[..4], &[8u8][..], &good[5..]].concat(),
            "unknown flags",
        ),
        ("truncated head", good[..7].to_vec(), "truncated"),
        (
            "truncated group",
            good[..good.len() - 4].to_vec(),
            "truncated",
        ),
        ("head not JSON", with_head(b"{nope"), "bad body"),
        (
            "head without operations",
            with_head(b"{\"requiredLeases\":[]}"),
            "operations",
        ),
        (
            "unknown operation",
            with_head(br#"{"operations":[{"type":"pop"}]}"#),
            "unknown operation",
        ),
        (
            "kv rider",
            with_head(br#"{"operations":[],"kv":[{"op":"set"}]}"#),
            "kv",
        ),
        (
            "nothing at all",
            b"QTB1\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec(),
            "no operations",
        ),
    ];
    let before = written(&db).await;
    for (what, qtb1, needle) in cases {
        let (status, answer) = post_bin(&b, "/api/v1/transaction", qtb1).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        assert_eq!(answer["success"], false, "{what}: {answer}");
        assert_eq!(answer["reason"], "bad_request", "{what}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{what}: {error:?} lacks {needle:?}");
        assert_eq!(written(&db).await, before, "{what}: something was written");
    }
    // The same groups behind a valid empty head commit.
    let (status, answer) = post_bin(&b, "/api/v1/transaction", with_head(b"")).await;
    assert_eq!(
        (status, &answer["success"]),
        (StatusCode::OK, &json!(true)),
        "{answer}"
    );
}
