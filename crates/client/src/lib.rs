//! Rust SDK for Queen-rs (and any broker speaking the Queen HTTP API, `docs/wire.md`).
//!
//! The shape follows the official clients: a [`Queen`] handle, a fluent [`QueueRef`] builder
//! per queue (`queen.queue("orders").partition("p1").push(items)`,
//! `.batch(100).wait(true).pop()`), and acks on the handle (`queen.ack_batch(...)`).
//! Payloads travel as raw JSON text ([`serde_json::value::RawValue`]) so a producer that
//! already holds serialized bytes pays no re-serialization.
//!
//! ```no_run
//! use queen_client::{AckItem, PushItem, Queen};
//!
//! # async fn demo() -> queen_client::Result<()> {
//! let queen = Queen::new("http://127.0.0.1:6632");
//! let orders = queen.queue("orders").partition("customer-42");
//! let item = PushItem::json(&serde_json::json!({"orderId": 91}), Some("order-91".into()))?;
//! let pushed = orders.push(&[item]).await?;
//! assert!(pushed[0].is_queued());
//!
//! // A leased batch for the `billing` group; ack each message when it is done.
//! if let Some(batch) = orders.group("billing").batch(10).wait(true).pop().await? {
//!     let acks: Vec<AckItem> = batch.messages.iter().map(AckItem::completed).collect();
//!     queen.ack_batch(&acks, Some("billing")).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! For a long-running worker, [`QueueRef::consumer`] runs the pop/ack loop (concurrency,
//! retries, lease renewal, graceful stop); [`Queen::transaction`] commits pushes and acks
//! together; the `examples/` directory has a producer, a worker and a transactional pipeline.
//! Beyond queues: the key-value store ([`Queen::kv`], module [`kv`]), locks with fencing
//! tokens ([`Queen::locks`]), timers ([`Queen::timers`]), reads by offset
//! ([`Queen::fetch`], module [`reads`]) and ephemeral queues ([`Queen::ephemeral`]).

#![deny(missing_docs)]

mod admin;
mod consume;
pub mod ephemeral;
mod hot_urls;
mod json_scan;
mod json_write;
pub mod kv;
mod lease;
pub mod locks;
mod pop_view;
mod push_raw;
mod queue;
pub mod reads;
pub mod retry429;
pub mod timers;
mod transaction;
mod types;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use admin::{DlqQuery, SeekTarget};
pub use consume::{AckMode, ConsumeOptions, ConsumeReport, Consumer, StopHandle};
pub use lease::LeaseRenewal;
pub use pop_view::{ack_body, ack_verdicts, AckRef, MessageView, PopBody, PopView};
pub use push_raw::{PushTally, RawPush};
pub use queue::{encode_segment, QueueRef};
pub use transaction::{Transaction, TransactionOutcome};
pub use types::{AckItem, AckResult, AckStatus, Message, PopResponse, PushItem, PushResult};

/// Errors of the SDK. `Api` carries the broker's `{"error": ...}` text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker answered with a non-2xx status and this `error` text.
    #[error("HTTP {status}: {message}")]
    Api {
        /// The HTTP status.
        status: StatusCode,
        /// The broker's `error` text (or the start of a body that had none).
        message: String,
        /// The answer's `Retry-After` (whole seconds), on a 429 or 503 that carried one.
        retry_after: Option<Duration>,
    },
    /// The broker could not be reached, or the connection broke.
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// The answer did not have the expected shape.
    #[error("unexpected answer: {0}")]
    Decode(String),
    /// The request could not be built (invalid JSON payload, empty transaction, …).
    #[error("cannot encode the request: {0}")]
    Encode(String),
    /// The broker rolled a transaction back; `reason` is its machine-readable cause.
    #[error("rejected ({reason}): {message}")]
    Rejected {
        /// Why, machine-readable: `duplicate` or `rejected_ack`.
        reason: String,
        /// The broker's explanation.
        message: String,
    },
    /// A transaction was rolled back because a required key-value operation of its `kv`
    /// rider lost its precondition (`failed_index` is flat: push items and acks count first).
    #[error("rolled back: the key-value operation at {} lost its precondition ({})", .0.failed_index, .0.reason)]
    Precondition(kv::KvPrecondition),
}

impl Error {
    /// Whether the same request may succeed later: the broker was unreachable, in trouble
    /// (5xx) or asked to be called back (408, 429). A refusal (other 4xx) will not change.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Api { status, .. } => {
                status.is_server_error() || matches!(status.as_u16(), 408 | 429)
            }
            _ => false,
        }
    }
}

/// The SDK's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A connection to one broker. Cheap to clone (the HTTP pool is shared).
#[derive(Debug, Clone)]
pub struct Queen {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
    retry_429: u32,
    hot: hot_urls::HotUrls,
}

impl Queen {
    /// A handle on `url` (e.g. `http://127.0.0.1:6632`) with a keep-alive pool sized for many
    /// concurrent long-polls.
    pub fn new(url: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Self::with_client(url, http)
    }

    /// A handle using the caller's `reqwest::Client` (timeouts, pool, proxies are its own).
    pub fn with_client(url: impl Into<String>, http: reqwest::Client) -> Self {
        let base = url.into().trim_end_matches('/').to_string();
        Self {
            hot: hot_urls::HotUrls::new(&base),
            base,
            http,
            token: None,
            retry_429: retry429::DEFAULT_ATTEMPTS,
        }
    }

