//! The frame walk and the JSON answer of a pop (docs/wire.md §7.3), run by `render.rs` after
//! PostgreSQL has answered and the connection is back in the pool: decompress each claimed segment's blob,
//! slice frames `[start_idx, start_idx + take)`, and write the envelope by hand into one
//! buffer, splicing each stored payload verbatim (the plaintext of an encrypted one).

use crate::engine::tenant::local;
use std::io::Write;

use queen_proto::frame::{self, Frame};
use queen_proto::time;

use super::render::{echo_keys, Rendered};
use crate::engine::pop::{ClaimedPartition, ClaimedSegment, Decoded, Envelope, PopAnswer};
use crate::http::json_text;

/// Renders the claims of `answer`, telling `seen` what each segment decoded to. Frames that
/// cannot be decoded are logged and left out (the lease expires and they redeliver).
pub fn render(answer: &PopAnswer, ctx: &Envelope, seen: &mut dyn Decoded) -> Rendered {
    let mut out = Vec::with_capacity(256 + answer.blobs.iter().map(Vec::len).sum::<usize>() * 2);
    let first = answer.partitions.first();
    out.extend_from_slice(b"{\"success\":true,\"queue\":");
    json_text::str(&mut out, local(&ctx.queue));
    out.extend_from_slice(b",\"partition\":");
    json_text::str(&mut out, first.map_or("", |p| p.partition.as_str()));
    out.extend_from_slice(b",\"partitionId\":");
    json_text::str(
        &mut out,
        &first.map_or(String::new(), |p| p.partition_id.to_string()),
    );
    out.extend_from_slice(b",\"leaseId\":");
    json_text::str(&mut out, ctx.lease_id.as_str());
    out.extend_from_slice(b",\"consumerGroup\":");
    json_text::str(&mut out, &ctx.group);
    out.extend_from_slice(b",\"messages\":[");

    let mut walk = Walk {
        out,
        messages: 0,
        seen,
    };
    let mut blobs = answer.blobs.iter();
    let mut partitions_claimed = 0;
    for part in &answer.partitions {
        let before = walk.messages;
        for seg in &part.segments {
            let Some(blob) = blobs.next() else { break };
            walk.segment(ctx, part, seg, blob);
        }
        if walk.messages > before {
            partitions_claimed += 1;
        }
    }
    let Walk {
        mut out, messages, ..
    } = walk;
    write!(out, "],\"partitionsClaimed\":{partitions_claimed}")
        .expect("writing to a Vec cannot fail");
    for (key, value) in echo_keys(ctx).into_iter().flatten() {
        out.push(b',');
        json_text::str(&mut out, &key);
        out.push(b':');
        json_text::value(&mut out, &value);
    }
    out.push(b'}');
    Rendered {
        body: out,
        messages,
    }
}

struct Walk<'s> {
    out: Vec<u8>,
    messages: usize,
    seen: &'s mut dyn Decoded,
}

impl Walk<'_> {
    fn segment(
        &mut self,
        ctx: &Envelope,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        blob: &[u8],
    ) {
        let frames = match ctx.segment_frames(part, seg, blob) {
            Ok(frames) => frames,
            Err(e) => return self.undecodable(part, seg, &e),
        };
        let count = usize::try_from(seg.msg_count).unwrap_or(0);
        let decoded = match frame::decode_exact(&frames, count) {
            Ok(decoded) => decoded,
            Err(e) => return self.undecodable(part, seg, &e),
        };
        let Some(slice) = seg.claimed_range().and_then(|range| decoded.get(range)) else {
            return self.undecodable(part, seg, &"claimed frames lie outside the segment");
        };
        self.seen.segment(part, seg, Some(slice));
        let created_at = time::iso_millis(seg.created_at);
        for (i, f) in slice.iter().enumerate() {
            let offset = seg.base + i64::from(seg.start_idx) + i as i64;
            self.message(ctx, part, f, &created_at, offset);
        }
    }

    /// A segment that could not be decoded: logged, left out, and reported as such.
    fn undecodable(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        e: &dyn std::fmt::Display,
    ) {
        self.seen.segment(part, seg, None);
        undecodable(part, seg, e);
    }

    fn message(
        &mut self,
        ctx: &Envelope,
        part: &ClaimedPartition,
        f: &Frame<'_>,
        created_at: &str,
        offset: i64,
    ) {
        let out = &mut self.out;
        if self.messages > 0 {
            out.push(b',');
        }
        self.messages += 1;
        out.extend_from_slice(b"{\"id\":\"");
        write!(out, "{}", f.message_uuid().hyphenated()).expect("writing to a Vec cannot fail");
        out.extend_from_slice(b"\",\"transactionId\":");
        json_text::str(out, f.transaction_id);
        out.extend_from_slice(b",\"traceId\":");
        match f.trace_uuid() {
            Some(t) => write!(out, "\"{}\"", t.hyphenated()).expect("writing to a Vec cannot fail"),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"data\":");
        let payload_error = write_payload(out, ctx, f);
        out.extend_from_slice(b",\"producerSub\":");
        json_text::opt_str(out, f.producer_sub);
        out.extend_from_slice(b",\"createdAt\":\"");
        out.extend_from_slice(created_at.as_bytes());
        write!(
            out,
            "\",\"partitionId\":\"{}\",\"partition\":",
            part.partition_id
        )
        .expect("writing to a Vec cannot fail");
        json_text::str(out, &part.partition);
        out.extend_from_slice(b",\"leaseId\":");
        json_text::str(out, ctx.lease_id.as_str());
        out.extend_from_slice(b",\"consumerGroup\":");
        json_text::str(out, &ctx.group);
        write!(
            out,
            ",\"deliveryAttempt\":{},\"offset\":{offset}",
            part.delivery_attempt
        )
        .expect("writing to a Vec cannot fail");
        if ctx.per_message_queue {
            out.extend_from_slice(b",\"queue\":");
            json_text::str(out, local(&part.queue));
        }
        if let Some(error) = payload_error {
            out.extend_from_slice(b",\"payloadError\":");
            json_text::str(out, &error);
        }
        out.push(b'}');
    }
}

