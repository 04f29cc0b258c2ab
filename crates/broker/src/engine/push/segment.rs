//! Builds one stored segment from messages: the frames of docs/engine.md §3.1 packed back to back
//! and compressed as ONE zstd frame, plus the parallel hash blob for `queen.log_txns`. Every
//! writer of segments (JSON push fusion, binary push, the transaction route) goes through
//! [`build_segment`], so the stored layout has exactly one producer.

use bytes::Bytes;
use queen_proto::frame::{Frame, FrameError};
use queen_proto::hash::{txn_hash, HASH_LEN};
use queen_proto::segment;

/// Segments whose frames exceed this many bytes are built (compressed) on the blocking pool
/// rather than on an async worker.
pub const INLINE_BUILD_BYTES: usize = 256 * 1024;

/// A segment ready for `queen.log_push_one_v1` / `queen.log_push_multi_v1`:
/// `p_msg_count = msg_count`, `p_blob = blob`, `p_hashes = hashes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltSegment {
    pub msg_count: i32,
    /// One zstd frame (content size in its header) of the encoded frames, in input order;
    /// shared, not copied, with the segment cache once committed.
    pub blob: Bytes,
    /// `16 × msg_count` bytes: `xxh3_128(transactionId)` big-endian, in frame order, so the
    /// hash at index k belongs to offset `base_offset + k`.
    pub hashes: Vec<u8>,
    /// The encoded frames before compression: what the blob decompresses to, kept for the
    /// segment cache (accel/segment_cache.rs) once the segment is committed.
    pub frames: Bytes,
}

/// Why a set of messages cannot become a segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("a segment needs at least one message")]
    Empty,
    #[error("a segment holds at most {} messages", i32::MAX)]
    TooMany,
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Packs `frames` into one segment compressed at zstd `level` (the configured
/// `QUEEN_V2_ZSTD_LEVEL`).
///
/// Each frame's `flags` keeps only the encryption bit; the trace and producerSub bits follow
/// `trace_id` / `producer_sub`. Callers are expected to have checked the 65 535-byte limits
/// (the HTTP layer answers 400); a longer transactionId still fails here rather than being
/// truncated. CPU-bound: run large segments off the async workers.
pub fn build_segment(frames: &[Frame<'_>], level: i32) -> Result<BuiltSegment, BuildError> {
    if frames.is_empty() {
        return Err(BuildError::Empty);
    }
    let msg_count = i32::try_from(frames.len()).map_err(|_| BuildError::TooMany)?;
    let mut raw = Vec::with_capacity(frames.iter().map(Frame::encoded_len).sum());
    let mut hashes = Vec::with_capacity(frames.len() * HASH_LEN);
    for frame in frames {
        frame.encode_into(&mut raw)?;
        hashes.extend_from_slice(&txn_hash(frame.transaction_id));
    }
    Ok(BuiltSegment {
        msg_count,
        blob: exact(segment::compress(&raw, level)),
        hashes,
        frames: exact(raw),
    })
}

/// `v` as `Bytes` holding no spare capacity (a compressed blob is allocated at zstd's bound),
/// so what the segment cache keeps is what its budget counts.
fn exact(mut v: Vec<u8>) -> Bytes {
    v.shrink_to_fit();
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use queen_proto::frame::{decode_exact, TRACE};

    fn frame<'a>(id: u8, txn: &'a str, payload: &'a [u8], trace: Option<[u8; 16]>) -> Frame<'a> {
        Frame {
            flags: 0,
            message_id: [id; 16],
            trace_id: trace,
            transaction_id: txn,
            producer_sub: None,
            payload,
        }
    }

    #[test]
    fn round_trips_frames_and_hashes_in_order() {
        let frames = [
            frame(1, "t-1", br#"{"a":1}"#, None),
            frame(2, "t-2", b"null", Some([9; 16])),
            frame(3, "", b"{}", None),
        ];
        let seg = build_segment(&frames, 3).expect("build");
        assert_eq!(seg.msg_count, 3);
        assert_eq!(seg.hashes.len(), 48);
        assert_eq!(&seg.hashes[16..32], &txn_hash("t-2"));
        let raw = segment::decompress(&seg.blob, seg.frames.len()).expect("one zstd frame");
        assert_eq!(raw, seg.frames);
        let back = decode_exact(&raw, 3).expect("decode");
        assert_eq!(back[0].payload, br#"{"a":1}"#);
        assert_eq!(back[1].flags, TRACE);
        assert_eq!(back[1].trace_id, Some([9; 16]));
        assert_eq!(back[2].message_id, [3; 16]);
        assert_eq!(back[2].transaction_id, "");
    }

    #[test]
    fn refuses_empty_and_oversized_fields() {
        assert_eq!(build_segment(&[], 3), Err(BuildError::Empty));
        let long = "x".repeat(65_536);
        let err = build_segment(&[frame(1, &long, b"1", None)], 3).expect_err("too long");
        assert!(
            matches!(err, BuildError::Frame(FrameError::FieldTooLong { .. })),
            "{err}"
        );
    }
}
