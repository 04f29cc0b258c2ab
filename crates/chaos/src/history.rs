//! The recorded history of a run: every push answer, every delivery (with its lease and the
//! times around the pop), every ack and lease-extend answer, every HTTP status, and every
//! injected fault, and every key-value operation with its invocation and completion. Times are microseconds since the run started, on one monotonic clock, so
//! the checker can order events that happened in different tasks. With `--keep` the log is
//! written as `history.json` beside the broker logs, for diagnosing what the checker reports.

use std::sync::Mutex;

use serde::Serialize;
use std::time::Instant;

/// Microseconds since the start of the run.
pub type Micros = u64;

/// What one push item's answer said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PushOutcome {
    /// `queued`, `duplicate` or `buffered`: the broker vouches that the message is stored
    /// (or spooled on its disk, to be stored in order).
    Stored(String),
    /// `failed` with the broker's reason.
    Failed(String),
    /// No per-item answer (transport error, 5xx, 503): it may or may not be stored.
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct PushRec {
    pub queue: String,
    pub partition: String,
    pub txn: String,
    pub outcome: PushOutcome,
}

#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    /// Order in which consumers recorded deliveries; a consumer records before it acts.
    pub seq: u64,
    pub group: String,
    pub queue: String,
    pub partition_id: String,
    pub txn: String,
    pub offset: i64,
    pub lease: String,
    pub lease_secs: u64,
    pub pop_sent: Micros,
    pub received: Micros,
}

/// One ack item as sent and answered. Items of one request share `call`.
#[derive(Debug, Clone, Serialize)]
pub struct AckRec {
    pub call: u64,
    pub group: String,
    pub partition_id: String,
    pub txn: String,
    pub offset: i64,
    pub status: &'static str,
    pub lease: Option<String>,
    pub via_transaction: bool,
    pub sent: Micros,
    /// When the answer (or the transport error) came back.
    pub answered: Micros,
    /// `None`: no per-item answer (the effect is unknown).
    pub answer: Option<AckAnswer>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AckAnswer {
    pub success: bool,
    pub lease_released: bool,
    pub dlq: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExtendRec {
    pub lease: String,
    pub seconds: u64,
    pub sent: Micros,
    pub renewed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpRec {
    pub route: &'static str,
    /// 0: no HTTP answer (connection refused, reset, timeout).
    pub status: u16,
    pub at: Micros,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultRec {
    pub kind: &'static str,
    pub start: Micros,
    pub end: Micros,
    /// Requests failing with 5xx inside this window are expected (the database was away).
    pub outage: bool,
    pub detail: String,
}

/// A key-value write as sent: `value` is unique in the run, `expect` the version it required
/// (0: absent; `None`: unconditional).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvWrite {
    pub value: String,
    pub expect: Option<i64>,
}

/// What a key-value operation answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum KvAnswer {
    /// The write applied and got this version.
    Applied(i64),
    /// A get's row, or the row a refused write found: version (0 = absent) and value.
    Observed { version: i64, value: Option<String> },
    /// No answer (transport error, 5xx): a write may or may not have applied.
    Unknown,
}

/// One key-value operation: a get (`write` = `None`) or a put.
#[derive(Debug, Clone, Serialize)]
pub struct KvRec {
    pub key: String,
    pub write: Option<KvWrite>,
    pub invoked: Micros,
    pub completed: Micros,
    pub answer: KvAnswer,
}

#[derive(Default, Serialize)]
pub struct Log {
    pub pushes: Vec<PushRec>,
    pub deliveries: Vec<Delivery>,
    pub acks: Vec<AckRec>,
    pub extends: Vec<ExtendRec>,
    pub http: Vec<HttpRec>,
    pub faults: Vec<FaultRec>,
    pub kv: Vec<KvRec>,
    #[serde(skip)]
    next_call: u64,
}

pub struct History {
    start: Instant,
    log: Mutex<Log>,
}

impl History {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            log: Mutex::new(Log::default()),
        }
    }

    pub fn now(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    pub fn pushes(&self, recs: impl IntoIterator<Item = PushRec>) {
        self.log.lock().unwrap().pushes.extend(recs);
    }

    /// Records a pop's messages, numbering them in recording order.
    pub fn deliveries(&self, recs: impl IntoIterator<Item = Delivery>) {
        let mut log = self.log.lock().unwrap();
        for mut d in recs {
            d.seq = log.deliveries.len() as u64;
            log.deliveries.push(d);
        }
    }

    /// A fresh id for the items of one ack request.
    pub fn next_call(&self) -> u64 {
        let mut log = self.log.lock().unwrap();
        log.next_call += 1;
        log.next_call
    }

    pub fn acks(&self, recs: impl IntoIterator<Item = AckRec>) {
        self.log.lock().unwrap().acks.extend(recs);
    }

    pub fn extend(&self, rec: ExtendRec) {
        self.log.lock().unwrap().extends.push(rec);
    }

    pub fn http(&self, route: &'static str, status: u16, detail: impl Into<String>) {
        let at = self.now();
        self.log.lock().unwrap().http.push(HttpRec {
            route,
            status,
            at,
            detail: detail.into(),
        });
    }

    pub fn kv(&self, rec: KvRec) {
        self.log.lock().unwrap().kv.push(rec);
    }

    pub fn fault(&self, rec: FaultRec) {
        self.log.lock().unwrap().faults.push(rec);
    }

    /// The whole log, for the checker (the run is over).
    pub fn take(&self) -> Log {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}