    /// How many times a push refused with 429 (the broker's push door: it is behind) is sent
    /// in all, each after the answer's `Retry-After` ±20 %, as the official client does; 10
    /// by default, 1 to hand every 429 to the caller at once.
    pub fn retry_429(mut self, attempts: u32) -> Self {
        self.retry_429 = attempts.max(1);
        self
    }

    /// The same handle sending `Authorization: Bearer <token>` on every call, for a broker
    /// with JWT auth on (the token's `role` decides what it may do).
    ///
    /// ```
    /// let queen = queen_client::Queen::new("http://127.0.0.1:6632").with_token("eyJhbGciOi...");
    /// assert_eq!(queen.url(), "http://127.0.0.1:6632");
    /// ```
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The broker's base URL, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// A builder for operations on one queue.
    pub fn queue(&self, name: impl Into<String>) -> QueueRef {
        QueueRef::new(self.clone(), name.into())
    }

    /// `POST /api/v1/ack/batch`: one cursor commit per (partition, lease) group, results in
    /// request order. Refused items come back with `success: false` (HTTP is still 200).
    pub async fn ack_batch(&self, acks: &[AckItem], group: Option<&str>) -> Result<Vec<AckResult>> {
        let body = types::AckBatchBody {
            acknowledgments: acks,
            consumer_group: group,
        };
        let req = self
            .request(Method::POST, crate::hot_urls::ACK_BATCH)
            .json(&body);
        expect_json(req.send().await?).await
    }

    /// `POST /api/v1/ack` for one message.
    pub async fn ack(&self, ack: &AckItem, group: Option<&str>) -> Result<AckResult> {
        let body = types::AckOneBody {
            item: ack,
            consumer_group: group,
        };
        let req = self.request(Method::POST, "/api/v1/ack").json(&body);
        // The answer is an array of one (docs/wire.md §8.2); older brokers answer the bare object.
        let answer: Value = expect_json(req.send().await?).await?;
        let item = match answer {
            Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
            other => other,
        };
        serde_json::from_value(item).map_err(|e| Error::Decode(e.to_string()))
    }

    /// `GET /health`: true when the broker reports its database connected.
    pub async fn healthy(&self) -> Result<bool> {
        let resp = self.request(Method::GET, "/health").send().await?;
        Ok(resp.status() == StatusCode::OK)
    }

    /// `GET /metrics` as JSON.
    pub async fn metrics(&self) -> Result<Value> {
        expect_json(self.request(Method::GET, "/metrics").send().await?).await
    }

    /// Sends a push `build` makes, again after a 429 while [`Queen::retry_429`] allows.
    pub(crate) async fn send_push(
        &self,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response> {
        retry429::send(self.retry_429, build).await
    }

    /// A request to `path` (starting with `/`) on this broker, carrying the token if any.
    pub(crate) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let req = match self.hot.get(path) {
            Some(url) => self.http.request(method, url.clone()),
            None => self.http.request(method, format!("{}{}", self.base, path)),
        };
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }
}

/// Decodes a 2xx JSON answer, or turns a non-2xx into [`Error::Api`] with the broker's text.
pub(crate) async fn expect_json<T: DeserializeOwned>(resp: reqwest::Response) -> Result<T> {
    let status = resp.status();
    let retry_after = retry_after(&resp);
    let bytes = resp.bytes().await?;
    if !status.is_success() {
        return Err(api_error(status, retry_after, &bytes));
    }
    serde_json::from_slice(&bytes).map_err(|e| Error::Decode(format!("{e} in {}", preview(&bytes))))
}

/// The refusal's text: its `error`, with the `reason` and `detail` the key-value, lock and
/// timer routes add (`kv_bad_request (kv_expiry_not_specified): a write needs …`).
pub(crate) fn api_error(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Error {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            let text = |f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
            let mut message = text("error")?;
            if let Some(reason) = text("reason").filter(|r| *r != message) {
                message = format!("{message} ({reason})");
            }
            if let Some(detail) = text("detail") {
                message = format!("{message}: {detail}");
            }
            Some(message)
        })
        .unwrap_or_else(|| preview(body));
    Error::Api {
        status,
        message,
        retry_after,
    }
}

/// The `Retry-After` header as a delay: RFC 9110 delay-seconds, fractions included (the
/// official client reads the header as a float, so a server speaking its wire may send
/// `0.25`); an HTTP date is not sent by the broker and reads as absent.
pub(crate) fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let value = resp.headers().get(reqwest::header::RETRY_AFTER)?;
    seconds(value.to_str().ok()?)
}

fn seconds(text: &str) -> Option<Duration> {
    Duration::try_from_secs_f64(text.trim().parse().ok()?).ok()
}

fn preview(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_whole_and_fractional_seconds() {
        assert_eq!(seconds("2"), Some(Duration::from_secs(2)));
        assert_eq!(seconds(" 0.25"), Some(Duration::from_millis(250)));
        assert_eq!(seconds("-1"), None);
        assert_eq!(seconds("soon"), None);
    }

    #[test]
    fn a_refusal_names_its_reason_and_detail() {
        let body = br#"{"error":"kv_bad_request","code":"kv_bad_request","reason":"kv_expiry_not_specified","detail":"a write needs exactly one expiry"}"#;
        let e = api_error(StatusCode::BAD_REQUEST, None, body);
        assert_eq!(
            e.to_string(),
            "HTTP 400 Bad Request: kv_bad_request (kv_expiry_not_specified): a write needs exactly one expiry"
        );
        let plain = api_error(
            StatusCode::NOT_FOUND,
            None,
            br#"{"error":"queue not found"}"#,
        );
        assert_eq!(plain.to_string(), "HTTP 404 Not Found: queue not found");
    }
}
