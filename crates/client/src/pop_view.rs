//! Pop answers read only as far as a consumer needs: [`PopBody`] keeps the answer's bytes and
//! [`PopBody::view`] borrows from them the fields an ack and a delivery check read (no owned
//! string per message, the payload not copied); [`AckRef`] acks by borrowing them back, and
//! [`Queen::ack_refs`] reads the ack answer only for its verdicts. For load generators and
//! other consumers whose cost per message matters; [`QueueRef::pop`] gives the owned shape.

use std::borrow::Cow;

use bytes::Bytes;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::{expect_json, AckStatus, Error, Queen, Result};

/// The bytes of a 2xx pop answer, as JSON (a framed `QPF1` answer is converted on receipt).
#[derive(Debug, Clone)]
pub struct PopBody {
    bytes: Bytes,
}

impl PopBody {
    pub(crate) fn new(bytes: Bytes) -> Self {
        Self { bytes }
    }

    /// The answer's JSON text.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The fields of the answer a consumer acks and checks with, borrowed from it.
    pub fn view(&self) -> Result<PopView<'_>> {
        serde_json::from_slice(&self.bytes).map_err(|e| Error::Decode(e.to_string()))
    }
}

/// A pop answer's lease and messages, borrowed (docs/wire.md §7.3); other keys are skipped.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PopView<'a> {
    /// The lease the batch is held under (empty for `autoAck` pops).
    #[serde(borrow, default)]
    pub lease_id: Cow<'a, str>,
    /// The delivered messages, in partition order (empty: nothing was claimable).
    #[serde(borrow, default)]
    pub messages: Vec<MessageView<'a>>,
}

/// One delivered message's ack key, payload, attempt and offset, borrowed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView<'a> {
    /// The producer's idempotency key; acks name the message by it.
    #[serde(borrow)]
    pub transaction_id: Cow<'a, str>,
    /// The partition's id; acks carry it.
    #[serde(borrow)]
    pub partition_id: Cow<'a, str>,
    /// The lease the message is held under (empty when delivered without one).
    #[serde(borrow, default)]
    pub lease_id: Cow<'a, str>,
    /// The payload as stored: raw JSON text, not copied.
    #[serde(borrow)]
    pub data: &'a RawValue,
    /// 1 on first delivery, more after nacks and lease expiries.
    #[serde(default)]
    pub delivery_attempt: Option<u32>,
    /// The message's offset in its partition.
    #[serde(default)]
    pub offset: Option<i64>,
}

impl MessageView<'_> {
    /// A `completed` ack of this message under the lease it was delivered with.
    pub fn completed(&self) -> AckRef<'_> {
        AckRef {
            transaction_id: &self.transaction_id,
            partition_id: &self.partition_id,
            status: AckStatus::Completed,
            lease_id: Some(self.lease_id.as_ref()).filter(|l| !l.is_empty()),
        }
    }
}

/// One acknowledgment borrowing its keys (docs/wire.md §8.1), without a nack reason.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckRef<'a> {
    /// The acked message's transactionId.
    pub transaction_id: &'a str,
    /// The acked message's partition id.
    pub partition_id: &'a str,
    /// The verdict.
    pub status: AckStatus,
    /// The lease it was delivered under; `None` acks lease-less.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AckRefsBody<'a> {
    acknowledgments: &'a [AckRef<'a>],
    consumer_group: Option<&'a str>,
}

/// The one field of an ack answer's element that [`Queen::ack_refs`] reads.
#[derive(Deserialize)]
struct Verdict {
    success: bool,
}

impl Queen {
    /// `POST /api/v1/ack/batch` of borrowed acks; answers how many the broker refused
    /// (`success: false`), reading nothing else of its answer.
    pub async fn ack_refs(&self, acks: &[AckRef<'_>], group: Option<&str>) -> Result<usize> {
        let body = AckRefsBody {
            acknowledgments: acks,
            consumer_group: group,
        };
        let req = self.request(Method::POST, "/api/v1/ack/batch").json(&body);
        let verdicts: Vec<Verdict> = expect_json(req.send().await?).await?;
        if verdicts.len() != acks.len() {
            return Err(Error::Decode(format!(
                "ack answered {} results for {} items",
                verdicts.len(),
                acks.len()
            )));
        }
        Ok(verdicts.iter().filter(|v| !v.success).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AckItem, PopResponse};

    const ANSWER: &str = r#"{"success":true,"queue":"orders","partition":"cust-42","partitionId":"17",
        "leaseId":"L","consumerGroup":"billing",
        "messages":[{"id":"M","transactionId":"T\u0031","traceId":null,"data":{"orderId":91},
            "producerSub":null,"createdAt":"2026-07-30T09:12:44.881Z","partitionId":"17",
            "partition":"cust-42","leaseId":"L","consumerGroup":"billing","deliveryAttempt":2,"offset":41},
            {"id":"N","transactionId":"U","data":[1,"x"],"partitionId":"17","leaseId":""}],
        "partitionsClaimed":1}"#;

    #[test]
    fn the_view_reads_what_the_owned_answer_reads() {
        let body = PopBody::new(Bytes::from_static(ANSWER.as_bytes()));
        let view = body.view().unwrap();
        let owned: PopResponse = serde_json::from_str(ANSWER).unwrap();
        assert_eq!(view.lease_id, owned.lease_id);
        assert_eq!(view.messages.len(), owned.messages.len());
        for (v, o) in view.messages.iter().zip(&owned.messages) {
            assert_eq!(v.transaction_id, o.transaction_id);
            assert_eq!(v.partition_id, o.partition_id);
            assert_eq!(v.lease_id, o.lease_id);
            assert_eq!(v.data.get(), o.data.get());
            assert_eq!((v.delivery_attempt, v.offset), (o.delivery_attempt, o.offset));
            // The borrowed ack is the owned one, less the null nack reason.
            let mut expected = serde_json::to_value(AckItem::completed(o)).unwrap();
            expected.as_object_mut().unwrap().remove("error");
            assert_eq!(serde_json::to_value(v.completed()).unwrap(), expected);
        }
        assert_eq!(view.messages[0].transaction_id, "T1", "escapes are decoded");
        assert!(view.messages[1].completed().lease_id.is_none());
    }

    #[test]
    fn a_message_without_its_ack_key_is_refused() {
        let body = PopBody::new(Bytes::from_static(br#"{"messages":[{"data":1}]}"#));
        assert!(body.view().is_err());
        let empty = PopBody::new(Bytes::from_static(br#"{"success":true,"messages":[]}"#));
        assert!(empty.view().unwrap().messages.is_empty());
    }
}
