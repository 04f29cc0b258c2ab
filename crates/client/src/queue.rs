//! The fluent per-queue builder: push (JSON or binary `QPB1`), pop (wildcard or targeted,
//! long-poll), configure and delete. Builder methods consume and return `self`, like the
//! official clients' `queue(...).partition(...).batch(...)` chains.

use queen_proto::pop_framed;
use queen_proto::push_bin::{encode_push_plain, Batch, BatchItem};
use queen_proto::wire::PUSH_CONTENT_TYPE;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::types::{PushBody, PushWireItem};
use crate::{
    api_error, expect_json, retry_after, Error, PopBody, PopResponse, PushItem, PushResult, Queen,
    Result,
};

/// Operations on one queue. Unset pop options are left to the broker's defaults.
#[derive(Debug, Clone)]
pub struct QueueRef {
    queen: Queen,
    name: String,
    partition: Option<String>,
    group: Option<String>,
    batch: Option<u32>,
    partitions: Option<u32>,
    wait: Option<bool>,
    timeout_ms: Option<u64>,
    auto_ack: Option<bool>,
    subscription_mode: Option<String>,
    lease_seconds: Option<u32>,
    framed: bool,
    autopilot: bool,
}

impl QueueRef {
    pub(crate) fn new(queen: Queen, name: String) -> Self {
        Self {
            queen,
            name,
            partition: None,
            group: None,
            batch: None,
            partitions: None,
            wait: None,
            timeout_ms: None,
            auto_ack: None,
            subscription_mode: None,
            lease_seconds: None,
            framed: false,
            autopilot: false,
        }
    }

    /// Push target and, unless it is `Default`, the targeted pop route.
    pub fn partition(mut self, name: impl Into<String>) -> Self {
        self.partition = Some(name.into());
        self
    }

    /// Consumer group of pops (absent: the shared queue-mode group).
    pub fn group(mut self, name: impl Into<String>) -> Self {
        self.group = Some(name.into());
        self
    }

    /// Pops take up to `n` messages.
    pub fn batch(mut self, n: u32) -> Self {
        self.batch = Some(n);
        self
    }

