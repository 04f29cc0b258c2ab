//! Positional resolution of a leased batch whose hash-sidecar rows were purged
//! (docs/engine.md §6.2, "purged span"). A group far behind the purge horizon is delivered
//! messages whose `log_txns` rows are gone, so their transactionIds can no longer be turned
//! into offsets by hash. Under a lease the batch's offsets are known, and the stored segments
//! still hold every frame: this module reads the frames of the purged part, hashes their
//! transactionIds (SQL never hashes) and hands the (offset, hash) pairs to
//! `log_ack_by_hash_v1`, which resolves the acks against them exactly as against sidecar rows.
//!
//! The decision which offsets need it is SQL's (the verdict's `purgedSpan`, taken under the
//! cursor row's lock); this module only answers the question. A segment retained away, or
//! one that does not decode, leaves its offsets out: their acks stay unresolved and the frames
//! redeliver, as before.

use deadpool_postgres::GenericClient;
use queen_proto::frame::decode_exact;
use queen_proto::hash::txn_hash;
use queen_proto::segment;

use crate::error::{Error, Result};
use crate::store::ack::{span_segments, PurgedSpan, Span, SpanSegment};

/// The (offset, hash) pairs of `purged` in partition `partition_id`, read from its stored
/// segments and decoded off the async workers.
pub async fn read(db: &impl GenericClient, partition_id: i64, purged: PurgedSpan) -> Result<Span> {
    let segments = span_segments(db, partition_id, purged).await?;
    tokio::task::spawn_blocking(move || resolve(&segments, purged, partition_id))
        .await
        .map_err(|e| Error::internal(format!("span decode task: {e}")))
}

/// The pairs of `purged` the segments hold; a segment that does not decode is left out
/// (logged), so its offsets stay unresolved.
fn resolve(segments: &[SpanSegment], purged: PurgedSpan, partition_id: i64) -> Span {
    let mut span = Span::default();
    for seg in segments {
        match frames_of(seg, purged) {
            Ok(pairs) => {
                for (off, hash) in pairs {
                    span.offsets.push(off);
                    span.hashes.push(hash);
                }
            }
            Err(error) => tracing::warn!(
                partition_id, base = seg.base, %error,
                "a segment of a purged leased batch does not decode; its acks stay unresolved"
            ),
        }
    }
    span
}

/// The (offset, hash) pairs of one segment that lie in `purged`.
fn frames_of(
    seg: &SpanSegment,
    purged: PurgedSpan,
) -> std::result::Result<Vec<(i64, [u8; 16])>, String> {
    let count = usize::try_from(seg.end - seg.base + 1).map_err(|_| "empty range".to_string())?;
    let raw =
        segment::decompress(&seg.blob, segment::MAX_SEGMENT_BYTES).map_err(|e| e.to_string())?;
    let frames = decode_exact(&raw, count).map_err(|e| e.to_string())?;
    Ok(frames
        .iter()
        .zip(seg.base..)
        .filter(|(_, off)| (purged.from..=purged.to).contains(off))
        .map(|(f, off)| (off, txn_hash(f.transaction_id)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use queen_proto::frame::Frame;

    fn segment_of(base: i64, txns: &[&str]) -> SpanSegment {
        let mut raw = Vec::new();
        for t in txns {
            let frame = Frame {
                flags: 0,
                message_id: [0; 16],
                trace_id: None,
                transaction_id: t,
                producer_sub: None,
                payload: b"{}",
            };
            frame.encode_into(&mut raw).expect("encode");
        }
        SpanSegment {
            base,
            end: base + txns.len() as i64 - 1,
            blob: segment::compress(&raw, 1),
        }
    }

    #[test]
    fn only_the_purged_offsets_are_resolved_in_order() {
        let segs = [
            segment_of(10, &["a", "b", "c"]),
            segment_of(13, &["d", "e"]),
        ];
        let span = resolve(&segs, PurgedSpan { from: 11, to: 13 }, 1);
        assert_eq!(span.offsets, vec![11, 12, 13]);
        assert_eq!(
            span.hashes,
            vec![txn_hash("b"), txn_hash("c"), txn_hash("d")]
        );
    }

    #[test]
    fn a_segment_that_does_not_decode_leaves_its_offsets_out() {
        let mut broken = segment_of(13, &["d", "e"]);
        broken.blob = vec![1, 2, 3];
        let segs = [segment_of(10, &["a", "b", "c"]), broken];
        let span = resolve(&segs, PurgedSpan { from: 10, to: 14 }, 1);
        assert_eq!(span.offsets, vec![10, 11, 12]);
    }
}
