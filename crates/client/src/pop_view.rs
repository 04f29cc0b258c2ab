//! Pop answers read only as far as a consumer needs: [`PopBody`] keeps the answer's bytes and
//! [`PopBody::view`] borrows from them the fields an ack and a delivery check read (no owned
//! string per message; the payload is located, not parsed, copied or validated);
//! [`AckRef`] acks by borrowing them back, and [`Queen::ack_refs`] reads the ack answer only
//! for its verdicts. For load generators and other consumers whose cost per message matters;
//! [`crate::QueueRef::pop`] gives the owned, fully parsed shape.

use std::borrow::Cow;

use bytes::Bytes;
use reqwest::header::CONTENT_TYPE;
use reqwest::Method;
use serde::Serialize;

use crate::json_scan::Scan;
use crate::json_write;
use crate::{api_error, retry_after, AckStatus, Error, Queen, Result};

/// The bytes of a 2xx pop answer, as JSON (a framed `QPF1` answer is converted on receipt).
#[derive(Debug, Clone)]
pub struct PopBody {
    bytes: Bytes,
}

impl PopBody {
    /// A pop answer's JSON text received some other way (the SDK's pops make their own).
    pub fn new(bytes: Bytes) -> Self {
        Self { bytes }
    }

    /// The answer's JSON text.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The lease and the messages' ack keys, payloads, attempts and offsets, borrowed from the
    /// answer; every other key is skipped unread.
    pub fn view(&self) -> Result<PopView<'_>> {
        let mut scan = Scan::new(&self.bytes);
        let mut view = PopView {
            lease_id: Cow::Borrowed(""),
            messages: Vec::new(),
        };
        scan.object(|s, key| match key {
            b"leaseId" => {
                view.lease_id = s.string_or_null()?;
                Ok(())
            }
            b"messages" => s.array(|s| {
                view.messages.push(MessageView::read(s)?);
                Ok(())
            }),
            _ => s.skip().map(|_| ()),
        })?;
        scan.end()?;
        Ok(view)
    }
}

/// A pop answer's lease and messages, borrowed (docs/wire.md §7.3).
#[derive(Debug)]
pub struct PopView<'a> {
    /// The lease the batch is held under (empty for `autoAck` pops).
    pub lease_id: Cow<'a, str>,
    /// The delivered messages, in partition order (empty: nothing was claimable).
    pub messages: Vec<MessageView<'a>>,
}

/// One delivered message's ack key, payload, attempt and offset, borrowed.
#[derive(Debug)]
pub struct MessageView<'a> {
    /// The producer's idempotency key; acks name the message by it.
    pub transaction_id: Cow<'a, str>,
    /// The partition's id; acks carry it.
    pub partition_id: Cow<'a, str>,
    /// The lease the message is held under (empty when delivered without one).
    pub lease_id: Cow<'a, str>,
    /// The payload's JSON text as the broker sent it (located, not parsed or validated).
    pub data: &'a [u8],
    /// 1 on first delivery, more after nacks and lease expiries.
    pub delivery_attempt: Option<u32>,
    /// The message's offset in its partition.
    pub offset: Option<i64>,
}

