//! Unit tests of the `QPF1` codec, including the official Python decoder's reading of one of
//! our answers.

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::frame::{Frame, ENCRYPTED};

fn frames(specs: &[(u8, &str, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (seed, txn, sub, payload)) in specs.iter().enumerate() {
        let frame = Frame {
            flags: 0,
            message_id: [*seed; 16],
            trace_id: (i % 2 == 1).then_some([0x40 + *seed; 16]),
            transaction_id: txn,
            producer_sub: *sub,
            payload,
        };
        frame.encode_into(&mut out).expect("encodable");
    }
    out
}

fn fixture() -> FramedPop {
    let first = frames(&[
        (1, "t0", None, b"0"),
        (2, "t1", None, b"1"),
        (3, "t2", None, b"2"),
        (4, "t3", Some("alice"), br#"{"orderId":91,"total":4200}"#),
        (5, "t4", None, b""),
    ]);
    let second = frames(&[
        (6, "t5", None, "\"ünïcødé\"".as_bytes()),
        (7, "t6", None, b"[1,2]"),
        (8, "t7", None, b"true"),
    ]);
    let lone = frames(&[(9, "only", None, b"null")]);
    let mut extra = serde_json::Map::new();
    extra.insert("frames".into(), json!(true));
    extra.insert(
        "autopilot".into(),
        json!({"partitions": 2, "batch": 10, "waitMs": 0}),
    );
    FramedPop {
        queue: "orders".into(),
        lease_id: "0198e4c2-0000-7000-8000-000000000000".into(),
        group: "billing".into(),
        extra: Some(extra),
        claims: vec![
            Claim {
                partition_id: 17,
                partition: "cust-42".into(),
                start: 3,
                end: 6,
                delivery_attempt: 2,
                records: vec![
                    Record {
                        base: 0,
                        created_us: 1_785_402_764_881_123,
                        frame_count: 5,
                        codec: Codec::Zstd,
                        bytes: Bytes::from(crate::segment::compress(&first, 3)),
                    },
                    Record {
                        base: 5,
                        created_us: 1_785_402_765_000_999,
                        frame_count: 3,
                        codec: Codec::Raw,
                        bytes: Bytes::from(second),
                    },
                ],
            },
            Claim {
                partition_id: u64::MAX,
                partition: "Default".into(),
                start: 0,
                end: 0,
                delivery_attempt: 1,
                records: vec![Record {
                    base: 0,
                    created_us: 0,
                    frame_count: 1,
                    codec: Codec::Raw,
                    bytes: Bytes::from(lone),
                }],
            },
        ],
    }
}

/// What `queen.http.pop_frames.decode_pop_frames` (queen-mq 2.6.0) returns for
/// `fixture().encode()`, as `json.dumps` printed it.
const PYTHON_DECODED: &str = include_str!("python_decoded.json");

fn encoded() -> Vec<u8> {
    fixture().encode().expect("encodes")
}

#[test]
fn round_trip_trims_claim_edges() {
    let answer = decode(&encoded()).expect("decodes");
    let offsets: Vec<(String, u64)> = answer
        .messages
        .iter()
        .map(|m| (m.partition_id.clone(), m.offset))
        .collect();
    let max = u64::MAX.to_string();
    assert_eq!(
        offsets,
        vec![
            ("17".into(), 3),
            ("17".into(), 4),
            ("17".into(), 5),
            ("17".into(), 6),
            (max, 0)
        ]
    );
    assert_eq!(answer.partitions_claimed, 2);
    assert_eq!(
        (answer.partition.as_str(), answer.partition_id.as_str()),
        ("cust-42", "17")
    );
    let m = &answer.messages[0];
    assert_eq!(m.transaction_id, "t3");
    assert_eq!(m.producer_sub.as_deref(), Some("alice"));
    assert_eq!(m.trace_id, Some(uuid::Uuid::from_bytes([0x44; 16])));
    assert_eq!(m.data, json!({"orderId": 91, "total": 4200}));
    assert_eq!(m.created_at, "2026-07-30T09:12:44.881Z");
    assert_eq!(m.delivery_attempt, 2);
    assert_eq!(answer.messages[1].data, Value::Null, "empty payload");
    assert_eq!(answer.messages[2].data, json!("ünïcødé"));
    assert_eq!(answer.messages[2].created_at, "2026-07-30T09:12:45.000Z");
    assert_eq!(answer.messages[4].created_at, "1970-01-01T00:00:00.000Z");
    assert!(!answer.extra.contains_key("frames"));
}

#[test]
fn matches_the_official_python_decoder() {
    let python: Value = serde_json::from_str(PYTHON_DECODED).expect("golden JSON");
    assert_eq!(decode(&encoded()).map(|a| a.to_json()), Ok(python));
}

#[test]
fn version_zero_and_empty_answers() {
    let mut pop = fixture();
    pop.extra = None;
    pop.claims.clear();
    let bytes = pop.encode().expect("encodes");
    assert_eq!(bytes[4], 0);
    let answer = decode(&bytes).expect("decodes");
    assert_eq!(
        answer.to_json(),
        json!({"success": true, "queue": "orders", "partition": "", "partitionId": "",
               "leaseId": "0198e4c2-0000-7000-8000-000000000000", "consumerGroup": "billing",
               "messages": [], "partitionsClaimed": 0})
    );
    // Version 1 with an empty or non-object header is the same answer.
    let mut v1 = b"QPF1\x01\0\0\0\0".to_vec();
    v1.extend_from_slice(&bytes[5..]);
    assert_eq!(decode(&v1), Ok(answer.clone()));
    let mut v1 = b"QPF1\x01\x02\0\0\0[]".to_vec();
    v1.extend_from_slice(&bytes[5..]);
    assert_eq!(decode(&v1), Ok(answer));
}

#[test]
fn every_truncation_fails_without_panicking() {
    let bytes = encoded();
    for end in 0..bytes.len() {
        assert!(decode(&bytes[..end]).is_err(), "cut at {end} accepted");
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let bytes = encoded();
    for i in 0..bytes.len() {
        for value in [0u8, 1, 0x7f, 0xff] {
            let mut bad = bytes.clone();
            bad[i] = value;
            let _ = decode(&bad);
        }
    }
}

#[test]
fn frame_count_is_read_from_the_start() {
    let mut pop = fixture();
    pop.claims[0].records[1].frame_count = 4;
    assert_eq!(
        decode(&pop.encode().unwrap_or_default()),
        Err(DecodeError::RecordShort(4))
    );
    // Fewer frames than the record holds: the rest is ignored, as upstream does.
    let mut pop = fixture();
    pop.claims[0].records[1].frame_count = 1;
    let answer = decode(&pop.encode().unwrap_or_default()).expect("decodes");
    let offsets: Vec<u64> = answer.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![3, 4, 5, 0]);
}

#[test]
fn rejects_bad_headers_codecs_and_encrypted_frames() {
    assert_eq!(decode(b"QPF1"), Err(DecodeError::NotFramed));
    assert_eq!(decode(b"JSON{}"), Err(DecodeError::NotFramed));
    assert_eq!(decode(b"QPF1\x02"), Err(DecodeError::UnknownVersion(2)));
    assert!(matches!(
        decode(b"QPF1\x01\x01\0\0\0{"),
        Err(DecodeError::OwnKeys(_))
    ));
    let mut pop = fixture();
    pop.claims[0].records[1].codec = Codec::Zstd;
    assert!(matches!(
        decode(&pop.encode().unwrap_or_default()),
        Err(DecodeError::Zstd(_))
    ));
    let mut bytes = encoded();
    let codec_at = bytes
        .windows(5)
        .position(|w| w == [5, 0, 0, 0, 1])
        .map(|at| at + 4)
        .expect("first record's codec");
    bytes[codec_at] = 7;
    assert_eq!(decode(&bytes), Err(DecodeError::UnknownCodec(7)));

    let mut secret = Vec::new();
    let frame = Frame {
        flags: ENCRYPTED,
        message_id: [1; 16],
        trace_id: None,
        transaction_id: "t",
        producer_sub: None,
        payload: b"{}",
    };
    frame.encode_into(&mut secret).expect("encodable");
    let mut pop = fixture();
    pop.claims[1].records[0].bytes = Bytes::from(secret);
    assert_eq!(
        decode(&pop.encode().unwrap_or_default()),
        Err(DecodeError::Encrypted)
    );
}

#[test]
fn offsets_near_the_top_do_not_overflow() {
    let mut pop = fixture();
    pop.claims[0].start = u64::MAX - 1;
    pop.claims[0].end = u64::MAX;
    pop.claims[0].records[1].base = u64::MAX - 1;
    let answer = decode(&pop.encode().unwrap_or_default()).expect("decodes");
    let offsets: Vec<u64> = answer.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![u64::MAX - 1, u64::MAX, 0]);
}

#[test]
fn codec_of_blob() {
    assert_eq!(Codec::of(&crate::segment::compress(b"x", 1)), Codec::Zstd);
    assert_eq!(Codec::of(b"\x13\0\0\0"), Codec::Raw);
}

#[test]
fn encoder_refuses_long_names() {
    let mut pop = fixture();
    pop.group = "g".repeat(65_536);
    assert!(matches!(pop.encode(), Err(EncodeError::TooLong { .. })));
}

#[test]
#[ignore = "prints the fixture for the official Python decoder"]
fn print_fixture_hex() {
    let hex: String = encoded().iter().map(|b| format!("{b:02x}")).collect();
    println!("{hex}");
}
