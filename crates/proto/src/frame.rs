//! The stored message frame (docs/wire.md §6.5, docs/engine.md §3.1), shared by binary push, segment
//! blobs and framed pop. Little-endian:
//!
//! ```text
//! u32 body_len
//! body: u8 flags | u8[16] message_id | [u8[16] trace_id, flag 1]
//!       | u16 len + transactionId | [u16 len + producerSub, flag 2] | payload (rest of body)
//! ```
//!
//! [`Frame`] is a borrowed view; [`Frames`] walks a buffer of back-to-back frames.

use thiserror::Error;
use uuid::Uuid;

use crate::reader::Reader;

/// Flag: a 16-byte trace id follows the message id.
pub const TRACE: u8 = 1;
/// Flag: a `u16`-length producerSub follows the transactionId.
pub const PRODUCER_SUB: u8 = 2;
/// Flag: the payload is an encryption envelope.
pub const ENCRYPTED: u8 = 4;
const KNOWN_FLAGS: u8 = TRACE | PRODUCER_SUB | ENCRYPTED;

/// The smallest body: flags, message id and an empty transactionId's length.
pub const MIN_BODY_LEN: usize = 19;

/// What is wrong with a frame buffer, or why a frame cannot be encoded. `index` is the
/// frame's 0-based position, `at` the byte offset of its length prefix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("frame {index} at byte {at}: truncated length prefix")]
    TruncatedLength { index: usize, at: usize },
    #[error("frame {index} at byte {at}: body of {len} bytes runs past the end")]
    TruncatedBody { index: usize, at: usize, len: u32 },
    #[error("frame {index} at byte {at}: body length {len} is below the minimum of 19")]
    BodyTooShort { index: usize, at: usize, len: u32 },
    #[error("frame {index} at byte {at}: unknown flag bits {flags:#04x}")]
    UnknownFlags { index: usize, at: usize, flags: u8 },
    #[error("frame {index} at byte {at}: fields run past the end of the body")]
    FieldsOverrun { index: usize, at: usize },
    #[error("frame {index} at byte {at}: {field} is not valid UTF-8")]
    Utf8 {
        index: usize,
        at: usize,
        field: &'static str,
    },
    #[error("expected {expected} frames, found {found}")]
    Missing { expected: usize, found: usize },
    #[error("{0} leftover bytes after the last frame")]
    Leftover(usize),
    #[error("{field} of {len} bytes does not fit a u16 length")]
    FieldTooLong { field: &'static str, len: usize },
    #[error("frame body of {0} bytes does not fit a u32 length")]
    BodyTooLong(usize),
}

/// One frame, borrowing its strings and payload from the buffer it was decoded from (or from
/// the caller, when encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The flags byte. On encode, [`TRACE`] and [`PRODUCER_SUB`] are taken from
    /// `trace_id`/`producer_sub` instead; [`ENCRYPTED`] is kept as given.
    pub flags: u8,
    pub message_id: [u8; 16],
    pub trace_id: Option<[u8; 16]>,
    pub transaction_id: &'a str,
    pub producer_sub: Option<&'a str>,
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The flags byte as encoded: the presence bits follow the optional fields.
    pub fn wire_flags(&self) -> u8 {
        let mut flags = self.flags & ENCRYPTED;
        if self.trace_id.is_some() {
            flags |= TRACE;
        }
        if self.producer_sub.is_some() {
            flags |= PRODUCER_SUB;
        }
        flags
    }

    fn body_len(&self) -> usize {
        MIN_BODY_LEN
            + self.trace_id.map_or(0, |_| 16)
            + self.transaction_id.len()
            + self.producer_sub.map_or(0, |sub| 2 + sub.len())
            + self.payload.len()
    }

    /// Bytes [`Frame::encode_into`] appends: 4 + body.
    pub fn encoded_len(&self) -> usize {
        4 + self.body_len()
    }

    /// Appends this frame to `out`. Fails (appending nothing) when the transactionId or
    /// producerSub exceeds 65 535 bytes or the body exceeds `u32::MAX` bytes.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let txn_len = len16("transactionId", self.transaction_id)?;
        let sub_len = self
            .producer_sub
            .map(|sub| len16("producerSub", sub))
            .transpose()?;
        let body_len = self.body_len();
        let body_len32 = u32::try_from(body_len).map_err(|_| FrameError::BodyTooLong(body_len))?;
        out.reserve(4 + body_len);
        out.extend_from_slice(&body_len32.to_le_bytes());
        out.push(self.wire_flags());
        out.extend_from_slice(&self.message_id);
        if let Some(trace) = &self.trace_id {
            out.extend_from_slice(trace);
        }
        out.extend_from_slice(&txn_len.to_le_bytes());
        out.extend_from_slice(self.transaction_id.as_bytes());
        if let (Some(sub), Some(sub_len)) = (self.producer_sub, sub_len) {
            out.extend_from_slice(&sub_len.to_le_bytes());
            out.extend_from_slice(sub.as_bytes());
        }
        out.extend_from_slice(self.payload);
        Ok(())
    }

    /// The payload as JSON text: the stored bytes, or `null` when they are empty.
    pub fn payload_json(&self) -> &'a [u8] {
        if self.payload.is_empty() {
            b"null"
        } else {
            self.payload
        }
    }

    pub fn message_uuid(&self) -> Uuid {
        Uuid::from_bytes(self.message_id)
    }

    pub fn trace_uuid(&self) -> Option<Uuid> {
        self.trace_id.map(Uuid::from_bytes)
    }

    pub fn is_encrypted(&self) -> bool {
        self.flags & ENCRYPTED != 0
    }
}

