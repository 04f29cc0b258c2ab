//! The write side of push fusion: [`run`] is the loop that pulls the work push fusion's
//! shard tasks hand out (`accel/push_fusion.rs` schedules and calls nobody) and does each item
//! in a task of its own. A bundle ([`Work::Write`]) of per-partition frame lists becomes
//! segments, appended with one statement per round (`queen.log_push_multi_v1`, or
//! `log_push_one_v1` by id for a lone segment: `CommitEffects::write`), and the bundle is
//! settled with every frame's outcome; a staged flush ([`Work::Prepare`]) gets its segment
//! built ahead. A task that panics drops its item, which then reports itself to the fusion
//! (failed requests, an unprepared stage): nothing strands.
//!
//! A segment the SQL probe reports as `duplicate` wrote nothing; its duplicate frames settle
//! with the original's id (read back from the covering segment) and the survivors are
//! repacked and written in the next round. A segment refused as `full` settles the frames
//! its queue's `maxSize` has no room for as failed and resends the rest; one refused as
//! `encrypt` (plaintext for an encrypted queue) is sealed from then on and resent, once. So
//! every round but a lane's one `encrypt` settles at least one frame, and the loop ends. The
//! partitions of a bundle stay "in flight" in the fusion until it is settled, so no other
//! flush of them interleaves.
//!
//! A lane staged while its partition's previous flush was written (accel/push_fusion.rs,
//! pipelining) arrives with its segment built by [`SegmentWriter::prepare`]; the first round
//! uses it when it still fits (every frame pending, the same sealing), otherwise builds anew.
//!
//! While the broker's disk spool holds records, the frames of a flush join its tail instead of
//! PostgreSQL (all but the spool's own drain's), and frames of a write PostgreSQL could not
//! take are spooled by the flush itself (`push/spool.rs`): both while the partitions are still
//! in flight, so a push that arrived behind them lands behind them in the spool, never ahead
//! of them in PostgreSQL.
//!
//! Each round asks the dedup cache for every segment's `p_verified`; a committed round goes
//! through the shared post-commit step (engine/push/commit.rs) before the next round (and before the
//! partition's next flush), and its frames settle whatever happens afterwards: only frames of
//! a round that did not commit, and frames the SQL refused (maxSize, or an encrypted queue on a
//! broker without the key), are ever reported `failed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use queen_proto::frame::{decode_exact, Frame, ENCRYPTED};
use queen_proto::ZERO_UUID;
use uuid::Uuid;

use crate::accel::push_fusion::{
    Failure, FrameOutcome, FusionFrame, FusionWork, LaneFlush, Stage, Work,
};
use crate::engine::encryption::{no_key, Encryption};
use crate::engine::push::commit::{after_commit_trouble, write_failed, CommitEffects};
use crate::engine::push::dedup::verified_offsets;
use crate::engine::push::segment::{build_segment, BuiltSegment, INLINE_BUILD_BYTES};
use crate::engine::push::spool;
use crate::error::{Error, Result};
use crate::log_limit::Tally;
use crate::spool::Spool;
use crate::store::push::{segment_at, DupFrame, SegmentResult, SegmentWrite};
use crate::store::Store;

/// How often the coalescing summary is logged (when there was traffic).
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Does push fusion's work until its shard tasks have all ended: each item in a task of its
/// own, so bundles of different shards are written concurrently (as many as admission lets
/// the fusion hand out).
pub async fn run(writer: Arc<SegmentWriter>, mut work: FusionWork<Work<Prepared>>) {
    while let Some(item) = work.next().await {
        let writer = writer.clone();
        match item {
            Work::Prepare(stage) => tokio::spawn(async move { writer.prepare(stage).await }),
            Work::Write(mut bundle) => tokio::spawn(async move {
                let outcomes = writer.write(bundle.lanes()).await;
                bundle.settle(outcomes);
            }),
        };
    }
}

/// Writes fusion bundles to PostgreSQL.
pub struct SegmentWriter {
    store: Store,
    zstd_level: i32,
    effects: CommitEffects,
    encryption: Arc<Encryption>,
    /// The broker's disk spool (none when `FILE_BUFFER_ENABLED` is off).
    spool: Option<Arc<Spool>>,
    summary: Summary,
}

