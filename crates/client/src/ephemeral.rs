//! Ephemeral queues (docs/wire.md §25): messages in unlogged PostgreSQL tables, kept across
//! broker restarts but lost on a PostgreSQL crash or failover (docs/engine.md §17), with
//! groups, leases, redelivery and bounds, and no dedup. [`Queen::ephemeral`] addresses one
//! queue; [`Queen::ephemeral_queues`] lists them.
//!
//! ```no_run
//! # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
//! use queen_client::ephemeral::{EphemeralAck, EphemeralPop};
//! let ticks = queen.ephemeral("ticks");
//! ticks.push(None, &[serde_json::json!({"price": 101.5})]).await?;
//! let got = ticks.pop(&EphemeralPop { batch: Some(10), ..Default::default() }).await?;
//! let acks: Vec<EphemeralAck> = got.iter().map(|m| EphemeralAck::completed(&m.id)).collect();
//! ticks.ack(None, &acks).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::queue::encode_segment;
use crate::{api_error, expect_json, Error, Queen, Result};

/// What a push past a bound does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Policy {
    /// Refuse the push (HTTP 429 `queue_full`).
    Reject,
    /// Drop the oldest messages.
    DropOldest,
}

/// A waiting pop's batching window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowBuffer {
    /// How long a pop waits for `count` after it first saw a message (0: its timeout).
    pub ms: u64,
    /// How many ready messages a pop waits for.
    pub count: u32,
}

/// A queue's declaration; `None` is the option's default (docs/wire.md §25.2). A
/// configure replaces the whole declaration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralOptions {
    /// Payload bytes the queue may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Messages the queue may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// What a push past a bound does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Drop messages older than this (0: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// The lease of a delivered message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_seconds: Option<u64>,
    /// Redeliveries after the first delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
    /// A waiting pop's batching window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_buffer: Option<WindowBuffer>,
}

/// A pop's parameters.
#[derive(Debug, Clone, Default)]
pub struct EphemeralPop {
    /// Only this partition's ring (else the one holding the queue's oldest ready message).
    pub partition: Option<String>,
    /// Messages (1 when `None`; the broker clamps it to 1000).
    pub batch: Option<u32>,
    /// Long-poll this long for a message (at most 300 s); `None` answers at once.
    pub wait: Option<Duration>,
    /// The consumer group (`None`: queue mode).
    pub group: Option<String>,
    /// Retire what is handed out (no lease; at most once).
    pub auto_ack: bool,
}

/// A delivered message.
#[derive(Debug, Clone, Deserialize)]
pub struct EphemeralMessage {
    /// Its id (opaque), to ack it.
    pub id: String,
    /// Its partition.
    pub partition: String,
    /// Its deliveries so far, this one included.
    pub attempts: u32,
    /// The payload, byte for byte as pushed.
    pub payload: Box<RawValue>,
}

/// One acknowledgment.
#[derive(Debug, Clone, Serialize)]
pub struct EphemeralAck {
    /// The message's id.
    pub id: String,
    /// `completed` retires it; `failed` redelivers it while deliveries are left.
    pub status: &'static str,
    /// A nack's reason (logged by the broker, not stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl EphemeralAck {
    /// Retires message `id`.
    pub fn completed(id: &str) -> Self {
        Self {
            id: id.to_string(),
            status: "completed",
            error: None,
        }
    }

    /// Hands message `id` back for redelivery (dropped once its deliveries are spent).
    pub fn failed(id: &str, error: Option<String>) -> Self {
        Self {
            id: id.to_string(),
            status: "failed",
            error,
        }
    }
}

/// What an ack did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum AckOutcome {
    /// Retired (or dropped: a nack whose deliveries were spent).
    Acked,
    /// Ready again, `attempts` one higher on its next pop.
    Redelivered,
    /// Its ring's incarnation is gone (a PostgreSQL crash or failover, a reset, a delete).
    Stale,
    /// The group holds no live lease on it.
    Unknown,
    /// An outcome this SDK does not know (a newer broker).
    Other(String),
}