fn len16(field: &'static str, text: &str) -> Result<u16, FrameError> {
    u16::try_from(text.len()).map_err(|_| FrameError::FieldTooLong {
        field,
        len: text.len(),
    })
}

/// Iterator over back-to-back frames. Yields one `Err` at the first malformed frame, then
/// ends; after a clean end, [`Frames::position`] equals the buffer length.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    buf: &'a [u8],
    pos: usize,
    index: usize,
    failed: bool,
}

impl<'a> Frames<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Frames {
            buf,
            pos: 0,
            index: 0,
            failed: false,
        }
    }

    /// Byte offset of the next frame.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn parse_next(&mut self) -> Result<Frame<'a>, FrameError> {
        let (index, at) = (self.index, self.pos);
        let rest = self.buf.get(at..).unwrap_or_default();
        let mut r = Reader::new(rest);
        let len = r.u32().ok_or(FrameError::TruncatedLength { index, at })?;
        let body = usize::try_from(len)
            .ok()
            .and_then(|n| r.take(n))
            .ok_or(FrameError::TruncatedBody { index, at, len })?;
        if body.len() < MIN_BODY_LEN {
            return Err(FrameError::BodyTooShort { index, at, len });
        }
        let frame = parse_body(body).map_err(|e| e.at(index, at))?;
        self.pos = at + 4 + body.len();
        self.index += 1;
        Ok(frame)
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let item = self.parse_next();
        self.failed = item.is_err();
        Some(item)
    }
}

/// A body error before its position is known.
enum BodyError {
    UnknownFlags(u8),
    Overrun,
    Utf8(&'static str),
}

impl BodyError {
    fn at(self, index: usize, at: usize) -> FrameError {
        match self {
            BodyError::UnknownFlags(flags) => FrameError::UnknownFlags { index, at, flags },
            BodyError::Overrun => FrameError::FieldsOverrun { index, at },
            BodyError::Utf8(field) => FrameError::Utf8 { index, at, field },
        }
    }
}

fn parse_body(body: &[u8]) -> Result<Frame<'_>, BodyError> {
    let mut r = Reader::new(body);
    let flags = r.u8().ok_or(BodyError::Overrun)?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(BodyError::UnknownFlags(flags));
    }
    let message_id = r.uuid_bytes().ok_or(BodyError::Overrun)?;
    let trace_id = if flags & TRACE != 0 {
        Some(r.uuid_bytes().ok_or(BodyError::Overrun)?)
    } else {
        None
    };
    let txn = r.bytes16().ok_or(BodyError::Overrun)?;
    let transaction_id = std::str::from_utf8(txn).map_err(|_| BodyError::Utf8("transactionId"))?;
    let producer_sub = if flags & PRODUCER_SUB != 0 {
        let sub = r.bytes16().ok_or(BodyError::Overrun)?;
        Some(std::str::from_utf8(sub).map_err(|_| BodyError::Utf8("producerSub"))?)
    } else {
        None
    };
    Ok(Frame {
        flags,
        message_id,
        trace_id,
        transaction_id,
        producer_sub,
        payload: r.rest(),
    })
}

/// Decodes every frame of `buf`; a truncated last frame is an error.
pub fn decode_all(buf: &[u8]) -> Result<Vec<Frame<'_>>, FrameError> {
    Frames::new(buf).collect()
}

/// Decodes exactly `n` frames that fill `buf` completely: fewer frames, or bytes left after
/// the `n`th, are errors.
pub fn decode_exact(buf: &[u8], n: usize) -> Result<Vec<Frame<'_>>, FrameError> {
    let mut frames = Frames::new(buf);
    let mut out = Vec::with_capacity(n.min(buf.len() / (4 + MIN_BODY_LEN)));
    for _ in 0..n {
        match frames.next() {
            Some(frame) => out.push(frame?),
            None => {
                return Err(FrameError::Missing {
                    expected: n,
                    found: out.len(),
                })
            }
        }
    }
    match buf.len().saturating_sub(frames.position()) {
        0 => Ok(out),
        leftover => Err(FrameError::Leftover(leftover)),
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