/// Commits, and segments and messages sent, since the last summary: how well fusion coalesces
/// (messages per segment, segments per commit) is the push path's main throughput lever.
struct Summary(Tally<3>);

impl Summary {
    fn record(&self, segments: &[BuiltSegment]) {
        let messages: i64 = segments.iter().map(|s| i64::from(s.msg_count)).sum();
        let deltas = [1, segments.len() as u64, messages.unsigned_abs()];
        let Some(([commits, segments, messages], elapsed)) = self.0.add(deltas) else {
            return;
        };
        tracing::info!(
            commits,
            segments,
            messages,
            segments_per_commit = format!("{:.2}", segments as f64 / commits.max(1) as f64),
            messages_per_segment = format!("{:.2}", messages as f64 / segments.max(1) as f64),
            seconds = elapsed.as_secs(),
            "push fusion coalescing"
        );
    }
}

impl SegmentWriter {
    pub fn new(
        store: Store,
        zstd_level: i32,
        effects: CommitEffects,
        encryption: Arc<Encryption>,
        spool: Option<Arc<Spool>>,
    ) -> Self {
        let summary = Summary(Tally::new(SUMMARY_EVERY));
        SegmentWriter {
            store,
            zstd_level,
            effects,
            encryption,
            spool,
            summary,
        }
    }

    /// Writes a bundle's lanes (taking their preparations) and returns, for every lane, one
    /// outcome per frame, in order.
    pub async fn write(&self, lanes: &mut [LaneFlush<Prepared>]) -> Vec<Vec<FrameOutcome>> {
        let mut settled: Vec<Vec<Option<FrameOutcome>>> =
            lanes.iter().map(|l| vec![None; l.frames.len()]).collect();
        let mut prepared: Vec<Option<Prepared>> =
            lanes.iter_mut().map(|l| l.prepared.take()).collect();
        let lanes = &*lanes;
        if let Some(spool) = &self.spool {
            spool::join_held(spool, lanes, &mut settled).await;
        }
        let mut sent = false;
        let written = self
            .settle(lanes, &mut prepared, &mut settled, &mut sent)
            .await;
        if let Err(e) = written {
            // Only frames of rounds that did not commit are still unsettled.
            let failed = write_failed(&e, "push flush", lanes.len());
            if let Some(spool) = self.spool.as_ref().filter(|_| e.is_unavailable()) {
                spool::rescue_lanes(spool, lanes, &mut settled, sent).await;
            }
            for slot in settled.iter_mut().flatten().filter(|s| s.is_none()) {
                *slot = Some(failed.clone());
            }
        }
        settled
            .into_iter()
            .map(|lane| {
                lane.into_iter()
                    .map(|o| o.unwrap_or_else(|| Failure::internal("push did not settle")))
                    .collect()
            })
            .collect()
    }

