//! The JSON push body (docs/wire.md §5.1): `{"items":[…]}` parsed without re-serialising
//! payloads (each payload is a zero-copy slice of the request body). The transaction body's
//! push operations parse with [`parse_item`] too.

use axum::body::Bytes;
use queen_proto::scalar::{ArrayOr, ObjectOr};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::engine::push::PushItem;
use crate::error::{Error, Result};
use crate::http::extract::json_body;

/// The body read in one pass: the items, each payload a borrowed slice, are read while the
/// envelope is (the payloads dominate the body, so each extra pass is a scan of all of them).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    items: Option<ArrayOr<ObjectOr<RawItem<'a>>>>,
}

/// One item as sent. Every field is kept raw so its type can be checked with a precise
/// message; `present` keeps an explicit `null` (a valid payload) apart from absence.
#[derive(Deserialize)]
struct RawItem<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    queue: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    partition: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    #[serde(
        rename = "transactionId",
        borrow,
        default,
        deserialize_with = "present"
    )]
    transaction_id: Option<&'a RawValue>,
    #[serde(rename = "traceId", borrow, default, deserialize_with = "present")]
    trace_id: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Parses `{"items":[…]}` into push items; any bad item refuses the whole body.
pub(super) fn parse_items(body: &Bytes) -> Result<Vec<PushItem>> {
    let envelope: Envelope<'_> = json_body(body)?;
    let items = match envelope.items {
        Some(ArrayOr::Array(items)) => items,
        Some(ArrayOr::NotArray) => return Err(Error::bad("bad body: items must be an array")),
        None => return Err(Error::bad("bad body: items is required")),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let item = match item {
                ObjectOr::Object(item) => read_item(body, item),
                ObjectOr::NotObject => Err(Error::bad("not a valid item object")),
            };
            item.map_err(|e| Error::bad(format!("item {index}: {e}")))
        })
        .collect()
}

/// One item given as its own JSON text (the transaction body's push operations).
pub(crate) fn parse_item(body: &Bytes, raw: &RawValue) -> Result<PushItem> {
    let item: RawItem<'_> = serde_json::from_str(raw.get())
        .map_err(|e| Error::bad(format!("not a valid item object: {e}")))?;
    read_item(body, item)
}

fn read_item(body: &Bytes, item: RawItem<'_>) -> Result<PushItem> {
    let queue =
        string_field("queue", item.queue)?.ok_or_else(|| Error::bad("queue is required"))?;
    let payload = item
        .payload
        .or(item.data)
        .ok_or_else(|| Error::bad("payload is required"))?;
    // A malformed traceId is dropped rather than refused: it is optional metadata.
    let trace_id = item
        .trace_id
        .and_then(|t| serde_json::from_str::<String>(t.get()).ok())
        .and_then(|t| uuid::Uuid::parse_str(&t).ok());
    Ok(PushItem {
        queue,
        partition: string_field("partition", item.partition)?,
        transaction_id: string_field("transactionId", item.transaction_id)?,
        trace_id,
        payload: share(body, payload.get().as_bytes()),
        message_id: None,
        producer_sub: None,
    })
}

/// A string field: absent or `null` → `None`; any other non-string → 400.
fn string_field(name: &str, raw: Option<&RawValue>) -> Result<Option<String>> {
    match raw {
        None => Ok(None),
        Some(r) if r.get() == "null" => Ok(None),
        Some(r) => serde_json::from_str::<String>(r.get())
            .map(Some)
            .map_err(|_| Error::bad(format!("{name} must be a string"))),
    }
}

/// `part` as a zero-copy slice of `body` when it lies inside it (it always does for values
/// borrowed from the body), else a copy.
fn share(body: &Bytes, part: &[u8]) -> Bytes {
    let start = body.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    if at >= start && at + part.len() <= start + body.len() {
        body.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}
