//! Scheduler tests of push fusion: bundling, one flush in flight per partition, admission,
//! layer-2 dedup and pipelining, with the work it hands out done by a recorder; and work
//! dropped unsettled.

use super::*;
use crate::accel::admission::Limits;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// Does the work as the engine's flush loop does, each bundle in a task of its own: records
/// each bundle's shape when its write starts (and each preparation, with the transactionIds it
/// was given), holds every write until the test opens the gate, then queues every frame at a
/// running offset.
struct Recorder {
    bundles: Mutex<Vec<Vec<(String, usize)>>>,
    prepared: Mutex<Vec<Vec<String>>>,
    /// Per write, per lane: the transactionIds its preparation had, if it came prepared.
    used: Mutex<Vec<Vec<Option<Vec<String>>>>>,
    writing: AtomicUsize,
    overlap: AtomicUsize,
    gate: watch::Receiver<bool>,
    /// Hand each preparation over; otherwise stages are recorded and dropped unprepared.
    prepare: bool,
}

fn txns(frames: &[FusionFrame]) -> Vec<String> {
    frames.iter().map(|f| f.transaction_id.clone()).collect()
}

/// Every frame of every lane queued, at offsets from 0.
fn queued(lanes: &[LaneFlush<Vec<String>>]) -> Vec<Vec<FrameOutcome>> {
    lanes
        .iter()
        .map(|l| {
            l.frames
                .iter()
                .enumerate()
                .map(|(i, f)| FrameOutcome::Queued {
                    message_id: f.message_id,
                    offset: i as i64,
                })
                .collect()
        })
        .collect()
}

impl Recorder {
    /// Pulls and does the fusion's work until it ends.
    fn drive(self: Arc<Self>, mut work: FusionWork<Work<Vec<String>>>) {
        tokio::spawn(async move {
            while let Some(item) = work.next().await {
                match item {
                    Work::Prepare(stage) => {
                        let txns = txns(&stage.frames);
                        self.prepared.lock().unwrap().push(txns.clone());
                        if self.prepare {
                            stage.prepared(txns);
                        }
                    }
                    Work::Write(bundle) => {
                        tokio::spawn(self.clone().write(bundle));
                    }
                }
            }
        });
    }

    async fn write(self: Arc<Self>, mut bundle: Bundle<Vec<String>>) {
        if self.writing.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlap.fetch_add(1, Ordering::SeqCst);
        }
        let lanes = bundle.lanes();
        let shape = lanes
            .iter()
            .map(|l| (l.partition.to_string(), l.frames.len()))
            .collect();
        self.bundles.lock().unwrap().push(shape);
        let used = lanes.iter().map(|l| l.prepared.clone()).collect();
        self.used.lock().unwrap().push(used);
        let _ = self.gate.clone().wait_for(|open| *open).await;
        self.writing.fetch_sub(1, Ordering::SeqCst);
        let outcomes = queued(bundle.lanes());
        bundle.settle(outcomes);
    }
}

fn recorder(prepare: bool) -> (Arc<Recorder>, watch::Sender<bool>) {
    let (open, gate) = watch::channel(false);
    let rec = Recorder {
        bundles: Mutex::default(),
        prepared: Mutex::default(),
        used: Mutex::default(),
        writing: AtomicUsize::new(0),
        overlap: AtomicUsize::new(0),
        gate,
        prepare,
    };
    (Arc::new(rec), open)
}

fn frame(txn: &str) -> FusionFrame {
    FusionFrame {
        message_id: Uuid::now_v7(),
        trace_id: None,
        transaction_id: txn.into(),
        producer_sub: None,
        payload: Bytes::from_static(b"1"),
        hash: queen_proto::hash::txn_hash(txn),
        replayed: false,
    }
}

/// Lets every spawned task run until it blocks (the test runtime is single-threaded).
async fn settle_tasks() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