    /// Writes rounds until every frame is settled (frames settled already, by the spool, are
    /// left out); fills `settled` as frames settle. An error means the current round did not
    /// commit, or may have: `sent` then says whether its write had reached PostgreSQL (its
    /// commit is in doubt). Every committed round is settled by then.
    async fn settle(
        &self,
        lanes: &[LaneFlush<Prepared>],
        prepared: &mut [Option<Prepared>],
        settled: &mut [Vec<Option<FrameOutcome>>],
        sent: &mut bool,
    ) -> Result<()> {
        // Taken after the first round's segments are built: compressing holds no connection.
        let mut conn = None;
        let mut pending: Vec<Vec<usize>> = lanes
            .iter()
            .zip(settled.iter())
            .map(|(l, done)| (0..l.frames.len()).filter(|&f| done[f].is_none()).collect())
            .collect();
        let mut originals = OriginalIds::default();
        // Lanes the SQL told to seal: sealed from then on, whatever the cache says.
        let mut must_seal = vec![false; lanes.len()];
        loop {
            for (l, lane) in lanes.iter().enumerate() {
                must_seal[l] |= self.encryption.wants(&lane.queue);
                if must_seal[l] && !self.encryption.has_key() && !pending[l].is_empty() {
                    let lane_state = Lane {
                        pending: &mut pending[l],
                        settled: &mut settled[l],
                    };
                    lane_state.refuse(0, &no_key(&lane.queue).to_string());
                }
            }
            let round: Vec<usize> = (0..lanes.len())
                .filter(|&l| !pending[l].is_empty())
                .collect();
            if round.is_empty() {
                return Ok(());
            }
            let sealed: Vec<bool> = round.iter().map(|&l| must_seal[l]).collect();
            let built = self
                .build(lanes, prepared, &pending, &round, &sealed)
                .await?;
            let conn = match &mut conn {
                Some(conn) => conn,
                None => conn.insert(self.store.conn().await?),
            };
            let mut writes: Vec<SegmentWrite<'_>> = round
                .iter()
                .zip(&built)
                .zip(&sealed)
                .map(|((&l, seg), &encrypted)| SegmentWrite {
                    queue: &lanes[l].queue,
                    partition: &lanes[l].partition,
                    msg_count: seg.msg_count,
                    hashes: &seg.hashes,
                    verified: -1,
                    blob: &seg.blob,
                    frames: Some(&seg.frames),
                    encrypted,
                })
                .collect();
            let verified = verified_offsets(&self.effects.dedup, &*conn, &writes).await;
            for (write, verified) in writes.iter_mut().zip(verified) {
                write.verified = verified;
            }
            *sent = true;
            let results = self.effects.write(&*conn, &writes).await;
            self.store.charge(conn, SegmentWrite::load(&writes));
            let results = results?;
            *sent = false;
            // Committed: from here on nothing may fail the round's frames.
            self.effects.committed(&writes, &results);
            self.summary.record(&built);
            for (&l, result) in round.iter().zip(results) {
                let (frames, queue) = (&lanes[l].frames, &lanes[l].queue);
                let lane = Lane {
                    pending: &mut pending[l],
                    settled: &mut settled[l],
                };
                match result {
                    SegmentResult::Queued { base_offset, .. } => {
                        lane.queued(frames, base_offset);
                    }
                    SegmentResult::Duplicate { partition_id, dups } => {
                        lane.duplicates(&*conn, &mut originals, partition_id, &dups)
                            .await;
                    }
                    // The next round seals them (or, without a key, refuses them).
                    SegmentResult::Encrypt { .. } => {
                        self.encryption.learn(queue, true);
                        must_seal[l] = true;
                    }
                    SegmentResult::Full { room, max_size, .. } => {
                        lane.refuse(room, &full(queue, max_size));
                    }
                }
            }
        }
    }

    /// One segment per lane of the round, from its pending frames (the prepared one when it
    /// has exactly those frames and sealing); `sealed[i]`: the round's i-th lane is sealed.
    async fn build(
        &self,
        lanes: &[LaneFlush<Prepared>],
        prepared: &mut [Option<Prepared>],
        pending: &[Vec<usize>],
        round: &[usize],
        sealed: &[bool],
    ) -> Result<Vec<BuiltSegment>> {
        let mut built = Vec::with_capacity(round.len());
        for (&l, &seal) in round.iter().zip(sealed) {
            let fits = |p: &Prepared| p.sealed == seal && pending[l].len() == lanes[l].frames.len();
            if let Some(ready) = prepared[l].take().filter(fits) {
                self.effects
                    .counters
                    .segments_prepared
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                built.push(ready.segment);
                continue;
            }
            let frames: Arc<[FusionFrame]> = if pending[l].len() == lanes[l].frames.len() {
                lanes[l].frames.clone()
            } else {
                pending[l]
                    .iter()
                    .map(|&f| lanes[l].frames[f].clone())
                    .collect()
            };
            let seal = seal.then(|| (self.encryption.clone(), lanes[l].queue.clone()));
            built.push(build_off_loop(frames, self.zstd_level, seal).await?);
        }
        Ok(built)
    }
}

