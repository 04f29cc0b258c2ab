//! The JSON shapes of push, pop and ack (docs/wire.md §5, §7.3, §8), typed for the SDK.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// One message to push. The payload is raw JSON text, sent verbatim.
#[derive(Debug, Clone)]
pub struct PushItem {
    /// The message body: one JSON document, stored and delivered byte for byte.
    pub payload: Box<RawValue>,
    /// `None`: the broker uses the minted message id as the transactionId.
    pub transaction_id: Option<String>,
}

impl PushItem {
    /// An item from already-serialized JSON; fails if `json` is not one JSON document.
    pub fn raw(json: String, transaction_id: Option<String>) -> crate::Result<Self> {
        let payload =
            RawValue::from_string(json).map_err(|e| crate::Error::Encode(e.to_string()))?;
        Ok(Self {
            payload,
            transaction_id,
        })
    }

    /// An item from any serializable value.
    pub fn json<T: Serialize>(value: &T, transaction_id: Option<String>) -> crate::Result<Self> {
        let payload = serde_json::value::to_raw_value(value)
            .map_err(|e| crate::Error::Encode(e.to_string()))?;
        Ok(Self {
            payload,
            transaction_id,
        })
    }
}

#[derive(Serialize)]
pub(crate) struct PushBody<'a> {
    pub items: Vec<PushWireItem<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PushWireItem<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub payload: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<&'a str>,
}

/// One element of the push answer, in input order.
#[derive(Debug, Clone, Deserialize)]
pub struct PushResult {
    /// The item's position in the request.
    #[serde(default)]
    pub index: usize,
    /// The stored message's id (a UUIDv7); absent when the item failed.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The item's transactionId (the one sent, or the minted message id).
    #[serde(default, alias = "transactionId")]
    pub transaction_id: Option<String>,
    /// `queued`, `duplicate`, `failed` (or `buffered`).
    pub status: String,
    /// Why the item failed (`status: failed`).
    #[serde(default)]
    pub error: Option<String>,
    /// The message's offset in its partition, when stored.
    #[serde(default)]
    pub offset: Option<i64>,
}

impl PushResult {
    /// Whether this item was stored now (not a duplicate, not failed).
    pub fn is_queued(&self) -> bool {
        self.status == "queued"
    }
}

/// A non-empty pop answer (an empty one is `None` in [`crate::QueueRef::pop`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PopResponse {
    /// The queue the batch came from.
    #[serde(default)]
    pub queue: String,
    /// The lease the batch is held under (empty for `autoAck` pops).
    #[serde(default)]
    pub lease_id: String,
    /// The consumer group (`None`: queue mode).
    #[serde(default)]
    pub consumer_group: Option<String>,
    /// The delivered messages, in partition order.
    #[serde(default)]
    pub messages: Vec<Message>,
}

/// One delivered message (docs/wire.md §7.3); `data` is the stored JSON, verbatim.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The message id (a UUIDv7 minted at push).
    pub id: String,
    /// The producer's idempotency key; acks name the message by it.
    pub transaction_id: String,
    /// The partition's id (an opaque decimal string); acks carry it.
    pub partition_id: String,
    /// The partition's name.
    #[serde(default)]
    pub partition: String,
    /// The lease the message is held under (empty when delivered without one).
    #[serde(default)]
    pub lease_id: String,
    /// The consumer group it was delivered to (`None`: queue mode).
    #[serde(default)]
    pub consumer_group: Option<String>,
    /// The payload as stored: raw JSON text.
    pub data: Box<RawValue>,
    /// The validated `sub` of the producer's token when the broker runs with auth on.
    #[serde(default)]
    pub producer_sub: Option<String>,
    /// The trace id the producer attached, if any.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// When it was pushed (ISO-8601 UTC, milliseconds).
    #[serde(default)]
    pub created_at: Option<String>,
    /// 1 on first delivery, more after nacks and lease expiries.
    #[serde(default)]
    pub delivery_attempt: Option<u32>,
    /// The message's offset in its partition.
    #[serde(default)]
    pub offset: Option<i64>,
}

/// Ack outcome a consumer reports for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AckStatus {
    /// Done: the cursor moves past it.
    Completed,
    /// Failed: redelivered until the queue's retry limit, then dead-lettered.
    Failed,
    /// Deliver again without charging the retry budget.
    Retry,
    /// Dead-letter it now.
    Dlq,
}

