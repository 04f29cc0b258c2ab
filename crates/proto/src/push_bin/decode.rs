//! Parsing `QPB1` and `QTB1` bodies. Everything the broker needs checked is checked here:
//! magic, flags, lengths, trailing bytes, UTF-8 names, non-empty queue names, JSON payloads,
//! and for pre-compressed groups the zstd frame (content size required and bounded), the
//! exact frame count and every frame. Payloads and client blobs are sliced, not copied.

use bytes::Bytes;
use serde::de::IgnoredAny;

use super::{
    GroupBody, Loc, PlainItem, PushEnvelope, PushError, PushGroup, TxnEnvelope, FLAG_COUNTS,
    FLAG_FRAMES, FLAG_TXN, FLAG_ZSTD, PUSH_MAGIC, TXN_MAGIC,
};
use crate::frame;
use crate::reader::Reader;
use crate::segment::{self, SegmentError};

const PUSH_FLAGS: u8 = FLAG_ZSTD | FLAG_COUNTS | FLAG_TXN | FLAG_FRAMES;

/// Parses a `QPB1` body. `max_decompressed` bounds the total bytes the body may decompress to
/// (the flag-1 body and every pre-compressed group together).
pub fn parse_push(body: Bytes, max_decompressed: usize) -> Result<PushEnvelope, PushError> {
    let mut r = Reader::new(&body);
    if r.take(4) != Some(&PUSH_MAGIC[..]) {
        return Err(PushError::BadMagic);
    }
    let flags = r.u8().ok_or(PushError::Truncated(Loc::Header))?;
    if flags & !PUSH_FLAGS != 0 {
        return Err(PushError::UnknownFlags(flags));
    }
    let mut budget = max_decompressed;
    let shape = Shape {
        frames: flags & FLAG_FRAMES != 0,
        with_txn: flags & FLAG_TXN != 0,
    };
    let groups = if flags & FLAG_ZSTD != 0 {
        let raw_len = r.u32().ok_or(PushError::Truncated(Loc::Header))?;
        let expected = usize::try_from(raw_len)
            .ok()
            .filter(|&n| n <= budget)
            .ok_or(PushError::RawLenTooLarge {
                raw_len,
                max: budget,
            })?;
        let raw = segment::decompress_sized(r.rest(), expected).map_err(PushError::Body)?;
        budget = budget.saturating_sub(expected);
        let raw = Bytes::from(raw);
        parse_groups(&raw, Reader::new(&raw), shape, &mut budget)?
    } else {
        parse_groups(&body, r, shape, &mut budget)?
    };
    Ok(PushEnvelope { flags, groups })
}

/// Parses a `QTB1` body; `max_decompressed` bounds the total decompressed bytes of its groups.
pub fn parse_txn(body: Bytes, max_decompressed: usize) -> Result<TxnEnvelope, PushError> {
    let mut r = Reader::new(&body);
    if r.take(4) != Some(&TXN_MAGIC[..]) {
        return Err(PushError::BadMagic);
    }
    let flags = r.u8().ok_or(PushError::Truncated(Loc::Header))?;
    if flags & !FLAG_COUNTS != 0 {
        return Err(PushError::UnknownFlags(flags));
    }
    let head = r.bytes32().ok_or(PushError::Truncated(Loc::Head))?;
    let head = body.slice_ref(head);
    let shape = Shape {
        frames: true,
        with_txn: false,
    };
    let mut budget = max_decompressed;
    let groups = parse_groups(&body, r, shape, &mut budget)?;
    Ok(TxnEnvelope {
        flags,
        head,
        groups,
    })
}

#[derive(Clone, Copy)]
struct Shape {
    /// Groups are pre-compressed frames (flag 8).
    frames: bool,
    /// Plain items carry a transactionId (flag 4).
    with_txn: bool,
}

