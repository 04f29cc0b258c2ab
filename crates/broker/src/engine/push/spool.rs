//! Which pushes go to the broker's disk spool instead of PostgreSQL (docs/engine.md §4.6); they
//! are answered `buffered` once their records are synced, and `push/replay.rs` stores them later.
//!
//! A push is spooled, checked in this order, when:
//! 1. the spool holds anything: until the drain has emptied it, every push joins it, so no push
//!    can overtake an earlier one of the same partition by going straight to PostgreSQL;
//! 2. push maintenance is on;
//! 3. PostgreSQL cannot be reached to learn the flag;
//!
//! and, after the fact, when its write failed only because PostgreSQL could not be reached.
//! Push fusion's flush (`push/flush.rs`) does the last two itself, while its partitions are in
//! flight, so order per partition holds across the spool: frames that reach a flush while the
//! spool holds records join its tail ([`join_held`]; a push can pass rule 1 just before a
//! rescue starts the spool), and frames of a write PostgreSQL could not take are spooled before
//! the partition's next flush may start ([`rescue_lanes`]). A write whose connection was lost
//! after it was sent is spooled *in doubt*: its commit may have happened, and the drain asks
//! PostgreSQL which of its messages are stored before it stores the rest (`push/replay.rs`),
//! so a queue without dedup does not get them twice. The binary path's segments stored as sent
//! bypass the fusion and are rescued after the fact ([`rescue`]). Without a spool (`FILE_BUFFER_ENABLED=false`) push maintenance answers 503 and
//! an outage fails the write as before. Transactions are never spooled: while pushes are being
//! spooled, a transaction carrying pushes answers 503 ([`refuse_transaction`]).

use std::time::Duration;

use bytes::Bytes;
use queen_proto::frame::Frame;
use tokio::time::Instant;
use uuid::Uuid;

use crate::accel::push_fusion::{Failure, FrameOutcome, FusionFrame, LaneFlush};
use crate::engine::maintenance;
use crate::engine::push::PushResult;
use crate::engine::push::PushState;
use crate::error::{Error, Result};
use crate::spool::{record, Spool, SpoolError, When};

/// How long a push waits to learn the maintenance flag when its cached read is stale; past it
/// (a starved pool) the push takes the direct way, where an outage is still caught by
/// [`rescue`].
const FLAG_WAIT: Duration = Duration::from_secs(2);

/// One (queue, partition) group of a push on its way to the spool: its frames, borrowed.
pub struct Outgoing<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub frames: Vec<Frame<'a>>,
}

/// The frame a fusion frame is stored as.
pub fn frame_of(f: &FusionFrame) -> Frame<'_> {
    Frame {
        flags: 0,
        message_id: f.message_id.into_bytes(),
        trace_id: f.trace_id.map(Uuid::into_bytes),
        transaction_id: &f.transaction_id,
        producer_sub: f.producer_sub.as_deref(),
        payload: &f.payload,
    }
}

/// Whether pushes go to the spool now (rules 1–3 above). The database being unreachable is an
/// answer (yes), not an error.
pub async fn engaged(st: &PushState) -> Result<bool> {
    if st.spool.as_ref().is_some_and(|s| s.is_holding()) {
        return Ok(true);
    }
    push_maintenance(st).await
}

/// Push maintenance is on, or PostgreSQL cannot be reached to say.
async fn push_maintenance(st: &PushState) -> Result<bool> {
    match maintenance::cached(st, Instant::now() + FLAG_WAIT).await {
        Ok(flags) => Ok(flags.is_some_and(|f| f.push)),
        Err(e) if e.is_unavailable() => Ok(true),
        Err(e) => Err(e),
    }
}

