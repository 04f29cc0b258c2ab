//! The commit side of ack fusion (docs/engine.md §6.5): a flush's rows become one
//! `queen.log_ack_multi_v1` call in its cover form, one transaction, consumer rows locked in
//! (partition, group) order, one verdict per row in row order; a flush of one row (low load)
//! calls `queen.log_ack_at_v1` itself, which the multi form would call for it anyway (psql,
//! alternating: ~220–250 µs against ~480–580 µs per call). The scheduler is
//! `accel/ack_fusion.rs`.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::accel::ack_fusion::{AckCommitter, AckFusion, FusedAck};
use crate::accel::admission::{Admission, Lane};
use crate::accel::fusion::Failure;
use crate::store::ack::{ack_cover, ack_multi_cover, AckVerdict, CoverRow};
use crate::store::db_error::failure_text;
use crate::store::Store;

/// Starts ack fusion with `shards` shard tasks committing through `store`, each flush under
/// an ack permit of `admission`; its verdicts are the positional procedure's.
pub fn start(store: Store, admission: Admission, shards: usize) -> AckFusion<AckVerdict> {
    AckFusion::start(shards, Arc::new(MultiCommitter { store, admission }))
}

struct MultiCommitter {
    store: Store,
    admission: Admission,
}

impl AckCommitter<AckVerdict> for MultiCommitter {
    fn commit(&self, rows: Vec<FusedAck>) -> BoxFuture<'static, Result<Vec<AckVerdict>, Failure>> {
        let (store, admission) = (self.store.clone(), self.admission.clone());
        Box::pin(async move {
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
        })
    }
}
