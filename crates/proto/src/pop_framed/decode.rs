//! Decoding `QPF1` bytes into the answer the official Python decoder builds: the messages of
//! every record whose offset lies in its claim's `start..=end`, in delivery order, each with
//! the keys of the JSON pop answer.
//!
//! Like the official decoder it reads exactly `frame_count` frames from the start of a record
//! (ignoring bytes after them) and only the first zstd frame of a zstd record. Unlike it, a
//! frame with unknown flag bits is malformed.

use std::io::Read;

use serde_json::{Map, Value};
use uuid::Uuid;

use super::{DecodeError, MAGIC};
use crate::frame::{Frame, FrameError, Frames};
use crate::reader::Reader;
use crate::time::iso_millis;

/// The most bytes one zstd record may decompress to.
pub const MAX_RECORD_BYTES: usize = 1 << 30;

/// Whether an answer's bytes are a framed pop answer (the official client's test).
pub fn is_framed(data: &[u8]) -> bool {
    data.len() > MAGIC.len() && data.starts_with(&MAGIC)
}

/// A decoded framed pop answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PopAnswer {
    pub queue: String,
    /// The first claim's partition (`""` without claims).
    pub partition: String,
    /// The first claim's partition id in decimal (`""` without claims).
    pub partition_id: String,
    pub lease_id: String,
    pub consumer_group: String,
    pub messages: Vec<PoppedMessage>,
    /// The claim count.
    pub partitions_claimed: u32,
    /// The header's own keys, without `frames`.
    pub extra: Map<String, Value>,
}

/// One delivered message, with the keys of the JSON answer's message object.
#[derive(Debug, Clone, PartialEq)]
pub struct PoppedMessage {
    pub id: Uuid,
    pub transaction_id: String,
    pub trace_id: Option<Uuid>,
    /// The payload parsed; `null` for an empty payload.
    pub data: Value,
    pub producer_sub: Option<String>,
    /// Millisecond ISO-8601 UTC.
    pub created_at: String,
    pub partition_id: String,
    pub partition: String,
    pub lease_id: String,
    pub consumer_group: String,
    pub delivery_attempt: u32,
    pub offset: u64,
}

impl PopAnswer {
    /// The dict the official decoder returns, as JSON: the JSON answer's keys, then the
    /// header's own keys merged over them.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("success".into(), Value::Bool(true));
        out.insert("queue".into(), self.queue.clone().into());
        out.insert("partition".into(), self.partition.clone().into());
        out.insert("partitionId".into(), self.partition_id.clone().into());
        out.insert("leaseId".into(), self.lease_id.clone().into());
        out.insert("consumerGroup".into(), self.consumer_group.clone().into());
        let messages = self.messages.iter().map(PoppedMessage::to_json).collect();
        out.insert("messages".into(), Value::Array(messages));
        out.insert("partitionsClaimed".into(), self.partitions_claimed.into());
        out.extend(self.extra.clone());
        Value::Object(out)
    }
}

impl PoppedMessage {
    /// The message object of the JSON pop answer.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), self.id.to_string().into());
        out.insert("transactionId".into(), self.transaction_id.clone().into());
        let trace = self.trace_id.map_or(Value::Null, |t| t.to_string().into());
        out.insert("traceId".into(), trace);
        out.insert("data".into(), self.data.clone());
        let sub = self.producer_sub.clone().map_or(Value::Null, Value::String);
        out.insert("producerSub".into(), sub);
        out.insert("createdAt".into(), self.created_at.clone().into());
        out.insert("partitionId".into(), self.partition_id.clone().into());
        out.insert("partition".into(), self.partition.clone().into());
        out.insert("leaseId".into(), self.lease_id.clone().into());
        out.insert("consumerGroup".into(), self.consumer_group.clone().into());
        out.insert("deliveryAttempt".into(), self.delivery_attempt.into());
        out.insert("offset".into(), self.offset.into());
        Value::Object(out)
    }
}

/// Decodes a framed pop answer.
pub fn decode(data: &[u8]) -> Result<PopAnswer, DecodeError> {
    if !is_framed(data) {
        return Err(DecodeError::NotFramed);
    }
    let mut r = Reader::new(data);
    r.take(MAGIC.len()).ok_or(DecodeError::Truncated)?;
    let extra = match r.u8().ok_or(DecodeError::Truncated)? {
        0 => Map::new(),
        1 => own_keys(r.bytes32().ok_or(DecodeError::Truncated)?)?,
        version => return Err(DecodeError::UnknownVersion(version)),
    };
    let queue = text(&mut r, "queue")?;
    let lease_id = text(&mut r, "leaseId")?;
    let consumer_group = text(&mut r, "consumerGroup")?;
    let claims = r.u32().ok_or(DecodeError::Truncated)?;
    let mut answer = PopAnswer {
        queue,
        partition: String::new(),
        partition_id: String::new(),
        lease_id,
        consumer_group,
        messages: Vec::new(),
        partitions_claimed: claims,
        extra,
    };
    for claim in 0..claims {
        let partition_id = r.u64().ok_or(DecodeError::Truncated)?.to_string();
        let partition = text(&mut r, "partition")?;
        let claim_head = ClaimHead {
            start: r.u64().ok_or(DecodeError::Truncated)?,
            end: r.u64().ok_or(DecodeError::Truncated)?,
            delivery_attempt: r.u32().ok_or(DecodeError::Truncated)?,
            partition_id,
            partition,
        };
        let records = r.u32().ok_or(DecodeError::Truncated)?;
        for _ in 0..records {
            decode_record(&mut r, &claim_head, &mut answer)?;
        }
        if claim == 0 {
            answer.partition = claim_head.partition;
            answer.partition_id = claim_head.partition_id;
        }
    }
    Ok(answer)
}

