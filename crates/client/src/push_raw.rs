//! Push bodies written in place (docs/wire.md §5.1), for producers whose cost per message
//! matters: [`RawPush`] appends each payload's JSON text straight into the request body — no
//! item value, no copy, no check on the client (the broker parses every body and refuses one
//! whose payload is not JSON with a 400 naming the item) — and [`QueueRef::push_raw`] reads
//! the answer only for its statuses ([`PushTally`]). [`QueueRef::push`] is the checked,
//! fully answered form.

use bytes::Bytes;
use reqwest::header::CONTENT_TYPE;
use reqwest::Method;

use crate::json_scan::Scan;
use crate::{api_error, json_write, retry_after, Error, QueueRef, Result};

/// A JSON push body under construction, for the queue and partition it was made for.
#[derive(Debug, Clone)]
pub struct RawPush {
    body: Vec<u8>,
    /// `{"queue":…,"partition":…,"payload":` — the start of every item.
    head: Vec<u8>,
    items: usize,
}

impl RawPush {
    /// An empty push to `queue`'s queue and partition, with room for `items` payloads of
    /// about `payload_bytes` each.
    pub fn new(queue: &QueueRef, items: usize, payload_bytes: usize) -> Self {
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(br#"{"queue":"#);
        json_write::string(&mut head, queue.name());
        head.extend_from_slice(br#","partition":"#);
        json_write::string(&mut head, queue.push_partition());
        head.extend_from_slice(br#","payload":"#);
        let mut body = Vec::with_capacity(16 + items * (head.len() + payload_bytes + 48));
        body.extend_from_slice(br#"{"items":["#);
        Self {
            body,
            head,
            items: 0,
        }
    }

    /// Appends one item: `payload` writes its JSON text (one JSON document) into the body;
    /// `None` lets the broker use the minted message id as the transactionId.
    pub fn item(&mut self, transaction_id: Option<&str>, payload: impl FnOnce(&mut Vec<u8>)) {
        if self.items > 0 {
            self.body.push(b',');
        }
        self.body.extend_from_slice(&self.head);
        payload(&mut self.body);
        if let Some(id) = transaction_id {
            self.body.extend_from_slice(br#","transactionId":"#);
            json_write::string(&mut self.body, id);
        }
        self.body.push(b'}');
        self.items += 1;
    }

    /// Items appended so far.
    pub fn len(&self) -> usize {
        self.items
    }

    /// Whether no item was appended.
    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// The finished body and its item count.
    pub fn finish(mut self) -> (Bytes, usize) {
        self.body.extend_from_slice(b"]}");
        (self.body.into(), self.items)
    }
}

/// A push answer counted by status.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PushTally {
    /// Items stored now.
    pub queued: usize,
    /// Items already stored under their transactionId.
    pub duplicate: usize,
    /// Every other item (`failed`, `buffered`, or a status this SDK does not know).
    pub other: usize,
    /// The first item not stored now, as `item <index>: <status> <error>`.
    pub first_not_queued: Option<String>,
}

impl PushTally {
    /// Items the answer accounts for.
    pub fn total(&self) -> usize {
        self.queued + self.duplicate + self.other
    }

    /// Reads a push answer (docs/wire.md §5.2) for the statuses only.
    pub fn read(answer: &[u8]) -> Result<Self> {
        let mut tally = Self::default();
        let mut scan = Scan::new(answer);
        scan.array(|s| {
            let (mut index, mut status, mut error) = (None, None, None);
            s.object(|s, key| {
                match key {
                    b"index" => index = s.int_or_null()?,
                    b"status" => status = Some(s.string()?),
                    b"error" => error = Some(s.string_or_null()?),
                    _ => {
                        s.skip()?;
                    }
                }
                Ok(())
            })?;
            let status =
                status.ok_or_else(|| Error::Decode("a push result without status".into()))?;
            match status.as_ref() {
                "queued" => tally.queued += 1,
                "duplicate" => tally.duplicate += 1,
                _ => tally.other += 1,
            }
            if status != "queued" && tally.first_not_queued.is_none() {
                tally.first_not_queued = Some(format!(
                    "item {}: {status} {}",
                    index.unwrap_or(-1),
                    error.unwrap_or_default()
                ));
            }
            Ok(())
        })?;
        scan.end()?;
        Ok(tally)
    }
}

impl QueueRef {
    /// Sends `push` (made for this queue and partition), again after a 429 as
    /// [`crate::Queen::retry_429`] allows; the answer counted by status.
    pub async fn push_raw(&self, push: RawPush) -> Result<PushTally> {
        let (body, sent) = push.finish();
        let queen = self.queen();
        let resp = queen
            .send_push(|| {
                queen
                    .request(Method::POST, crate::hot_urls::PUSH)
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.clone())
            })
            .await?;
        let (status, retry_after) = (resp.status(), retry_after(&resp));
        let answer = resp.bytes().await?;
        if !status.is_success() {
            return Err(api_error(status, retry_after, &answer));
        }
        let tally = PushTally::read(&answer)?;
        if tally.total() != sent {
            return Err(Error::Decode(format!(
                "push answered {} results for {sent} items",
                tally.total()
            )));
        }
        Ok(tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PushBody, PushWireItem};
    use crate::{PushItem, PushResult, Queen};

    #[test]
    fn the_body_is_what_the_checked_push_sends() {
        let queue = Queen::new("http://x").queue("or\"ders").partition("p/1");
        let payloads = [r#"{"a":1}"#, r#"[1, "two"]"#, "3"];
        let ids = [Some("t1"), None, Some("t\\3")];
        let mut raw = RawPush::new(&queue, 3, 16);
        for (p, id) in payloads.iter().zip(ids) {
            raw.item(id, |out| out.extend_from_slice(p.as_bytes()));
        }
        assert_eq!(raw.len(), 3);
        let (body, items) = raw.finish();
        let checked: Vec<PushItem> = payloads
            .iter()
            .zip(ids)
            .map(|(p, id)| PushItem::raw(p.to_string(), id.map(str::to_string)).unwrap())
            .collect();
        let serde = serde_json::to_vec(&PushBody {
            items: checked
                .iter()
                .map(|i| PushWireItem {
                    queue: "or\"ders",
                    partition: "p/1",
                    payload: &i.payload,
                    transaction_id: i.transaction_id.as_deref(),
                })
                .collect(),
        })
        .unwrap();
        assert_eq!((&body[..], items), (&serde[..], 3));
        let empty = RawPush::new(&queue, 0, 0);
        assert!(empty.is_empty());
        assert_eq!(&empty.finish().0[..], br#"{"items":[]}"#);
    }

    #[test]
    fn the_tally_counts_what_the_full_answer_says() {
        let answer = br#"[{"index":0,"message_id":"M0","transaction_id":"t0","queueName":"q","status":"queued","offset":4},
            {"index":1,"message_id":"M1","transaction_id":"t1","queueName":"q","status":"duplicate"},
            {"index":2,"message_id":"","transaction_id":"t2","queueName":"q","status":"failed","error":"too big"},
            {"index":3,"message_id":"M3","transaction_id":"t3","queueName":"q","status":"buffered"}]"#;
        let full: Vec<PushResult> = serde_json::from_slice(answer).unwrap();
        let tally = PushTally::read(answer).unwrap();
        assert_eq!(tally.queued, full.iter().filter(|r| r.is_queued()).count());
        assert_eq!((tally.queued, tally.duplicate, tally.other), (1, 1, 2));
        assert_eq!(
            tally.first_not_queued.as_deref(),
            Some("item 1: duplicate ")
        );
        assert_eq!(PushTally::read(b"[]").unwrap(), PushTally::default());
        assert!(PushTally::read(br#"[{"index":0}]"#).is_err());
        assert!(PushTally::read(br#"{"error":"x"}"#).is_err());
    }
}
