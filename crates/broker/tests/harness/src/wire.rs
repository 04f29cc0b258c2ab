//! Helpers of the binary-wire tests (binary push, binary transaction, framed pop): posting
//! `application/x-queen-push` bodies, the client's zstd frames of a body, stored segment
//! blobs, and row counts for "nothing was written" checks.

use bytes::Bytes;
use queen_proto::push_bin::{parse_push, parse_txn, Batch, BatchItem, GroupBody, PushGroup};
use reqwest::StatusCode;
use serde_json::Value;

use crate::TestBroker;

pub const PUSH_CONTENT_TYPE: &str = "application/x-queen-push";
pub const POP_CONTENT_TYPE: &str = "application/x-queen-pop";

/// Bodies produced by the official Python client (queen-mq 2.6.0), the same fixtures as
/// crates/proto's codec tests:
/// `encode_push_frames([PushBatch('q','p',[b'{"a":1}',b'2'],['t1','']),
///                      PushBatch('q2','Default',[b'null'],None)], counts=True)`.
pub const PY_FRAMES: &str =
    "515042310a02000000010071010070020000006500000028b52ffd205ce102001c00000000\
    01a2275bd613729a83343ef352b2a7f4020074317b2261223a317d380000000001a2275bd6137c7c89422dc33c36e4\
    f3240030316132323735622d643631332d376337632d383934322d3264633333633336653466333202007132070044\
    656661756c74010000004800000028b52ffd203ff901003b0000000001a2275bd61475dda647e0c229c9694e240030\
    316132323735622d643631342d373564642d613634372d6530633232396339363934656e756c6c";
/// `encode_transaction_frames(b'{"operations":[]}', [PushBatch('q','p',[b'[1,2]'],['tx'])])`.
pub const PY_TXN: &str =
    "5154423100110000007b226f7065726174696f6e73223a5b5d7d010000000100710100700100\
    00002700000028b52ffd201ef100001a0000000001a2275bd61470dbbad9eec2b9afb5fa020074785b312c325d";

/// One message for queen_proto's encoders.
pub fn item<'a>(txn: Option<&'a str>, payload: &'a [u8]) -> BatchItem<'a> {
    BatchItem {
        transaction_id: txn,
        payload,
    }
}

/// One (queue, partition) group for queen_proto's encoders.
pub fn batch<'a>(queue: &'a str, partition: &'a str, items: Vec<BatchItem<'a>>) -> Batch<'a> {
    Batch {
        queue,
        partition,
        items,
    }
}

pub fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex fixture"))
        .collect()
}

/// POSTs a binary body to `path`; returns the status and the JSON answer.
pub async fn post_bin(b: &TestBroker, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    b.post_raw(path, PUSH_CONTENT_TYPE, body).await
}

/// The groups of a `QPB1` body, as the broker parses them.
pub fn push_groups(body: &[u8]) -> Vec<PushGroup> {
    parse_push(Bytes::copy_from_slice(body), 1 << 30)
        .expect("a valid QPB1 body")
        .groups
}

/// The groups of a `QTB1` body.
pub fn txn_groups(body: &[u8]) -> Vec<PushGroup> {
    parse_txn(Bytes::copy_from_slice(body), 1 << 30)
        .expect("a valid QTB1 body")
        .groups
}

/// The client's zstd frame of a pre-compressed group.
pub fn z_of(group: &PushGroup) -> Vec<u8> {
    match &group.body {
        GroupBody::Precompressed { z, .. } => z.to_vec(),
        GroupBody::Items(_) => panic!("not a pre-compressed group"),
    }
}

/// The (message id, transactionId, payload) of each frame of a pre-compressed group.
pub fn frames_of(group: &PushGroup) -> Vec<(String, String, Vec<u8>)> {
    match &group.body {
        GroupBody::Precompressed { frames_raw, .. } => queen_proto::frame::decode_all(frames_raw)
            .expect("frames")
            .iter()
            .map(|f| {
                let id = f.message_uuid().to_string();
                (id, f.transaction_id.to_string(), f.payload.to_vec())
            })
            .collect(),
        GroupBody::Items(_) => panic!("not a pre-compressed group"),
    }
}

/// Every stored segment of (queue, partition): (base_offset, end_offset, blob), ascending.
pub async fn segments(
    db: &tokio_postgres::Client,
    queue: &str,
    partition: &str,
) -> Vec<(i64, i64, Vec<u8>)> {
    db.query(
        "SELECT s.base_offset, s.end_offset, s.blob FROM queen.log_segments s
         JOIN queen.log_partitions p ON p.id = s.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = $1 AND p.name = $2 ORDER BY s.base_offset",
        &[&queue, &partition],
    )
    .await
    .expect("segments query")
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// The transactionIds stored in a blob, in frame order.
pub fn blob_txns(blob: &[u8]) -> Vec<String> {
    let raw = queen_proto::segment::decompress(blob, 1 << 30).expect("one zstd frame");
    queen_proto::frame::decode_all(&raw)
        .expect("frames")
        .iter()
        .map(|f| f.transaction_id.to_string())
        .collect()
}

/// Row counts of every table a push or transaction writes.
pub async fn written(db: &tokio_postgres::Client) -> Vec<i64> {
    let tables = [
        "queen.queues",
        "queen.log_partitions",
        "queen.log_segments",
        "queen.log_txns",
        "queen.log_consumers",
        "queen.log_dlq",
    ];
    crate::counts(db, &tables).await
}
