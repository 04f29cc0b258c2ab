//! Scheduler tests of ack fusion, with the flushes it hands out committed by a recorder:
//! fire-on-idle, coalescing behind a flush in flight, folding, verdict realignment, failures,
//! and a flush dropped unsettled.

use super::*;
use std::sync::Mutex;
use tokio::sync::watch;

/// A verdict naming the row it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    partition_id: i64,
    worker: String,
    batch_end: i64,
}

/// Commits flushes as the engine's loop does, each in a task of its own: records each
/// flush's rows when it starts, holds every flush until the gate opens, then answers each row
/// with itself (or `fail` for every row).
struct Recorder {
    flushes: Mutex<Vec<Vec<FusedAck>>>,
    gate: watch::Receiver<bool>,
    fail: Option<Failure>,
}

impl Recorder {
    /// Pulls and commits the fusion's flushes until it ends.
    fn drive(self: Arc<Self>, mut work: FusionWork<AckFlush<Row>>) {
        tokio::spawn(async move {
            while let Some(flush) = work.next().await {
                tokio::spawn(self.clone().commit(flush));
            }
        });
    }

    async fn commit(self: Arc<Self>, flush: AckFlush<Row>) {
        self.flushes.lock().unwrap().push(flush.rows().to_vec());
        let _ = self.gate.clone().wait_for(|open| *open).await;
        let verdicts = match &self.fail {
            Some(f) => Err(f.clone()),
            None => Ok(flush.rows().iter().map(row_of).collect()),
        };
        flush.settle(verdicts);
    }
}

fn row_of(r: &FusedAck) -> Row {
    Row {
        partition_id: r.partition_id,
        worker: r.worker.clone(),
        batch_end: r.batch_end,
    }
}

/// Ack fusion with `shards` shards whose flushes `rec` commits.
fn started(shards: usize, rec: &Arc<Recorder>) -> AckFusion<Row> {
    let (fusion, work) = AckFusion::start(shards);
    rec.clone().drive(work);
    fusion
}

fn recorder(fail: Option<Failure>) -> (Arc<Recorder>, watch::Sender<bool>) {
    let (open, gate) = watch::channel(false);
    let rec = Recorder {
        flushes: Mutex::default(),
        gate,
        fail,
    };
    (Arc::new(rec), open)
}

fn ack(pid: i64, worker: &str, batch_end: i64) -> FusedAck {
    FusedAck {
        partition_id: pid,
        group: "g".into(),
        worker: worker.into(),
        batch_end,
        frames: 1,
    }
}

/// Lets every spawned task run until it blocks (the test runtime is single-threaded).
async fn settle_tasks() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

fn flush_shapes(rec: &Recorder) -> Vec<Vec<(i64, String, i64)>> {
    rec.flushes
        .lock()
        .unwrap()
        .iter()
        .map(|rows| {
            rows.iter()
                .map(|r| (r.partition_id, r.worker.clone(), r.batch_end))
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn an_idle_shard_flushes_at_once_and_arrivals_behind_it_coalesce() {
    let (rec, open) = recorder(None);
    let fusion = started(1, &rec);
    let first = tokio::spawn({
        let f = fusion.clone();
        async move { f.submit(ack(1, "a", 9)).await }
    });
    settle_tasks().await;
    assert_eq!(
        flush_shapes(&rec).len(),
        1,
        "the first ack flushes alone, at once"
    );
    let later: Vec<_> = [(2, "b", 4), (3, "c", 7), (2, "b", 6), (2, "other", 5)]
        .into_iter()
        .map(|(pid, w, end)| {
            let f = fusion.clone();
            tokio::spawn(async move { f.submit(ack(pid, w, end)).await })
        })
        .collect();
    settle_tasks().await;
    assert_eq!(
        flush_shapes(&rec).len(),
        1,
        "nothing else while one is in flight"
    );
    open.send_replace(true);
    assert_eq!(first.await.unwrap().unwrap().batch_end, 9);
    let answers: Vec<Row> = futures::future::join_all(later)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    // Same (partition, group, worker) folds to the largest batch_end, and both acks get that
    // row's verdict; another worker on the same partition stays its own row.
    assert_eq!(
        flush_shapes(&rec)[1],
        [
            (2, "b".to_string(), 6),
            (3, "c".to_string(), 7),
            (2, "other".to_string(), 5)
        ]
    );
    let ends: Vec<(i64, &str, i64)> = answers
        .iter()
        .map(|r| (r.partition_id, r.worker.as_str(), r.batch_end))
        .collect();
    assert_eq!(
        ends,
        [(2, "b", 6), (3, "c", 7), (2, "b", 6), (2, "other", 5)]
    );
    let m = fusion.metrics();
    assert_eq!((m.commits, m.rows, m.acks, m.failures), (2, 4, 5, 0));
}

#[tokio::test]
async fn a_failed_flush_answers_every_ack_of_it_with_the_failure() {
    let lost = Failure {
        error: "connection closed".into(),
        unavailable: true,
        refused: false,
    };
    let (rec, open) = recorder(Some(lost.clone()));
    open.send_replace(true);
    let fusion = started(2, &rec);
    let answers = futures::future::join_all((1..=3).map(|pid| {
        let f = fusion.clone();
        async move { f.submit(ack(pid, "w", 1)).await }
    }))
    .await;
    assert!(
        answers.iter().all(|a| a.as_ref() == Err(&lost)),
        "{answers:?}"
    );
    assert_eq!(fusion.metrics().commits, 0);
    assert!(fusion.metrics().failures >= 1);
}

#[test]
fn folding_keeps_first_arrival_order_and_the_largest_batch() {
    let acks = [
        ack(5, "w", 3),
        ack(1, "w", 2),
        ack(5, "w", 8),
        ack(5, "v", 1),
    ];
    let (rows, slots) = fold(acks.iter());
    let shape: Vec<(i64, &str, i64)> = rows
        .iter()
        .map(|r| (r.partition_id, r.worker.as_str(), r.batch_end))
        .collect();
    assert_eq!(shape, [(5, "w", 8), (1, "w", 2), (5, "v", 1)]);
    assert_eq!(slots, [0, 1, 0, 2]);
}

/// The next flush the fusion hands out, within a few seconds.
async fn next(work: &mut FusionWork<AckFlush<Row>>) -> Option<AckFlush<Row>> {
    tokio::time::timeout(std::time::Duration::from_secs(5), work.next())
        .await
        .ok()
        .flatten()
}

#[tokio::test]
async fn a_flush_dropped_unsettled_fails_its_acks_and_frees_its_shard() {
    let (fusion, mut work) = AckFusion::<Row>::start(1);
    let f = fusion.clone();
    let first = tokio::spawn(async move { f.submit(ack(1, "a", 3)).await });
    let flush = next(&mut work).await.expect("the first flush");
    let f = fusion.clone();
    let behind = tokio::spawn(async move { f.submit(ack(1, "a", 5)).await });
    settle_tasks().await;
    drop(flush); // as when the task committing it panics

    let answer = first.await.unwrap();
    assert!(
        matches!(&answer, Err(f) if !f.unavailable && !f.refused),
        "{answer:?}"
    );
    let Some(flush) = next(&mut work).await else {
        panic!("the shard still waits for the dropped flush");
    };
    let verdicts = flush.rows().iter().map(row_of).collect();
    flush.settle(Ok(verdicts));
    assert_eq!(behind.await.unwrap().map(|r| r.batch_end), Ok(5));
}
