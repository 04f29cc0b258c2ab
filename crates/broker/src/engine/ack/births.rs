//! What a leasing pop's answer delivered, for the ack registry (docs/engine.md §6.4): per
//! claimed partition whose claimed frames all decode (what the renderers could deliver), its
//! batch end, frame count and distinct hashes, stored under the pop's lease before the answer
//! leaves. The renderer reports each segment it decodes ([`Births::seen`]), so an answer is
//! decompressed once; [`Births::finish`] decodes only what the renderer did not (a framed
//! answer ships most blobs without opening them).

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::time::{Duration, Instant};

use chrono::Utc;
use queen_proto::frame::{decode_exact, Frame};
use queen_proto::hash::txn_hash;
use queen_proto::segment;
use queen_proto::tenant::tenant_of;

use super::cover::registry_group;
use crate::accel::ack_registry::{AckRegistry, Delivered, TxnHash};
use crate::store::pop::{ClaimedPartition, ClaimedSegment, PopAnswer};

/// One claimed segment's part of a birth: the hashes of its claimed frames; `None` when they
/// could not be decoded.
type SegmentBirth = Option<Vec<TxnHash>>;

/// The births of one leasing pop's answer, gathered while it is rendered.
pub struct Births<'a> {
    registry: &'a AckRegistry,
    group: &'a str,
    lease_id: &'a str,
    /// Per (partition id, segment base) the renderer decoded.
    seen: HashMap<(i64, i64), SegmentBirth>,
}

impl<'a> Births<'a> {
    pub fn new(registry: &'a AckRegistry, group: &'a str, lease_id: &'a str) -> Self {
        Births {
            registry,
            group,
            lease_id,
            seen: HashMap::new(),
        }
    }