async fn first_bundle_started(rec: &Recorder) {
    while rec.bundles.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn arrivals_behind_a_flush_coalesce_into_the_next_and_dedup_by_hash() {
    let cfg = FusionConfig {
        shards: 1,
        ..FusionConfig::default()
    };
    let admission = Admission::new(Limits::for_pool(32, 8));
    let (rec, open, fusion, first) = behind_one_write(cfg, admission, "p").await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let f = fusion.clone();
        // Each request carries its own txn plus one they all share.
        tasks.push(tokio::spawn(async move {
            f.submit("q", "p", vec![frame(&format!("t{i}")), frame("shared")])
                .await
        }));
    }
    settle_tasks().await;
    open.send_replace(true);
    assert!(matches!(
        first.await.expect("first")[0],
        FrameOutcome::Queued { .. }
    ));
    let mut shared = Vec::new();
    for t in tasks {
        let out = t.await.expect("task");
        assert!(matches!(out[0], FrameOutcome::Queued { .. }), "{out:?}");
        shared.push(out[1].clone());
    }
    let bundles = rec.bundles.lock().unwrap().clone();
    assert_eq!(
        bundles,
        [vec![("p".to_string(), 1)], vec![("p".to_string(), 11)]]
    );
    assert_eq!(
        rec.overlap.load(Ordering::SeqCst),
        0,
        "two flushes of one partition overlapped"
    );
    let leader = shared
        .iter()
        .filter(|o| matches!(o, FrameOutcome::Queued { .. }))
        .count();
    assert_eq!(leader, 1, "{shared:?}");
    let ids: std::collections::HashSet<_> = shared
        .iter()
        .map(|o| match o {
            FrameOutcome::Queued { message_id, .. }
            | FrameOutcome::Duplicate { message_id, .. } => *message_id,
            other => panic!("not stored: {other:?}"),
        })
        .collect();
    assert_eq!(ids.len(), 1, "every copy reports the leader's id");
}

#[tokio::test]
async fn admission_bounds_writes_across_shards_and_bundles_partitions() {
    let cfg = FusionConfig {
        shards: 4,
        max_inflight: 8,
        bundle_max: 16,
        bundle_max_bytes: usize::MAX,
        pipeline: true,
    };
    let admission = Admission::new(Limits {
        budget: 3,
        caps: [1, 1, 1],
        floors: [0; 3],
    });
    let (rec, open, fusion, first) = behind_one_write(cfg, admission, "first").await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let f = fusion.clone();
        tasks.push(tokio::spawn(async move {
            f.submit("q", &format!("p{i}"), vec![frame("x")]).await
        }));
    }
    settle_tasks().await;
    assert_eq!(
        rec.bundles.lock().unwrap().len(),
        1,
        "nothing may start while the only permit is held"
    );
    open.send_replace(true);
    assert!(matches!(
        first.await.expect("first")[0],
        FrameOutcome::Queued { .. }
    ));
    for t in tasks {
        assert!(matches!(
            t.await.expect("task")[0],
            FrameOutcome::Queued { .. }
        ));
    }
    let bundles = rec.bundles.lock().unwrap().clone();
    println!(
        "bundle sizes after the first: {:?}",
        bundles[1..].iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(
        rec.overlap.load(Ordering::SeqCst),
        0,
        "admission 1 allows one write at a time"
    );
    assert_eq!(bundles.iter().map(Vec::len).sum::<usize>(), 41);
    // Four shards, at most 16 partitions per bundle: 40 partitions need at least 4 bundles
    // and, bundled, far fewer than 40.
    assert!(
        bundles.len() - 1 <= 4 + 40 / 16,
        "{} bundles",
        bundles.len() - 1
    );
}

type FirstWrite = tokio::task::JoinHandle<Vec<FrameOutcome>>;

/// One shard, bundles of at most 100 bytes, one permit in all, held by a first write that
/// waits at the gate: whatever is submitted next queues behind it.
async fn capped_behind_one_write() -> (Arc<Recorder>, watch::Sender<bool>, PushFusion, FirstWrite) {
    let cfg = FusionConfig {
        shards: 1,
        max_inflight: 8,
        bundle_max: 64,
        bundle_max_bytes: 100,
        pipeline: true,
    };
    let admission = Admission::new(Limits {
        budget: 3,
        caps: [1, 1, 1],
        floors: [0; 3],
    });
    behind_one_write(cfg, admission, "first").await
}

/// A fusion whose first write (one frame to `partition`) has started and waits at the gate.
async fn behind_one_write(
    cfg: FusionConfig,
    admission: Admission,
    partition: &'static str,
) -> (Arc<Recorder>, watch::Sender<bool>, PushFusion, FirstWrite) {
    behind_one_write_with(recorder(true), cfg, admission, partition).await
}

/// [`behind_one_write`] with the given recorder.
async fn behind_one_write_with(
    (rec, open): (Arc<Recorder>, watch::Sender<bool>),
    cfg: FusionConfig,
    admission: Admission,
    partition: &'static str,
) -> (Arc<Recorder>, watch::Sender<bool>, PushFusion, FirstWrite) {
    let (fusion, work) = PushFusion::start(cfg, admission);
    rec.clone().drive(work);
    let f = fusion.clone();
    let first = tokio::spawn(async move { f.submit("q", partition, vec![frame("first")]).await });
    first_bundle_started(&rec).await;
    (rec, open, fusion, first)
}

