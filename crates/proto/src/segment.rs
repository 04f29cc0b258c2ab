//! Segment blobs: the frames of one flush, stored as exactly ONE zstd frame that carries its
//! content size (or, from older writers, raw frames). The official Python framed-pop decoder
//! stops at the first zstd frame, so a blob is never a concatenation of zstd frames.

use std::cell::RefCell;

use thiserror::Error;
use zstd::zstd_safe;

/// The largest decompressed segment any reader of the broker accepts: 1 GiB, PostgreSQL's limit
/// on one `bytea` value, so a stored segment written uncompressed could never be larger. It only
/// bounds what a corrupt header may make a reader allocate (docs/engine.md §3.2).
pub const MAX_SEGMENT_BYTES: usize = 1 << 30;

/// The four bytes every zstd frame starts with.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Why a blob cannot be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SegmentError {
    #[error("not a zstd frame")]
    NotZstd,
    #[error("bad zstd frame header")]
    BadHeader,
    #[error("zstd frame without content size")]
    NoContentSize,
    #[error("zstd content size {size} exceeds the limit of {max} bytes")]
    TooLarge { size: u64, max: usize },
    #[error("zstd frame does not end where the blob does ({extra} extra bytes)")]
    Trailing { extra: usize },
    #[error("zstd frame is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("zstd frame decompressed to {got} bytes, expected {expected}")]
    SizeMismatch { got: usize, expected: usize },
}

/// Whether `blob` starts with the zstd magic number.
pub fn is_zstd(blob: &[u8]) -> bool {
    blob.starts_with(&ZSTD_MAGIC)
}

/// Compresses `frames` into one zstd frame with the content size in its header. `level` is
/// clamped to zstd's range. Should zstd itself fail (it only can on allocation failure), the
/// raw frames are returned: every reader accepts a blob without the zstd magic as raw.
pub fn compress(frames: &[u8], level: i32) -> Vec<u8> {
    let range = zstd::compression_level_range();
    let level = level.clamp(*range.start(), *range.end());
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(frames.len()));
    let done = if frames.len() <= REUSED_CONTEXT_MAX_BYTES {
        REUSED_CONTEXT.with(|cctx| cctx.borrow_mut().compress(&mut out, frames, level))
    } else {
        zstd_safe::compress(&mut out, frames, level)
    };
    match done {
        Ok(_) => out,
        Err(_) => frames.to_vec(),
    }
}

/// Inputs up to this size are compressed with the thread's [`REUSED_CONTEXT`]; larger ones
/// with a context of their own, so no thread keeps a workspace sized for a large segment. It
/// covers a batch of 100 one-KiB messages (~140 KiB of frames), whose fresh ~1 MiB workspace
/// was mapped, zeroed and unmapped per segment above the broker's 256 KiB mmap threshold.
const REUSED_CONTEXT_MAX_BYTES: usize = 256 * 1024;

thread_local! {
    /// A fresh context per call mapped and zeroed a new workspace every time: for segments of
    /// one message that cost more than the compression (page faults led the broker's profile
    /// of pushes spread over many partitions). The context keeps no data between calls.
    static REUSED_CONTEXT: RefCell<zstd_safe::CCtx<'static>> =
        RefCell::new(zstd_safe::CCtx::create());
}

thread_local! {
    /// zstd's one-shot decompress creates and initialises a context per call: half of its
    /// time for a 100-message segment in the e2e profile. A decompression starts by resetting
    /// the context, so nothing leaks from one blob into the next.
    static REUSED_DCONTEXT: RefCell<zstd_safe::DCtx<'static>> =
        RefCell::new(zstd_safe::DCtx::create());
}

/// The frames of a stored blob: a zstd frame (content size required, at most `max` bytes,
/// nothing after the frame) is decompressed; a blob without the zstd magic is raw frames and
/// returned as is.
pub fn decompress(blob: &[u8], max: usize) -> Result<Vec<u8>, SegmentError> {
    if !is_zstd(blob) {
        return Ok(blob.to_vec());
    }
    let size = match zstd_safe::get_frame_content_size(blob) {
        Ok(Some(size)) => size,
        Ok(None) => return Err(SegmentError::NoContentSize),
        Err(_) => return Err(SegmentError::BadHeader),
    };
    let size = usize::try_from(size)
        .ok()
        .filter(|&n| n <= max)
        .ok_or(SegmentError::TooLarge { size, max })?;
    decompress_sized(blob, size)
}

