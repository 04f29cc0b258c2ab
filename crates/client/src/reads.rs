//! Reads by offset (docs/wire.md §23): `POST /api/v1/fetch` reads a partition's messages from
//! an offset without a lease or a cursor, and `POST /api/v1/partitions/changed` lists a
//! queue's partitions (all, or those written since a time). Neither writes anything: no
//! consumer group notices them.
//!
//! ```no_run
//! # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
//! use queen_client::reads::FetchEntry;
//! let mut next = 0;
//! let got = queen.fetch(&[FetchEntry::new("orders", "customer-42", next)], None).await?;
//! for record in &got[0].records {
//!     println!("{} {}", record.offset, record.payload);
//!     next = record.offset + 1;
//! }
//! # Ok(()) }
//! ```

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::{expect_json, Error, Queen, Result};

/// One partition to read, from `offset` on.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchEntry {
    /// The queue.
    pub queue: String,
    /// The partition's name.
    pub partition: String,
    /// The first offset to read (≥ 0).
    pub offset: i64,
    /// The payload bytes this entry may answer (1 MiB when `None`; the broker clamps it to
    /// 8 MiB); the first record always comes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

impl FetchEntry {
    /// Reads `partition` of `queue` from `offset`.
    pub fn new(queue: impl Into<String>, partition: impl Into<String>, offset: i64) -> Self {
        Self {
            queue: queue.into(),
            partition: partition.into(),
            offset,
            max_bytes: None,
        }
    }
}

/// Why an entry answered no records.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum FetchError {
    /// No such queue or partition.
    UnknownTopicOrPartition,
    /// The offset is below the oldest one kept or past the next one to be written.
    OffsetOutOfRange,
    /// An error this SDK does not know (a newer broker).
    Other(String),
}

impl From<String> for FetchError {
    fn from(s: String) -> Self {
        match s.as_str() {
            "UNKNOWN_TOPIC_OR_PARTITION" => FetchError::UnknownTopicOrPartition,
            "OFFSET_OUT_OF_RANGE" => FetchError::OffsetOutOfRange,
            _ => FetchError::Other(s),
        }
    }
}

/// One stored message, read by offset.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Its offset in the partition.
    pub offset: i64,
    /// Its transactionId.
    pub transaction_id: String,
    /// Its message id.
    pub message_id: String,
    /// The pushed JSON (`null` when an encrypted payload cannot be opened).
    pub payload: Box<RawValue>,
    /// When the push that wrote it was stored (ISO-8601 UTC, microseconds).
    pub ts: String,
}

/// The answer for one [`FetchEntry`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fetched {
    /// The queue.
    pub queue: String,
    /// The partition.
    pub partition: String,
    /// Its records from the offset asked, in offset order.
    pub records: Vec<Record>,
    /// The next offset the partition will assign.
    pub high_watermark: i64,
    /// The oldest offset retention kept.
    pub log_start_offset: i64,
    /// Why there are no records, when that is an error.
    #[serde(default)]
    pub error: Option<FetchError>,
}

/// Which partitions of a queue to list.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedQuery {
    /// The queue.
    pub queue: String,
    /// Only partitions written at or after this ISO-8601 time (a previous answer's
    /// `safe_time`); every partition when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The previous page's `next`, with the same `since`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Partitions per page (the broker clamps it to 1..1000; 1000 when `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// One partition in a listing.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedPartition {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: String,
    /// Its last offset (-1: never written).
    pub last_offset: i64,
    /// The oldest offset kept.
    pub log_start: i64,
    /// When it was last written (ISO-8601 UTC, microseconds).
    pub last_write_at: String,
}

/// The answer for one [`ChangedQuery`].
#[derive(Debug, Clone, Deserialize)]
pub struct ChangedPage {
    /// The partitions.
    pub partitions: Vec<ChangedPartition>,
    /// The cursor of the next page; `None` at the end.
    pub next: Option<String>,
    /// Set when the queue does not exist.
    #[serde(default)]
    pub error: Option<FetchError>,
}

/// The answer of [`Queen::partitions_changed`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Changed {
    /// One page per query, in order.
    pub entries: Vec<ChangedPage>,
    /// Every write up to this time is counted in the answer: pass it as the next `since`.
    pub safe_time: String,
}

impl Queen {
    /// `POST /api/v1/fetch`: each entry's records from its offset (index-aligned). `max_bytes`
    /// bounds the payload bytes of the whole call (64 MiB when `None`).
    pub async fn fetch(
        &self,
        entries: &[FetchEntry],
        max_bytes: Option<u64>,
    ) -> Result<Vec<Fetched>> {
        let mut body = json!({ "entries": entries });
        if let Some(max) = max_bytes {
            body["maxBytes"] = json!(max);
        }
        #[derive(Deserialize)]
        struct Answer {
            entries: Vec<Fetched>,
        }
        let req = self.request(Method::POST, "/api/v1/fetch").json(&body);
        let answer: Answer = expect_json(req.send().await?).await?;
        aligned(answer.entries, entries.len())
    }

    /// `POST /api/v1/partitions/changed`: one page of partitions per query.
    pub async fn partitions_changed(&self, queries: &[ChangedQuery]) -> Result<Changed> {
        let body = json!({ "entries": queries });
        let req = self
            .request(Method::POST, "/api/v1/partitions/changed")
            .json(&body);
        let answer: Changed = expect_json(req.send().await?).await?;
        let entries = aligned(answer.entries, queries.len())?;
        Ok(Changed { entries, ..answer })
    }
}

fn aligned<T>(got: Vec<T>, asked: usize) -> Result<Vec<T>> {
    if got.len() != asked {
        return Err(Error::Decode(format!(
            "{} answers for {asked} entries",
            got.len()
        )));
    }
    Ok(got)
}