/// `u32 group_count` and the groups; `r` reads from `base`, from which payloads are sliced.
fn parse_groups(
    base: &Bytes,
    mut r: Reader<'_>,
    shape: Shape,
    budget: &mut usize,
) -> Result<Vec<PushGroup>, PushError> {
    let count = r.u32().ok_or(PushError::Truncated(Loc::Header))?;
    // A group takes at least 8 bytes: never reserve for more groups than could fit.
    let mut groups = Vec::with_capacity(capacity(count, r.remaining(), 8));
    for g in 0..count {
        let at = Loc::Group(g);
        let queue = text16(&mut r, at, "queue name")?;
        if queue.is_empty() {
            return Err(PushError::EmptyQueue(at));
        }
        let partition = text16(&mut r, at, "partition name")?;
        let n = r.u32().ok_or(PushError::Truncated(at))?;
        let body = if shape.frames {
            precompressed(base, &mut r, g, n, budget)?
        } else {
            GroupBody::Items(items(base, &mut r, g, n, shape.with_txn)?)
        };
        groups.push(PushGroup {
            queue,
            partition,
            body,
        });
    }
    match r.remaining() {
        0 => Ok(groups),
        extra => Err(PushError::Trailing(extra)),
    }
}

fn items(
    base: &Bytes,
    r: &mut Reader<'_>,
    g: u32,
    n: u32,
    with_txn: bool,
) -> Result<Vec<PlainItem>, PushError> {
    let mut items = Vec::with_capacity(capacity(n, r.remaining(), 4));
    for i in 0..n {
        let at = Loc::Item(g, i);
        let transaction_id = if with_txn {
            Some(text16(r, at, "transactionId")?).filter(|txn| !txn.is_empty())
        } else {
            None
        };
        let payload = r.bytes32().ok_or(PushError::Truncated(at))?;
        check_json(payload).map_err(|reason| PushError::Json { at, reason })?;
        items.push(PlainItem {
            transaction_id,
            payload: base.slice_ref(payload),
        });
    }
    Ok(items)
}

fn precompressed(
    base: &Bytes,
    r: &mut Reader<'_>,
    group: u32,
    n: u32,
    budget: &mut usize,
) -> Result<GroupBody, PushError> {
    let z = r.bytes32().ok_or(PushError::Truncated(Loc::Group(group)))?;
    let zstd_err = |source| PushError::GroupZstd { group, source };
    if !segment::is_zstd(z) {
        return Err(zstd_err(SegmentError::NotZstd));
    }
    let frames_raw = segment::decompress(z, *budget).map_err(zstd_err)?;
    *budget = budget.saturating_sub(frames_raw.len());
    let frames = frame::decode_exact(&frames_raw, n as usize)
        .map_err(|source| PushError::GroupFrames { group, source })?;
    for (k, f) in frames.iter().enumerate() {
        if f.flags != 0 {
            return Err(PushError::FrameFlags {
                group,
                frame: k,
                flags: f.flags,
            });
        }
        if f.transaction_id.is_empty() {
            return Err(PushError::EmptyTxn { group, frame: k });
        }
        check_json(f.payload).map_err(|reason| PushError::FrameJson {
            group,
            frame: k,
            reason,
        })?;
    }
    drop(frames);
    Ok(GroupBody::Precompressed {
        n,
        z: base.slice_ref(z),
        frames_raw,
    })
}

fn text16(r: &mut Reader<'_>, at: Loc, what: &'static str) -> Result<String, PushError> {
    let raw = r.bytes16().ok_or(PushError::Truncated(at))?;
    std::str::from_utf8(raw)
        .map(str::to_owned)
        .map_err(|_| PushError::Utf8 { at, what })
}

/// One JSON document in UTF-8 (whitespace around it allowed), else the reason.
fn check_json(payload: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(payload).map_err(|e| e.to_string())?;
    serde_json::from_str::<IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// How many elements to reserve for `count` entries of at least `min_size` bytes each.
fn capacity(count: u32, remaining: usize, min_size: usize) -> usize {
    (count as usize).min(remaining / min_size)
}