impl<'a> MessageView<'a> {
    fn read(scan: &mut Scan<'a>) -> Result<Self> {
        let (mut transaction_id, mut partition_id, mut data) = (None, None, None);
        let mut m = MessageView {
            transaction_id: Cow::Borrowed(""),
            partition_id: Cow::Borrowed(""),
            lease_id: Cow::Borrowed(""),
            data: b"",
            delivery_attempt: None,
            offset: None,
        };
        scan.object(|s, key| {
            match key {
                b"transactionId" => transaction_id = Some(s.string()?),
                b"partitionId" => partition_id = Some(s.string()?),
                b"leaseId" => m.lease_id = s.string_or_null()?,
                b"data" => data = Some(s.skip()?),
                b"deliveryAttempt" => {
                    m.delivery_attempt = match s.int_or_null()? {
                        Some(n) => Some(u32::try_from(n).map_err(|_| {
                            Error::Decode(format!("deliveryAttempt {n} out of range"))
                        })?),
                        None => None,
                    }
                }
                b"offset" => m.offset = s.int_or_null()?,
                _ => {
                    s.skip()?;
                }
            }
            Ok(())
        })?;
        let missing = |what| Error::Decode(format!("a popped message without {what}"));
        m.transaction_id = transaction_id.ok_or_else(|| missing("transactionId"))?;
        m.partition_id = partition_id.ok_or_else(|| missing("partitionId"))?;
        m.data = data.ok_or_else(|| missing("data"))?;
        Ok(m)
    }

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

/// The `/ack/batch` body of `acks` that [`Queen::ack_refs`] sends, written by hand
/// (docs/wire.md §8.1).
pub fn ack_body(acks: &[AckRef<'_>], group: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + acks.len() * 140);
    out.extend_from_slice(br#"{"acknowledgments":["#);
    for (n, ack) in acks.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"transactionId":"#);
        json_write::string(&mut out, ack.transaction_id);
        out.extend_from_slice(br#","partitionId":"#);
        json_write::string(&mut out, ack.partition_id);
        out.extend_from_slice(br#","status":"#);
        json_write::string(&mut out, status_text(ack.status));
        if let Some(lease) = ack.lease_id {
            out.extend_from_slice(br#","leaseId":"#);
            json_write::string(&mut out, lease);
        }
        out.push(b'}');
    }
    out.extend_from_slice(br#"],"consumerGroup":"#);
    match group {
        Some(group) => json_write::string(&mut out, group),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    out
}

/// The wire name of a verdict (as `AckStatus` serializes).
fn status_text(status: AckStatus) -> &'static str {
    match status {
        AckStatus::Completed => "completed",
        AckStatus::Failed => "failed",
        AckStatus::Retry => "retry",
        AckStatus::Dlq => "dlq",
    }
}

impl Queen {
    /// `POST /api/v1/ack/batch` of borrowed acks; answers how many the broker refused
    /// (`success: false`), reading nothing else of its answer.
    pub async fn ack_refs(&self, acks: &[AckRef<'_>], group: Option<&str>) -> Result<usize> {
        let req = self
            .request(Method::POST, crate::hot_urls::ACK_BATCH)
            .header(CONTENT_TYPE, "application/json")
            .body(ack_body(acks, group));
        let resp = req.send().await?;
        let (status, retry_after) = (resp.status(), retry_after(&resp));
        let answer = resp.bytes().await?;
        if !status.is_success() {
            return Err(api_error(status, retry_after, &answer));
        }
        let (answered, refused) = ack_verdicts(&answer)?;
        if answered != acks.len() {
            return Err(Error::Decode(format!(
                "ack answered {answered} results for {} items",
                acks.len()
            )));
        }
        Ok(refused)
    }
}

/// An ack answer's element count and how many of them say `success: false` (what
/// [`Queen::ack_refs`] reads of it).
pub fn ack_verdicts(answer: &[u8]) -> Result<(usize, usize)> {
    let (mut answered, mut refused) = (0, 0);
    let mut scan = Scan::new(answer);
    scan.array(|s| {
        answered += 1;
        let mut success = None;
        s.object(|s, key| match key {
            b"success" => {
                success = Some(s.bool()?);
                Ok(())
            }
            _ => s.skip().map(|_| ()),
        })?;
        match success {
            Some(ok) => {
                refused += usize::from(!ok);
                Ok(())
            }
            None => Err(Error::Decode("an ack result without success".into())),
        }
    })?;
    scan.end()?;
    Ok((answered, refused))
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
            assert_eq!(v.data, o.data.get().as_bytes());
            assert_eq!(
                (v.delivery_attempt, v.offset),
                (o.delivery_attempt, o.offset)
            );
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

    #[test]
    fn a_cut_answer_is_an_error_never_a_panic() {
        for cut in 0..ANSWER.len() {
            let body = PopBody::new(Bytes::copy_from_slice(&ANSWER.as_bytes()[..cut]));
            assert!(body.view().is_err(), "{cut} bytes read as a whole answer");
        }
    }

    #[test]
    fn hand_written_ack_bodies_are_what_serde_writes() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct AckRefsBody<'a> {
            acknowledgments: &'a [AckRef<'a>],
            consumer_group: Option<&'a str>,
        }
        let acks = [
            AckRef {
                transaction_id: "m1",
                partition_id: "17",
                status: AckStatus::Completed,
                lease_id: Some("L"),
            },
            AckRef {
                transaction_id: "odd \"id\"\n",
                partition_id: "18",
                status: AckStatus::Dlq,
                lease_id: None,
            },
        ];
        for (acks, group) in [
            (&acks[..], None),
            (&acks[..1], Some("g\\1")),
            (&[][..], None),
        ] {
            let ours: serde_json::Value = serde_json::from_slice(&ack_body(acks, group)).unwrap();
            let serde = serde_json::to_value(AckRefsBody {
                acknowledgments: acks,
                consumer_group: group,
            })
            .unwrap();
            assert_eq!(ours, serde);
        }
        for status in [
            AckStatus::Completed,
            AckStatus::Failed,
            AckStatus::Retry,
            AckStatus::Dlq,
        ] {
            assert_eq!(serde_json::to_value(status).unwrap(), status_text(status));
        }
    }

    #[test]
    fn ack_verdicts_count_the_refused() {
        let answer = br#"[{"index":0,"transactionId":"a","success":true,"error":null},
            {"index":1,"transactionId":"b\"","success":false,"error":"lease expired"}]"#;
        assert_eq!(ack_verdicts(answer).unwrap(), (2, 1));
        assert_eq!(ack_verdicts(b"[]").unwrap(), (0, 0));
        assert!(ack_verdicts(br#"[{"index":0}]"#).is_err());
        assert!(ack_verdicts(br#"{"error":"x"}"#).is_err());
    }
}
