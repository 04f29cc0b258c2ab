//! Transactions: pushes and acks committed in one PostgreSQL transaction, all or nothing
//! (`POST /api/v1/transaction`, docs/wire.md §10), with key-value and timer operations riding
//! in the same transaction (§20.3, §22.3).

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::kv::{KvOp, KvPrecondition};
use crate::timers::TimerOp;
use crate::{expect_json, AckStatus, Error, Message, PushItem, Queen, Result};

/// Collects operations; [`Transaction::commit`] sends them as one bundle.
///
/// ```no_run
/// # async fn demo(queen: queen_client::Queen, msg: queen_client::Message) -> queen_client::Result<()> {
/// use queen_client::{AckStatus, PushItem};
/// // Forward a message to the next stage and ack it, atomically.
/// let next = PushItem::json(&serde_json::json!({"step": 2}), None)?;
/// let outcome = queen
///     .transaction()
///     .push("stage-2", "Default", vec![next])
///     .ack(&msg, AckStatus::Completed, None)
///     .commit()
///     .await?;
/// assert!(outcome.success);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Transaction {
    queen: Queen,
    operations: Vec<Operation>,
    leases: Vec<String>,
    kv: Vec<KvOp>,
    timers: Vec<TimerOp>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum Operation {
    Push {
        items: Vec<WireItem>,
    },
    #[serde(rename_all = "camelCase")]
    Ack {
        transaction_id: String,
        partition_id: String,
        status: AckStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        consumer_group: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        lease_id: Option<String>,
    },
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireItem {
    queue: String,
    partition: String,
    payload: Box<RawValue>,
    transaction_id: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    operations: &'a [Operation],
    required_leases: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kv: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    timers: Vec<serde_json::Value>,
}

/// A committed transaction: one result per pushed item and per ack, in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransactionOutcome {
    /// Always true here: a rolled-back bundle is [`crate::Error::Rejected`].
    pub success: bool,
    /// The broker's id of this bundle.
    #[serde(default)]
    pub transaction_id: Option<String>,
    /// One result per operation, in order: push items as in a push answer, acks as in an ack
    /// answer, then the `kv` rider's (`type: "kv"`) and the `timers` rider's (`type: "timer"`),
    /// each with its flat `index` and its `opIndex` in the rider.
    #[serde(default)]
    pub results: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Refusal {
    success: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

impl Queen {
    /// Starts a transaction bundle.
    pub fn transaction(&self) -> Transaction {
        Transaction {
            queen: self.clone(),
            operations: Vec::new(),
            leases: Vec::new(),
            kv: Vec::new(),
            timers: Vec::new(),
        }
    }
}

impl Transaction {
    /// Pushes `items` to (queue, partition) as part of the bundle. Items without a
    /// transactionId get one now, so a bundle sent again is deduplicated.
    pub fn push(mut self, queue: &str, partition: &str, items: Vec<PushItem>) -> Self {
        let items = items
            .into_iter()
            .map(|item| WireItem {
                queue: queue.to_string(),
                partition: partition.to_string(),
                payload: item.payload,
                transaction_id: item
                    .transaction_id
                    .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            })
            .collect();
        self.operations.push(Operation::Push { items });
        self
    }

    /// Acks `msg` (under the lease it was delivered with) as part of the bundle; `group` is
    /// the consumer group it was popped for (`None`: the queue's shared group).
    pub fn ack(mut self, msg: &Message, status: AckStatus, group: Option<&str>) -> Self {
        let lease = Some(msg.lease_id.clone()).filter(|l| !l.is_empty());
        if let Some(l) = &lease {
            if !self.leases.contains(l) {
                self.leases.push(l.clone());
            }
        }
        self.operations.push(Operation::Ack {
            transaction_id: msg.transaction_id.clone(),
            partition_id: msg.partition_id.clone(),
            status,
            consumer_group: group.map(str::to_string),
            lease_id: lease,
        });
        self
    }

    /// Applies a key-value operation in the bundle's transaction, before its pushes and acks
    /// (`getPrefix` is not allowed). A `required` one whose precondition is lost (a lock's
    /// [`crate::locks::Permit::guard`], a `put_if_absent` gate) rolls back the whole bundle:
    /// [`Error::Precondition`].
    pub fn kv(mut self, op: KvOp) -> Self {
        self.kv.push(op);
        self
    }

    /// Schedules or cancels a timer in the bundle's transaction: a bundle that rolls back
    /// schedules and cancels nothing.
    pub fn timer(mut self, op: TimerOp) -> Self {
        self.timers.push(op);
        self
    }

    /// Sends the bundle. A rolled-back bundle is [`Error::Rejected`] with the broker's reason,
    /// or [`Error::Precondition`] when a required key-value operation lost its precondition.
    pub async fn commit(self) -> Result<TransactionOutcome> {
        if self.operations.is_empty() && self.kv.is_empty() && self.timers.is_empty() {
            return Err(Error::Encode(
                "a transaction needs at least one operation".into(),
            ));
        }
        if self
            .kv
            .iter()
            .any(|op| matches!(op, KvOp::GetPrefix { .. }))
        {
            return Err(Error::Encode(
                "getPrefix is not allowed in a transaction".into(),
            ));
        }
        let body = Body {
            operations: &self.operations,
            required_leases: &self.leases,
            kv: self.kv.iter().map(KvOp::to_json).collect(),
            timers: self.timers.iter().map(TimerOp::to_json).collect(),
        };
        let req = self
            .queen
            .request(Method::POST, "/api/v1/transaction")
            .json(&body);
        let answer: serde_json::Value = expect_json(req.send().await?).await?;
        let refusal: Refusal =
            serde_json::from_value(answer.clone()).map_err(|e| Error::Decode(e.to_string()))?;
        if !refusal.success && refusal.reason.as_deref() == Some("kv_precondition") {
            let lost: KvPrecondition =
                serde_json::from_value(answer).map_err(|e| Error::Decode(e.to_string()))?;
            return Err(Error::Precondition(lost));
        }
        if !refusal.success {
            return Err(Error::Rejected {
                reason: refusal.reason.unwrap_or_default(),
                message: refusal
                    .error
                    .unwrap_or_else(|| "transaction rolled back".into()),
            });
        }
        serde_json::from_value(answer).map_err(|e| Error::Decode(e.to_string()))
    }
}
