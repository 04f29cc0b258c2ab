//! Unit tests of the `QPB1`/`QTB1` codecs, including bodies produced by the official Python
//! client (queen-mq 2.6.0).

use bytes::Bytes;

use super::*;
use crate::frame::{self, Frame};
use crate::segment;

const MAX: usize = 1 << 20;

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap_or(0))
        .collect()
}

// encode_push_binary([PushBatch('q','p',[b'{"a":1}',b'2'],['t1','']),
//                     PushBatch('q2','Default',[b'null'],['x'])], counts=True)
const PY_PLAIN: &str = "5150423106020000000100710100700200000002007431070000007b2261223a317d0000\
    010000003202007132070044656661756c7401000000010078040000006e756c6c";
// encode_push_binary([PushBatch('q','p',[b'{"a":1}',b'2'],['t1',''])], compress=True)
const PY_PLAIN_ZSTD: &str = "51504231052400000028b52ffd2024210100010000000100710100700200000002\
    007431070000007b2261223a317d00000100000032";
// encode_push_frames([PushBatch('q','p',[b'{"a":1}',b'2'],['t1','']),
//                     PushBatch('q2','Default',[b'null'],None)], counts=True)
const PY_FRAMES: &str =
    "515042310a02000000010071010070020000006500000028b52ffd205ce102001c00000000\
    01a2275bd613729a83343ef352b2a7f4020074317b2261223a317d380000000001a2275bd6137c7c89422dc33c36e4\
    f3240030316132323735622d643631332d376337632d383934322d3264633333633336653466333202007132070044\
    656661756c74010000004800000028b52ffd203ff901003b0000000001a2275bd61475dda647e0c229c9694e240030\
    316132323735622d643631342d373564642d613634372d6530633232396339363934656e756c6c";
// encode_transaction_frames(b'{"operations":[]}', [PushBatch('q','p',[b'[1,2]'],['tx'])])
const PY_TXN: &str = "5154423100110000007b226f7065726174696f6e73223a5b5d7d010000000100710100700100\
    00002700000028b52ffd201ef100001a0000000001a2275bd61470dbbad9eec2b9afb5fa020074785b312c325d";

fn item(txn: Option<&str>, payload: &[u8]) -> PlainItem {
    PlainItem {
        transaction_id: txn.map(str::to_owned),
        payload: Bytes::copy_from_slice(payload),
    }
}

fn batches() -> Vec<Batch<'static>> {
    vec![
        Batch {
            queue: "q",
            partition: "p",
            items: vec![
                BatchItem {
                    transaction_id: Some("t1"),
                    payload: br#"{"a":1}"#,
                },
                BatchItem {
                    transaction_id: None,
                    payload: b"2",
                },
            ],
        },
        Batch {
            queue: "q2",
            partition: "Default",
            items: vec![BatchItem {
                transaction_id: Some("x"),
                payload: b"null",
            }],
        },
    ]
}

fn parse(body: &[u8]) -> Result<PushEnvelope, PushError> {
    parse_push(Bytes::copy_from_slice(body), MAX)
}

fn frames_of(group: &PushGroup) -> Vec<(String, Vec<u8>)> {
    match &group.body {
        GroupBody::Precompressed { frames_raw, .. } => frame::decode_all(frames_raw)
            .unwrap_or_default()
            .iter()
            .map(|f| (f.transaction_id.to_owned(), f.payload.to_vec()))
            .collect(),
        GroupBody::Items(_) => Vec::new(),
    }
}

