//! The body of a claimed pop answer: `QPF1` when the pop asked for frames ([`framed`]), else
//! JSON ([`json`]). The one place a pop answer is rendered: off the async workers when it is
//! big, with the ack registry's births (docs/engine.md §6.4) told each segment the renderer
//! decodes and finished before the body is handed back, so the registry knows every leased
//! batch before the client can ack it.

use serde_json::{Map, Value};

use super::{framed, json};
use crate::engine::pop::{Claim, Envelope};
use crate::engine::push::segment::INLINE_BUILD_BYTES;
use crate::error::{Error, Result};

/// A rendered 200 answer.
pub struct Rendered {
    pub body: Vec<u8>,
    /// Messages the body carries: the claimed ones less those that could not be decoded.
    pub messages: usize,
}

/// Renders `claim` and records its births. Decompressing and rendering an answer of more than
/// [`INLINE_BUILD_BYTES`] of blobs would stall an async worker for milliseconds: it runs on
/// the blocking pool.
pub async fn render(claim: Claim) -> Result<Rendered> {
    if claim.blob_bytes() <= INLINE_BUILD_BYTES {
        return Ok(body(&claim));
    }
    tokio::task::spawn_blocking(move || body(&claim))
        .await
        .map_err(|e| Error::internal(format!("pop render task failed: {e}")))
}

/// The body, the renderer telling the births what it decoded as it goes.
fn body(claim: &Claim) -> Rendered {
    let (answer, envelope) = (&claim.answer, &claim.envelope);
    let mut births = claim.births();
    let rendered = if envelope.frames {
        framed::render(answer, envelope, &mut births)
    } else {
        json::render(answer, envelope, &mut births)
    };
    if let Some(births) = births {
        births.finish(answer, envelope.max_segment_bytes);
    }
    rendered
}

/// The answer's own keys (docs/wire.md §7.4): the autopilot's sizes, when it echoes them.
/// JSON answers append them to the envelope, framed ones carry them in their header.
pub(super) fn echo_keys(envelope: &Envelope) -> Option<Map<String, Value>> {
    let s = envelope.autopilot?;
    let echo =
        serde_json::json!({ "partitions": s.partitions, "batch": s.batch, "waitMs": s.wait_ms });
    Some(Map::from_iter([("autopilot".to_string(), echo)]))
}
