//! The vouched bundle (`sql/statements/push_vouched.sql`, docs/engine.md §4.4) against real
//! PostgreSQL: it appends each segment right after its partition's last offset with one
//! created_at per bundle; it writes nothing at all when any segment needs the function's
//! other work (a probe, a cap, sealing, a gone or repeated id, a bad shape), and the same
//! bundle without that fault is written; and bundles racing over shared partitions in
//! arbitrary orders neither deadlock nor leave an offset hole.

use queen_broker::engine::push::segment::{build_segment, BuiltSegment};
use queen_broker::store::push::{push_vouched, SegmentResult, SegmentWrite};
use queen_proto::frame::Frame;
use serde_json::json;

use crate::common;
use crate::common::TestBroker;

/// A partition's id and last offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Part {
    pid: i64,
    last: i64,
}

async fn part(db: &tokio_postgres::Client, queue: &str, partition: &str) -> Part {
    let row = db
        .query_one(
            "SELECT lp.id, lp.last_offset FROM queen.log_partitions lp
             JOIN queen.queues q ON q.id = lp.queue_id WHERE q.name = $1 AND lp.name = $2",
            &[&queue, &partition],
        )
        .await
        .unwrap();
    Part {
        pid: row.get(0),
        last: row.get(1),
    }
}

/// A partition's last offset and how many segments it holds.
async fn stored(db: &tokio_postgres::Client, pid: i64) -> (i64, i64) {
    let row = db
        .query_one(
            "SELECT last_offset, (SELECT count(*) FROM queen.log_segments WHERE partition_id = $1)
             FROM queen.log_partitions WHERE id = $1",
            &[&pid],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// A segment of `n` fresh messages whose transactionIds start with `tag`.
fn segment(tag: &str, n: usize) -> BuiltSegment {
    let txns: Vec<String> = (0..n).map(|k| format!("{tag}-{k}")).collect();
    let ids: Vec<uuid::Uuid> = txns.iter().map(|_| queen_proto::new_v7()).collect();
    build_segment(&frames_of(&txns, &ids), 3).expect("segment")
}

/// Frames of payload `1`, one per (transactionId, message id).
pub(crate) fn frames_of<'a>(txns: &'a [String], ids: &[uuid::Uuid]) -> Vec<Frame<'a>> {
    txns.iter()
        .zip(ids)
        .map(|(t, id)| Frame {
            flags: 0,
            message_id: *id.as_bytes(),
            trace_id: None,
            transaction_id: t,
            producer_sub: None,
            payload: b"1",
        })
        .collect()
}

/// One write per segment, vouching for `verified[i]`.
fn writes<'a>(
    queue: &'a str,
    names: &'a [&'a str],
    segs: &'a [BuiltSegment],
    verified: &[i64],
) -> Vec<SegmentWrite<'a>> {
    segs.iter()
        .zip(names)
        .zip(verified)
        .map(|((s, name), &verified)| SegmentWrite {
            queue,
            partition: name,
            msg_count: s.msg_count,
            hashes: &s.hashes,
            verified,
            blob: &s.blob,
            frames: Some(&s.frames),
            encrypted: false,
        })
        .collect()
}