/// A segment built ahead by [`SegmentWriter::prepare`], and whether its payloads are sealed.
pub struct Prepared {
    sealed: bool,
    segment: BuiltSegment,
}

impl SegmentWriter {
    /// Builds a staged flush's segment ahead of its write. Dropping the stage unprepared
    /// leaves the build to the write: when the queue wants sealing and this broker has no
    /// key (the write refuses these frames), or when the build fails (the write redoes and
    /// reports it).
    async fn prepare(&self, stage: Stage<Prepared>) {
        let sealed = self.encryption.wants(&stage.queue);
        if sealed && !self.encryption.has_key() {
            return;
        }
        let seal = sealed.then(|| (self.encryption.clone(), stage.queue.clone()));
        if let Ok(segment) = build_off_loop(stage.frames.clone(), self.zstd_level, seal).await {
            stage.prepared(Prepared { sealed, segment });
        }
    }
}

/// Builds a segment of `frames`, on the blocking pool when it is large.
async fn build_off_loop(
    frames: Arc<[FusionFrame]>,
    level: i32,
    seal: Option<(Arc<Encryption>, Arc<str>)>,
) -> Result<BuiltSegment> {
    let bytes: usize = frames
        .iter()
        .map(|f| f.payload.len() + f.transaction_id.len())
        .sum();
    if bytes <= INLINE_BUILD_BYTES {
        return build_fusion_segment(&frames, level, seal);
    }
    tokio::task::spawn_blocking(move || build_fusion_segment(&frames, level, seal))
        .await
        .map_err(|e| Error::internal(format!("segment build task failed: {e}")))?
}

/// One lane's frames still to write and its outcomes, while a committed round settles them.
struct Lane<'a> {
    pending: &'a mut Vec<usize>,
    settled: &'a mut [Option<FrameOutcome>],
}

impl Lane<'_> {
    /// The segment of the pending frames was stored from `base_offset` on.
    fn queued(self, frames: &[FusionFrame], base_offset: i64) {
        for (k, &f) in self.pending.iter().enumerate() {
            self.settled[f] = Some(FrameOutcome::Queued {
                message_id: frames[f].message_id,
                offset: base_offset + k as i64,
            });
        }
        self.pending.clear();
    }

    /// The segment wrote nothing and only its first `keep` frames may be sent again: the
    /// others settle as refused with `error` (a per-item answer, the rest of the request
    /// untouched).
    fn refuse(self, keep: usize, error: &str) {
        for &f in self.pending.iter().skip(keep) {
            self.settled[f] = Some(Failure::refusal(error));
        }
        self.pending.truncate(keep);
    }

    /// The segment wrote nothing: the `dups` frames are stored already and settle with their
    /// originals' ids (the nil id when one cannot be read back: the verdict stands, only the
    /// id is unknown); the others stay pending for the next round. An answer naming no frame,
    /// or a frame the segment did not have, settles the lane as failed (nothing of it was
    /// written) rather than loop.
    async fn duplicates(
        self,
        db: &impl deadpool_postgres::GenericClient,
        originals: &mut OriginalIds,
        partition_id: i64,
        dups: &[DupFrame],
    ) {
        let count = self.pending.len();
        if dups.is_empty() || dups.iter().any(|d| d.i >= count) {
            let trouble =
                format!("log_push_one_v1 reported duplicates {dups:?} of a {count}-frame segment");
            after_commit_trouble(&trouble);
            for &f in self.pending.iter() {
                self.settled[f] = Some(Failure::internal(trouble.clone()));
            }
            self.pending.clear();
            return;
        }
        let mut dup_frames = Vec::with_capacity(dups.len());
        for dup in dups {
            let f = self.pending[dup.i];
            let original = match originals.resolve(db, partition_id, dup.off).await {
                Ok(id) => id,
                Err(e) => {
                    after_commit_trouble(&format!(
                        "reading the original of a duplicate (partition {partition_id}, \
                         offset {}): {e}",
                        dup.off
                    ));
                    ZERO_UUID
                }
            };
            self.settled[f] = Some(FrameOutcome::Duplicate {
                message_id: original,
                offset: Some(dup.off),
            });
            dup_frames.push(f);
        }
        self.pending.retain(|f| !dup_frames.contains(f));
    }
}

