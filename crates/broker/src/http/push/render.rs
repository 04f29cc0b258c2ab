//! The answers of a push (docs/wire.md §5.2, §6.4): 201 with one element per message, or the
//! counts object of a binary push with flag 2.

use crate::engine::tenant::{local, local_text};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::borrow::Cow;

use serde::Serialize;
use serde_json::{json, Value};

use uuid::Uuid;

use crate::engine::push::PushResult;

/// The 201 answer of a push: one element per message, in input order.
pub(super) fn created(results: &[PushResult]) -> Response {
    let out: Vec<ItemOut<'_>> = results
        .iter()
        .enumerate()
        .map(|(index, r)| ItemOut::new(index, r))
        .collect();
    (StatusCode::CREATED, Json(out)).into_response()
}

/// One element of the 201 answer (docs/wire.md §5.2), borrowing from its result: a push of
/// many small messages renders one of these per message.
#[derive(Serialize)]
struct ItemOut<'a> {
    index: usize,
    message_id: IdText,
    transaction_id: &'a str,
    #[serde(rename = "queueName")]
    queue_name: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
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
}

/// A message id written as its hyphenated text straight into the answer, with no `String`.
struct IdText(Uuid);

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
