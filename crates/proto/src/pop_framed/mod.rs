//! The framed pop answer `QPF1` (docs/wire.md §7.7): the broker ships stored segment blobs as
//! records and the client trims them to the claim's `start..=end`. Little-endian:
//!
//! ```text
//! header:     "QPF1" | u8 version (0, or 1: u32 len + JSON object of the answer's own keys)
//! pop:        u16 queue | u16 leaseId | u16 consumerGroup | u32 claim_count
//! per claim:  u64 partitionId | u16 partition | u64 start | u64 end (inclusive)
//!             | u32 deliveryAttempt | u32 record_count
//! per record: u64 base_offset | i64 created_at_us | u32 frame_count | u8 codec (0 raw, 1 zstd)
//!             | u32 len | bytes
//! ```
//!
//! [`FramedPop::encode`] builds an answer; [`decode`] reads one back into the message list the
//! official Python decoder (queen-mq 2.6.0 `decode_pop_frames`) produces.

use bytes::Bytes;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::frame::FrameError;
use crate::segment;

mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use crate::writer::EncodeError;
pub use decode::{decode, is_framed, PopAnswer, PoppedMessage, MAX_RECORD_BYTES};

/// The magic every framed pop answer starts with.
pub const MAGIC: [u8; 4] = *b"QPF1";

/// A framed pop answer to encode.
#[derive(Debug, Clone, PartialEq)]
pub struct FramedPop {
    pub queue: String,
    /// `""` for an autoAck pop.
    pub lease_id: String,
    pub group: String,
    /// The answer's own keys (autopilot, conflation, …): `Some` selects version 1.
    pub extra: Option<Map<String, Value>>,
    pub claims: Vec<Claim>,
}

/// One claimed partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub partition_id: u64,
    pub partition: String,
    /// First delivered offset.
    pub start: u64,
    /// Last delivered offset, inclusive.
    pub end: u64,
    pub delivery_attempt: u32,
    pub records: Vec<Record>,
}

/// One stored segment (or part of one), shipped as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset of the first frame in `bytes`.
    pub base: u64,
    /// The segment's `created_at`, microseconds since the Unix epoch.
    pub created_us: i64,
    /// The exact number of frames in `bytes` (decompressed).
    pub frame_count: u32,
    pub codec: Codec,
    /// Raw frames (`Codec::Raw`) or exactly one zstd frame of them (`Codec::Zstd`).
    pub bytes: Bytes,
}

/// How a record's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Raw = 0,
    Zstd = 1,
}

impl Codec {
    /// The codec of a stored segment blob: zstd when it starts with the zstd magic.
    pub fn of(blob: &[u8]) -> Codec {
        if segment::is_zstd(blob) {
            Codec::Zstd
        } else {
            Codec::Raw
        }
    }
}

/// Why bytes are not a whole framed pop answer. The texts follow the official decoder's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("framed pop answer: not a framed pop answer")]
    NotFramed,
    #[error("framed pop answer: truncated")]
    Truncated,
    #[error("framed pop answer: unknown version {0}")]
    UnknownVersion(u8),
    #[error("framed pop answer: its own keys: {0}")]
    OwnKeys(String),
    #[error("framed pop answer: {0} is not valid UTF-8")]
    Utf8(&'static str),
    #[error("framed pop answer: unknown codec {0}")]
    UnknownCodec(u8),
    #[error("framed pop answer: zstd: {0}")]
    Zstd(String),
    #[error("framed pop answer: a record is shorter than its {0} frames")]
    RecordShort(u32),
    #[error("framed pop answer: a frame is malformed: {0}")]
    Malformed(FrameError),
    #[error("framed pop answer: a frame is encrypted")]
    Encrypted,
    #[error("framed pop answer: payload at offset {offset} is not valid JSON: {reason}")]
    Data { offset: u64, reason: String },
}