#[tokio::test]
async fn a_bundle_stops_at_its_byte_cap_but_a_large_partition_still_goes() {
    let (rec, open, fusion, first) = capped_behind_one_write().await;
    // Behind the only permit: one partition of 300 bytes, then ten of 30 bytes each
    // (a 29-byte transactionId and a 1-byte payload per frame).
    let mut tasks = Vec::new();
    let big: Vec<FusionFrame> = (0..10).map(|i| frame(&format!("{i:029}"))).collect();
    let f = fusion.clone();
    tasks.push(tokio::spawn(async move { f.submit("q", "big", big).await }));
    settle_tasks().await;
    for i in 0..10 {
        let f = fusion.clone();
        let txn = format!("{i:029}");
        tasks.push(tokio::spawn(async move {
            f.submit("q", &format!("p{i}"), vec![frame(&txn)]).await
        }));
    }
    settle_tasks().await;
    open.send_replace(true);
    first.await.expect("first");
    for t in tasks {
        assert!(matches!(
            t.await.expect("task")[0],
            FrameOutcome::Queued { .. }
        ));
    }
    let shapes: Vec<Vec<String>> = rec.bundles.lock().unwrap()[1..]
        .iter()
        .map(|b| b.iter().map(|(p, _)| p.clone()).collect())
        .collect();
    assert_eq!(shapes[0], vec!["big"], "300 bytes go alone, over the cap");
    // 30-byte partitions, at most 100 bytes a bundle: three each, then the last one.
    let sizes: Vec<usize> = shapes[1..].iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![3, 3, 3, 1], "{shapes:?}");
}

#[tokio::test]
async fn a_partition_over_the_byte_cap_flushes_its_requests_in_order_over_several_bundles() {
    let (rec, open, fusion, first) = capped_behind_one_write().await;
    // Five requests of 30 bytes to one partition, queued in this order behind the permit.
    let mut tasks = Vec::new();
    for i in 0..5 {
        let f = fusion.clone();
        let txn = format!("{i:029}");
        tasks.push(tokio::spawn(async move {
            f.submit("q", "seq", vec![frame(&txn)]).await
        }));
        settle_tasks().await;
    }
    open.send_replace(true);
    first.await.expect("first");
    for t in tasks {
        assert!(matches!(
            t.await.expect("task")[0],
            FrameOutcome::Queued { .. }
        ));
    }
    let flushes: Vec<Vec<(String, usize)>> = rec.bundles.lock().unwrap()[1..].to_vec();
    assert_eq!(
        flushes,
        vec![vec![("seq".to_string(), 3)], vec![("seq".to_string(), 2)]],
        "three whole requests fit 100 bytes; the other two go next, one flush at a time"
    );
}

/// A frame carrying `bytes` of payload.
fn big_frame(txn: &str, bytes: usize) -> FusionFrame {
    FusionFrame {
        payload: Bytes::from(vec![b'x'; bytes]),
        ..frame(txn)
    }
}

/// Three 40 KiB requests queue behind a held flush of one partition, with pipelining on or
/// off; returns the recorder once every request settled in order.
async fn three_big_requests_behind_a_flush(pipeline: bool) -> Arc<Recorder> {
    three_big_requests_behind_a_flush_with(recorder(true), pipeline).await
}

/// [`three_big_requests_behind_a_flush`] with the given recorder.
async fn three_big_requests_behind_a_flush_with(
    rec: (Arc<Recorder>, watch::Sender<bool>),
    pipeline: bool,
) -> Arc<Recorder> {
    let cfg = FusionConfig {
        shards: 1,
        pipeline,
        bundle_max_bytes: 1 << 20,
        ..FusionConfig::default()
    };
    let admission = Admission::new(Limits::for_pool(32, 8));
    let (rec, open, fusion, first) = behind_one_write_with(rec, cfg, admission, "p").await;
    let mut tasks = Vec::new();
    for i in 0..3 {
        let f = fusion.clone();
        tasks.push(tokio::spawn(async move {
            f.submit("q", "p", vec![big_frame(&format!("b{i}"), 40 * 1024)])
                .await
        }));
        settle_tasks().await;
    }
    if pipeline {
        assert_eq!(
            *rec.prepared.lock().unwrap(),
            vec![vec!["b0".to_string(), "b1".to_string()]],
            "the requests past 64 KiB are staged and prepared while the first flush is held"
        );
    }
    open.send_replace(true);
    first.await.expect("first");
    for t in tasks {
        assert!(matches!(
            t.await.expect("task")[0],
            FrameOutcome::Queued { .. }
        ));
    }
    assert_eq!(
        rec.overlap.load(Ordering::SeqCst),
        0,
        "two flushes of one partition overlapped"
    );
    rec
}

