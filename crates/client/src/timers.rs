//! Timers: messages scheduled for later under a key of their queue (docs/wire.md §22). A due
//! timer becomes its message — same transactionId (`txn`) and message id as scheduled — in
//! the transaction that removes it. Schedule and cancel in batches ([`Timers::apply`]), read
//! one ([`Timers::peek`]) or a queue's pending ones a page at a time ([`Timers::list`]).
//!
//! ```no_run
//! # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
//! use std::time::Duration;
//! use queen_client::timers::Schedule;
//! let expire = Schedule::new("orders", "order:9f1:expire", &serde_json::json!({"order": "9f1"}),
//!                            Duration::from_secs(1800))?;
//! let done = queen.timers().schedule(expire).await?;
//! println!("fires at {}", done.deliver_at.unwrap_or_default());
//! # Ok(()) }
//! ```

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::queue::encode_segment;
use crate::{expect_json, Error, Queen, Result};

/// A timer to (re)schedule: the same (queue, key) replaces a pending one.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The queue the message goes to (it need not exist yet).
    pub queue: String,
    /// The timer's key in its queue (1 to 512 bytes, no control character).
    pub timer_key: String,
    /// The message: one JSON document (at most 1 MiB).
    pub payload: Box<RawValue>,
    /// Milliseconds from now, on the database's clock (negative: due at once; at most 90 days).
    pub delay_ms: i64,
    /// The fired message's transactionId (the broker mints one when `None`).
    pub txn: Option<String>,
    /// The partition (`Default` when `None`).
    pub partition: Option<String>,
}

impl Schedule {
    /// A timer firing `payload` into `queue` after `delay`, under `timer_key`.
    pub fn new<T: Serialize>(
        queue: impl Into<String>,
        timer_key: impl Into<String>,
        payload: &T,
        delay: Duration,
    ) -> Result<Self> {
        let payload =
            serde_json::value::to_raw_value(payload).map_err(|e| Error::Encode(e.to_string()))?;
        let delay_ms = i64::try_from(delay.as_millis())
            .map_err(|_| Error::Encode(format!("a delay of {delay:?} is too long")))?;
        Ok(Self {
            queue: queue.into(),
            timer_key: timer_key.into(),
            payload,
            delay_ms,
            txn: None,
            partition: None,
        })
    }

    fn to_json(&self) -> Value {
        let mut op = json!({"op": "schedule", "queue": self.queue, "timerKey": self.timer_key,
            "payload": STANDARD.encode(self.payload.get()), "delayMs": self.delay_ms});
        if let Some(txn) = &self.txn {
            op["txn"] = json!(txn);
        }
        if let Some(p) = &self.partition {
            op["partition"] = json!(p);
        }
        op
    }
}

/// One operation of a timer batch.
#[derive(Debug, Clone)]
pub enum TimerOp {
    /// Schedules, or reschedules a pending timer of the same key.
    Schedule(Schedule),
    /// Cancels a pending timer; `txn` is echoed back when it is already gone.
    Cancel {
        /// Its queue.
        queue: String,
        /// Its key.
        timer_key: String,
        /// The transactionId it was scheduled with, if known.
        txn: Option<String>,
    },
}

impl TimerOp {
    /// The operation as the broker reads it (also the element of a transaction's `timers` rider).
    pub fn to_json(&self) -> Value {
        match self {
            TimerOp::Schedule(s) => s.to_json(),
            TimerOp::Cancel {
                queue,
                timer_key,
                txn,
            } => {
                let mut op = json!({"op": "cancel", "queue": queue, "timerKey": timer_key});
                if let Some(txn) = txn {
                    op["txn"] = json!(txn);
                }
                op
            }
        }
    }
}

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum TimerStatus {
    /// A new timer.
    Scheduled,
    /// A pending timer of that key was replaced.
    Rescheduled,
    /// Cancelled: it will not fire.
    Cancelled,
    /// No pending timer of that key: never scheduled, cancelled, or already fired.
    Absent,
    /// It is firing now; it will be delivered.
    TooLate,
    /// A status this SDK does not know (a newer broker).
    Other(String),
}