/// The refusal of a message its queue's `maxSize` has no room for (docs/wire.md §3.2).
pub fn full(queue: &str, max_size: i64) -> String {
    format!(
        "queue {queue} is full: it holds its maxSize of {max_size} unconsumed messages, and \
         this message would exceed that max capacity"
    )
}

/// The fusion's frames as stored frames, each with its pusher's producerSub (a body-supplied
/// one never reaches a `FusionFrame`); with `seal`, every payload becomes the queue's envelope.
fn build_fusion_segment(
    frames: &[FusionFrame],
    level: i32,
    seal: Option<(Arc<Encryption>, Arc<str>)>,
) -> Result<BuiltSegment> {
    let sealed: Vec<Vec<u8>> = match &seal {
        Some((encryption, queue)) => frames
            .iter()
            .map(|f| encryption.seal(queue, &f.payload))
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    let views: Vec<Frame<'_>> = frames
        .iter()
        .enumerate()
        .map(|(k, f)| Frame {
            flags: if seal.is_some() { ENCRYPTED } else { 0 },
            message_id: *f.message_id.as_bytes(),
            trace_id: f.trace_id.map(|t| *t.as_bytes()),
            transaction_id: &f.transaction_id,
            producer_sub: f.producer_sub.as_deref(),
            payload: sealed.get(k).map_or(&f.payload[..], Vec::as_slice),
        })
        .collect();
    build_segment(&views, level).map_err(|e| Error::internal(format!("building a segment: {e}")))
}

/// Original message ids of duplicates, decoded from their covering segments (each segment
/// read and decompressed once per flush), keyed by (partition id, base offset).
#[derive(Default)]
pub(crate) struct OriginalIds {
    segments: HashMap<(i64, i64), DecodedSegment>,
}

/// The message ids of the segment covering `[base, end]`, in offset order.
struct DecodedSegment {
    base: i64,
    end: i64,
    ids: Vec<Uuid>,
}

impl DecodedSegment {
    fn covers(&self, off: i64) -> bool {
        self.base <= off && off <= self.end
    }

    fn id_at(&self, off: i64) -> Uuid {
        usize::try_from(off - self.base)
            .ok()
            .and_then(|i| self.ids.get(i).copied())
            .unwrap_or(ZERO_UUID)
    }
}

impl OriginalIds {
    /// The id stored at `off` of partition `pid`; the nil UUID when the segment is gone.
    pub(crate) async fn resolve(
        &mut self,
        db: &impl deadpool_postgres::GenericClient,
        pid: i64,
        off: i64,
    ) -> Result<Uuid> {
        let cached = self
            .segments
            .iter()
            .find(|((p, _), seg)| *p == pid && seg.covers(off));
        if let Some((_, seg)) = cached {
            return Ok(seg.id_at(off));
        }
        let Some(stored) = segment_at(db, pid, off).await? else {
            return Ok(ZERO_UUID);
        };
        let seg = DecodedSegment {
            base: stored.base,
            end: stored.end,
            ids: message_ids(&stored.blob, stored.base, stored.end)?,
        };
        let id = seg.id_at(off);
        self.segments.insert((pid, stored.base), seg);
        Ok(id)
    }
}

/// The message ids of a stored segment covering `[base, end]`, in offset order.
fn message_ids(blob: &[u8], base: i64, end: i64) -> Result<Vec<Uuid>> {
    let corrupt =
        |what: String| Error::internal(format!("segment at base {base} is corrupt: {what}"));
    let raw = queen_proto::segment::decompress(blob, queen_proto::segment::MAX_SEGMENT_BYTES)
        .map_err(|e| corrupt(e.to_string()))?;
    let count =
        usize::try_from(end - base + 1).map_err(|_| corrupt(format!("end {end} below base")))?;
    let frames = decode_exact(&raw, count).map_err(|e| corrupt(e.to_string()))?;
    Ok(frames.iter().map(Frame::message_uuid).collect())
}