#[tokio::test]
async fn a_hot_partition_prepares_its_next_flush_while_one_is_written() {
    let rec = three_big_requests_behind_a_flush(true).await;
    let bundles = rec.bundles.lock().unwrap().clone();
    let p = |n| vec![("p".to_string(), n)];
    assert_eq!(
        bundles,
        vec![p(1), p(2), p(1)],
        "staged b0+b1, then b2 behind them"
    );
    let used = rec.used.lock().unwrap().clone();
    assert_eq!(used[0], vec![None], "the first flush was not staged");
    assert_eq!(
        used[1],
        vec![Some(vec!["b0".to_string(), "b1".to_string()])],
        "the staged flush is written with its preparation, in arrival order"
    );
    assert_eq!(
        rec.prepared.lock().unwrap().len(),
        1,
        "b2 alone (40 KiB) is below the staging threshold: no preparation"
    );
}

#[tokio::test]
async fn without_pipelining_nothing_is_prepared() {
    let rec = three_big_requests_behind_a_flush(false).await;
    let bundles = rec.bundles.lock().unwrap().clone();
    assert_eq!(
        bundles,
        vec![vec![("p".to_string(), 1)], vec![("p".to_string(), 3)]],
        "everything queued behind the first flush goes next, as one segment"
    );
    assert!(rec.prepared.lock().unwrap().is_empty());
    assert!(rec
        .used
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .all(Option::is_none));
}

#[tokio::test]
async fn a_stage_dropped_unprepared_is_written_unprepared() {
    let flushes = three_big_requests_behind_a_flush_with(recorder(false), true);
    let rec = tokio::time::timeout(Duration::from_secs(10), flushes)
        .await
        .expect("the partition stayed stuck behind its dropped stage");
    let p = |n| vec![("p".to_string(), n)];
    assert_eq!(*rec.bundles.lock().unwrap(), vec![p(1), p(2), p(1)]);
    assert_eq!(rec.prepared.lock().unwrap().len(), 1, "b0+b1 were staged");
    assert!(
        rec.used
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .all(Option::is_none),
        "the staged flush went out without a preparation"
    );
}

/// The next work item the fusion hands out, within a few seconds.
async fn next_work(work: &mut FusionWork<Work<Vec<String>>>) -> Option<Work<Vec<String>>> {
    tokio::time::timeout(Duration::from_secs(5), work.next())
        .await
        .ok()
        .flatten()
}

#[tokio::test]
async fn a_bundle_dropped_unsettled_fails_its_requests_and_frees_its_partition_and_permit() {
    let cfg = FusionConfig {
        shards: 1,
        ..FusionConfig::default()
    };
    // One push permit in all: the next bundle goes out only once the dropped one freed it.
    let admission = Admission::new(Limits {
        budget: 3,
        caps: [1, 1, 1],
        floors: [0; 3],
    });
    let (fusion, mut work) = PushFusion::start(cfg, admission);
    let f = fusion.clone();
    let first = tokio::spawn(async move { f.submit("q", "p", vec![frame("a")]).await });
    let Some(Work::Write(bundle)) = next_work(&mut work).await else {
        panic!("the first request was not handed out as a bundle");
    };
    let f = fusion.clone();
    let behind = tokio::spawn(async move { f.submit("q", "p", vec![frame("b")]).await });
    settle_tasks().await;
    drop(bundle); // as when the task writing it panics

    let out = first.await.expect("first");
    assert!(
        matches!(&out[..], [FrameOutcome::Failed(f)] if !f.unavailable && !f.refused),
        "{out:?}"
    );
    let Some(Work::Write(mut bundle)) = next_work(&mut work).await else {
        panic!("the partition (or the permit) stayed taken by the dropped bundle");
    };
    assert_eq!(txns(&bundle.lanes()[0].frames), ["b"]);
    let outcomes = queued(bundle.lanes());
    bundle.settle(outcomes);
    assert!(matches!(
        behind.await.expect("behind")[..],
        [FrameOutcome::Queued { .. }]
    ));
}