async fn vouched(
    b: &TestBroker,
    w: &[SegmentWrite<'_>],
    pids: &[i64],
) -> Option<Vec<SegmentResult>> {
    let store = &b.server.as_ref().unwrap().state.store;
    let conn = store.conn().await.unwrap();
    push_vouched(&conn, w, pids).await.unwrap()
}

/// Pushes two messages to each of `names` of `queue`; their parts.
async fn seeded(b: &TestBroker, queue: &str, names: &[&str]) -> Vec<Part> {
    let db = b.sql().await;
    let mut parts = Vec::new();
    for name in names {
        b.push(queue, name, &[json!({"n": 1}), json!({"n": 2})])
            .await;
        parts.push(part(&db, queue, name).await);
    }
    parts
}

#[tokio::test]
async fn a_vouched_bundle_appends_each_segment_after_its_partitions_last_offset() {
    let b = common::broker().await;
    let names = ["a", "b", "c"];
    let parts = seeded(&b, "vouched", &names).await;
    let segs: Vec<BuiltSegment> = (0..3).map(|i| segment(&format!("ok-{i}"), i + 1)).collect();
    let lasts: Vec<i64> = parts.iter().map(|p| p.last).collect();
    let pids: Vec<i64> = parts.iter().map(|p| p.pid).collect();
    let results = vouched(&b, &writes("vouched", &names, &segs, &lasts), &pids)
        .await
        .expect("every segment is vouched for: the bundle is written");

    let db = b.sql().await;
    let mut created = Vec::new();
    for ((p, seg), result) in parts.iter().zip(&segs).zip(&results) {
        let SegmentResult::Queued {
            partition_id,
            base_offset,
            created_at,
        } = result
        else {
            panic!("queued expected: {result:?}");
        };
        assert_eq!((*partition_id, *base_offset), (p.pid, p.last + 1));
        let end = p.last + i64::from(seg.msg_count);
        assert_eq!(
            stored(&db, p.pid).await,
            (end, 2),
            "allocator moved, one new segment"
        );
        let row = db
            .query_one(
                "SELECT s.end_offset, t.end_offset, queen.log_iso_micros(s.created_at),
                        s.created_at = t.created_at, t.hashes = $3
                 FROM queen.log_segments s JOIN queen.log_txns t
                   ON t.partition_id = s.partition_id AND t.base_offset = s.base_offset
                 WHERE s.partition_id = $1 AND s.base_offset = $2",
                &[&p.pid, base_offset, &seg.hashes],
            )
            .await
            .unwrap();
        assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (end, end));
        assert_eq!(
            &row.get::<_, String>(2),
            created_at,
            "createdAt is the stored one"
        );
        assert!(
            row.get::<_, bool>(3) && row.get::<_, bool>(4),
            "sidecar row matches"
        );
        created.push(created_at.clone());
    }
    created.dedup();
    assert_eq!(created.len(), 1, "one created_at per bundle: {created:?}");
}

/// Each fault, applied to the second of two segments, makes the whole bundle write nothing;
/// the same bundle without it is written.
#[tokio::test]
async fn a_vouched_bundle_writes_nothing_when_any_segment_needs_the_function() {
    let b = common::broker().await;
    let db = b.sql().await;
    let faults = [
        "another writer appended",
        "capped queue",
        "encrypting queue",
        "recent window raise",
        "gone partition",
        "repeated partition",
        "short hashes",
    ];
    for (n, fault) in faults.iter().enumerate() {
        let queue = format!("vf{n}");
        let names = ["x", "y"];
        let parts = seeded(&b, &queue, &names).await;
        let segs = [segment(&format!("{n}-x"), 1), segment(&format!("{n}-y"), 2)];
        let good_pids: Vec<i64> = parts.iter().map(|p| p.pid).collect();
        let lasts = [parts[0].last, parts[1].last];
        let mut verified = lasts;
        let mut pids = good_pids.clone();
        let mut short = segment(&format!("{n}-y"), 2);
        let mut undo = None;
        match *fault {
            "another writer appended" => verified[1] -= 1,
            "capped queue" => {
                let set = "UPDATE queen.queues SET max_queue_size = 1000 WHERE name = $1";
                db.execute(set, &[&queue]).await.unwrap();
                undo = Some("UPDATE queen.queues SET max_queue_size = 0 WHERE name = $1");
            }
            "encrypting queue" => {
                let set = "UPDATE queen.queues SET encryption_enabled = true WHERE name = $1";
                db.execute(set, &[&queue]).await.unwrap();
                undo = Some("UPDATE queen.queues SET encryption_enabled = false WHERE name = $1");
            }
            "recent window raise" => {
                let set = "INSERT INTO queen.log_dedup_resets VALUES ($1, clock_timestamp())";
                db.execute(set, &[&queue]).await.unwrap();
                undo = Some("DELETE FROM queen.log_dedup_resets WHERE queue_name = $1");
            }
            "gone partition" => pids[1] = i64::MAX,
            "repeated partition" => pids[1] = pids[0],
            "short hashes" => {
                short.hashes.truncate(24);
            }
            other => unreachable!("{other}"),
        }
        let faulty_segs = [segment(&format!("{n}-x"), 1), short];
        let w = writes(&queue, &names, &faulty_segs, &verified);
        assert!(vouched(&b, &w, &pids).await.is_none(), "{fault}: declined");
        for p in &parts {
            assert_eq!(
                stored(&db, p.pid).await,
                (p.last, 1),
                "{fault}: nothing written"
            );
        }

        if let Some(undo) = undo {
            db.execute(undo, &[&queue]).await.unwrap();
        }
        let w = writes(&queue, &names, &segs, &lasts);
        assert!(
            vouched(&b, &w, &good_pids).await.is_some(),
            "{fault}: without it the bundle is written"
        );
    }
}