/// Spools the groups `outgoing` builds when the rules above say so: `true` once they are on
/// disk (answer `buffered`), `false` when the push goes to PostgreSQL. `outgoing` runs only
/// when the push is spooled.
pub async fn divert<'a>(st: &PushState, outgoing: impl Fn() -> Vec<Outgoing<'a>>) -> Result<bool> {
    let Some(spool) = &st.spool else {
        // No spool: maintenance refuses the push; an outage is the write's to report.
        let flags = maintenance::cached(st, Instant::now() + FLAG_WAIT).await;
        if matches!(flags, Ok(Some(f)) if f.push) {
            return Err(Error::TryLater(
                "push maintenance mode is on and the disk spool is off (FILE_BUFFER_ENABLED)"
                    .into(),
            ));
        }
        return Ok(false);
    };
    if spool.is_holding() {
        let (records, messages) = encode(outgoing(), false)?;
        let joined = spool.append(records, messages, When::WhileHolding).await;
        if joined.map_err(refused)? {
            return Ok(true);
        }
        // The drain emptied the spool meanwhile: decide as if it had been empty.
    }
    if !push_maintenance(st).await? {
        return Ok(false);
    }
    let (records, messages) = encode(outgoing(), false)?;
    spool
        .append(records, messages, When::Always)
        .await
        .map_err(refused)?;
    Ok(true)
}

/// The items among `results` whose write failed only because PostgreSQL could not be reached
/// are spooled instead, in doubt (their write was sent), and answered `buffered` (`item(i)`
/// gives item `i`'s payload and trace id; every item was stamped with `producer_sub`). If the
/// spool refuses them they stay failed.
pub async fn rescue(
    st: &PushState,
    results: &mut [PushResult],
    producer_sub: Option<&str>,
    item: impl Fn(usize) -> (Bytes, Option<Uuid>),
) {
    let Some(spool) = &st.spool else { return };
    let stranded: Vec<usize> = (0..results.len())
        .filter(|&i| matches!(&results[i].outcome, FrameOutcome::Failed(f) if f.unavailable))
        .collect();
    if stranded.is_empty() {
        return;
    }
    let kept: Vec<(Bytes, Option<Uuid>)> = stranded.iter().map(|&i| item(i)).collect();
    let mut groups: Vec<Outgoing<'_>> = Vec::new();
    for (&i, (payload, trace)) in stranded.iter().zip(&kept) {
        let r = &results[i];
        let frame = Frame {
            flags: 0,
            message_id: r.minted_id.into_bytes(),
            trace_id: trace.map(Uuid::into_bytes),
            transaction_id: &r.transaction_id,
            producer_sub,
            payload,
        };
        match groups
            .iter_mut()
            .find(|g| g.queue == r.queue && g.partition == r.partition)
        {
            Some(g) => g.frames.push(frame),
            None => groups.push(Outgoing {
                queue: &r.queue,
                partition: &r.partition,
                frames: vec![frame],
            }),
        }
    }
    let spooled = match encode(groups, true) {
        Ok((records, messages)) => spool.append(records, messages, When::Always).await,
        Err(e) => Err(SpoolError::Io(e.to_string())),
    };
    match spooled {
        Ok(_) => {
            for i in stranded {
                let message_id = results[i].minted_id;
                results[i].outcome = FrameOutcome::Buffered { message_id };
            }
        }
        Err(e) => tracing::warn!(error = %e, "pushes PostgreSQL could not take were not spooled"),
    }
}

/// While the spool holds records, the frames of a flush that are not the drain's own join its
/// tail and settle `buffered`: they must not reach PostgreSQL ahead of what waits there. A
/// spool that cannot take them fails them as unavailable (the push answers 503).
pub async fn join_held(
    spool: &Spool,
    lanes: &[LaneFlush<impl Send>],
    settled: &mut [Vec<Option<FrameOutcome>>],
) {
    if !spool.is_holding() {
        return;
    }
    let outcome = spool_lanes(spool, lanes, settled, false, When::WhileHolding).await;
    if let Some(Err(e)) = outcome {
        fail_fresh(lanes, settled, &e);
    }
}

/// After a write PostgreSQL could not take (`sent`: it had reached PostgreSQL, so its commit
/// is in doubt), the frames still unsettled that are not the drain's own are spooled and
/// settle `buffered`; if the spool refuses them they stay unsettled (and fail).
pub async fn rescue_lanes(
    spool: &Spool,
    lanes: &[LaneFlush<impl Send>],
    settled: &mut [Vec<Option<FrameOutcome>>],
    sent: bool,
) {
    if let Some(Err(e)) = spool_lanes(spool, lanes, settled, sent, When::Always).await {
        tracing::warn!(error = %e, "pushes PostgreSQL could not take were not spooled");
    }
}

