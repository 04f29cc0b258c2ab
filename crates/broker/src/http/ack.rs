//! Routes of the ack: `POST /api/v1/ack` and `POST /api/v1/ack/batch` (docs/wire.md §8).
//! Parsing and rendering only; the decisions live in `engine::ack` and SQL.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use queen_proto::name::{check_id, check_text};
use queen_proto::scalar::{ArrayOr, ObjectOr, Scalar};
use queen_proto::wire::QUEUE_MODE;
use queen_proto::{LeaseId, Name, PartitionId};
use serde::Deserialize;

use crate::engine::ack::{self, Ack, AckOutcome, AckStatus};
use crate::engine::tenant::Tenant;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::auth::CallerTenant;
use crate::http::extract::{json_object, RawBody};
use crate::http::json_text;

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/ack", post(ack_one))
        .route("/api/v1/ack/batch", post(ack_batch))
}

/// One acknowledgment object as the client wrote it, read straight from the body (no
/// `Value` tree per item); `parse_ack` decides what each field means.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct AckItem<'a> {
    #[serde(borrow)]
    transaction_id: Scalar<'a>,
    #[serde(borrow)]
    partition_id: Scalar<'a>,
    #[serde(borrow)]
    status: Scalar<'a>,
    #[serde(borrow)]
    error: Scalar<'a>,
    #[serde(borrow)]
    lease_id: Scalar<'a>,
    #[serde(borrow)]
    pub(crate) consumer_group: Scalar<'a>,
}

/// `{"acknowledgments":[…],"consumerGroup"}`, read in one pass.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AckBatch<'a> {
    #[serde(borrow)]
    acknowledgments: Option<ArrayOr<ObjectOr<AckItem<'a>>>>,
    #[serde(borrow, default)]
    consumer_group: Scalar<'a>,
}

/// One element of the answer, in request order, written by [`AckAnswer::write`] (serde's
/// derive only checks it in the tests).
#[cfg_attr(test, derive(serde::Serialize))]
#[cfg_attr(test, serde(rename_all = "camelCase"))]
struct AckAnswer<'a> {
    index: usize,
    /// Echoed as sent (`null` when absent or not a scalar).
    transaction_id: &'a Scalar<'a>,
    success: bool,
    error: Option<String>,
    lease_released: bool,
    dlq: bool,
    noop: bool,
}

