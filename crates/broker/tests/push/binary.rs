//! Binary push (`QPB1`, docs/wire.md §6) over real HTTP and PostgreSQL: bodies built by
//! queen_proto's encoders (byte-identical to the official Python client's) and by the Python
//! client itself; every flag; pre-compressed groups stored byte for byte, and re-packed when a
//! duplicate forbids it; each malformed-body class refused with a 400 and nothing written.

use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed, GroupBody};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::common::statuses;
use crate::wire::{
    batch, blob_txns, frames_of, hex, item, post_bin, push_groups, segments, written, z_of,
    PY_FRAMES,
};

/// Pops (queue-mode JSON, wildcard) everything of `queue`, acking nothing; returns the
/// messages in delivery order.
async fn pop_all(b: &common::TestBroker, queue: &str) -> Vec<Value> {
    let (status, body) = b
        .get(&format!(
            "/api/v1/pop/queue/{queue}?batch=1000&autoAck=true&partitions=50"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "pop {queue}: {body}");
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn plain_bodies_with_every_flag_round_trip() {
    let b = common::broker().await;
    let payloads: [&[u8]; 4] = [br#"{"n":0}"#, b"null", b"{}", "\"\u{fc}ber\"".as_bytes()];

    // Flag 4 (transactionIds), no compression: one result per item, in wire order.
    let batches = [
        batch(
            "bin.plain",
            "p1",
            payloads
                .iter()
                .enumerate()
                .map(|(i, p)| item(Some(["t0", "t1", "t2", "t3"][i]), p))
                .collect(),
        ),
        batch("bin.plain", "", vec![item(Some(""), b"[1,2]")]),
    ];
    let body = encode_push_plain(&batches, false, false).expect("encodes");
    let (status, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(statuses(&out), ["queued"; 5]);
    let out = out.as_array().expect("array");
    assert_eq!(out[1]["transaction_id"], "t1");
    assert_eq!(out[1]["queueName"], "bin.plain");
    assert_eq!(out[4]["index"], 4);
    assert_eq!(
        out[4]["transaction_id"], out[4]["message_id"],
        "an empty transactionId is minted from the message id"
    );
    let popped = pop_all(&b, "bin.plain").await;
    let by_partition = |p: &str| -> Vec<Value> {
        popped
            .iter()
            .filter(|m| m["partition"] == p)
            .map(|m| m["data"].clone())
            .collect()
    };
    assert_eq!(
        by_partition("p1"),
        [json!({"n": 0}), Value::Null, json!({}), json!("über")]
    );
    assert_eq!(
        by_partition("Default"),
        [json!([1, 2])],
        "empty partition = Default"
    );

    // Flag 1 (zstd body) + 4, then a repeat with flag 2: the counts answer.
    let zipped = [batch(
        "bin.zipped",
        "p",
        vec![item(Some("z0"), b"1"), item(Some("z1"), b"2")],
    )];
    let body = encode_push_plain(&zipped, true, false).expect("encodes");
    assert_eq!(body[4] & 1, 1, "flag 1 set");
    let (status, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(
        (status, statuses(&out)),
        (StatusCode::CREATED, vec!["queued"; 2])
    );
    let body = encode_push_plain(&zipped, true, true).expect("encodes");
    let (status, counts) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        counts,
        json!({"count": 2, "queued": 0, "duplicate": 2, "error": 0})
    );

    // No flag 4: the broker mints every transactionId; the same payload twice is no duplicate.
    let bare = [batch(
        "bin.bare",
        "p",
        vec![item(None, b"7"), item(None, b"7")],
    )];
    let body = encode_push_plain(&bare, false, true).expect("encodes");
    assert_eq!(body[4], 2, "flags: counts only");
    let (_, counts) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(
        counts,
        json!({"count": 2, "queued": 2, "duplicate": 0, "error": 0})
    );
    assert_eq!(pop_all(&b, "bin.bare").await.len(), 2);

    // An empty body (no groups) pushes nothing.
    let body = encode_push_plain(&[], false, false).expect("encodes");
    assert_eq!(
        post_bin(&b, "/api/v1/push", body).await,
        (StatusCode::CREATED, json!([]))
    );
}

#[tokio::test]
async fn plain_duplicates_inside_the_request_report_the_leader() {
    let b = common::broker().await;
    let body = encode_push_plain(
        &[batch(
            "bin.dups",
            "p",
            vec![
                item(Some("a"), b"1"),
                item(Some("a"), b"2"),
                item(Some("b"), b"3"),
            ],
        )],
        false,
        false,
    )
    .expect("encodes");
    let (_, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(statuses(&out), ["queued", "duplicate", "queued"]);
    assert_eq!(out[1]["message_id"], out[0]["message_id"]);
    let data: Vec<Value> = pop_all(&b, "bin.dups")
        .await
        .iter()
        .map(|m| m["data"].clone())
        .collect();
    assert_eq!(data, [json!(1), json!(3)]);
}

/// A broker whose own segments are compressed at a level the clients never use, so a blob
/// equal to the client's bytes can only have been stored as sent.
async fn recompressing_broker() -> common::TestBroker {
    common::broker_with(|cfg| cfg.zstd_level = BROKER_LEVEL).await
}

const BROKER_LEVEL: i32 = 19;

/// Asserts that re-packing `group` the broker's way would not reproduce the client's bytes.
fn assert_repack_differs(group: &queen_proto::push_bin::PushGroup) {
    let GroupBody::Precompressed { frames_raw, z, .. } = &group.body else {
        panic!("pre-compressed")
    };
    assert_ne!(
        queen_proto::segment::compress(frames_raw, BROKER_LEVEL),
        z.to_vec(),
        "precondition: the broker's own compression differs from the client's"
    );
}

#[tokio::test]
async fn precompressed_groups_are_stored_as_sent() {
    let b = recompressing_broker().await;
    let db = b.sql().await;
    let text: String = (0..400).map(|i| format!("w{} ", i * 7919 % 1000)).collect();
    let big = format!("{{\"text\":\"{text}\"}}");
    let batches = [
        batch(
            "bin.sent",
            "p1",
            vec![
                item(Some("a"), big.as_bytes()),
                item(None, b"null"),
                item(Some("b"), big.as_bytes()),
            ],
        ),
        batch("bin.sent", "p2", vec![item(Some("c"), b"[3]")]),
    ];
    let body = encode_push_precompressed(&batches, false).expect("encodes");
    let groups = push_groups(&body);
    assert_repack_differs(&groups[0]);
    let (status, out) = post_bin(&b, "/api/v1/push", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(statuses(&out), ["queued"; 4]);

    // The answer carries the frames' own ids and transactionIds.
    let sent: Vec<_> = groups.iter().flat_map(frames_of).collect();
    for (r, (id, txn, _)) in out.as_array().expect("array").iter().zip(&sent) {
        assert_eq!(r["message_id"], id.as_str());
        assert_eq!(r["transaction_id"], txn.as_str());
    }
    assert_eq!(
        sent[1].1, sent[1].0,
        "a minted transactionId is the id's text"
    );
    assert_eq!(sent[2].1, "b");

    // Each group is its own segment whose blob is the client's zstd frame, byte for byte.
    for (group, partition) in groups.iter().zip(["p1", "p2"]) {
        let segs = segments(&db, "bin.sent", partition).await;
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].2, z_of(group), "{partition}: blob stored as sent");
        assert_eq!((segs[0].0, segs[0].1), (0, group.len() as i64 - 1));
    }

    // Pops see exactly what was sent; and a re-push is all duplicates with the original ids.
    let popped = pop_all(&b, "bin.sent").await;
    let mut got: Vec<(String, String)> = popped
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap_or_default().into(),
                m["data"].to_string(),
            )
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = sent
        .iter()
        .map(|(id, _, p)| (id.clone(), String::from_utf8_lossy(p).into_owned()))
        .collect();
    want.sort();
    assert_eq!(got, want);

    // The client's retry: the same bytes (same minted ids), here with flag 2 added.
    let mut again = body;
    again[4] |= 2;
    let (_, counts) = post_bin(&b, "/api/v1/push", again).await;
    assert_eq!(
        counts,
        json!({"count": 4, "queued": 0, "duplicate": 4, "error": 0})
    );
    assert_eq!(
        segments(&db, "bin.sent", "p1").await.len(),
        1,
        "nothing new"
    );
}

#[tokio::test]
async fn a_python_client_body_is_stored_as_sent() {
    let b = recompressing_broker().await;
    let db = b.sql().await;
    let body = hex(PY_FRAMES);
    let groups = push_groups(&body);
    assert_repack_differs(&groups[0]);
    let (status, counts) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        counts,
        json!({"count": 3, "queued": 3, "duplicate": 0, "error": 0})
    );
    assert_eq!(segments(&db, "q", "p").await[0].2, z_of(&groups[0]));
    assert_eq!(segments(&db, "q2", "Default").await[0].2, z_of(&groups[1]));
    let popped = pop_all(&b, "q").await;
    assert_eq!(popped[0]["transactionId"], "t1");
    assert_eq!(popped[0]["data"], json!({"a": 1}));
    assert_eq!(popped[1]["data"], json!(2));
}

#[tokio::test]
async fn an_intra_request_duplicate_forces_a_repack() {
    let b = common::broker().await;
    let db = b.sql().await;
    // A duplicate inside one group, and one (queue, partition) split over two groups.
    let batches = [
        batch(
            "bin.repack",
            "dup",
            vec![
                item(Some("a"), b"1"),
                item(Some("b"), b"2"),
                item(Some("a"), b"3"),
            ],
        ),
        batch("bin.repack", "split", vec![item(Some("s1"), b"1")]),
        batch("bin.repack", "other", vec![item(Some("o1"), b"1")]),
        batch(
            "bin.repack",
            "split",
            vec![item(Some("s2"), b"2"), item(Some("s1"), b"9")],
        ),
    ];
    let body = encode_push_precompressed(&batches, false).expect("encodes");
    let groups = push_groups(&body);
    let (_, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(
        statuses(&out),
        [
            "queued",
            "queued",
            "duplicate",
            "queued",
            "queued",
            "queued",
            "duplicate"
        ]
    );
    assert_eq!(out[2]["message_id"], out[0]["message_id"]);
    assert_eq!(out[6]["message_id"], out[3]["message_id"]);

    let dup = segments(&db, "bin.repack", "dup").await;
    assert_eq!(dup.len(), 1);
    assert_ne!(
        dup[0].2,
        z_of(&groups[0]),
        "re-packed without the duplicate"
    );
    assert_eq!(blob_txns(&dup[0].2), ["a", "b"]);
    let split: Vec<String> = segments(&db, "bin.repack", "split")
        .await
        .iter()
        .flat_map(|s| blob_txns(&s.2))
        .collect();
    assert_eq!(split, ["s1", "s2"], "wire order kept, the repeat dropped");
    // The lone group of the request is still stored as sent.
    assert_eq!(
        segments(&db, "bin.repack", "other").await[0].2,
        z_of(&groups[2])
    );
}

#[tokio::test]
async fn a_stored_duplicate_forces_a_repack() {
    let b = common::broker().await;
    let db = b.sql().await;
    let (_, first) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "bin.stored", "partition": "p", "transactionId": "x", "payload": 0}]}),
        )
        .await;
    let batches = [batch(
        "bin.stored",
        "p",
        vec![
            item(Some("y"), b"1"),
            item(Some("x"), b"2"),
            item(Some("z"), b"3"),
        ],
    )];
    let body = encode_push_precompressed(&batches, false).expect("encodes");
    let groups = push_groups(&body);
    let (_, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(statuses(&out), ["queued", "duplicate", "queued"]);
    assert_eq!(
        out[1]["message_id"], first[0]["message_id"],
        "the original's id"
    );
    assert_eq!(out[0]["message_id"], frames_of(&groups[0])[0].0.as_str());

    let segs = segments(&db, "bin.stored", "p").await;
    assert_eq!(segs.len(), 2);
    assert_ne!(segs[1].2, z_of(&groups[0]));
    assert_eq!(blob_txns(&segs[1].2), ["y", "z"]);
    assert_eq!((segs[1].0, segs[1].1), (1, 2), "offsets stay dense");
    let data: Vec<Value> = pop_all(&b, "bin.stored")
        .await
        .iter()
        .map(|m| m["data"].clone())
        .collect();
    assert_eq!(data, [json!(0), json!(1), json!(3)]);
}