/// Writes a message's `data`: the stored payload, or the plaintext of an encrypted one. An
/// envelope that cannot be opened (another key, a corrupt envelope) writes `null` and returns
/// the reason, which the message carries as `payloadError`; the rest of the answer is not
/// affected, and the message stays leased and ackable like any other.
fn write_payload(out: &mut Vec<u8>, ctx: &Envelope, f: &Frame<'_>) -> Option<String> {
    if !f.is_encrypted() {
        out.extend_from_slice(f.payload_json());
        return None;
    }
    match ctx.encryption.open(f.payload) {
        Ok(plain) if plain.is_empty() => out.extend_from_slice(b"null"),
        Ok(plain) => out.extend_from_slice(&plain),
        Err(error) => {
            out.extend_from_slice(b"null");
            return Some(error);
        }
    }
    None
}

fn undecodable(part: &ClaimedPartition, seg: &ClaimedSegment, e: &dyn std::fmt::Display) {
    tracing::error!(
        queue = %part.queue, partition = %part.partition, partition_id = part.partition_id,
        base_offset = seg.base, error = %e, "stored segment cannot be decoded; its frames are left out"
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::EncryptionKey;
    use crate::engine::encryption::Encryption;
    use crate::engine::pop::autopilot::Sizing;
    use crate::engine::pop::SegmentCache;
    use queen_proto::frame::ENCRYPTED;
    use queen_proto::segment;
    use queen_proto::LeaseId;
    use std::sync::Arc;

    fn stored(frames: &[Frame<'_>]) -> Vec<u8> {
        let mut raw = Vec::new();
        for f in frames {
            f.encode_into(&mut raw).expect("encode");
        }
        segment::compress(&raw, 3)
    }

    /// A plain frame with a fresh message id (shared with the framed renderer's tests).
    pub(crate) fn frame<'a>(txn: &'a str, payload: &'a [u8]) -> Frame<'a> {
        Frame {
            flags: 0,
            message_id: *uuid::Uuid::now_v7().as_bytes(),
            trace_id: None,
            transaction_id: txn,
            producer_sub: None,
            payload,
        }
    }

    /// The envelope of a pop of queue `q` by group `g`.
    pub(crate) fn ctx(lease_id: &str) -> Envelope {
        Envelope {
            queue: "q".into(),
            group: "g".into(),
            lease_id: LeaseId::parse("leaseId", lease_id).expect("lease id"),
            per_message_queue: false,
            frames: false,
            max_segment_bytes: 1 << 20,
            encryption: Arc::new(Encryption::new(None)),
            autopilot: None,
            segments: Arc::new(SegmentCache::new(0)),
        }
    }

    /// A claim of the `n` messages of partition `p` of queue `q`, stored in one `blob`.
    fn claim_of(n: i32, blob: Vec<u8>) -> PopAnswer {
        PopAnswer {
            partitions: vec![ClaimedPartition {
                partition: "p".into(),
                partition_id: 1,
                queue: "q".into(),
                delivery_attempt: 1,
                lease_expires_at: None,
                segments: vec![ClaimedSegment {
                    base: 0,
                    start_idx: 0,
                    take: n,
                    msg_count: n,
                    created_at: 0,
                }],
            }],
            min_pop_wait_ms: None,
            blobs: vec![blob],
        }
    }

    #[test]
    fn echoes_the_autopilot_sizes_only_when_asked() {
        let answer = claim_of(1, stored(&[frame("a", b"1")]));
        let plain: serde_json::Value =
            serde_json::from_slice(&render(&answer, &ctx("L"), &mut ()).body).expect("valid JSON");
        assert!(plain.get("autopilot").is_none());
        let mut piloted = ctx("L");
        piloted.autopilot = Some(Sizing::of(400, 100));
        let v: serde_json::Value =
            serde_json::from_slice(&render(&answer, &piloted, &mut ()).body).expect("valid JSON");
        assert_eq!(
            v["autopilot"],
            serde_json::json!({"partitions": 100, "batch": 400, "waitMs": 0})
        );
        assert_eq!(v["partitionsClaimed"], 1);
    }

    #[test]
    fn slices_the_claimed_frames_and_splices_payloads() {
        let frames = [
            frame("a", b"{\"n\":0}"),
            frame("b", b""),
            frame("c\"q", b"[1,2]"),
        ];
        let answer = PopAnswer {
            partitions: vec![ClaimedPartition {
                partition: "p".into(),
                partition_id: 17,
                queue: "q".into(),
                delivery_attempt: 2,
                lease_expires_at: None,
                segments: vec![ClaimedSegment {
                    base: 40,
                    start_idx: 1,
                    take: 2,
                    msg_count: 3,
                    created_at: 1_785_402_764_881_123,
                }],
            }],
            min_pop_wait_ms: None,
            blobs: vec![stored(&frames)],
        };
        let r = render(&answer, &ctx("L"), &mut ());
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("valid JSON");
        assert_eq!(r.messages, 2);
        assert_eq!(v["partitionId"], "17");
        assert_eq!(v["partitionsClaimed"], 1);
        let m = v["messages"].as_array().expect("messages");
        assert_eq!(m[0]["transactionId"], "b");
        assert_eq!(m[0]["data"], serde_json::Value::Null);
        assert_eq!(m[0]["offset"], 41);
        assert_eq!(m[1]["transactionId"], "c\"q");
        assert_eq!(m[1]["data"], serde_json::json!([1, 2]));
        assert_eq!(m[1]["deliveryAttempt"], 2);
        assert_eq!(m[1]["createdAt"], "2026-07-30T09:12:44.881Z");
    }

    #[test]
    fn opens_sealed_payloads_and_reports_the_ones_it_cannot() {
        let key = EncryptionKey::from_hex(&"5a".repeat(32)).expect("key");
        let enc = Arc::new(Encryption::new(Some(&key)));
        let other = Encryption::new(Some(&EncryptionKey::from_hex(&"a5".repeat(32)).unwrap()));
        let good = enc.seal("q", br#"{"secret":1}"#).expect("sealed");
        let foreign = other.seal("q", br#"{"secret":2}"#).expect("sealed");
        let sealed = |txn, payload| Frame {
            flags: ENCRYPTED,
            ..frame(txn, payload)
        };
        let frames = [sealed("a", &good), sealed("b", &foreign), frame("c", b"3")];
        let answer = claim_of(3, stored(&frames));
        let mut c = ctx("L");
        c.encryption = enc;
        let r = render(&answer, &c, &mut ());
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("valid JSON");
        let m = v["messages"].as_array().expect("messages");
        assert_eq!(r.messages, 3);
        assert_eq!(m[0]["data"], serde_json::json!({"secret": 1}));
        assert!(m[0].get("payloadError").is_none());
        assert_eq!(m[1]["data"], serde_json::Value::Null);
        let error = m[1]["payloadError"].as_str().expect("a per-message error");
        assert!(error.contains("QUEEN_ENCRYPTION_KEY"), "{error}");
        assert_eq!(m[2]["data"], 3);
    }

    #[test]
    fn a_corrupt_blob_is_left_out() {
        let answer = claim_of(1, vec![1, 2, 3]);
        let mut seen = Seen::default();
        let r = render(&answer, &ctx("L"), &mut seen);
        assert_eq!(r.messages, 0);
        serde_json::from_slice::<serde_json::Value>(&r.body).expect("still valid JSON");
        assert_eq!(seen.0, [(0, None)], "reported as undecodable");
    }

    /// What a walk reported: per segment base, the claimed transactionIds.
    #[derive(Default)]
    struct Seen(Vec<(i64, Option<Vec<String>>)>);

    impl Decoded for Seen {
        fn segment(
            &mut self,
            _: &ClaimedPartition,
            seg: &ClaimedSegment,
            claimed: Option<&[Frame<'_>]>,
        ) {
            let txns = claimed.map(|c| c.iter().map(|f| f.transaction_id.to_string()).collect());
            self.0.push((seg.base, txns));
        }
    }

    #[test]
    fn the_walk_reports_the_claimed_frames_it_decoded() {
        let answer = claim_of(2, stored(&[frame("a", b"1"), frame("b", b"2")]));
        let mut seen = Seen::default();
        render(&answer, &ctx("L"), &mut seen);
        assert_eq!(seen.0, [(0, Some(vec!["a".to_string(), "b".to_string()]))]);
    }
}