impl From<String> for AckOutcome {
    fn from(s: String) -> Self {
        match s.as_str() {
            "acked" => AckOutcome::Acked,
            "redelivered" => AckOutcome::Redelivered,
            "stale" => AckOutcome::Stale,
            "unknown" => AckOutcome::Unknown,
            _ => AckOutcome::Other(s),
        }
    }
}

impl AckOutcome {
    /// The outcome as the broker names it.
    pub fn as_str(&self) -> &str {
        match self {
            AckOutcome::Acked => "acked",
            AckOutcome::Redelivered => "redelivered",
            AckOutcome::Stale => "stale",
            AckOutcome::Unknown => "unknown",
            AckOutcome::Other(s) => s,
        }
    }
}

/// Messages dropped, by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Past a bound (`dropOldest`).
    pub bounds: u64,
    /// Past the ttl.
    pub ttl: u64,
    /// Deliveries spent.
    pub retry: u64,
}

/// A queue's gauges (the broker may add fields).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gauges {
    /// The queue.
    pub queue: String,
    /// Whether it was configured (else it runs on the defaults).
    pub declared: bool,
    /// Messages held.
    pub length: u64,
    /// Payload bytes held.
    pub bytes: u64,
    /// Messages pushed since its ring began.
    pub pushed: u64,
    /// Partitions (rings).
    pub partitions: u64,
    /// Consumer groups.
    pub groups: u64,
    /// Messages dropped.
    pub dropped: Dropped,
    /// The options in force.
    pub options: EphemeralOptions,
}

/// The answer of [`Ephemeral::push`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Pushed {
    /// Messages stored.
    pub pushed: u64,
    /// Older messages dropped to make room (`dropOldest`).
    pub dropped: u64,
}

/// One ephemeral queue of a broker ([`Queen::ephemeral`]).
#[derive(Debug, Clone)]
pub struct Ephemeral {
    queen: Queen,
    queue: String,
}

impl Queen {
    /// The ephemeral queue `queue` (unrelated to a durable queue of the same name).
    pub fn ephemeral(&self, queue: impl Into<String>) -> Ephemeral {
        Ephemeral {
            queen: self.clone(),
            queue: queue.into(),
        }
    }

    /// `GET /api/v1/ephemeral/queues`: every ephemeral queue's gauges in byte order (at most
    /// 1000; `true` when more exist).
    pub async fn ephemeral_queues(&self) -> Result<(Vec<Gauges>, bool)> {
        #[derive(Deserialize)]
        struct Answer {
            queues: Vec<Gauges>,
            truncated: bool,
        }
        let req = self.request(Method::GET, "/api/v1/ephemeral/queues");
        let a: Answer = expect_json(req.send().await?).await?;
        Ok((a.queues, a.truncated))
    }
}

impl Ephemeral {
    /// Declares the queue with `options` (replacing any earlier declaration); answers the
    /// options in force. Needs the `admin` role.
    pub async fn configure(&self, options: &EphemeralOptions) -> Result<EphemeralOptions> {
        #[derive(Deserialize)]
        struct Answer {
            options: EphemeralOptions,
        }
        let body = json!({ "queue": self.queue, "options": options });
        let a: Answer = self.post("/api/v1/ephemeral/configure", &body).await?;
        Ok(a.options)
    }

