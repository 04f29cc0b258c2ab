//! The framed pop answer (`QPF1`, docs/wire.md §7.7), asked for with `frames=true`: the stored
//! segment blobs PostgreSQL returned go out as records unchanged — no decompression, no
//! per-message rendering — and the client trims each claim to its `start..=end`.
//!
//! A blob ships as is when it is raw frames (codec 0) or exactly one zstd frame (codec 1; the
//! official decoder reads only the first zstd frame of a record). Every writer of this broker
//! stores one zstd frame per segment, so the other case exists only for foreign or damaged
//! data: such a blob is decompressed and its claimed frames ship raw, and one that cannot be
//! decompressed is logged and left out, as the JSON renderer does.
//!
//! Encrypted frames would make the client raise (docs/wire.md §7.7), so a broker with an
//! encryption key looks inside every claimed blob: one without a sealed frame still ships as
//! is, one with sealed frames ships its claimed frames opened, as a raw record; should one not
//! open (another key, a corrupt envelope), the whole answer is JSON, which carries that
//! message's error. A broker without a key ships blobs unopened: run every broker of a
//! database with the same key.

use crate::engine::tenant::local;
use std::io::Read;

use bytes::Bytes;
use queen_proto::frame::{decode_exact, Frame, ENCRYPTED};
use queen_proto::pop_framed::{Claim, Codec, FramedPop, Record};
use zstd::zstd_safe;

use super::json;
use super::render::{echo_keys, Rendered};
use crate::engine::pop::{ClaimedPartition, ClaimedSegment, Decoded, Envelope, PopAnswer};

/// Renders the claims of `answer` as a `QPF1` body. Should the answer not be encodable
/// (a name over 65 535 bytes, which validation upstream rules out), or hold an encrypted
/// payload this broker cannot open (a per-message error only JSON can carry), it is rendered
/// as JSON: the client accepts either. Only that JSON answer tells `seen` what it decoded: a
/// framed answer ships most blobs unopened, and the registry decodes what it needs itself.
pub fn render(answer: &PopAnswer, ctx: &Envelope, seen: &mut dyn Decoded) -> Rendered {
    let mut blobs = answer.blobs.iter();
    let mut claims = Vec::with_capacity(answer.partitions.len());
    let mut messages = 0;
    for part in &answer.partitions {
        let segments: Vec<(&ClaimedSegment, &Vec<u8>)> =
            part.segments.iter().zip(blobs.by_ref()).collect();
        match claim(part, &segments, ctx) {
            Ok(Some((claim, count))) => {
                messages += count;
                claims.push(claim);
            }
            Ok(None) => {}
            Err(Sealed) => return json::render(answer, ctx, seen),
        }
    }
    let framed = FramedPop {
        queue: local(&ctx.queue).to_string(),
        lease_id: ctx.lease_id.to_string(),
        group: ctx.group.clone(),
        extra: echo_keys(ctx),
        claims,
    };
    match framed.encode() {
        Ok(body) => Rendered { body, messages },
        Err(e) => {
            tracing::error!(error = %e, "framed pop answer cannot be encoded; answering JSON");
            json::render(answer, ctx, seen)
        }
    }
}

/// A claimed encrypted payload this broker cannot open: the answer goes out as JSON.
struct Sealed;

/// One partition's claim: `start..=end` spans the claimed frames of its segments (which
/// are contiguous), one record per segment; with the number of messages it delivers. `None`
/// when nothing of it can be shipped.
fn claim(
    part: &ClaimedPartition,
    segments: &[(&ClaimedSegment, &Vec<u8>)],
    ctx: &Envelope,
) -> Result<Option<(Claim, usize)>, Sealed> {
    let mut records: Vec<(Record, &ClaimedSegment)> = Vec::with_capacity(segments.len());
    for &(seg, blob) in segments.iter().filter(|(seg, _)| seg.take > 0) {
        if let Some(record) = record(part, seg, blob, ctx)? {
            records.push((record, seg));
        }
    }
    let Some(((_, first), (_, last))) = records.first().zip(records.last()) else {
        return Ok(None);
    };
    let span = || -> Option<(u64, u64, u64)> {
        let start = u64::try_from(first.base + i64::from(first.start_idx)).ok()?;
        let end =
            u64::try_from(last.base + i64::from(last.start_idx) + i64::from(last.take) - 1).ok()?;
        Some((start, end, u64::try_from(part.partition_id).ok()?))
    };
    let Some((start, end, partition_id)) = span() else {
        return Ok(None);
    };
    let count = records
        .iter()
        .map(|(_, seg)| usize::try_from(seg.take).unwrap_or(0))
        .sum();
    let claim = Claim {
        partition_id,
        partition: part.partition.clone(),
        start,
        end,
        delivery_attempt: u32::try_from(part.delivery_attempt).unwrap_or(0),
        records: records.into_iter().map(|(r, _)| r).collect(),
    };
    Ok(Some((claim, count)))
}

