//! The answers of a push (docs/wire.md §5.2, §6.4): 201 with one element per message, or the
//! counts object of a binary push with flag 2.

use crate::engine::tenant::{local, local_text};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};

use crate::engine::push::PushResult;

/// The 201 answer of a push: one element per message, in input order.
pub(super) fn created(results: &[PushResult]) -> Response {
    let out: Vec<ItemOut> = results
        .iter()
        .enumerate()
        .map(|(index, r)| ItemOut::new(index, r))
        .collect();
    (StatusCode::CREATED, Json(out)).into_response()
}

/// One element of the 201 answer (docs/wire.md §5.2).
#[derive(Serialize)]
struct ItemOut {
    index: usize,
    message_id: String,
    transaction_id: String,
    #[serde(rename = "queueName")]
    queue_name: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl ItemOut {
    fn new(index: usize, r: &PushResult) -> Self {
        ItemOut {
            index,
            message_id: r.message_id().to_string(),
            transaction_id: r.transaction_id.clone(),
            queue_name: local(&r.queue).to_string(),
            status: r.status(),
            offset: r.offset(),
            error: r.error().map(|e| local_text(e).into_owned()),
        }
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