#[test]
fn python_plain_body() {
    let env = parse(&hex(PY_PLAIN)).expect("python body");
    assert_eq!(env.flags, FLAG_COUNTS | FLAG_TXN);
    assert!(env.counts_only());
    assert_eq!(env.groups.len(), 2);
    assert_eq!(env.groups[0].queue, "q");
    assert_eq!(env.groups[0].partition, "p");
    assert_eq!(
        env.groups[0].body,
        GroupBody::Items(vec![item(Some("t1"), br#"{"a":1}"#), item(None, b"2")])
    );
    assert_eq!(env.groups[1].partition, "Default");
    assert_eq!(env.groups[1].len(), 1);
    // Our encoder writes the same bytes.
    assert_eq!(
        encode_push_plain(&batches(), false, true),
        Ok(hex(PY_PLAIN))
    );
}

#[test]
fn python_compressed_plain_body() {
    let env = parse(&hex(PY_PLAIN_ZSTD)).expect("python body");
    assert_eq!(env.flags, FLAG_ZSTD | FLAG_TXN);
    assert_eq!(
        env.groups[0].body,
        GroupBody::Items(vec![item(Some("t1"), br#"{"a":1}"#), item(None, b"2")])
    );
    let ours = encode_push_plain(&batches()[..1], true, false).expect("encodes");
    assert_eq!(parse(&ours), Ok(env));
}

#[test]
fn python_precompressed_body() {
    let body = hex(PY_FRAMES);
    let env = parse(&body).expect("python body");
    assert_eq!(env.flags, FLAG_FRAMES | FLAG_COUNTS);
    assert_eq!(env.groups.len(), 2);
    let first = frames_of(&env.groups[0]);
    assert_eq!(first[0], ("t1".to_owned(), br#"{"a":1}"#.to_vec()));
    assert_eq!(first[1].1, b"2");
    assert_eq!(first[1].0.len(), 36, "a minted id's text");
    let GroupBody::Precompressed { n, z, .. } = &env.groups[0].body else {
        panic!("pre-compressed")
    };
    assert_eq!(*n, 2);
    assert!(segment::is_zstd(z));
    let at = body
        .windows(z.len())
        .position(|w| w == &z[..])
        .expect("z is the client's bytes");
    assert_eq!(at, 4 + 1 + 4 + 2 + 1 + 2 + 1 + 4 + 4);
    assert_eq!(frames_of(&env.groups[1])[0].1, b"null");
}

#[test]
fn python_txn_body() {
    let env = parse_txn(Bytes::from(hex(PY_TXN)), MAX).expect("python body");
    assert_eq!(env.flags, 0);
    assert!(!env.counts_only());
    assert_eq!(&env.head[..], br#"{"operations":[]}"#);
    assert_eq!(
        frames_of(&env.groups[0]),
        vec![("tx".to_owned(), b"[1,2]".to_vec())]
    );
}

#[test]
fn precompressed_round_trip() {
    let body = encode_push_precompressed(&batches(), false).expect("encodes");
    let env = parse(&body).expect("parses");
    assert_eq!(env.flags, FLAG_FRAMES);
    let first = frames_of(&env.groups[0]);
    assert_eq!(first[0].0, "t1");
    let raw = match &env.groups[0].body {
        GroupBody::Precompressed { frames_raw, .. } => frames_raw.clone(),
        GroupBody::Items(_) => Vec::new(),
    };
    let decoded = frame::decode_all(&raw).expect("frames");
    assert_eq!(
        decoded[1].transaction_id,
        decoded[1].message_uuid().to_string()
    );
    assert_eq!(decoded[1].message_uuid().get_version_num(), 7);
    assert!(decoded[0].message_id < decoded[1].message_id);
}

#[test]
fn txn_round_trip() {
    let body = encode_txn(b"", &batches(), true).expect("encodes");
    let env = parse_txn(Bytes::from(body), MAX).expect("parses");
    assert!(env.counts_only());
    assert!(env.head.is_empty());
    assert_eq!(env.groups.len(), 2);
    assert_eq!(frames_of(&env.groups[1])[0].0, "x");
}

#[test]
fn plain_without_transaction_ids() {
    let plain = vec![Batch {
        queue: "q",
        partition: "",
        items: vec![BatchItem {
            transaction_id: None,
            payload: b" [ ] ",
        }],
    }];
    let body = encode_push_plain(&plain, false, false).expect("encodes");
    let env = parse(&body).expect("parses");
    assert_eq!(env.flags, 0);
    assert_eq!(env.groups[0].partition, "");
    assert_eq!(
        env.groups[0].body,
        GroupBody::Items(vec![item(None, b" [ ] ")])
    );
    let empty = encode_push_plain(&[], false, false).expect("encodes");
    assert_eq!(parse(&empty).map(|e| e.groups.len()), Ok(0));
}

#[test]
fn every_truncation_fails_without_panicking() {
    let bodies = [
        hex(PY_PLAIN),
        hex(PY_PLAIN_ZSTD),
        hex(PY_FRAMES),
        encode_push_plain(&batches(), true, true).unwrap_or_default(),
    ];
    for body in &bodies {
        for end in 0..body.len() {
            assert!(parse(&body[..end]).is_err(), "cut at {end} accepted");
        }
    }
    let txn = hex(PY_TXN);
    for end in 0..txn.len() {
        assert!(parse_txn(Bytes::copy_from_slice(&txn[..end]), MAX).is_err());
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    for body in [hex(PY_PLAIN), hex(PY_FRAMES), hex(PY_PLAIN_ZSTD)] {
        for i in 0..body.len() {
            for value in [0u8, 0x08, 0x7f, 0xff] {
                let mut bad = body.clone();
                bad[i] = value;
                let _ = parse(&bad);
                let _ = parse_txn(Bytes::from(bad), MAX);
            }
        }
    }
}

#[test]
fn error_texts() {
    let plain = hex(PY_PLAIN);
    let err = |body: &[u8]| parse(body).map(|_| ()).unwrap_err().to_string();
    assert_eq!(err(b"QPB2\x00"), "bad magic");
    assert_eq!(err(b"QPB1\x10\0\0\0\0"), "unknown flags 0x10");
    assert_eq!(err(b"QPB1"), "truncated at header");
    assert_eq!(
        err(&plain[..plain.len() - 1]),
        "truncated at group 1 item 0"
    );
    assert_eq!(err(&plain[..20]), "truncated at group 0 item 0");
    let mut trailing = plain.clone();
    trailing.extend_from_slice(b"zz");
    assert_eq!(err(&trailing), "2 trailing bytes after the last group");
    let mut bad_name = plain.clone();
    bad_name[11] = 0xff; // the queue name "q"
    assert_eq!(err(&bad_name), "invalid UTF-8 in queue name at group 0");
    let mut bad_json = plain.clone();
    let at = plain.len() - 4; // "null" -> "nulx"
    bad_json[at + 3] = b'x';
    assert!(err(&bad_json).starts_with("payload is not valid JSON at group 1 item 0"));
    let empty_queue = encode_push_plain(
        &[Batch {
            queue: "",
            partition: "p",
            items: vec![],
        }],
        false,
        false,
    )
    .expect("encodes");
    assert_eq!(err(&empty_queue), "empty queue name at group 0");
}

#[test]
fn rejects_bad_payload_json_and_utf8() {
    for payload in [&b""[..], b"{", b"1 2", b"\"\xff\"", b"nan"] {
        let body = encode_push_plain(
            &[Batch {
                queue: "q",
                partition: "p",
                items: vec![BatchItem {
                    transaction_id: None,
                    payload,
                }],
            }],
            false,
            false,
        )
        .expect("encodes");
        assert!(
            matches!(parse(&body), Err(PushError::Json { .. })),
            "{payload:?}"
        );
    }
}

/// A flag-8 body with one group whose zstd blob is `z` and frame count `n`.
fn frames_body(n: u32, z: &[u8]) -> Vec<u8> {
    let mut body = b"QPB1\x08\x01\0\0\0\x01\0q\x01\0p".to_vec();
    body.extend_from_slice(&n.to_le_bytes());
    body.extend_from_slice(&(z.len() as u32).to_le_bytes());
    body.extend_from_slice(z);
    body
}

fn stored(flags: u8, txn: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let frame = Frame {
        flags,
        message_id: [7; 16],
        trace_id: None,
        transaction_id: txn,
        producer_sub: None,
        payload,
    };
    frame.encode_into(&mut out).expect("encodable");
    out
}

#[test]
fn precompressed_validation() {
    let good = stored(0, "t", b"1");
    assert!(parse(&frames_body(1, &segment::compress(&good, 1))).is_ok());
    let err = |n: u32, z: &[u8]| {
        parse(&frames_body(n, z))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(err(1, &good), "group 0: not a zstd frame");
    assert_eq!(
        err(2, &segment::compress(&good, 1)),
        "group 0: expected 2 frames, found 1"
    );
    let two = [good.clone(), good.clone()].concat();
    let mut trace_flag_without_trace = good.clone();
    trace_flag_without_trace[4] = frame::TRACE;
    assert_eq!(
        err(1, &segment::compress(&two, 1)),
        format!(
            "group 0: {} leftover bytes after the last frame",
            good.len()
        )
    );
    assert_eq!(
        err(1, &segment::compress(&trace_flag_without_trace, 1)),
        "group 0: frame 0 at byte 0: fields run past the end of the body"
    );
    assert_eq!(
        err(1, &segment::compress(&stored(4, "t", b"1"), 1)),
        "group 0 frame 0: flags byte 0x04, client frames must use 0"
    );
    assert_eq!(
        err(1, &segment::compress(&stored(0, "", b"1"), 1)),
        "group 0 frame 0: empty transactionId"
    );
    assert!(err(1, &segment::compress(&stored(0, "t", b"{x"), 1))
        .starts_with("group 0 frame 0: payload is not valid JSON"));
    let mut streamed = zstd::stream::Encoder::new(Vec::new(), 1).expect("encoder");
    std::io::Write::write_all(&mut streamed, &good).expect("write");
    let streamed = streamed.finish().expect("finish");
    assert_eq!(
        err(1, &streamed),
        "group 0: zstd frame without content size"
    );
}

#[test]
fn decompression_budget_is_shared() {
    let mut payload = vec![b' '; 999];
    payload.push(b'1');
    let framed = stored(0, "t", &payload);
    let body = encode_twice(&segment::compress(&framed, 1));
    let limit = framed.len() * 2;
    assert!(parse_push(Bytes::from(body.clone()), limit).is_ok());
    assert!(matches!(
        parse_push(Bytes::from(body), limit - 1),
        Err(PushError::GroupZstd {
            group: 1,
            source: segment::SegmentError::TooLarge { .. }
        })
    ));
    let zbody = encode_push_plain(&batches(), true, false).expect("encodes");
    assert!(matches!(
        parse_push(Bytes::from(zbody), 10),
        Err(PushError::RawLenTooLarge { max: 10, .. })
    ));
}

fn encode_twice(z: &[u8]) -> Vec<u8> {
    let mut body = b"QPB1\x08\x02\0\0\0".to_vec();
    for _ in 0..2 {
        body.extend_from_slice(b"\x01\0q\x01\0p\x01\0\0\0");
        body.extend_from_slice(&(z.len() as u32).to_le_bytes());
        body.extend_from_slice(z);
    }
    body
}

#[test]
fn compressed_body_must_match_raw_len() {
    let mut body = encode_push_plain(&batches(), true, false).expect("encodes");
    let raw_len = u32::from_le_bytes([body[5], body[6], body[7], body[8]]);
    body[5..9].copy_from_slice(&(raw_len + 1).to_le_bytes());
    assert!(matches!(parse(&body), Err(PushError::Body(_))));
}

#[test]
fn txn_flags_and_magic() {
    assert_eq!(
        parse_txn(Bytes::from_static(b"QPB1\0"), MAX),
        Err(PushError::BadMagic)
    );
    assert_eq!(
        parse_txn(Bytes::from_static(b"QTB1\x04\0\0\0\0\0\0\0\0"), MAX),
        Err(PushError::UnknownFlags(4))
    );
    assert_eq!(
        parse_txn(Bytes::from_static(b"QTB1\x02\x05\0\0\0{}"), MAX)
            .map(|_| ())
            .unwrap_err()
            .to_string(),
        "truncated at transaction head"
    );
}

#[test]
fn encoder_refuses_long_names() {
    let long = "q".repeat(65_536);
    let too_long = [Batch {
        queue: &long,
        partition: "p",
        items: vec![],
    }];
    assert!(matches!(
        encode_push_plain(&too_long, false, false),
        Err(EncodeError::TooLong { .. })
    ));
    assert!(encode_push_precompressed(&too_long, false).is_err());
    assert!(encode_txn(b"{}", &too_long, false).is_err());
}

/// The decompressed bytes a parsed body holds: the flag-1 body and every group's frames.
fn inflated(groups: &[PushGroup]) -> usize {
    groups
        .iter()
        .map(|g| match &g.body {
            GroupBody::Precompressed { frames_raw, .. } => frames_raw.len(),
            GroupBody::Items(_) => 0,
        })
        .sum()
}

#[test]
fn announced_inflation_is_what_parsing_inflates() {
    assert_eq!(announced_inflation(&hex(PY_PLAIN)), 0);
    let zstd = hex(PY_PLAIN_ZSTD);
    assert_eq!(announced_inflation(&zstd), 0x24, "the flag-1 raw_len");
    let frames = hex(PY_FRAMES);
    let env = parse_push(Bytes::from(frames.clone()), MAX).expect("frames body");
    assert!(inflated(&env.groups) > 0);
    assert_eq!(announced_inflation(&frames), inflated(&env.groups));
    let txn = hex(PY_TXN);
    let env = parse_txn(Bytes::from(txn.clone()), MAX).expect("txn body");
    assert_eq!(announced_inflation(&txn), inflated(&env.groups));
}

#[test]
fn announced_inflation_of_broken_or_foreign_bodies() {
    let frames = hex(PY_FRAMES);
    let env = parse_push(Bytes::from(frames.clone()), MAX).expect("frames body");
    let first = inflated(&env.groups[..1]);
    // Cut inside the second group: only the first one would be inflated.
    assert_eq!(announced_inflation(&frames[..frames.len() - 10]), first);
    assert_eq!(announced_inflation(b"{\"items\":[]}"), 0);
    assert_eq!(announced_inflation(b"QPB1"), 0);
    // Flag 1 with flag 8: the groups' sizes are inside the outer frame.
    assert_eq!(
        announced_inflation(&[b'Q', b'P', b'B', b'1', FLAG_ZSTD | FLAG_FRAMES, 0, 0, 0, 0]),
        usize::MAX
    );
    // A raw_len of 64 MiB behind a few bytes is announced as such.
    let mut bomb = PUSH_MAGIC.to_vec();
    bomb.push(FLAG_ZSTD);
    bomb.extend_from_slice(&(64u32 << 20).to_le_bytes());
    bomb.extend_from_slice(&segment::compress(&[0u8; 16], 1));
    assert_eq!(announced_inflation(&bomb), 64 << 20);
}