/// A valid group followed by `tail`, as a flag-8 body.
fn framed_body_with(tail: &[u8], groups: u32) -> Vec<u8> {
    let good = encode_push_precompressed(
        &[batch("bin.bad", "p", vec![item(Some("ok"), b"1")])],
        false,
    )
    .expect("encodes");
    let mut body = good[..5].to_vec();
    body.extend_from_slice(&groups.to_le_bytes());
    body.extend_from_slice(&good[9..]);
    body.extend_from_slice(tail);
    body
}

/// One flag-8 group header for (bin.bad, q), `n` frames, and the zstd bytes `z`.
fn group(n: u32, z: &[u8]) -> Vec<u8> {
    let mut g = Vec::new();
    for name in ["bin.bad", "q"] {
        g.extend_from_slice(&(name.len() as u16).to_le_bytes());
        g.extend_from_slice(name.as_bytes());
    }
    g.extend_from_slice(&n.to_le_bytes());
    g.extend_from_slice(&(z.len() as u32).to_le_bytes());
    g.extend_from_slice(z);
    g
}

/// A stored frame with the given flags byte.
fn frame(flags: u8, txn: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![flags];
    body.extend_from_slice(&[7; 16]);
    if flags & 1 != 0 {
        body.extend_from_slice(&[9; 16]);
    }
    body.extend_from_slice(&(txn.len() as u16).to_le_bytes());
    body.extend_from_slice(txn.as_bytes());
    body.extend_from_slice(payload);
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn zstd(raw: &[u8]) -> Vec<u8> {
    queen_proto::segment::compress(raw, 1)
}

#[tokio::test]
async fn malformed_bodies_are_400_naming_the_problem_and_write_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    let plain = encode_push_plain(
        &[batch("bin.bad", "p", vec![item(Some("t"), b"{\"a\":1}")])],
        false,
        false,
    )
    .expect("encodes");
    let zipped = encode_push_plain(
        &[batch("bin.bad", "p", vec![item(Some("t"), b"1")])],
        true,
        false,
    )
    .expect("encodes");
    let streamed = {
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).expect("encoder");
        std::io::Write::write_all(&mut enc, &frame(0, "s", b"1")).expect("write");
        enc.finish().expect("finish")
    };
    let mut raw_len_off = zipped.clone();
    raw_len_off[5] += 1;
    let mut bad_name = plain.clone();
    bad_name[11] = b'\n'; // a control character inside the queue name

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad magic",
            b"QPB2\x04\x00\x00\x00\x00".to_vec(),
            "bad magic",
        ),
        (
            "unknown flags",
            b"QPB1\x10\x00\x00\x00\x00".to_vec(),
            "unknown flags",
        ),
        ("empty body", Vec::new(), "bad magic"),
        ("truncated header", b"QPB1".to_vec(), "truncated"),
        (
            "truncated item",
            plain[..plain.len() - 3].to_vec(),
            "truncated",
        ),
        (
            "trailing bytes",
            [plain.clone(), vec![0]].concat(),
            "trailing",
        ),
        (
            "payload not JSON",
            {
                let mut p = plain.clone();
                let at = p.len() - 2;
                p[at] = b'}';
                p
            },
            "not valid JSON",
        ),
        ("raw_len mismatch", raw_len_off, "zstd body"),
        (
            "zstd without content size",
            framed_body_with(&group(1, &streamed), 2),
            "without content size",
        ),
        (
            "group not zstd",
            framed_body_with(&group(1, &frame(0, "r", b"1")), 2),
            "not a zstd frame",
        ),
        (
            "fewer frames than n",
            framed_body_with(&group(2, &zstd(&frame(0, "f", b"1"))), 2),
            "expected 2 frames",
        ),
        (
            "leftover bytes",
            framed_body_with(
                &group(1, &zstd(&[frame(0, "f", b"1"), vec![1, 2]].concat())),
                2,
            ),
            "leftover",
        ),
        (
            "frame flags",
            framed_body_with(&group(1, &zstd(&frame(1, "f", b"1"))), 2),
            "flags byte",
        ),
        (
            "empty transactionId",
            framed_body_with(&group(1, &zstd(&frame(0, "", b"1"))), 2),
            "empty transactionId",
        ),
        (
            "frame payload not JSON",
            framed_body_with(&group(1, &zstd(&frame(0, "f", b"{nope"))), 2),
            "not valid JSON",
        ),
        (
            "short frame body",
            framed_body_with(&group(1, &zstd(&[5, 0, 0, 0, 0, 1, 2, 3, 4])), 2),
            "below the minimum",
        ),
        (
            "truncated group",
            framed_body_with(&group(1, &zstd(&frame(0, "f", b"1")))[..20], 2),
            "truncated",
        ),
        (
            "control character in a name",
            bad_name,
            "control characters",
        ),
    ];
    let before = written(&db).await;
    for (what, body, needle) in cases {
        let (status, answer) = post_bin(&b, "/api/v1/push", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{what}: {error:?} lacks {needle:?}");
        assert_eq!(written(&db).await, before, "{what}: something was written");
    }
    // The well-formed first group of those bodies alone goes through.
    let (status, _) = post_bin(&b, "/api/v1/push", framed_body_with(&[], 1)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(written(&db).await, before);
}

#[tokio::test]
async fn the_json_body_still_works_beside_the_binary_one() {
    let b = common::broker().await;
    // A JSON body under the JSON content type is the JSON push; QPB1 bytes under it are not.
    let (status, _) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "bin.json", "payload": 1}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let body = encode_push_plain(
        &[batch("bin.json", "p", vec![item(None, b"1")])],
        false,
        false,
    )
    .expect("encodes");
    let (status, answer) = b.post_raw("/api/v1/push", "application/json", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["error"]
        .as_str()
        .unwrap_or_default()
        .starts_with("bad body"));
}
