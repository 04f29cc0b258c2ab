//! Unit tests of the stored frame codec.

use super::*;

fn sample() -> Vec<Frame<'static>> {
    vec![
        Frame {
            flags: 0,
            message_id: [1; 16],
            trace_id: None,
            transaction_id: "t-1",
            producer_sub: None,
            payload: br#"{"a":1}"#,
        },
        Frame {
            flags: TRACE | PRODUCER_SUB,
            message_id: [2; 16],
            trace_id: Some([3; 16]),
            transaction_id: "ünï",
            producer_sub: Some("alice"),
            payload: b"",
        },
        Frame {
            flags: ENCRYPTED | PRODUCER_SUB,
            message_id: [4; 16],
            trace_id: None,
            transaction_id: "",
            producer_sub: Some(""),
            payload: br#"{"encrypted":"x","iv":"y","authTag":"z"}"#,
        },
    ]
}

fn encode(frames: &[Frame<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        frame.encode_into(&mut out).expect("encodable");
    }
    out
}

#[test]
fn round_trip() {
    let frames = sample();
    let buf = encode(&frames);
    assert_eq!(
        buf.len(),
        frames.iter().map(Frame::encoded_len).sum::<usize>()
    );
    assert_eq!(decode_all(&buf), Ok(frames.clone()));
    assert_eq!(decode_exact(&buf, 3), Ok(frames.clone()));
    assert_eq!(decode_all(&[]), Ok(vec![]));
    assert_eq!(decode_exact(&[], 0), Ok(vec![]));
}

#[test]
fn exact_layout() {
    let frame = Frame {
        flags: 0,
        message_id: [0xaa; 16],
        trace_id: None,
        transaction_id: "tx",
        producer_sub: None,
        payload: b"7",
    };
    let mut out = Vec::new();
    frame.encode_into(&mut out).expect("encodable");
    let mut expected = vec![22, 0, 0, 0, 0];
    expected.extend_from_slice(&[0xaa; 16]);
    expected.extend_from_slice(&[2, 0, b't', b'x', b'7']);
    assert_eq!(out, expected);
}

#[test]
fn presence_flags_follow_the_fields() {
    let frame = Frame {
        flags: TRACE | PRODUCER_SUB | 0x80,
        message_id: [0; 16],
        trace_id: None,
        transaction_id: "x",
        producer_sub: None,
        payload: b"1",
    };
    assert_eq!(frame.wire_flags(), 0);
    let buf = encode(&[frame]);
    let back = decode_all(&buf).expect("decodes");
    assert_eq!(back[0].flags, 0);
    assert_eq!(back[0].trace_id, None);
}

#[test]
fn every_truncation_is_an_error() {
    let buf = encode(&sample());
    let boundaries: Vec<usize> = {
        let mut at = 0;
        sample()
            .iter()
            .map(|f| {
                at += f.encoded_len();
                at
            })
            .collect()
    };
    for end in 0..buf.len() {
        let result = decode_all(&buf[..end]);
        if end == 0 || boundaries.contains(&end) {
            assert!(result.is_ok(), "cut at frame boundary {end}");
        } else {
            assert!(result.is_err(), "cut at {end} accepted");
        }
        assert!(decode_exact(&buf[..end], 3).is_err(), "cut at {end}");
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let buf = encode(&sample());
    for i in 0..buf.len() {
        for value in [0u8, 1, 0x7f, 0xff] {
            let mut bad = buf.clone();
            bad[i] = value;
            let _ = decode_all(&bad);
            let _ = decode_exact(&bad, 3);
        }
    }
}

#[test]
fn rejects_leftovers_and_missing_frames() {
    let mut buf = encode(&sample());
    assert_eq!(
        decode_exact(&buf, 4),
        Err(FrameError::Missing {
            expected: 4,
            found: 3
        })
    );
    let two = sample()[..2].iter().map(Frame::encoded_len).sum::<usize>();
    assert_eq!(
        decode_exact(&buf, 2),
        Err(FrameError::Leftover(buf.len() - two))
    );
    buf.push(0);
    assert_eq!(
        decode_all(&buf),
        Err(FrameError::TruncatedLength {
            index: 3,
            at: buf.len() - 1
        })
    );
}

#[test]
fn rejects_short_bodies_bad_flags_and_bad_utf8() {
    let mut short = 18u32.to_le_bytes().to_vec();
    short.extend_from_slice(&[0; 18]);
    assert!(matches!(
        decode_all(&short),
        Err(FrameError::BodyTooShort { len: 18, .. })
    ));

    let frame = Frame {
        flags: 0,
        message_id: [0; 16],
        trace_id: None,
        transaction_id: "ab",
        producer_sub: None,
        payload: b"1",
    };
    let good = encode(&[frame]);
    let mut bad_flags = good.clone();
    bad_flags[4] = 8;
    assert!(matches!(
        decode_all(&bad_flags),
        Err(FrameError::UnknownFlags { flags: 8, .. })
    ));
    let mut trace_overrun = good.clone();
    trace_overrun[4] = TRACE;
    assert!(matches!(
        decode_all(&trace_overrun),
        Err(FrameError::FieldsOverrun { .. })
    ));
    let mut bad_utf8 = good.clone();
    bad_utf8[4 + 1 + 16 + 2] = 0xff;
    assert!(matches!(
        decode_all(&bad_utf8),
        Err(FrameError::Utf8 {
            field: "transactionId",
            ..
        })
    ));
    let mut huge_len = good;
    huge_len[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_all(&huge_len),
        Err(FrameError::TruncatedBody { .. })
    ));
}

#[test]
fn encode_refuses_oversized_fields() {
    let long = "x".repeat(65_536);
    let mut frame = sample()[0];
    frame.transaction_id = &long;
    let mut out = vec![9];
    assert_eq!(
        frame.encode_into(&mut out),
        Err(FrameError::FieldTooLong {
            field: "transactionId",
            len: 65_536
        })
    );
    assert_eq!(out, vec![9], "nothing appended on error");
    let max = "y".repeat(65_535);
    frame.transaction_id = &max;
    assert!(frame.encode_into(&mut out).is_ok());
    let mut frame = sample()[1];
    frame.producer_sub = Some(&long);
    assert!(frame.encode_into(&mut Vec::new()).is_err());
}

#[test]
fn helpers() {
    let frames = sample();
    assert_eq!(frames[0].payload_json(), br#"{"a":1}"#);
    assert_eq!(frames[1].payload_json(), b"null");
    assert_eq!(frames[1].trace_uuid(), Some(Uuid::from_bytes([3; 16])));
    assert_eq!(frames[0].trace_uuid(), None);
    assert_eq!(frames[0].message_uuid(), Uuid::from_bytes([1; 16]));
    assert!(frames[2].is_encrypted() && !frames[0].is_encrypted());
}

#[test]
fn iterator_stops_after_the_first_error() {
    let mut buf = encode(&sample());
    buf.extend_from_slice(&[1, 0]);
    let mut frames = Frames::new(&buf);
    assert!(frames.by_ref().take(3).all(|f| f.is_ok()));
    assert!(matches!(frames.next(), Some(Err(_))));
    assert!(frames.next().is_none());
}
