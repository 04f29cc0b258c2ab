//! What a pop hands the HTTP floor (docs/engine.md §5.1 step 7): the claimed answer as
//! PostgreSQL returned it, the facts of its envelope, and — for a leasing pop with the ack
//! registry on — the births the renderer feeds segment by segment ([`Decoded`]) and that must be
//! finished before the answer leaves (§6.4). The engine never renders: the body's shape is
//! the HTTP floor's (`http/pop/render.rs`).

use std::sync::Arc;

use bytes::Bytes;
use queen_proto::frame::Frame;
use queen_proto::segment::{self, SegmentError};
use queen_proto::LeaseId;

use crate::accel::ack_registry::AckRegistry;
pub use crate::accel::segment_cache::SegmentCache;
use crate::engine::ack::births::Births;
use crate::engine::encryption::Encryption;
use crate::engine::pop::autopilot::Sizing;
pub use crate::store::pop::{ClaimedPartition, ClaimedSegment, PopAnswer};

/// A claimed answer with at least one claimed message, to be rendered.
pub struct Claim {
    pub answer: PopAnswer,
    pub envelope: Envelope,
    /// Where a leasing pop's deliveries go; `None` for autoAck or with the registry off.
    pub(super) registry: Option<Arc<AckRegistry>>,
}

impl Claim {
    /// Bytes of stored blobs the answer carries (what rendering it decompresses at most).
    pub fn blob_bytes(&self) -> usize {
        self.answer.blobs.iter().map(Vec::len).sum()
    }

    /// The births of a leasing pop, to be told each segment the renderer decodes and then
    /// finished ([`Births::finish`]) before the answer leaves; `None` when nobody records.
    pub fn births(&self) -> Option<Births<'_>> {
        let registry = self.registry.as_deref()?;
        Some(Births::new(
            registry,
            &self.envelope.group,
            self.envelope.lease_id.as_str(),
        ))
    }
}

/// Fixed parts of an answer's envelope.
pub struct Envelope {
    /// Top-level `queue`: the queue name, or `""` for a discovery pop.
    pub queue: String,
    pub group: String,
    /// The pop's lease, or none for autoAck.
    pub lease_id: LeaseId,
    /// Discovery answers carry a per-message `queue`.
    pub per_message_queue: bool,
    /// `QPF1` instead of JSON.
    pub frames: bool,
    /// Upper bound of one decompressed segment.
    pub max_segment_bytes: usize,
    /// Opens the payloads of encrypted frames.
    pub encryption: Arc<Encryption>,
    /// The sizes to echo (`autopilot=true` pops with the autopilot on).
    pub autopilot: Option<Sizing>,
    /// The frames of segments this broker wrote lately (docs/engine.md §5.8).
    pub segments: Arc<SegmentCache>,
}

impl Envelope {
    /// The frames a claimed segment's stored `blob` holds: the segment cache's when it holds
    /// them for exactly this blob, else decompressed (at most `max_segment_bytes`).
    pub fn segment_frames(
        &self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        blob: &[u8],
    ) -> Result<Bytes, SegmentError> {
        let key = (part.partition_id, seg.base);
        if let Some(frames) = self.segments.frames(&part.queue, key, blob) {
            return Ok(frames);
        }
        segment::decompress(blob, self.max_segment_bytes).map(Bytes::from)
    }
}

/// Told what a renderer decoded, segment by segment: the claimed frames of `seg`, or `None`
/// when they could not be decoded. A leasing pop's ack-registry births listen here, so its
/// answer is decompressed once (docs/engine.md §6.4).
pub trait Decoded {
    fn segment(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        claimed: Option<&[Frame<'_>]>,
    );
}

/// Nobody listens.
impl Decoded for () {
    fn segment(&mut self, _: &ClaimedPartition, _: &ClaimedSegment, _: Option<&[Frame<'_>]>) {}
}

/// A listener, or nobody ([`Claim::births`] of an autoAck pop).
impl<D: Decoded> Decoded for Option<D> {
    fn segment(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        claimed: Option<&[Frame<'_>]>,
    ) {
        if let Some(listener) = self {
            listener.segment(part, seg, claimed);
        }
    }
}

impl Decoded for Births<'_> {
    fn segment(
        &mut self,
        part: &ClaimedPartition,
        seg: &ClaimedSegment,
        claimed: Option<&[Frame<'_>]>,
    ) {
        self.seen(part, seg, claimed);
    }
}