/// Decompresses a blob that must be exactly one zstd frame of exactly `expected` bytes (the
/// frame may omit its content size). Used where the size is announced elsewhere, such as the
/// `raw_len` of a compressed `QPB1` body.
pub fn decompress_sized(blob: &[u8], expected: usize) -> Result<Vec<u8>, SegmentError> {
    if !is_zstd(blob) {
        return Err(SegmentError::NotZstd);
    }
    let frame_len = zstd_safe::find_frame_compressed_size(blob)
        .map_err(|code| SegmentError::Corrupt(zstd_safe::get_error_name(code)))?;
    if frame_len != blob.len() {
        return Err(SegmentError::Trailing {
            extra: blob.len().saturating_sub(frame_len),
        });
    }
    let mut out = Vec::with_capacity(expected);
    let got = REUSED_DCONTEXT
        .with(|dctx| dctx.borrow_mut().decompress(&mut out, blob))
        .map_err(|code| SegmentError::Corrupt(zstd_safe::get_error_name(code)))?;
    if got != expected {
        return Err(SegmentError::SizeMismatch { got, expected });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("frame {i} ").into_bytes())
            .collect()
    }

    #[test]
    fn one_frame_with_content_size() {
        for data in [Vec::new(), b"x".to_vec(), frames(1000)] {
            let blob = compress(&data, 3);
            assert!(is_zstd(&blob));
            assert_eq!(
                zstd_safe::get_frame_content_size(&blob).ok(),
                Some(Some(data.len() as u64))
            );
            assert_eq!(zstd_safe::find_frame_compressed_size(&blob), Ok(blob.len()));
            assert_eq!(decompress(&blob, data.len()), Ok(data.clone()));
            assert_eq!(decompress_sized(&blob, data.len()), Ok(data));
        }
    }

    #[test]
    fn the_reused_context_carries_nothing_between_calls() {
        let inputs = [
            frames(5000),
            b"x".to_vec(),
            frames(20),
            frames(30_000),
            Vec::new(),
        ];
        for level in [1, 19, 3, -5] {
            for data in &inputs {
                let mut fresh = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
                zstd_safe::compress(&mut fresh, data, level).expect("one-shot");
                assert_eq!(
                    compress(data, level),
                    fresh,
                    "level {level}, {} bytes",
                    data.len()
                );
            }
        }
    }

    #[test]
    fn levels_are_clamped() {
        let data = frames(50);
        for level in [i32::MIN, -5, 0, 1, 22, i32::MAX] {
            assert_eq!(
                decompress(&compress(&data, level), 1 << 20),
                Ok(data.clone())
            );
        }
    }

    #[test]
    fn raw_blobs_pass_through() {
        let raw = vec![5, 0, 0, 0, 1, 2, 3, 4, 5];
        assert!(!is_zstd(&raw));
        assert_eq!(decompress(&raw, 0), Ok(raw.clone()));
        assert_eq!(decompress(&[], 0), Ok(vec![]));
        assert_eq!(decompress_sized(&raw, 9), Err(SegmentError::NotZstd));
    }

    #[test]
    fn bounds_the_content_size() {
        let data = frames(100);
        let blob = compress(&data, 1);
        assert_eq!(
            decompress(&blob, data.len() - 1),
            Err(SegmentError::TooLarge {
                size: data.len() as u64,
                max: data.len() - 1
            })
        );
    }

    #[test]
    fn requires_the_content_size() {
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 1).expect("encoder");
        std::io::Write::write_all(&mut encoder, b"streamed").expect("write");
        let blob = encoder.finish().expect("finish");
        assert_eq!(
            zstd_safe::get_frame_content_size(&blob).ok(),
            Some(None),
            "a streamed frame omits the size"
        );
        assert_eq!(decompress(&blob, 100), Err(SegmentError::NoContentSize));
        assert_eq!(decompress_sized(&blob, 8), Ok(b"streamed".to_vec()));
        assert!(decompress_sized(&blob, 7).is_err());
    }

    #[test]
    fn rejects_two_frames_and_trailing_bytes() {
        let mut two = compress(b"one", 1);
        two.extend_from_slice(&compress(b"two", 1));
        assert!(matches!(
            decompress(&two, 100),
            Err(SegmentError::Trailing { .. })
        ));
        let mut tail = compress(b"one", 1);
        tail.push(0);
        assert_eq!(
            decompress(&tail, 100),
            Err(SegmentError::Trailing { extra: 1 })
        );
        assert_eq!(
            decompress_sized(&compress(b"one", 1), 4),
            Err(SegmentError::SizeMismatch {
                got: 3,
                expected: 4
            })
        );
    }

    #[test]
    fn truncated_and_corrupt_blobs_never_panic() {
        let data = frames(200);
        let blob = compress(&data, 3);
        for end in 0..blob.len() {
            let result = decompress(&blob[..end], 1 << 20);
            if end >= 4 {
                assert!(result.is_err(), "truncated at {end} accepted");
            }
        }
        for i in 4..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 0x55;
            if let Ok(out) = decompress(&bad, 1 << 20) {
                assert!(out.len() <= 1 << 20);
            }
            // The thread's reused context recovers from the failure before the next blob.
            assert_eq!(decompress(&blob, 1 << 20).as_deref(), Ok(&data[..]));
        }
    }
}
