//! The commit side of ack fusion (docs/engine.md §6.5): the loop that pulls the flushes ack
//! fusion's shard tasks hand out (`accel/ack_fusion.rs` schedules and calls nobody) and
//! commits each in a task of its own. A flush's rows become one `queen.log_ack_multi_v1` call
//! in its cover form, one transaction, consumer rows locked in (partition, group) order, one
//! verdict per row in row order, and the flush is settled with them; a flush of one row (low
//! load) calls `queen.log_ack_at_v1` itself, which the multi form would call for it anyway
//! (psql, alternating: ~220–250 µs against ~480–580 µs per call). A task that panics drops its
//! flush, which then fails its acks and frees its shard: nothing strands.

use crate::accel::ack_fusion::{AckFlush, AckFusion, FusedAck, FusionWork};
use crate::accel::admission::{Admission, Lane};
use crate::accel::fusion::Failure;
use crate::store::ack::{ack_cover, ack_multi_cover, AckVerdict, CoverRow};
use crate::store::db_error::failure_text;
use crate::store::Store;

/// Starts ack fusion with `shards` shard tasks and the loop committing their flushes through
/// `store`, each under an ack permit of `admission`; its verdicts are the positional
/// procedure's.
pub fn start(store: Store, admission: Admission, shards: usize) -> AckFusion<AckVerdict> {
    let (fusion, work) = AckFusion::start(shards);
    tokio::spawn(run(store, admission, work));
    fusion
}

/// Commits ack fusion's flushes until its shard tasks have all ended.
async fn run(store: Store, admission: Admission, mut work: FusionWork<AckFlush<AckVerdict>>) {
    while let Some(flush) = work.next().await {
        let (store, admission) = (store.clone(), admission.clone());
        tokio::spawn(async move {
            let verdicts = commit(&store, &admission, flush.rows()).await;
            flush.settle(verdicts);
        });
    }
}

/// Commits `rows` in one transaction: one verdict per row, in row order.
async fn commit(
    store: &Store,
    admission: &Admission,
    rows: &[FusedAck],
) -> Result<Vec<AckVerdict>, Failure> {
    let _permit = admission.acquire(Lane::Ack).await;
    let covers: Vec<CoverRow<'_>> = rows
        .iter()
        .map(|r| CoverRow {
            partition_id: r.partition_id,
            group: &r.group,
            lease_id: &r.worker,
            batch_end: r.batch_end,
            frames: r.frames,
        })
        .collect();
    let committed = match (store.conn().await, covers.as_slice()) {
        (Ok(db), [lone]) => ack_cover(&db, lone).await.map(|v| vec![v]),
        (Ok(db), _) => ack_multi_cover(&db, &covers).await,
        (Err(e), _) => Err(e),
    };
    committed.map_err(|e| Failure {
        error: failure_text(&e),
        unavailable: e.is_unavailable(),
        refused: false,
    })
}
