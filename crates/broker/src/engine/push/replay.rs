//! The spool's drain (docs/engine.md §4.6): one background task per broker that stores what the
//! disk spool holds, in the order it was appended, under the messages' original ids and
//! transactionIds, once push maintenance is off and PostgreSQL takes writes again.
//!
//! - **Order.** One round at a time, each a run of consecutive records pushed together: within
//!   a (queue, partition) push fusion keeps the order it is given, and a round that fails is
//!   tried again whole before anything after it. While the spool holds anything, new pushes
//!   join its tail (`push/spool.rs`), so none overtakes it.
//! - **Idempotence.** A round tried again, or replayed again after a crash between its commit
//!   and the spool's, carries the same transactionIds: the dedup layers answer `duplicate`
//!   for what was stored already. A record spooled after a write whose commit was in doubt,
//!   and every record of a round tried again after the connection was lost during its write,
//!   first drops what PostgreSQL holds already (`push/doubt.rs`), so a queue without dedup
//!   does not store it twice.
//! - **Failures.** PostgreSQL unreachable: wait (from `FILE_BUFFER_FLUSH_MS` doubling up to
//!   [`MAX_BACKOFF`]) and try the same round again. Any other refusal: tried again up to five rounds in a row,
//!   then the refused messages go to the quarantine file (logged, never replayed) and the drain
//!   moves on, so one poison message cannot hold every later push hostage.
//! - **Cost.** Asleep while the spool holds nothing: no timer, no database reads.
//! - **Shutdown.** The task ends when the broker starts closing, after the round in progress;
//!   what it did not drain stays on disk for the next start.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::accel::push_fusion::FrameOutcome;
use crate::engine::maintenance;
use crate::engine::push::PushState;
use crate::engine::push::{self, doubt, PushItem, PushResult};
use crate::spool::{Batch, Spool, SpoolGroup};

/// Consecutive refused rounds after which the refused messages are quarantined.
const QUARANTINE_AFTER: u32 = 5;
/// Ceiling of the wait between rounds while PostgreSQL stays unreachable (or the flush
/// interval, if longer). Every push joins the spool while it holds anything, so each moment
/// the drain still sleeps once a primary takes writes again is a moment every push is answered
/// `buffered`: 5 s kept pushes out of PostgreSQL for seconds after each failover (issue 38
/// wants the first stored push within a second). A round against an absent server is one
/// refused or timed-out connection attempt.
const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// Starts the drain of the broker's spool (none without a spool). It ends when the broker
/// starts closing; await the handle to know the round in progress is done.
pub fn spawn(st: &Arc<PushState>) -> Option<JoinHandle<()>> {
    let spool_held = st.spool.as_ref()?.held();
    if spool_held.records > 0 {
        tracing::info!(
            messages = spool_held.messages,
            bytes = spool_held.bytes,
            "the disk spool holds pushes from an earlier run; replaying them"
        );
    }
    Some(tokio::spawn(run(st.clone())))
}

/// What one round came to.
enum Round {
    /// Records stored (or set aside): go on at once.
    Progress,
    /// Push maintenance is on, or synced records are not there yet: look again later.
    Waiting,
    /// PostgreSQL cannot be reached: back off.
    Outage,
    /// Something else failed: try again after a pause.
    Refused,
}

async fn run(st: Arc<PushState>) {
    let Some(spool) = st.spool.as_ref() else {
        return;
    };
    let mut closing = st.closing.subscribe();
    let interval = Duration::from_millis(st.cfg.file_buffer_flush_ms);
    let mut backoff = interval;
    let mut drain = Drain::default();
    loop {
        if *closing.borrow() {
            return;
        }
        if !spool.is_holding() {
            if drain.replayed > 0 {
                tracing::info!(messages = drain.replayed, "the disk spool is drained");
                drain.replayed = 0;
            }
            tokio::select! {
                _ = spool.appended() => {}
                _ = closing.changed() => return,
            }
            continue;
        }
        let pause = match round(&st, spool, &mut drain).await {
            Round::Progress => {
                backoff = interval;
                continue;
            }
            Round::Waiting | Round::Refused => interval,
            Round::Outage => {
                let pause = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF.max(interval));
                pause
            }
        };
        if sleep_or_close(pause, &mut closing).await {
            return;
        }
    }
}

/// Sleeps `pause`; true when the broker started closing meanwhile.
async fn sleep_or_close(pause: Duration, closing: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => false,
        changed = closing.changed() => changed.is_err() || *closing.borrow(),
    }
}

/// What the drain carries from round to round.
#[derive(Default)]
struct Drain {
    /// Refused rounds in a row.
    refusals: u32,
    /// Messages stored since the spool was last empty.
    replayed: u64,
    /// The last round lost its connection during its write (it may have committed): the next
    /// one drops what is stored already from every record, not only those spooled in doubt.
    in_doubt: bool,
}