impl From<String> for TimerStatus {
    fn from(s: String) -> Self {
        match s.as_str() {
            "scheduled" => TimerStatus::Scheduled,
            "rescheduled" => TimerStatus::Rescheduled,
            "cancelled" => TimerStatus::Cancelled,
            "absent" => TimerStatus::Absent,
            "too_late" => TimerStatus::TooLate,
            _ => TimerStatus::Other(s),
        }
    }
}

impl TimerStatus {
    /// The status as the broker names it.
    pub fn as_str(&self) -> &str {
        match self {
            TimerStatus::Scheduled => "scheduled",
            TimerStatus::Rescheduled => "rescheduled",
            TimerStatus::Cancelled => "cancelled",
            TimerStatus::Absent => "absent",
            TimerStatus::TooLate => "too_late",
            TimerStatus::Other(s) => s,
        }
    }
}

impl Serialize for TimerStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The result of one schedule or cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerResult {
    /// Scheduled, rescheduled or cancelled.
    pub ok: bool,
    /// What happened.
    pub status: TimerStatus,
    /// The timer's queue.
    pub queue: String,
    /// The timer's key.
    pub timer_key: String,
    /// The message's transactionId (a cancel: the one asked about, if any).
    #[serde(default)]
    pub txn: Option<String>,
    /// The message's id (schedules).
    #[serde(default)]
    pub message_id: Option<String>,
    /// When it falls due (schedules; fixed-width ISO-8601 UTC, microseconds).
    #[serde(default)]
    pub deliver_at: Option<String>,
}

/// A pending timer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingTimer {
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub timer_key: String,
    /// The partition the message goes to.
    pub partition: String,
    /// The message's transactionId.
    pub txn: String,
    /// The message's id.
    pub message_id: String,
    /// When it falls due (fixed-width ISO-8601 UTC, microseconds).
    pub deliver_at: String,
    /// Fire attempts so far.
    pub attempts: u32,
    /// A fire holds it now.
    pub firing: bool,
    /// The message ([`Timers::peek`] only; `None` in a listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Box<RawValue>>,
}

/// A page of a queue's pending timers, by key.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerPage {
    /// The timers, in byte order of their keys.
    pub rows: Vec<PendingTimer>,
    /// More follow.
    pub truncated: bool,
    /// The last key, to pass as `after` for the next page; `None` at the end.
    pub next_after: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePending {
    queue: String,
    timer_key: String,
    partition: String,
    txn: String,
    message_id: String,
    deliver_at: String,
    attempts: u32,
    firing: bool,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    encrypted: bool,
}

