//! The binary push body `QPB1` (docs/wire.md §6.1–6.3) and the binary transaction body `QTB1`
//! (docs/wire.md §10.4): the types both decode into, their errors, the codecs in
//! [`decode`](self::decode) and [`encode`](self::encode), and what a body announces it
//! inflates to ([`announced_inflation`]).
//!
//! ```text
//! QPB1: "QPB1" | u8 flags | [u32 raw_len, flag 1] | body (one zstd frame with flag 1)
//!   plain body (no flag 8):  u32 groups | per group: u16 queue | u16 partition | u32 n
//!                            | n × ([u16 transactionId, flag 4] | u32 len + JSON payload)
//!   flag 8 body:             u32 groups | per group: u16 queue | u16 partition | u32 n
//!                            | u32 z_len | z (one zstd frame of n stored frames, flags 0)
//! QTB1: "QTB1" | u8 flags | u32 head_len | head JSON | u32 groups | groups as with flag 8
//! ```

use std::fmt;

use bytes::Bytes;
use thiserror::Error;

use crate::frame::FrameError;
use crate::segment::SegmentError;

mod announce;
mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use announce::announced_inflation;
pub use decode::{parse_push, parse_txn};
pub use encode::{
    encode_push_plain, encode_push_precompressed, encode_txn, Batch, BatchItem, EncodeError,
};

/// Magic of the binary push body.
pub const PUSH_MAGIC: [u8; 4] = *b"QPB1";
/// Magic of the binary transaction body.
pub const TXN_MAGIC: [u8; 4] = *b"QTB1";

/// `QPB1` flag: the body is one zstd frame, preceded by its `u32` raw length.
pub const FLAG_ZSTD: u8 = 1;
/// `QPB1`/`QTB1` flag: answer with counts instead of one result per item.
pub const FLAG_COUNTS: u8 = 2;
/// `QPB1` flag: every plain item carries a transactionId (empty = the broker mints one).
pub const FLAG_TXN: u8 = 4;
/// `QPB1` flag: groups are pre-compressed stored frames.
pub const FLAG_FRAMES: u8 = 8;

/// A decoded `QPB1` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushEnvelope {
    pub flags: u8,
    pub groups: Vec<PushGroup>,
}

impl PushEnvelope {
    /// Whether the client asked for the counts-only answer (flag 2).
    pub fn counts_only(&self) -> bool {
        self.flags & FLAG_COUNTS != 0
    }
}

/// A decoded `QTB1` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnEnvelope {
    pub flags: u8,
    /// The JSON transaction body without its pushes, verbatim (possibly empty); not validated
    /// here.
    pub head: Bytes,
    /// Always [`GroupBody::Precompressed`].
    pub groups: Vec<PushGroup>,
}

impl TxnEnvelope {
    /// Whether the client asked for the counted answer (flag 2).
    pub fn counts_only(&self) -> bool {
        self.flags & FLAG_COUNTS != 0
    }
}

/// Consecutive items for one (queue, partition), in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushGroup {
    /// Non-empty.
    pub queue: String,
    /// Possibly empty; the broker decides what an empty partition name means.
    pub partition: String,
    pub body: GroupBody,
}

impl PushGroup {
    /// Number of messages in the group.
    pub fn len(&self) -> usize {
        match &self.body {
            GroupBody::Items(items) => items.len(),
            GroupBody::Precompressed { n, .. } => *n as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A group's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBody {
    /// Plain items (no flag 8).
    Items(Vec<PlainItem>),
    /// Pre-compressed stored frames (flag 8, and every `QTB1` group). `frames_raw` holds exactly
    /// `n` validated frames: decode them with [`crate::frame::decode_all`].
    Precompressed {
        n: u32,
        /// The client's zstd frame, byte for byte: one zstd frame with its content size.
        z: Bytes,
        /// `z` decompressed.
        frames_raw: Vec<u8>,
    },
}

/// One plain pushed item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainItem {
    /// `None` when the body had no transactionIds (no flag 4) or this one was empty: the
    /// broker mints one.
    pub transaction_id: Option<String>,
    /// One JSON document, validated, sliced from the request body without copying.
    pub payload: Bytes,
}

/// Where in a body a problem is: group and item indexes are 0-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    Header,
    Head,
    Group(u32),
    Item(u32, u32),
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loc::Header => f.write_str("header"),
            Loc::Head => f.write_str("transaction head"),
            Loc::Group(g) => write!(f, "group {g}"),
            Loc::Item(g, i) => write!(f, "group {g} item {i}"),
        }
    }
}

/// Why a `QPB1`/`QTB1` body is rejected; the `Display` text is meant for the 400 answer's
/// `error`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PushError {
    #[error("bad magic")]
    BadMagic,
    #[error("unknown flags {0:#04x}")]
    UnknownFlags(u8),
    #[error("truncated at {0}")]
    Truncated(Loc),
    #[error("{0} trailing bytes after the last group")]
    Trailing(usize),
    #[error("invalid UTF-8 in {what} at {at}")]
    Utf8 { at: Loc, what: &'static str },
    #[error("empty queue name at {0}")]
    EmptyQueue(Loc),
    #[error("payload is not valid JSON at {at}: {reason}")]
    Json { at: Loc, reason: String },
    #[error("raw_len {raw_len} exceeds the limit of {max} bytes")]
    RawLenTooLarge { raw_len: u32, max: usize },
    #[error("zstd body: {0}")]
    Body(SegmentError),
    #[error("group {group}: {source}")]
    GroupZstd { group: u32, source: SegmentError },
    #[error("group {group}: {source}")]
    GroupFrames { group: u32, source: FrameError },
    #[error("group {group} frame {frame}: flags byte {flags:#04x}, client frames must use 0")]
    FrameFlags { group: u32, frame: usize, flags: u8 },
    #[error("group {group} frame {frame}: empty transactionId")]
    EmptyTxn { group: u32, frame: usize },
    #[error("group {group} frame {frame}: payload is not valid JSON: {reason}")]
    FrameJson {
        group: u32,
        frame: usize,
        reason: String,
    },
}

impl PushError {
    /// Whether the body was refused for announcing more decompressed bytes than allowed
    /// (checked before anything is inflated).
    pub fn exceeds_limit(&self) -> bool {
        matches!(
            self,
            PushError::RawLenTooLarge { .. }
                | PushError::Body(SegmentError::TooLarge { .. })
                | PushError::GroupZstd {
                    source: SegmentError::TooLarge { .. },
                    ..
                }
        )
    }
}
