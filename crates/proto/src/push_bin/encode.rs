//! Building `QPB1` and `QTB1` bodies, as the official clients do: for the Rust client SDK, the
//! benchmark and tests. Pre-compressed groups mint a UUIDv7 message id per item and use its
//! text as the transactionId of an item without one.

use super::{FLAG_COUNTS, FLAG_FRAMES, FLAG_TXN, FLAG_ZSTD, PUSH_MAGIC, TXN_MAGIC};
use crate::frame::Frame;
use crate::ids::new_v7;
use crate::segment;
pub use crate::writer::EncodeError;
use crate::writer::{put_text16, put_u32};

/// The zstd level the official clients compress with.
const CLIENT_LEVEL: i32 = 1;

/// One (queue, partition) group to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub items: Vec<BatchItem<'a>>,
}

/// One message to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchItem<'a> {
    /// `None` or empty: the broker (plain form) or the encoder (pre-compressed form) mints one.
    pub transaction_id: Option<&'a str>,
    /// One compact JSON document, UTF-8.
    pub payload: &'a [u8],
}

/// A plain `QPB1` body (flag 4 when any item has a transactionId; `compress` sets flag 1 and
/// compresses the body; `counts` sets flag 2).
pub fn encode_push_plain(
    batches: &[Batch<'_>],
    compress: bool,
    counts: bool,
) -> Result<Vec<u8>, EncodeError> {
    let with_txn = batches
        .iter()
        .flat_map(|b| &b.items)
        .any(|item| item.transaction_id.is_some());
    let mut body = Vec::new();
    put_u32(&mut body, batches.len(), "group count")?;
    for batch in batches {
        put_text16(&mut body, batch.queue, "queue name")?;
        put_text16(&mut body, batch.partition, "partition name")?;
        put_u32(&mut body, batch.items.len(), "item count")?;
        for item in &batch.items {
            if with_txn {
                put_text16(
                    &mut body,
                    item.transaction_id.unwrap_or(""),
                    "transactionId",
                )?;
            }
            put_u32(&mut body, item.payload.len(), "payload length")?;
            body.extend_from_slice(item.payload);
        }
    }
    let flags = counts_flag(counts) | if with_txn { FLAG_TXN } else { 0 };
    let mut out = PUSH_MAGIC.to_vec();
    if compress {
        out.push(flags | FLAG_ZSTD);
        put_u32(&mut out, body.len(), "body length")?;
        out.extend_from_slice(&compressed(&body)?);
    } else {
        out.push(flags);
        out.extend_from_slice(&body);
    }
    Ok(out)
}

/// A `QPB1` body with pre-compressed groups (flag 8, plus flag 2 with `counts`).
pub fn encode_push_precompressed(
    batches: &[Batch<'_>],
    counts: bool,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = PUSH_MAGIC.to_vec();
    out.push(FLAG_FRAMES | counts_flag(counts));
    append_frame_groups(&mut out, batches)?;
    Ok(out)
}

/// A `QTB1` body: `head` is the JSON transaction body without its pushes (may be empty).
pub fn encode_txn(
    head: &[u8],
    batches: &[Batch<'_>],
    counts: bool,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = TXN_MAGIC.to_vec();
    out.push(counts_flag(counts));
    put_u32(&mut out, head.len(), "head length")?;
    out.extend_from_slice(head);
    append_frame_groups(&mut out, batches)?;
    Ok(out)
}

fn counts_flag(counts: bool) -> u8 {
    if counts {
        FLAG_COUNTS
    } else {
        0
    }
}

fn append_frame_groups(out: &mut Vec<u8>, batches: &[Batch<'_>]) -> Result<(), EncodeError> {
    put_u32(out, batches.len(), "group count")?;
    for batch in batches {
        let mut frames = Vec::new();
        for item in &batch.items {
            let id = new_v7();
            let minted: String;
            let transaction_id = match item.transaction_id {
                Some(txn) if !txn.is_empty() => txn,
                _ => {
                    minted = id.to_string();
                    &minted
                }
            };
            let frame = Frame {
                flags: 0,
                message_id: id.into_bytes(),
                trace_id: None,
                transaction_id,
                producer_sub: None,
                payload: item.payload,
            };
            frame.encode_into(&mut frames)?;
        }
        put_text16(out, batch.queue, "queue name")?;
        put_text16(out, batch.partition, "partition name")?;
        put_u32(out, batch.items.len(), "item count")?;
        let z = compressed(&frames)?;
        put_u32(out, z.len(), "compressed group length")?;
        out.extend_from_slice(&z);
    }
    Ok(())
}

fn compressed(raw: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let z = segment::compress(raw, CLIENT_LEVEL);
    if segment::is_zstd(&z) {
        Ok(z)
    } else {
        Err(EncodeError::Compression)
    }
}