#[tokio::test]
async fn with_window_zero_a_bundle_needs_no_vouching() {
    let b = common::broker().await;
    let names = ["a", "b"];
    let parts = seeded(&b, "vz", &names).await;
    let db = b.sql().await;
    let set = "UPDATE queen.queues SET dedup_window_seconds = 0 WHERE name = 'vz'";
    db.execute(set, &[]).await.unwrap();
    let segs = [segment("vz-a", 1), segment("vz-b", 1)];
    let pids: Vec<i64> = parts.iter().map(|p| p.pid).collect();
    let results = vouched(&b, &writes("vz", &names, &segs, &[-1, -1]), &pids).await;
    assert_eq!(
        results.map(|r| r.len()),
        Some(2),
        "window 0: no probe is due"
    );
}

/// Eight writers, each 30 bundles over 3–4 of 6 shared partitions listed in shuffled order
/// (window 0, so every bundle may write): none fails (a lock taken out of id order would
/// deadlock), and every partition's segments tile its offsets from 0 with created_at
/// rising along them.
#[tokio::test]
async fn racing_bundles_over_shared_partitions_never_deadlock_or_leave_holes() {
    const WRITERS: u64 = 8;
    const BUNDLES: u64 = 30;
    let b = std::sync::Arc::new(common::broker().await);
    let names: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let parts = seeded(&b, "vr", &refs).await;
    let db = b.sql().await;
    let set = "UPDATE queen.queues SET dedup_window_seconds = 0 WHERE name = 'vr'";
    db.execute(set, &[]).await.unwrap();

    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (b, names, parts) = (b.clone(), names.clone(), parts.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (w + 1);
            for k in 0..BUNDLES {
                let mut order: Vec<usize> = (0..parts.len()).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, (next(&mut rng) % (i as u64 + 1)) as usize);
                }
                order.truncate(3 + (next(&mut rng) % 2) as usize);
                let segs: Vec<BuiltSegment> = order
                    .iter()
                    .map(|&i| segment(&format!("r{w}-{k}-{i}"), 1 + (next(&mut rng) % 3) as usize))
                    .collect();
                let picked: Vec<&str> = order.iter().map(|&i| names[i].as_str()).collect();
                let pids: Vec<i64> = order.iter().map(|&i| parts[i].pid).collect();
                let verified = vec![-1; segs.len()];
                let results = vouched(&b, &writes("vr", &picked, &segs, &verified), &pids).await;
                assert_eq!(
                    results.map(|r| r.len()),
                    Some(segs.len()),
                    "writer {w} bundle {k}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }

    for p in &parts {
        let rows = db
            .query(
                "SELECT base_offset, end_offset, created_at FROM queen.log_segments
                 WHERE partition_id = $1 ORDER BY base_offset",
                &[&p.pid],
            )
            .await
            .unwrap();
        let mut next_base = 0i64;
        let mut last_created = std::time::SystemTime::UNIX_EPOCH;
        for r in &rows {
            let (base, end): (i64, i64) = (r.get(0), r.get(1));
            let created: std::time::SystemTime = r.get(2);
            assert_eq!(base, next_base, "partition {} tiles its offsets", p.pid);
            assert!(created >= last_created, "created_at rises with base_offset");
            (next_base, last_created) = (end + 1, created);
        }
        assert_eq!(
            stored(&db, p.pid).await.0,
            next_base - 1,
            "last_offset is the last end"
        );
    }
}

/// xorshift64: the writers' shuffles, reproducible per writer.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