/// `{"transactionId","partitionId","status","error","consumerGroup","leaseId"}` → a
/// one-element answer array.
async fn ack_one(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Response> {
    let item: AckItem<'_> = json_object(&body)?;
    let group = group_name(&item.consumer_group)?;
    answer(&st, &[ObjectOr::Object(item)], &group, &tenant).await
}

/// `{"acknowledgments":[…],"consumerGroup"}` → one answer element per acknowledgment.
async fn ack_batch(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Response> {
    let request: AckBatch<'_> = json_object(&body)?;
    let Some(ArrayOr::Array(items)) = request.acknowledgments else {
        return Err(Error::bad("bad body: acknowledgments must be an array"));
    };
    let group = group_name(&request.consumer_group)?;
    answer(&st, &items, &group, &tenant).await
}

/// Applies the well-formed items and renders every item, malformed ones included, in
/// request order. HTTP 200 even when items are refused.
async fn answer(
    st: &Engine,
    items: &[ObjectOr<AckItem<'_>>],
    group: &str,
    tenant: &Tenant,
) -> Result<Response> {
    // The well-formed items go to the engine in request order; each item keeps its refusal.
    let mut valid: Vec<Ack> = Vec::with_capacity(items.len());
    let refusals: Vec<Option<String>> = items
        .iter()
        .map(|item| {
            let parsed = match item {
                ObjectOr::Object(item) => parse_ack(item, group),
                ObjectOr::NotObject => Err("acknowledgment is not a JSON object".into()),
            };
            parsed.map(|ack| valid.push(ack)).err()
        })
        .collect();
    let mut applied = ack::acknowledge(&st.ack, &valid, tenant).await?.into_iter();
    let rendered: Vec<AckAnswer<'_>> = items
        .iter()
        .zip(refusals)
        .enumerate()
        .map(|(index, (item, refusal))| {
            let outcome = match refusal {
                None => applied.next().unwrap_or_default(),
                Some(e) => AckOutcome::refused(e),
            };
            let transaction_id = match item {
                ObjectOr::Object(item) => &item.transaction_id,
                ObjectOr::NotObject => &Scalar::Null,
            };
            AckAnswer::new(index, transaction_id, outcome)
        })
        .collect();
    let body = json_text::array(&rendered, 128, |out, a| a.write(out));
    Ok(json_text::response(StatusCode::OK, body))
}

impl<'a> AckAnswer<'a> {
    fn new(index: usize, transaction_id: &'a Scalar<'a>, o: AckOutcome) -> Self {
        AckAnswer {
            index,
            transaction_id,
            success: o.success,
            error: o.error,
            lease_released: o.lease_released,
            dlq: o.dlq,
            noop: o.noop,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"index\":");
        json_text::int(out, self.index);
        out.extend_from_slice(b",\"transactionId\":");
        json_text::value(out, self.transaction_id);
        out.extend_from_slice(b",\"success\":");
        json_text::bool(out, self.success);
        out.extend_from_slice(b",\"error\":");
        json_text::opt_str(out, self.error.as_deref());
        out.extend_from_slice(b",\"leaseReleased\":");
        json_text::bool(out, self.lease_released);
        out.extend_from_slice(b",\"dlq\":");
        json_text::bool(out, self.dlq);
        out.extend_from_slice(b",\"noop\":");
        json_text::bool(out, self.noop);
        out.push(b'}');
    }
}

/// The consumer group of a request: null, absent or empty means queue mode; anything else
/// must be a name by the same rule as the pop's `consumerGroup` (never trimmed).
pub(crate) fn group_name(value: &Scalar<'_>) -> Result<String> {
    Ok(Name::from_json("consumerGroup", value)?
        .map_or_else(|| QUEUE_MODE.to_string(), Name::into_string))
}

/// One acknowledgement object, or the per-item error that refuses it.
pub(crate) fn parse_ack(item: &AckItem<'_>, group: &str) -> std::result::Result<Ack, String> {
    let transaction_id = match item.transaction_id.as_str() {
        Some(t) if !t.is_empty() => t,
        _ => return Err("transactionId is missing".into()),
    };
    check_id("transactionId", transaction_id).map_err(|e| e.to_string())?;
    let error = item.error.as_str();
    if let Some(text) = error {
        check_text("error", text).map_err(|e| e.to_string())?;
    }
    let lease_id = item.lease_id.as_str().unwrap_or_default();
    let lease_id = LeaseId::parse("leaseId", lease_id).map_err(|e| e.to_string())?;
    let partition_id = match PartitionId::from_json(&item.partition_id) {
        Ok(Some(id)) => id,
        Ok(None) => return Err("partitionId is missing".into()),
        Err(_) => return Err("partitionId is not a partition id".into()),
    };
    let status = match &item.status {
        // The clients map True/False to completed/failed; accept the booleans too.
        Scalar::Bool(true) => AckStatus::Completed,
        Scalar::Bool(false) => AckStatus::Failed,
        Scalar::Str(text) => AckStatus::normalise(Some(text)),
        Scalar::Null => AckStatus::Completed,
        // Any other status is not a completion the client stated: never skip it.
        Scalar::Int(_) | Scalar::Other => AckStatus::Failed,
    };
    Ok(Ack {
        transaction_id: transaction_id.to_string(),
        partition_id,
        status,
        error: error.map(str::to_string),
        group: group.to_string(),
        lease_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::extract::json_body;
    use serde_json::{json, Value};

    #[test]
    fn per_item_errors_name_the_problem() {
        let parse = |v: Value| parse_ack(&AckItem::deserialize(&v).expect("an object"), "g");
        assert_eq!(
            parse(json!({"partitionId": "1"})).err().as_deref(),
            Some("transactionId is missing")
        );
        assert_eq!(
            parse(json!({"transactionId": "t"})).err().as_deref(),
            Some("partitionId is missing")
        );
        for bad in [
            json!("abc"),
            json!("-1"),
            json!(-3),
            json!(1.5),
            json!([1]),
            json!("99999999999999999999"),
        ] {
            assert_eq!(
                parse(json!({"transactionId": "t", "partitionId": bad}))
                    .err()
                    .as_deref(),
                Some("partitionId is not a partition id")
            );
        }
        let ok = parse(
            json!({"transactionId": "t", "partitionId": "17", "status": false, "leaseId": null}),
        )
        .expect("valid");
        assert_eq!(
            (ok.partition_id.get(), ok.status, ok.lease_id.as_str()),
            (17, AckStatus::Failed, "")
        );
        let status = |s: Value| {
            parse(json!({"transactionId": "t", "partitionId": "1", "status": s})).map(|a| a.status)
        };
        assert_eq!(status(Value::Null), Ok(AckStatus::Completed));
        assert_eq!(status(json!(true)), Ok(AckStatus::Completed));
        assert_eq!(status(json!("retry")), Ok(AckStatus::Retry));
        for other in [json!(7), json!({"s": "completed"}), json!(["completed"])] {
            assert_eq!(status(other.clone()), Ok(AckStatus::Failed), "{other}");
        }
    }

    #[test]
    fn groups_default_to_queue_mode() {
        let name = |v: Value| group_name(&Scalar::from(&v)).map_err(|e| e.to_string());
        assert_eq!(
            group_name(&Scalar::Null)
                .map_err(|e| e.to_string())
                .as_deref(),
            Ok(QUEUE_MODE)
        );
        assert_eq!(name(Value::Null).as_deref(), Ok(QUEUE_MODE));
        assert_eq!(name(json!("")).as_deref(), Ok(QUEUE_MODE));
        assert_eq!(name(json!("billing")).as_deref(), Ok("billing"));
        for refused in [json!(7), json!(["g"]), json!(" g"), json!("g\u{0}")] {
            assert!(name(refused.clone()).is_err(), "{refused}");
        }
    }

    /// The batch body is read in one pass without a `Value` tree: escaped strings, non-object
    /// items and unknown keys keep the meaning they had, and the answer echoes each
    /// transaction id.
    #[test]
    fn batch_items_are_read_from_the_text() {
        let body = r#"{"consumerGroup": "g", "acknowledgments": [
            {"transactionId": "a\"b", "partitionId": 3, "status": "failed", "extra": [1]},
            7,
            {"transactionId": 5, "partitionId": "3"},
            {"transactionId": "c", "partitionId": "4", "leaseId": "L", "error": "why\n"}
        ]}"#;
        let batch: AckBatch<'_> = json_body(body.as_bytes()).expect("batch");
        assert_eq!(group_name(&batch.consumer_group).ok().as_deref(), Some("g"));
        let Some(ArrayOr::Array(items)) = batch.acknowledgments else {
            panic!("an array")
        };
        let parsed: Vec<_> = items
            .iter()
            .map(|item| match item {
                ObjectOr::Object(item) => parse_ack(item, "g")
                    .map(|a| (a.transaction_id, a.partition_id.get(), a.status, a.error)),
                ObjectOr::NotObject => Err("not an object".into()),
            })
            .collect();
        assert_eq!(
            parsed,
            [
                Ok(("a\"b".into(), 3, AckStatus::Failed, None)),
                Err("not an object".into()),
                Err("transactionId is missing".into()),
                Ok(("c".into(), 4, AckStatus::Completed, Some("why\n".into()))),
            ]
        );
        let ObjectOr::Object(third) = &items[2] else {
            panic!("an object")
        };
        let answer = AckAnswer::new(2, &third.transaction_id, AckOutcome::refused("no"));
        assert_eq!(
            serde_json::to_value(&answer).expect("renders"),
            json!({"index": 2, "transactionId": 5, "success": false, "error": "no",
                   "leaseReleased": false, "dlq": false, "noop": false})
        );
    }

    #[test]
    fn the_written_answer_is_what_serde_writes() {
        let values = [json!(null), json!(true), json!(7), json!(-2.5)];
        let text = json!("t-\"q\"\n\u{7f}é");
        let ids: Vec<Scalar<'_>> = values.iter().chain([&text]).map(Scalar::from).collect();
        let outcomes = [
            AckOutcome::refused("bad \"leaseId\"\t"),
            AckOutcome {
                success: true,
                lease_released: true,
                dlq: true,
                noop: true,
                ..AckOutcome::default()
            },
        ];
        for (i, id) in ids.iter().enumerate() {
            for o in &outcomes {
                let answer = AckAnswer::new(i * 1000, id, o.clone());
                let mut written = Vec::new();
                answer.write(&mut written);
                let serde = serde_json::to_vec(&answer).expect("serde");
                assert_eq!(
                    String::from_utf8_lossy(&written),
                    String::from_utf8_lossy(&serde)
                );
            }
        }
    }
}
