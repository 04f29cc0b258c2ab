//! The write of a round of segments and the step that follows every committed one, shared by
//! the push paths (push fusion's flushes, binary groups stored as sent; transactions share the
//! step), and how a write that did not commit is reported.
//!
//! Once PostgreSQL committed a write, its answer is the write's outcome: what comes after
//! (telling the dedup cache, waking parked pops, counting) cannot fail, and trouble in any
//! later step is logged, never turned into a `failed` frame, since a client would retry a
//! frame reported failed and store it twice.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::accel::dedup_cache::DedupCache;
use crate::accel::hotlist::HotList;
use crate::accel::push_fusion::{Failure, FrameOutcome};
use crate::accel::segment_cache::SegmentCache;
use crate::accel::wake::WakeGates;
use crate::engine::push::dedup::report_commits;
use crate::engine::Counters;
use crate::error::{Error, Result};
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::failure_text;
use crate::store::push::{push_multi, push_one, push_vouched, SegmentResult, SegmentWrite};

/// What a committed write touches; cheap to clone (the fusion's writer keeps one).
#[derive(Clone)]
pub struct CommitEffects {
    pub dedup: Arc<DedupCache>,
    pub wake: Arc<WakeGates>,
    pub hotlist: HotList,
    pub counters: Arc<Counters>,
    pub segments: Arc<SegmentCache>,
}

impl CommitEffects {
    /// Writes `writes` in one transaction: a lone segment whose partition id the dedup cache
    /// holds by that id (`log_push_one_v1`: no provisioning, no bundle bookkeeping, about half
    /// the PostgreSQL time of a bundle of one); a bundle whose every partition id the cache
    /// holds and vouches for as the vouched statement, which writes only when nothing but
    /// the appends is due; anything else, or when those decline, as a bundle
    /// (`log_push_multi_v1`).
    pub async fn write(
        &self,
        db: &impl deadpool_postgres::GenericClient,
        writes: &[SegmentWrite<'_>],
    ) -> Result<Vec<SegmentResult>> {
        if let [lone] = writes {
            if let Some(pid) = self.dedup.partition_id(lone.queue, lone.partition) {
                if let Some(result) = push_one(db, lone, pid).await? {
                    return Ok(vec![result]);
                }
            }
        } else if let Some(pids) = self.vouched_ids(writes) {
            if let Some(results) = push_vouched(db, writes, &pids).await? {
                return Ok(results);
            }
        }
        push_multi(db, writes).await
    }

    /// The partition ids of `writes` when the dedup cache holds every one, distinct, and
    /// vouches for each segment (a segment it does not vouch for needs the function's probe).
    fn vouched_ids(&self, writes: &[SegmentWrite<'_>]) -> Option<Vec<i64>> {
        let pids = writes
            .iter()
            .map(|w| match w.verified >= 0 {
                true => self.dedup.partition_id(w.queue, w.partition),
                false => None,
            })
            .collect::<Option<Vec<i64>>>()?;
        let mut sorted = pids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        (sorted.len() == pids.len()).then_some(pids)
    }

    /// Records a committed write: `results` are PostgreSQL's answers for `segs`, in order.
    /// The dedup cache learns each stored segment (its entries stay extendable past it), the
    /// hot-list rings of those queues mark the partitions and pops parked on them wake (both
    /// before the pushers are answered, so a pop right after the answer sees the messages),
    /// the segment cache keeps their frames for the pops to come, and the pushed counter
    /// counts them.
    pub fn committed(&self, segs: &[SegmentWrite<'_>], results: &[SegmentResult]) {
        report_commits(&self.dedup, segs, results);
        let mut stored = Vec::new();
        let mut messages = 0u64;
        for (seg, result) in segs.iter().zip(results) {
            if let SegmentResult::Queued {
                partition_id,
                base_offset,
                ..
            } = result
            {
                stored.push((seg.queue, seg.partition));
                messages += (seg.hashes.len() / 16) as u64;
                if let Some(frames) = seg.frames {
                    let key = (*partition_id, *base_offset);
                    let kept = (seg.blob.clone(), frames.clone());
                    self.segments.stored(seg.queue, key, kept);
                }
            }
        }
        self.hotlist.mark_pushed(stored.iter().copied());
        self.wake.wake_partitions(stored);
        self.counters.messages_pushed.fetch_add(messages, Relaxed);
    }
}

/// Failed writes are logged per flush or request: identical ones once per window.
static WRITE_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// The outcome of frames whose write did not commit because of `e` (logged here, rate
/// limited, with PostgreSQL's own message); `what` names the write in the log.
pub fn write_failed(e: &Error, what: &str, segments: usize) -> FrameOutcome {
    let error = failure_text(e);
    if let Some(suppressed) = WRITE_FAILURES.admit(&error) {
        tracing::error!(error = %error, segments, suppressed, "{what} failed");
    }
    FrameOutcome::Failed(Failure {
        error,
        unavailable: e.is_unavailable(),
        refused: false,
    })
}

/// Logs trouble after a commit (rate limited): the committed frames keep their outcome.
pub fn after_commit_trouble(trouble: &str) {
    if let Some(suppressed) = WRITE_FAILURES.admit(trouble) {
        tracing::error!(error = %trouble, suppressed, "post-commit step failed; the write stands");
    }
}