    /// The renderer decoded `seg` of `part`: its `claimed` frames, or `None` when it could not.
    pub fn seen(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        claimed: Option<&[Frame<'_>]>,
    ) {
        if part.lease_expires_at.is_none() || seg.take <= 0 {
            return;
        }
        let hashes =
            claimed.map(|frames| frames.iter().map(|f| txn_hash(f.transaction_id)).collect());
        self.seen.insert((part.partition_id, seg.base), hashes);
    }

    /// Stores every leased partition of `answer` whose claimed frames all decode, decoding
    /// the segments the renderer did not report.
    pub fn finish(mut self, answer: &PopAnswer, max_segment_bytes: usize) {
        let mut blobs = answer.blobs.as_slice();
        let now_us = Utc::now().timestamp_micros();
        for part in &answer.partitions {
            let (own, rest) = blobs.split_at(part.segments.len().min(blobs.len()));
            blobs = rest;
            let Some(until_us) = part.lease_expires_at else {
                continue;
            };
            let Some((hashes, batch_end, frames)) = self.delivered(part, own, max_segment_bytes)
            else {
                continue;
            };
            let left = Duration::from_micros(until_us.saturating_sub(now_us).max(0).unsigned_abs());
            self.registry.born(Delivered {
                partition_id: part.partition_id,
                group: registry_group(tenant_of(&part.queue), self.group),
                worker: self.lease_id.to_string(),
                batch_end,
                frames,
                hashes,
                lease_until: Instant::now() + left,
            });
        }
    }

    /// One claimed partition's hash set, batch end and frame count; `None` when a claimed
    /// frame cannot be decoded (the renderers leave those out, so the client cannot ack them
    /// all).
    fn delivered(
        &mut self,
        part: &ClaimedPartition,
        blobs: &[Vec<u8>],
        max_segment_bytes: usize,
    ) -> Option<(HashSet<TxnHash>, i64, i32)> {
        let mut hashes = HashSet::new();
        let (mut frames, mut batch_end) = (0, None);
        for (seg, blob) in part.segments.iter().zip(blobs).filter(|(s, _)| s.take > 0) {
            let claimed = match self.seen.remove(&(part.partition_id, seg.base)) {
                Some(seen) => seen?,
                None => decode_claimed(seg, blob, max_segment_bytes)?,
            };
            hashes.extend(claimed);
            frames += seg.take;
            batch_end = Some(seg.base + i64::from(seg.start_idx) + i64::from(seg.take) - 1);
        }
        Some((hashes, batch_end?, frames))
    }
}

/// The hashes of `seg`'s claimed frames, decoded from its blob.
fn decode_claimed(seg: &ClaimedSegment, blob: &[u8], max_segment_bytes: usize) -> SegmentBirth {
    let raw = segment::decompress(blob, max_segment_bytes).ok()?;
    let decoded = decode_exact(&raw, usize::try_from(seg.msg_count).ok()?).ok()?;
    let claimed = decoded.get(seg.claimed_range()?)?;
    Some(claimed.iter().map(|f| txn_hash(f.transaction_id)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(txn: &str) -> Frame<'_> {
        Frame {
            flags: 0,
            message_id: *uuid::Uuid::now_v7().as_bytes(),
            trace_id: None,
            transaction_id: txn,
            producer_sub: None,
            payload: b"1",
        }
    }

    fn stored(txns: &[&str]) -> Vec<u8> {
        let mut raw = Vec::new();
        for t in txns {
            frame(t).encode_into(&mut raw).expect("encode");
        }
        segment::compress(&raw, 3)
    }

    /// One leased partition (id `pid`) of two-frame segments at `bases`, with their blobs.
    fn answer(pid: i64, bases: &[i64], blobs: Vec<Vec<u8>>) -> PopAnswer {
        PopAnswer {
            partitions: vec![ClaimedPartition {
                partition: "p".into(),
                partition_id: pid,
                queue: "q".into(),
                delivery_attempt: 1,
                lease_expires_at: Some(Utc::now().timestamp_micros() + 60_000_000),
                segments: bases
                    .iter()
                    .map(|&base| ClaimedSegment {
                        base,
                        start_idx: 0,
                        take: 2,
                        msg_count: 2,
                        created_at: 0,
                    })
                    .collect(),
            }],
            min_pop_wait_ms: None,
            blobs,
        }
    }

    fn acked(txns: &[&str]) -> HashSet<TxnHash> {
        txns.iter().map(|t| txn_hash(t)).collect()
    }

    #[test]
    fn what_the_renderer_decoded_is_not_decoded_again() {
        let registry = AckRegistry::new(true, 1 << 20);
        // The first blob is not a segment at all: decoding it would leave the partition out.
        let a = answer(
            7,
            &[0, 2],
            vec![b"not a segment".to_vec(), stored(&["c", "d"])],
        );
        let mut births = Births::new(&registry, "g", "L");
        let part = &a.partitions[0];
        births.seen(part, &part.segments[0], Some(&[frame("a"), frame("b")]));
        births.finish(&a, 1 << 20);
        let cover = registry
            .take(7, "g", "L", &acked(&["a", "b", "c", "d"]))
            .expect("the reported segment and the decoded one make the birth");
        assert_eq!((cover.batch_end, cover.frames), (3, 4));
    }

    #[test]
    fn a_segment_the_renderer_could_not_decode_leaves_its_partition_out() {
        let registry = AckRegistry::new(true, 1 << 20);
        let a = answer(7, &[0], vec![stored(&["a", "b"])]);
        let mut births = Births::new(&registry, "g", "L");
        births.seen(&a.partitions[0], &a.partitions[0].segments[0], None);
        births.finish(&a, 1 << 20);
        assert!(registry.take(7, "g", "L", &acked(&["a", "b"])).is_none());

        let births = Births::new(&registry, "g", "L");
        births.finish(&a, 1 << 20);
        assert!(
            registry.take(7, "g", "L", &acked(&["a", "b"])).is_some(),
            "unreported, it is decoded from its blob"
        );
    }
}