    /// Pushes `payloads` (1 to 10 000, any JSON; a [`RawValue`] is sent byte for byte) to
    /// `partition` (`Default` when `None`), all or nothing. A queue full under `policy: reject` is [`Error::Api`] 429 `queue_full`
    /// with its `Retry-After` (not retried here).
    pub async fn push<T: Serialize>(
        &self,
        partition: Option<&str>,
        payloads: &[T],
    ) -> Result<Pushed> {
        #[derive(Serialize)]
        struct Message<'a, T: Serialize> {
            payload: &'a T,
        }
        #[derive(Serialize)]
        struct Body<'a, T: Serialize> {
            queue: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            partition: Option<&'a str>,
            messages: Vec<Message<'a, T>>,
        }
        // Serialized straight from `T`, so a `RawValue` payload keeps its bytes (key order,
        // number spelling), which the broker stores and pops back as sent.
        let body = Body {
            queue: &self.queue,
            partition,
            messages: payloads.iter().map(|payload| Message { payload }).collect(),
        };
        let req = self
            .queen
            .request(Method::POST, "/api/v1/ephemeral/push")
            .json(&body);
        expect_json(req.send().await?).await
    }

    /// Pops up to `q.batch` messages (none: an empty list).
    pub async fn pop(&self, q: &EphemeralPop) -> Result<Vec<EphemeralMessage>> {
        let mut query = vec![("queue", self.queue.clone())];
        let optional = [
            ("partition", q.partition.clone()),
            ("batch", q.batch.map(|b| b.to_string())),
            ("group", q.group.clone()),
            ("wait", q.wait.map(|_| "true".to_string())),
            ("timeout", q.wait.map(|w| w.as_millis().to_string())),
            ("autoAck", q.auto_ack.then(|| "true".to_string())),
        ];
        query.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
        #[derive(Deserialize)]
        struct Answer {
            messages: Vec<EphemeralMessage>,
        }
        let req = self
            .queen
            .request(Method::GET, "/api/v1/ephemeral/pop")
            .query(&query);
        let a: Answer = expect_json(req.send().await?).await?;
        Ok(a.messages)
    }

    /// Acknowledges for `group` (`None`: queue mode); one outcome per ack, in order.
    pub async fn ack(&self, group: Option<&str>, acks: &[EphemeralAck]) -> Result<Vec<AckOutcome>> {
        #[derive(Deserialize)]
        struct One {
            outcome: AckOutcome,
        }
        #[derive(Deserialize)]
        struct Answer {
            results: Vec<One>,
        }
        let mut body = json!({ "queue": self.queue, "acks": acks });
        if let Some(g) = group {
            body["group"] = json!(g);
        }
        let a: Answer = self.post("/api/v1/ephemeral/ack", &body).await?;
        if a.results.len() != acks.len() {
            return Err(Error::Decode(format!(
                "{} outcomes for {} acks",
                a.results.len(),
                acks.len()
            )));
        }
        Ok(a.results.into_iter().map(|o| o.outcome).collect())
    }

    /// Drops every message (the declaration stays); answers how many. Needs `admin`.
    pub async fn reset(&self) -> Result<u64> {
        #[derive(Deserialize)]
        struct Answer {
            dropped: u64,
        }
        let a: Answer = self
            .post("/api/v1/ephemeral/reset", &json!({ "queue": self.queue }))
            .await?;
        Ok(a.dropped)
    }

    /// Removes the queue and its declaration; `true` when anything was removed. Needs `admin`.
    pub async fn delete(&self) -> Result<bool> {
        #[derive(Deserialize)]
        struct Answer {
            deleted: bool,
        }
        let path = format!("/api/v1/ephemeral/queue/{}", encode_segment(&self.queue));
        let a: Answer =
            expect_json(self.queen.request(Method::DELETE, &path).send().await?).await?;
        Ok(a.deleted)
    }

    /// The queue's gauges; `None` when it does not exist.
    pub async fn gauges(&self) -> Result<Option<Gauges>> {
        let path = format!(
            "/api/v1/ephemeral/queues/{}/depth",
            encode_segment(&self.queue)
        );
        let resp = self.queen.request(Method::GET, &path).send().await?;
        if resp.status() != StatusCode::NOT_FOUND {
            return expect_json(resp).await.map(Some);
        }
        let bytes = resp.bytes().await?;
        let code = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_string));
        match code.as_deref() {
            Some("ephemeral_queue_not_found") => Ok(None),
            _ => Err(api_error(StatusCode::NOT_FOUND, None, &bytes)),
        }
    }

    async fn post<T: serde::de::DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T> {
        let req = self.queen.request(Method::POST, path).json(body);
        expect_json(req.send().await?).await
    }
}