/// The record of one claimed segment: the stored blob when it can ship as is, else its
/// claimed frames decompressed (opened, when they are encrypted). A broker with a key looks
/// inside every blob, since only a look tells sealed frames apart; one without never stored
/// any.
fn record(
    part: &ClaimedPartition,
    seg: &ClaimedSegment,
    blob: &[u8],
    ctx: &Envelope,
) -> Result<Option<Record>, Sealed> {
    let codec = Codec::of(blob);
    let whole = || Record {
        base: u64::try_from(seg.base).unwrap_or(0),
        created_us: seg.created_at,
        frame_count: u32::try_from(seg.msg_count).unwrap_or(0),
        codec,
        bytes: Bytes::copy_from_slice(blob),
    };
    let single =
        codec == Codec::Raw || zstd_safe::find_frame_compressed_size(blob) == Ok(blob.len());
    if single && !ctx.encryption.has_key() {
        return Ok(Some(whole()));
    }
    let undecodable = |e: &dyn std::fmt::Display| {
        tracing::error!(
            queue = %part.queue, partition = %part.partition, partition_id = part.partition_id,
            base_offset = seg.base, error = %e,
            "stored segment cannot be framed; its frames are left out"
        );
        Ok(None)
    };
    let raw = match decompress_all(blob, ctx.max_segment_bytes) {
        Ok(raw) => raw,
        Err(e) => return undecodable(&e),
    };
    let count = usize::try_from(seg.msg_count).unwrap_or(0);
    let frames = match decode_exact(&raw, count) {
        Ok(frames) => frames,
        Err(e) => return undecodable(&e),
    };
    if single && !frames.iter().any(Frame::is_encrypted) {
        return Ok(Some(whole()));
    }
    let Some(claimed) = seg.claimed_range().and_then(|range| frames.get(range)) else {
        return undecodable(&"claimed frames lie outside the segment");
    };
    let mut out = Vec::with_capacity(raw.len());
    for f in claimed {
        let opened = if f.is_encrypted() {
            Some(ctx.encryption.open(f.payload).map_err(|_| Sealed)?)
        } else {
            None
        };
        let plain = Frame {
            flags: f.flags & !ENCRYPTED,
            payload: opened.as_deref().unwrap_or(f.payload),
            ..*f
        };
        if let Err(e) = plain.encode_into(&mut out) {
            return undecodable(&e);
        }
    }
    Ok(Some(Record {
        base: u64::try_from(seg.base + i64::from(seg.start_idx)).unwrap_or(0),
        created_us: seg.created_at,
        frame_count: u32::try_from(seg.take).unwrap_or(0),
        codec: Codec::Raw,
        bytes: Bytes::from(out),
    }))
}