impl WirePending {
    fn typed(self) -> Result<PendingTimer> {
        if self.encrypted {
            return Err(Error::Decode(format!(
                "timer {} carries an encrypted payload",
                self.timer_key
            )));
        }
        let payload = match self.payload {
            None => None,
            Some(b64) => {
                let bytes = STANDARD
                    .decode(b64)
                    .map_err(|e| Error::Decode(format!("payload is not base64: {e}")))?;
                let text = String::from_utf8(bytes)
                    .map_err(|e| Error::Decode(format!("payload is not UTF-8: {e}")))?;
                Some(RawValue::from_string(text).map_err(|e| Error::Decode(e.to_string()))?)
            }
        };
        Ok(PendingTimer {
            queue: self.queue,
            timer_key: self.timer_key,
            partition: self.partition,
            txn: self.txn,
            message_id: self.message_id,
            deliver_at: self.deliver_at,
            attempts: self.attempts,
            firing: self.firing,
            payload,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePage {
    rows: Vec<WirePending>,
    truncated: bool,
    next_after: Option<String>,
}

/// The timers of one broker ([`Queen::timers`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Timers {
    queen: Queen,
}

impl Queen {
    /// Timers (docs/wire.md §22), in the caller's tenant.
    pub fn timers(&self) -> Timers {
        Timers {
            queen: self.clone(),
        }
    }
}

impl Timers {
    /// Applies a batch (at most 256, one per (queue, key)), all or nothing; one result per
    /// operation, in order.
    pub async fn apply(&self, ops: &[TimerOp]) -> Result<Vec<TimerResult>> {
        if ops.is_empty() {
            return Err(Error::Encode(
                "a timer call needs at least one operation".into(),
            ));
        }
        let body = json!({ "operations": ops.iter().map(TimerOp::to_json).collect::<Vec<_>>() });
        let req = self
            .queen
            .request(Method::POST, "/api/v1/timers")
            .json(&body);
        #[derive(Deserialize)]
        struct Answer {
            results: Vec<TimerResult>,
        }
        let answer: Answer = expect_json(req.send().await?).await?;
        if answer.results.len() != ops.len() {
            return Err(Error::Decode(format!(
                "{} results for {} timer operations",
                answer.results.len(),
                ops.len()
            )));
        }
        Ok(answer.results)
    }

    /// Schedules one timer (or reschedules the pending one of its key).
    pub async fn schedule(&self, s: Schedule) -> Result<TimerResult> {
        self.single(TimerOp::Schedule(s)).await
    }

    /// Cancels the pending timer `timer_key` of `queue`; `txn` (its transactionId, if known)
    /// is echoed back when it is already gone.
    pub async fn cancel(
        &self,
        queue: &str,
        timer_key: &str,
        txn: Option<&str>,
    ) -> Result<TimerResult> {
        self.single(TimerOp::Cancel {
            queue: queue.into(),
            timer_key: timer_key.into(),
            txn: txn.map(str::to_string),
        })
        .await
    }

    /// The pending timer `timer_key` of `queue` with its payload; `None` when there is none
    /// (never scheduled, cancelled, or fired).
    pub async fn peek(&self, queue: &str, timer_key: &str) -> Result<Option<PendingTimer>> {
        if matches!(timer_key, "." | "..") {
            return Err(Error::Encode(format!(
                "a timer key {timer_key:?} cannot be named in a URL path; list the queue instead"
            )));
        }
        let path = format!(
            "/api/v1/timers/{}/{}",
            encode_segment(queue),
            encode_segment(timer_key)
        );
        let mut v: Value =
            expect_json(self.queen.request(Method::GET, &path).send().await?).await?;
        if v.get("found").and_then(Value::as_bool) != Some(true) {
            return Ok(None);
        }
        if let Value::Object(o) = &mut v {
            o.remove("found");
        }
        let text = v.to_string();
        let wire: WirePending =
            serde_json::from_value(v).map_err(|e| Error::Decode(format!("{e} in {text}")))?;
        wire.typed().map(Some)
    }

    /// A page of `queue`'s pending timers, keys after `after` in byte order; `limit` is
    /// clamped by the broker to 1..1000 (100 when `None`).
    pub async fn list(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<TimerPage> {
        let path = format!("/api/v1/timers/{}", encode_segment(queue));
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(after) = after {
            query.push(("after", after.to_string()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        let req = self.queen.request(Method::GET, &path).query(&query);
        let page: WirePage = expect_json(req.send().await?).await?;
        Ok(TimerPage {
            rows: page
                .rows
                .into_iter()
                .map(WirePending::typed)
                .collect::<Result<_>>()?,
            truncated: page.truncated,
            next_after: page.next_after,
        })
    }

    async fn single(&self, op: TimerOp) -> Result<TimerResult> {
        let mut results = self.apply(std::slice::from_ref(&op)).await?;
        Ok(results.swap_remove(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_sends_its_payload_as_base64_json() {
        let mut s =
            Schedule::new("q", "k/1", &json!({"a": 1}), Duration::from_millis(1500)).unwrap();
        s.txn = Some("t".into());
        assert_eq!(
            TimerOp::Schedule(s).to_json(),
            json!({"op":"schedule","queue":"q","timerKey":"k/1","payload":"eyJhIjoxfQ==",
                   "delayMs":1500,"txn":"t"})
        );
    }

    #[test]
    fn a_peeked_payload_is_decoded() {
        let wire: WirePending = serde_json::from_value(json!({"queue":"q","timerKey":"k",
            "partition":"Default","txn":"t","messageId":"m","deliverAt":"x","attempts":0,
            "firing":false,"payload":"eyJhIjoxfQ==","encrypted":false}))
        .unwrap();
        let t = wire.typed().unwrap();
        assert_eq!(t.payload.unwrap().get(), r#"{"a":1}"#);
    }
}