/// Whether a frame is one to spool: not settled, not the drain's own.
fn fresh(frame: &FusionFrame, outcome: &Option<FrameOutcome>) -> bool {
    outcome.is_none() && !frame.replayed
}

/// Spools the fresh frames of `lanes` (one record per lane, in lane order) and settles them
/// `buffered`; `None` when there were none, `Ok(false)` when `when` found the spool empty.
async fn spool_lanes(
    spool: &Spool,
    lanes: &[LaneFlush<impl Send>],
    settled: &mut [Vec<Option<FrameOutcome>>],
    in_doubt: bool,
    when: When,
) -> Option<std::result::Result<bool, SpoolError>> {
    let mut bodies = Vec::new();
    let mut messages = 0u64;
    for (lane, done) in lanes.iter().zip(settled.iter()) {
        let frames: Vec<Frame<'_>> = lane
            .frames
            .iter()
            .zip(done)
            .filter(|(f, o)| fresh(f, o))
            .map(|(f, _)| frame_of(f))
            .collect();
        if frames.is_empty() {
            continue;
        }
        messages += frames.len() as u64;
        match record::body(&lane.queue, &lane.partition, in_doubt, frames.into_iter()) {
            Ok(body) => bodies.push(body),
            Err(e) => return Some(Err(SpoolError::Io(e.to_string()))),
        }
    }
    if bodies.is_empty() {
        return None;
    }
    let appended = spool.append(bodies, messages, when).await;
    if let Ok(true) = appended {
        for (lane, done) in lanes.iter().zip(settled.iter_mut()) {
            for (f, slot) in lane.frames.iter().zip(done.iter_mut()) {
                if fresh(f, slot) {
                    *slot = Some(FrameOutcome::Buffered {
                        message_id: f.message_id,
                    });
                }
            }
        }
    }
    Some(appended)
}

/// Fails the fresh frames of `lanes`: the spool holds records and cannot take them.
fn fail_fresh(
    lanes: &[LaneFlush<impl Send>],
    settled: &mut [Vec<Option<FrameOutcome>>],
    e: &SpoolError,
) {
    for (lane, done) in lanes.iter().zip(settled.iter_mut()) {
        for (f, slot) in lane.frames.iter().zip(done.iter_mut()) {
            if fresh(f, slot) {
                *slot = Some(FrameOutcome::Failed(Failure {
                    error: format!("the spool holds earlier pushes and cannot take these: {e}"),
                    unavailable: true,
                    refused: false,
                }));
            }
        }
    }
}

/// A transaction carrying pushes while pushes are being spooled: refused with 503, since its
/// pushes could neither join the spool (a transaction is all or nothing with its acks) nor
/// overtake it.
pub async fn refuse_transaction(st: &PushState) -> Result<()> {
    let holding = st.spool.as_ref().is_some_and(|s| s.is_holding());
    // An unreachable database refuses the transaction by itself.
    let maintenance = match maintenance::cached(st, Instant::now() + FLAG_WAIT).await {
        Ok(flags) => flags.is_some_and(|f| f.push),
        Err(e) if e.is_unavailable() => false,
        Err(e) => return Err(e),
    };
    if holding || maintenance {
        return Err(Error::TryLater(
            "pushes are being spooled (push maintenance, or a spool still draining): \
             transactions with pushes are refused until they are stored"
                .into(),
        ));
    }
    Ok(())
}

/// The record bodies of `groups` (one per group) and their message count.
fn encode(groups: Vec<Outgoing<'_>>, in_doubt: bool) -> Result<(Vec<Vec<u8>>, u64)> {
    let mut messages = 0u64;
    let records = groups
        .into_iter()
        .map(|g| {
            messages += g.frames.len() as u64;
            record::body(g.queue, g.partition, in_doubt, g.frames.into_iter())
                .map_err(|e| Error::internal(format!("a push cannot be spooled: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((records, messages))
}

/// A spool that cannot take a push: 503, the client retries.
fn refused(e: SpoolError) -> Error {
    Error::TryLater(e.to_string())
}