/// Every frame of a blob (raw bytes, one zstd frame or several), bounded by `max`.
fn decompress_all(blob: &[u8], max_segment_bytes: usize) -> Result<Vec<u8>, String> {
    if Codec::of(blob) == Codec::Raw {
        return Ok(blob.to_vec());
    }
    let mut raw = Vec::new();
    zstd::stream::read::Decoder::with_buffer(blob)
        .map_err(|e| e.to_string())?
        .take(max_segment_bytes as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    if raw.len() > max_segment_bytes {
        return Err(format!(
            "decompresses to more than {max_segment_bytes} bytes"
        ));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::pop::json::tests::{ctx, frame};
    use queen_proto::pop_framed::decode;
    use queen_proto::segment;

    fn frames(txns: &[&str]) -> Vec<u8> {
        let mut raw = Vec::new();
        for (i, txn) in txns.iter().enumerate() {
            let payload = format!("{{\"n\":{i}}}");
            frame(txn, payload.as_bytes())
                .encode_into(&mut raw)
                .expect("encode");
        }
        raw
    }

    fn seg(base: i64, start_idx: i32, take: i32, msg_count: i32) -> ClaimedSegment {
        ClaimedSegment {
            base,
            start_idx,
            take,
            msg_count,
            created_at: 1_785_402_764_881_123,
        }
    }

    fn answer(segments: Vec<ClaimedSegment>, blobs: Vec<Vec<u8>>) -> PopAnswer {
        PopAnswer {
            partitions: vec![ClaimedPartition {
                partition: "p".into(),
                partition_id: 17,
                queue: "q".into(),
                delivery_attempt: 2,
                lease_expires_at: None,
                segments,
            }],
            min_pop_wait_ms: None,
            blobs,
        }
    }

    fn txns(body: &[u8]) -> Vec<String> {
        decode(body)
            .expect("a framed answer")
            .messages
            .into_iter()
            .map(|m| m.transaction_id)
            .collect()
    }

    #[test]
    fn ships_blobs_unchanged_and_trims_by_the_claim() {
        let zstd_blob = segment::compress(&frames(&["a", "b", "c"]), 3);
        let raw_blob = frames(&["d", "e", "f"]);
        let a = answer(
            vec![seg(40, 1, 2, 3), seg(43, 0, 2, 3)],
            vec![zstd_blob.clone(), raw_blob.clone()],
        );
        let r = render(&a, &ctx("L"), &mut ());
        assert_eq!(r.messages, 4);
        assert!(
            r.body.windows(zstd_blob.len()).any(|w| w == zstd_blob),
            "the zstd blob is shipped byte for byte"
        );
        assert!(r.body.windows(raw_blob.len()).any(|w| w == raw_blob));
        assert_eq!(txns(&r.body), ["b", "c", "d", "e"]);
        let d = decode(&r.body).expect("decoded");
        assert_eq!(d.messages[0].offset, 41);
        assert_eq!(d.messages[3].offset, 44);
        assert_eq!(d.messages[0].delivery_attempt, 2);
        assert_eq!(d.partition_id, "17");
        assert_eq!(d.lease_id, "L");
        assert_eq!(d.messages[0].created_at, "2026-07-30T09:12:44.881Z");
    }

    #[test]
    fn a_blob_of_two_zstd_frames_ships_its_claimed_frames_raw() {
        let mut two = segment::compress(&frames(&["a", "b"]), 1);
        two.extend_from_slice(&segment::compress(&frames(&["c"]), 1));
        let r = render(&answer(vec![seg(0, 1, 2, 3)], vec![two]), &ctx(""), &mut ());
        assert_eq!(txns(&r.body), ["b", "c"]);
    }

    #[test]
    fn sealed_frames_ship_opened_and_an_unopenable_one_turns_the_answer_to_json() {
        use crate::config::EncryptionKey;
        use crate::engine::encryption::Encryption;
        use std::sync::Arc;
        let enc = Arc::new(Encryption::new(Some(
            &EncryptionKey::from_hex(&"3c".repeat(32)).unwrap(),
        )));
        let other = Arc::new(Encryption::new(Some(
            &EncryptionKey::from_hex(&"c3".repeat(32)).unwrap(),
        )));
        let sealed = enc.seal("q", b"{\"n\":0}").unwrap();
        let mut raw = Vec::new();
        Frame {
            flags: ENCRYPTED,
            ..frame("a", &sealed)
        }
        .encode_into(&mut raw)
        .unwrap();
        frame("b", b"1").encode_into(&mut raw).unwrap();
        let plain_blob = segment::compress(&frames(&["c"]), 1);
        let a = answer(
            vec![seg(0, 0, 2, 2), seg(2, 0, 1, 1)],
            vec![segment::compress(&raw, 1), plain_blob.clone()],
        );
        let mut c = ctx("L");
        c.frames = true;
        c.encryption = enc;
        let r = render(&a, &c, &mut ());
        let d = decode(&r.body).expect("still framed");
        let data: Vec<String> = d.messages.iter().map(|m| m.data.to_string()).collect();
        assert_eq!(data, ["{\"n\":0}", "1", "{\"n\":0}"]);
        assert!(
            r.body.windows(plain_blob.len()).any(|w| w == plain_blob),
            "a blob without sealed frames still ships as is"
        );

        c.encryption = other;
        let r = render(&a, &c, &mut ());
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON instead");
        assert!(v["messages"][0]["payloadError"].is_string(), "{v}");
    }

    #[test]
    fn an_undecodable_blob_is_left_out() {
        let good = segment::compress(&frames(&["a"]), 1);
        let mut bad = segment::compress(&frames(&["x", "y"]), 1);
        bad.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]);
        let r = render(
            &answer(vec![seg(0, 0, 1, 1), seg(1, 0, 2, 2)], vec![good, bad]),
            &ctx("L"),
            &mut (),
        );
        assert_eq!(txns(&r.body), ["a"]);
        assert_eq!(r.messages, 1);
    }
}
