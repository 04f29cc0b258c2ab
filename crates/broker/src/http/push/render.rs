//! The answers of a push (docs/wire.md §5.2, §6.4): 201 with one element per message, or the
//! counts object of a binary push with flag 2.

use crate::engine::tenant::{local, local_text};
use axum::http::StatusCode;
use axum::response::Response;
use std::borrow::Cow;

#[cfg(test)]
use serde::Serialize;
use serde_json::{json, Value};

use uuid::Uuid;

use crate::engine::push::PushResult;
use crate::http::json_text;

/// The 201 answer of a push: one element per message, in input order.
pub(super) fn created(results: &[PushResult]) -> Response {
    let out: Vec<ItemOut<'_>> = results
        .iter()
        .enumerate()
        .map(|(index, r)| ItemOut::new(index, r))
        .collect();
    let body = json_text::array(&out, 160, |buf, item| item.write(buf));
    json_text::response(StatusCode::CREATED, body)
}

/// One element of the 201 answer (docs/wire.md §5.2), borrowing from its result: a push of
/// many small messages renders one of these per message, by [`ItemOut::write`] (serde's
/// derive only checks it in the tests).
#[cfg_attr(test, derive(Serialize))]
struct ItemOut<'a> {
    index: usize,
    message_id: IdText,
    transaction_id: &'a str,
    #[cfg_attr(test, serde(rename = "queueName"))]
    queue_name: &'a str,
    status: &'static str,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    offset: Option<i64>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    error: Option<Cow<'a, str>>,
}

impl<'a> ItemOut<'a> {
    fn new(index: usize, r: &'a PushResult) -> Self {
        ItemOut {
            index,
            message_id: IdText(r.message_id()),
            transaction_id: &r.transaction_id,
            queue_name: local(&r.queue),
            status: r.status(),
            offset: r.offset(),
            error: r.error().map(local_text),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let mut id = Uuid::encode_buffer();
        out.extend_from_slice(b"{\"index\":");
        json_text::int(out, self.index);
        out.extend_from_slice(b",\"message_id\":");
        json_text::str(out, self.message_id.0.hyphenated().encode_lower(&mut id));
        out.extend_from_slice(b",\"transaction_id\":");
        json_text::str(out, self.transaction_id);
        out.extend_from_slice(b",\"queueName\":");
        json_text::str(out, self.queue_name);
        out.extend_from_slice(b",\"status\":");
        json_text::str(out, self.status);
        if let Some(offset) = self.offset {
            out.extend_from_slice(b",\"offset\":");
            json_text::int(out, offset);
        }
        if let Some(error) = &self.error {
            out.extend_from_slice(b",\"error\":");
            json_text::str(out, error);
        }
        out.push(b'}');
    }
}

/// A message id, written as its hyphenated text with no `String`.
struct IdText(Uuid);

#[cfg(test)]
impl Serialize for IdText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut text = Uuid::encode_buffer();
        s.serialize_str(self.0.hyphenated().encode_lower(&mut text))
    }
}

/// `{"count","queued","duplicate","error"}` of the counts-only answer (flag 2), plus
/// `"buffered"` (ours, additive) when the disk spool took some.
pub(super) fn counts(results: &[PushResult]) -> Value {
    let of = |status: &str| results.iter().filter(|r| r.status() == status).count();
    let mut counts = json!({
        "count": results.len(),
        "queued": of("queued"),
        "duplicate": of("duplicate"),
        "error": of("failed"),
    });
    let buffered = of("buffered");
    if buffered > 0 {
        counts["buffered"] = buffered.into();
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::push::{Failure, FrameOutcome};

    fn result(transaction_id: &str, outcome: FrameOutcome) -> PushResult {
        PushResult {
            queue: "acme/orders".into(),
            partition: "p".into(),
            transaction_id: transaction_id.into(),
            minted_id: Uuid::now_v7(),
            outcome,
        }
    }

    #[test]
    fn the_written_answer_is_what_serde_writes() {
        let id = Uuid::now_v7();
        let results = [
            result(
                "t-0",
                FrameOutcome::Queued {
                    message_id: id,
                    offset: 7,
                },
            ),
            result(
                "t-\"1\"\n\u{1}é",
                FrameOutcome::Duplicate {
                    message_id: id,
                    offset: None,
                },
            ),
            result("", FrameOutcome::Buffered { message_id: id }),
            result("t-3", Failure::refusal("queue acme/orders is \"full\"")),
        ];
        for (index, r) in results.iter().enumerate() {
            let item = ItemOut::new(index * 1000, r);
            let mut written = Vec::new();
            item.write(&mut written);
            let serde = serde_json::to_vec(&item).expect("serde");
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&serde)
            );
        }
    }
}
