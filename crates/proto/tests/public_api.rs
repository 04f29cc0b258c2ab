//! The crate seen from outside, as the broker and the client use it: a binary push turned into
//! a stored segment, then shipped as a framed pop answer and read back.

use bytes::Bytes;
use queen_proto::frame::{self, Frame};
use queen_proto::pop_framed::{self, Claim, Codec, FramedPop, Record};
use queen_proto::push_bin::{self, Batch, BatchItem, GroupBody};
use queen_proto::{hash, ids, segment, time, wire};

#[test]
fn txn_hash_is_big_endian_xxh3_128() {
    assert_eq!(
        queen_proto::txn_hash("hello"),
        xxhash_rust::xxh3::xxh3_128(b"hello").to_be_bytes()
    );
    let hex = queen_proto::to_hex(&queen_proto::txn_hash("hello"));
    assert_eq!(queen_proto::from_hex(&hex), Ok(hash::txn_hash("hello")));
}

#[test]
fn push_to_segment_to_framed_pop() {
    let batches = [Batch {
        queue: "orders",
        partition: "cust-42",
        items: vec![
            BatchItem {
                transaction_id: Some("a"),
                payload: br#"{"n":1}"#,
            },
            BatchItem {
                transaction_id: None,
                payload: br#"{"n":2}"#,
            },
        ],
    }];
    let body = push_bin::encode_push_plain(&batches, false, false).expect("encodes");
    let envelope = push_bin::parse_push(Bytes::from(body), 64 << 20).expect("parses");
    let GroupBody::Items(items) = &envelope.groups[0].body else {
        panic!("plain items");
    };

    // The broker mints ids and transactionIds, frames and compresses the group.
    let minted: Vec<String> = items
        .iter()
        .map(|item| {
            item.transaction_id
                .clone()
                .unwrap_or_else(|| ids::new_v7().to_string())
        })
        .collect();
    let mut raw = Vec::new();
    for (item, txn) in items.iter().zip(&minted) {
        let frame = Frame {
            flags: 0,
            message_id: ids::new_v7().into_bytes(),
            trace_id: None,
            transaction_id: txn,
            producer_sub: None,
            payload: &item.payload,
        };
        frame.encode_into(&mut raw).expect("encodable");
    }
    let hashes = hash::txn_hashes(minted.iter().map(String::as_str));
    assert_eq!(hashes.len(), 32);
    let blob = segment::compress(&raw, 3);
    assert_eq!(segment::decompress(&blob, 1 << 20).as_deref(), Ok(&raw[..]));

    let pop = FramedPop {
        queue: "orders".into(),
        lease_id: ids::new_v7().to_string(),
        group: wire::QUEUE_MODE.into(),
        extra: None,
        claims: vec![Claim {
            partition_id: 17,
            partition: "cust-42".into(),
            start: 41,
            end: 42,
            delivery_attempt: 1,
            records: vec![Record {
                base: 41,
                created_us: 1_785_402_764_881_123,
                frame_count: 2,
                codec: Codec::of(&blob),
                bytes: Bytes::from(blob),
            }],
        }],
    };
    let answer = pop_framed::decode(&pop.encode().expect("encodes")).expect("decodes");
    let txns: Vec<&str> = answer
        .messages
        .iter()
        .map(|m| m.transaction_id.as_str())
        .collect();
    assert_eq!(txns, vec!["a", minted[1].as_str()]);
    assert_eq!(answer.messages[1].offset, 42);
    assert_eq!(
        answer.messages[0].created_at,
        time::iso_millis(1_785_402_764_881_123)
    );
    assert_eq!(frame::decode_all(&raw).map(|f| f.len()), Ok(2));
}