/// One round: check the flag, read a batch, store it, commit it to the spool.
async fn round(st: &PushState, spool: &Spool, drain: &mut Drain) -> Round {
    let until = Instant::now() + Duration::from_secs(1);
    match maintenance::cached(st, until).await {
        Ok(Some(flags)) if !flags.push => {}
        Ok(_) => return Round::Waiting,
        Err(e) if e.is_unavailable() => return Round::Outage,
        Err(e) => {
            tracing::warn!(error = %e.chain(), "spool drain: cannot read the maintenance flags");
            return Round::Refused;
        }
    }
    let batch = match spool.read(st.cfg.file_buffer_max_batch).await {
        Ok(batch) => batch,
        Err(e) => {
            tracing::error!(error = %e, "spool drain: cannot read the spool");
            return Round::Refused;
        }
    };
    if !batch.moves() {
        return Round::Waiting; // what the spool holds is not synced yet
    }
    let groups = match doubt::without_stored(st, &batch.groups, drain.in_doubt).await {
        Ok((groups, 0)) => groups,
        Ok((groups, dropped)) => {
            tracing::info!(
                messages = dropped,
                "spool drain: messages of a write whose commit was in doubt are stored \
                 already; not stored again"
            );
            groups
        }
        Err(e) if e.is_unavailable() => return Round::Outage,
        Err(e) => {
            tracing::warn!(error = %e.chain(), "spool drain: cannot resolve a write in doubt");
            return Round::Refused;
        }
    };
    if groups.is_empty() {
        drain.in_doubt = false;
        spool.commit(batch); // only finished files, or messages stored already
        return Round::Progress;
    }
    let results = match push::store(st, items_of(&groups)).await {
        Ok(results) => results,
        Err(e) if e.is_unavailable() => {
            drain.in_doubt = true;
            return Round::Outage;
        }
        Err(e) => {
            tracing::warn!(error = %e.chain(), "spool drain: a round was refused");
            return refused(spool, batch, &groups, &[], &mut drain.refusals).await;
        }
    };
    if results.iter().any(|r| is_failed(r, true)) {
        drain.in_doubt = true;
        return Round::Outage;
    }
    drain.in_doubt = false;
    let failed: Vec<usize> = (0..results.len())
        .filter(|&i| is_failed(&results[i], false))
        .collect();
    if !failed.is_empty() {
        let first = results[failed[0]].error().unwrap_or_default();
        tracing::warn!(failed = failed.len(), error = %first, "spool drain: messages were refused");
        return refused(spool, batch, &groups, &failed, &mut drain.refusals).await;
    }
    drain.refusals = 0;
    drain.replayed += results.len() as u64;
    spool.commit(batch);
    Round::Progress
}

/// A round PostgreSQL refused (`failed` indexes the refused messages of `groups`, what the
/// round sent of `batch`; empty: all of them). After [`QUARANTINE_AFTER`] such rounds in a row
/// the refused messages are quarantined and the batch counts as drained.
async fn refused(
    spool: &Spool,
    batch: Batch,
    groups: &[SpoolGroup],
    failed: &[usize],
    refusals: &mut u32,
) -> Round {
    *refusals += 1;
    if *refusals < QUARANTINE_AFTER {
        return Round::Refused;
    }
    let kept = refused_groups(groups, failed);
    let messages: usize = kept.iter().map(|g| g.items.len()).sum();
    let records: Result<Vec<_>, _> = kept.iter().map(SpoolGroup::body).collect();
    let quarantined = match records {
        Ok(records) => spool.quarantine(records).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match quarantined {
        Ok(()) => {
            tracing::error!(
                messages,
                file = %spool.dir().join(crate::spool::QUARANTINE_FILE).display(),
                "spool drain: messages refused {QUARANTINE_AFTER} rounds in a row were quarantined \
                 (kept on disk, not replayed)"
            );
            *refusals = 0;
            spool.commit(batch);
            Round::Progress
        }
        Err(e) => {
            tracing::error!(error = %e, "spool drain: cannot quarantine refused messages");
            Round::Refused
        }
    }
}

/// The groups of `groups` with only the messages at the flattened indexes `failed` (all of
/// them when `failed` is empty).
fn refused_groups(groups: &[SpoolGroup], failed: &[usize]) -> Vec<SpoolGroup> {
    let mut index = 0;
    let mut out = Vec::new();
    for g in groups {
        let mut items = Vec::new();
        for item in &g.items {
            if failed.is_empty() || failed.contains(&index) {
                items.push(item.clone());
            }
            index += 1;
        }
        if !items.is_empty() {
            out.push(SpoolGroup {
                queue: g.queue.clone(),
                partition: g.partition.clone(),
                in_doubt: g.in_doubt,
                items,
            });
        }
    }
    out
}

/// A failed result: by an outage (`unavailable`) or by anything else.
fn is_failed(r: &PushResult, unavailable: bool) -> bool {
    matches!(&r.outcome, FrameOutcome::Failed(f) if f.unavailable == unavailable)
}

/// The push items of spooled groups, keeping their ids and transactionIds.
fn items_of(groups: &[SpoolGroup]) -> Vec<PushItem> {
    groups
        .iter()
        .flat_map(|g| {
            g.items.iter().map(|item| PushItem {
                queue: g.queue.clone(),
                partition: Some(g.partition.clone()),
                transaction_id: Some(item.transaction_id.clone()),
                trace_id: item.trace_id,
                payload: item.payload.clone(),
                message_id: Some(item.message_id),
                producer_sub: item.producer_sub.as_deref().map(std::sync::Arc::from),
            })
        })
        .collect()
}