struct ClaimHead {
    partition_id: String,
    partition: String,
    start: u64,
    end: u64,
    delivery_attempt: u32,
}

fn own_keys(json: &[u8]) -> Result<Map<String, Value>, DecodeError> {
    if json.is_empty() {
        return Ok(Map::new());
    }
    let value: Value =
        serde_json::from_slice(json).map_err(|e| DecodeError::OwnKeys(e.to_string()))?;
    Ok(match value {
        Value::Object(mut keys) => {
            keys.remove("frames");
            keys
        }
        _ => Map::new(),
    })
}

fn text(r: &mut Reader<'_>, what: &'static str) -> Result<String, DecodeError> {
    let raw = r.bytes16().ok_or(DecodeError::Truncated)?;
    std::str::from_utf8(raw)
        .map(str::to_owned)
        .map_err(|_| DecodeError::Utf8(what))
}

fn decode_record(
    r: &mut Reader<'_>,
    claim: &ClaimHead,
    answer: &mut PopAnswer,
) -> Result<(), DecodeError> {
    let base = r.u64().ok_or(DecodeError::Truncated)?;
    let created_at = iso_millis(r.i64().ok_or(DecodeError::Truncated)?);
    let count = r.u32().ok_or(DecodeError::Truncated)?;
    let codec = r.u8().ok_or(DecodeError::Truncated)?;
    let bytes = r.bytes32().ok_or(DecodeError::Truncated)?;
    let decompressed;
    let raw = match codec {
        0 => bytes,
        1 => {
            decompressed = first_zstd_frame(bytes)?;
            &decompressed[..]
        }
        other => return Err(DecodeError::UnknownCodec(other)),
    };
    let mut frames = Frames::new(raw);
    for i in 0..count {
        let frame = match frames.next() {
            None => return Err(DecodeError::RecordShort(count)),
            Some(Err(FrameError::TruncatedLength { .. } | FrameError::TruncatedBody { .. })) => {
                return Err(DecodeError::RecordShort(count))
            }
            Some(Err(e)) => return Err(DecodeError::Malformed(e)),
            Some(Ok(frame)) => frame,
        };
        if frame.is_encrypted() {
            return Err(DecodeError::Encrypted);
        }
        let Some(offset) = base.checked_add(u64::from(i)) else {
            continue;
        };
        if offset < claim.start || offset > claim.end {
            continue;
        }
        answer
            .messages
            .push(message(&frame, offset, &created_at, claim, answer)?);
    }
    Ok(())
}

fn message(
    frame: &Frame<'_>,
    offset: u64,
    created_at: &str,
    claim: &ClaimHead,
    answer: &PopAnswer,
) -> Result<PoppedMessage, DecodeError> {
    let data = if frame.payload.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(frame.payload).map_err(|e| DecodeError::Data {
            offset,
            reason: e.to_string(),
        })?
    };
    Ok(PoppedMessage {
        id: frame.message_uuid(),
        transaction_id: frame.transaction_id.to_owned(),
        trace_id: frame.trace_uuid(),
        data,
        producer_sub: frame.producer_sub.map(str::to_owned),
        created_at: created_at.to_owned(),
        partition_id: claim.partition_id.clone(),
        partition: claim.partition.clone(),
        lease_id: answer.lease_id.clone(),
        consumer_group: answer.consumer_group.clone(),
        delivery_attempt: claim.delivery_attempt,
        offset,
    })
}

/// The first zstd frame of `blob`, decompressed (content size not required), at most
/// [`MAX_RECORD_BYTES`].
fn first_zstd_frame(blob: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let zstd = |e: std::io::Error| DecodeError::Zstd(e.to_string());
    let decoder = zstd::stream::read::Decoder::with_buffer(blob)
        .map_err(zstd)?
        .single_frame();
    let mut out = Vec::new();
    decoder
        .take(MAX_RECORD_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(zstd)?;
    if out.len() > MAX_RECORD_BYTES {
        return Err(DecodeError::Zstd(format!(
            "a record decompresses to more than {MAX_RECORD_BYTES} bytes"
        )));
    }
    Ok(out)
}