/// One acknowledgment (docs/wire.md §8.1).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckItem {
    /// The acked message's transactionId.
    pub transaction_id: String,
    /// The acked message's partition id.
    pub partition_id: String,
    /// The verdict.
    pub status: AckStatus,
    /// The nack reason, kept with a dead letter.
    pub error: Option<String>,
    /// The lease it was delivered under; `None` acks lease-less (see docs/wire.md §8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
}

impl AckItem {
    /// A `completed` ack of `msg` under the lease it was delivered with.
    pub fn completed(msg: &Message) -> Self {
        Self::with_status(msg, AckStatus::Completed, None)
    }

    /// An ack of `msg` with any status; `error` is the nack reason.
    pub fn with_status(msg: &Message, status: AckStatus, error: Option<String>) -> Self {
        Self {
            transaction_id: msg.transaction_id.clone(),
            partition_id: msg.partition_id.clone(),
            status,
            error,
            lease_id: Some(msg.lease_id.clone()).filter(|l| !l.is_empty()),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AckBatchBody<'a> {
    pub acknowledgments: &'a [AckItem],
    pub consumer_group: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AckOneBody<'a> {
    #[serde(flatten)]
    pub item: &'a AckItem,
    pub consumer_group: Option<&'a str>,
}

/// One element of the ack answer, in request order.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AckResult {
    /// The item's position in the request.
    #[serde(default)]
    pub index: usize,
    /// The item's transactionId.
    #[serde(default)]
    pub transaction_id: Option<String>,
    /// Whether the verdict took effect (a refusal still answers HTTP 200).
    pub success: bool,
    /// Why it was refused.
    #[serde(default)]
    pub error: Option<String>,
    /// This call released the batch's lease.
    #[serde(default)]
    pub lease_released: bool,
    /// This call dead-lettered the message.
    #[serde(default)]
    pub dlq: bool,
    /// Already acked before: nothing changed.
    #[serde(default)]
    pub noop: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pop_answer_of_wire_md_parses() {
        let body = json!({"success":true,"queue":"orders","partition":"cust-42","partitionId":"17",
            "leaseId":"L","consumerGroup":"billing",
            "messages":[{"id":"M","transactionId":"T","traceId":null,"data":{"orderId":91},
                "producerSub":null,"createdAt":"2026-07-30T09:12:44.881Z","partitionId":"17",
                "partition":"cust-42","leaseId":"L","consumerGroup":"billing","deliveryAttempt":1,"offset":41}],
            "partitionsClaimed":1});
        let pop: PopResponse = serde_json::from_value(body).unwrap();
        let m = &pop.messages[0];
        assert_eq!(
            (m.partition_id.as_str(), m.offset, m.delivery_attempt),
            ("17", Some(41), Some(1))
        );
        assert_eq!(m.data.get(), r#"{"orderId":91}"#);
    }

    #[test]
    fn acks_carry_the_lease_only_when_there_is_one() {
        let mut msg: Message = serde_json::from_value(json!({
            "id":"M","transactionId":"T","partitionId":"17","data":null,"leaseId":"L"}))
        .unwrap();
        let with = serde_json::to_value(AckItem::completed(&msg)).unwrap();
        assert_eq!(
            with,
            json!({"transactionId":"T","partitionId":"17","status":"completed","error":null,"leaseId":"L"})
        );
        msg.lease_id.clear();
        let item = AckItem::with_status(&msg, AckStatus::Failed, Some("boom".into()));
        let body = serde_json::to_value(AckBatchBody {
            acknowledgments: &[item],
            consumer_group: None,
        })
        .unwrap();
        assert_eq!(
            body,
            json!({"acknowledgments":[{"transactionId":"T","partitionId":"17","status":"failed","error":"boom"}],
                   "consumerGroup":null})
        );
    }

    #[test]
    fn push_items_are_sent_verbatim() {
        let item = PushItem::raw(r#"{"a": 1}"#.into(), Some("t1".into())).unwrap();
        let body = PushBody {
            items: vec![PushWireItem {
                queue: "q",
                partition: "p",
                payload: &item.payload,
                transaction_id: None,
            }],
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"items":[{"queue":"q","partition":"p","payload":{"a": 1}}]}"#
        );
        assert!(PushItem::raw("not json".into(), None).is_err());
    }
}