    /// Wildcard pops: claim up to `n` partitions in one call.
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = Some(n);
        self
    }

    /// Long-poll when nothing is claimable.
    pub fn wait(mut self, on: bool) -> Self {
        self.wait = Some(on);
        self
    }

    /// Long-poll deadline in milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Commit at delivery (no lease, at-most-once).
    pub fn auto_ack(mut self, on: bool) -> Self {
        self.auto_ack = Some(on);
        self
    }

    /// First-contact seeding of a named group: `all` or `new`.
    pub fn subscription_mode(mut self, mode: impl Into<String>) -> Self {
        self.subscription_mode = Some(mode.into());
        self
    }

    /// The lease of popped batches, overriding the queue's `leaseTime`.
    pub fn lease_seconds(mut self, secs: u32) -> Self {
        self.lease_seconds = Some(secs);
        self
    }

    /// Pops ask for the binary framed answer (`QPF1`, docs/wire.md §7.7): the broker sends the
    /// stored frames as they are instead of rendering JSON. The result is the same
    /// [`PopResponse`]; a broker that answers JSON anyway is read as JSON.
    pub fn framed(mut self, on: bool) -> Self {
        self.framed = on;
        self
    }

    /// Pops send `autopilot=true` (docs/wire.md §7.4): the broker sizes the knobs left unset
    /// (`partitions`, `batch`) and its answer echoes the sizes it used.
    pub fn autopilot(mut self, on: bool) -> Self {
        self.autopilot = on;
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn queen(&self) -> &Queen {
        &self.queen
    }

    pub(crate) fn group_name(&self) -> Option<&str> {
        self.group.as_deref()
    }

    pub(crate) fn batch_size(&self) -> Option<u32> {
        self.batch
    }

    pub(crate) fn push_partition(&self) -> &str {
        self.partition.as_deref().unwrap_or("Default")
    }

    /// `POST /api/v1/configure` with `options` (camelCase keys, docs/wire.md §3.2); returns the
    /// broker's echo of the effective row.
    pub async fn configure(&self, options: Value) -> Result<Value> {
        let body = serde_json::json!({ "queue": self.name, "options": options });
        let req = self
            .queen
            .request(Method::POST, "/api/v1/configure")
            .json(&body);
        expect_json(req.send().await?).await
    }

    /// `DELETE /api/v1/resources/queues/:queue`.
    pub async fn delete(&self) -> Result<Value> {
        let path = format!("/api/v1/resources/queues/{}", encode_segment(&self.name));
        let req = self.queen.request(Method::DELETE, &path);
        expect_json(req.send().await?).await
    }

    /// JSON push of `items` to this queue and partition; one result per item, input order.
    /// A retried push with the same transactionIds answers `duplicate` for what was stored.
    ///
    /// ```no_run
    /// # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
    /// use queen_client::PushItem;
    /// let items = vec![
    ///     PushItem::raw(r#"{"sku":"A-1","qty":2}"#.to_string(), Some("line-1".into()))?,
    ///     PushItem::raw(r#"{"sku":"B-7","qty":1}"#.to_string(), Some("line-2".into()))?,
    /// ];
    /// for r in queen.queue("lines").partition("order-91").push(&items).await? {
    ///     println!("{} {}", r.transaction_id.unwrap_or_default(), r.status);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn push(&self, items: &[PushItem]) -> Result<Vec<PushResult>> {
        let partition = self.push_partition();
        let body = PushBody {
            items: items
                .iter()
                .map(|item| PushWireItem {
                    queue: &self.name,
                    partition,
                    payload: &item.payload,
                    transaction_id: item.transaction_id.as_deref(),
                })
                .collect(),
        };
        let resp = self
            .queen
            .send_push(|| {
                self.queen
                    .request(Method::POST, crate::hot_urls::PUSH)
                    .json(&body)
            })
            .await?;
        let results: Vec<PushResult> = expect_json(resp).await?;
        check_len(results, items.len())
    }

    /// The same push as a binary `QPB1` body (docs/wire.md §6.2), optionally zstd-compressed.
    pub async fn push_binary(&self, items: &[PushItem], compress: bool) -> Result<Vec<PushResult>> {
        let batch = Batch {
            queue: &self.name,
            partition: self.push_partition(),
            items: items
                .iter()
                .map(|item| BatchItem {
                    transaction_id: item.transaction_id.as_deref(),
                    payload: item.payload.get().as_bytes(),
                })
                .collect(),
        };
        // Shared, not copied, by each attempt a 429 may cost.
        let body = bytes::Bytes::from(
            encode_push_plain(&[batch], compress, false)
                .map_err(|e| Error::Encode(e.to_string()))?,
        );
        let resp = self
            .queen
            .send_push(|| {
                self.queen
                    .request(Method::POST, crate::hot_urls::PUSH)
                    .header(CONTENT_TYPE, PUSH_CONTENT_TYPE)
                    .body(body.clone())
            })
            .await?;
        let results: Vec<PushResult> = expect_json(resp).await?;
        check_len(results, items.len())
    }

    /// Pops a batch: `None` when the broker answers 204 (nothing claimable by the deadline).
    ///
    /// ```no_run
    /// # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
    /// let popper = queen.queue("lines").group("packing").batch(50).wait(true).timeout_ms(5_000);
    /// match popper.pop().await? {
    ///     Some(batch) => println!("{} messages under lease {}", batch.messages.len(), batch.lease_id),
    ///     None => println!("nothing within 5 s"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn pop(&self) -> Result<Option<PopResponse>> {
        let Some(body) = self.pop_body().await? else {
            return Ok(None);
        };
        let popped: PopResponse =
            serde_json::from_slice(body.bytes()).map_err(|e| Error::Decode(e.to_string()))?;
        Ok(Some(popped).filter(|p| !p.messages.is_empty()))
    }

    /// The same pop, its answer kept as bytes for [`PopBody::view`] (which borrows only what
    /// an ack and a delivery check read): `None` when the broker answers 204.
    pub async fn pop_body(&self) -> Result<Option<PopBody>> {
        let path = match self.partition.as_deref() {
            Some(p) if p != "Default" => format!(
                "/api/v1/pop/queue/{}/partition/{}",
                encode_segment(&self.name),
                encode_segment(p)
            ),
            _ => format!("/api/v1/pop/queue/{}", encode_segment(&self.name)),
        };
        let mut query: Vec<(&str, String)> = Vec::new();
        let mut put = |k: &'static str, v: Option<String>| {
            if let Some(v) = v {
                query.push((k, v));
            }
        };
        put("autopilot", self.autopilot.then(|| "true".to_string()));
        put("batch", self.batch.map(|n| n.to_string()));
        put("wait", self.wait.map(|b| b.to_string()));
        put("timeout", self.timeout_ms.map(|n| n.to_string()));
        put("consumerGroup", self.group.clone());
        put("autoAck", self.auto_ack.map(|b| b.to_string()));
        put("subscriptionMode", self.subscription_mode.clone());
        put("partitions", self.partitions.map(|n| n.to_string()));
        put("leaseSeconds", self.lease_seconds.map(|n| n.to_string()));
        put("frames", self.framed.then(|| "true".to_string()));
        let resp = self
            .queen
            .request(Method::GET, &path)
            .query(&query)
            .send()
            .await?;
        let status = resp.status();
        if status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let retry_after = retry_after(&resp);
        let body = resp.bytes().await?;
        if !status.is_success() {
            return Err(api_error(status, retry_after, &body));
        }
        Ok(Some(PopBody::new(as_json(body)?)))
    }
}

/// A 2xx pop answer as JSON: framed (`QPF1`) answers decode to the JSON answer's keys, so
/// there is one shape to read.
fn as_json(body: bytes::Bytes) -> Result<bytes::Bytes> {
    if !pop_framed::is_framed(&body) {
        return Ok(body);
    }
    let answer = pop_framed::decode(&body).map_err(|e| Error::Decode(format!("QPF1: {e}")))?;
    Ok(answer.to_json().to_string().into())
}

fn check_len(results: Vec<PushResult>, sent: usize) -> Result<Vec<PushResult>> {
    if results.len() == sent {
        Ok(results)
    } else {
        Err(Error::Decode(format!(
            "push answered {} results for {sent} items",
            results.len()
        )))
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode_segment;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("orders"), "orders");
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
        assert_eq!(encode_segment("é"), "%C3%A9");
    }
}
