//! Read and manage broker state: queue listings, consumer groups, dead letters (listing, purge,
//! delete, replay), message details, seeks, totals. These answers are operator views whose shapes the broker may extend, so they are
//! returned as JSON values (docs/wire.md §11, §12, §14).

use reqwest::Method;
use serde_json::{json, Value};

use crate::queue::encode_segment;
use crate::{expect_json, Queen, Result};

/// Which dead letters to list (`GET /api/v1/dlq`).
#[derive(Debug, Clone, Default)]
pub struct DlqQuery {
    /// The queue whose dead letters to list.
    pub queue: String,
    /// Only this consumer group's (queue mode is `__QUEUE_MODE__`).
    pub group: Option<String>,
    /// Only this partition's.
    pub partition: Option<String>,
    /// Page size.
    pub limit: Option<u32>,
    /// Rows to skip (paging).
    pub offset: Option<u32>,
}

/// Where a seek moves a group's cursors.
#[derive(Debug, Clone)]
pub enum SeekTarget {
    /// Past everything stored now: only later messages are delivered.
    End,
    /// Just before the first message stored at or after this ISO-8601 instant.
    Timestamp(String),
}

impl Queen {
    /// `GET /api/v1/resources/queues`: every queue with its partition count and message counts.
    pub async fn queues(&self) -> Result<Value> {
        self.get_json("/api/v1/resources/queues", &[]).await
    }

    /// `GET /api/v1/resources/queues/:queue`: one queue with its config and partitions.
    pub async fn queue_info(&self, queue: &str) -> Result<Value> {
        let path = format!("/api/v1/resources/queues/{}", encode_segment(queue));
        self.get_json(&path, &[]).await
    }

    /// `GET /api/v1/consumer-groups`: every group with its queues, lag and active leases.
    pub async fn consumer_groups(&self) -> Result<Value> {
        self.get_json("/api/v1/consumer-groups", &[]).await
    }

    /// `GET /api/v1/resources/overview`: totals over all queues.
    pub async fn overview(&self) -> Result<Value> {
        self.get_json("/api/v1/resources/overview", &[]).await
    }

    /// `GET /api/v1/dlq`: one page of dead letters, newest first, with the matching `total`.
    ///
    /// ```no_run
    /// # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
    /// use queen_client::DlqQuery;
    /// let query = DlqQuery { queue: "orders".into(), limit: Some(20), ..Default::default() };
    /// let page = queen.dlq(&query).await?;
    /// for letter in page["messages"].as_array().into_iter().flatten() {
    ///     let (pid, txn) = (letter["partitionId"].as_str(), letter["transactionId"].as_str());
    ///     if let (Some(pid), Some(txn)) = (pid, txn) {
    ///         queen.dlq_replay(pid, txn).await?; // back into its partition, same transactionId
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn dlq(&self, q: &DlqQuery) -> Result<Value> {
        let mut query = vec![("queue", q.queue.clone())];
        let optional = [
            ("consumerGroup", q.group.clone()),
            ("partition", q.partition.clone()),
            ("limit", q.limit.map(|n| n.to_string())),
            ("offset", q.offset.map(|n| n.to_string())),
        ];
        query.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
        self.get_json("/api/v1/dlq", &query).await
    }

    /// `DELETE /api/v1/dlq?queue=&consumerGroup=`: purges the queue's dead letters (of one
    /// group if given); answers `{"success":true,"deleted":n}`.
    pub async fn dlq_purge(&self, queue: &str, group: Option<&str>) -> Result<Value> {
        let mut query = vec![("queue", queue)];
        query.extend(group.map(|g| ("consumerGroup", g)));
        let req = self.request(Method::DELETE, "/api/v1/dlq").query(&query);
        expect_json(req.send().await?).await
    }

    /// `DELETE /api/v1/messages/:partitionId/:transactionId`: deletes that address's dead
    /// letters, every group (HTTP 404 when it has none).
    pub async fn dlq_delete(&self, partition_id: &str, transaction_id: &str) -> Result<Value> {
        let path = message_path(partition_id, transaction_id);
        let req = self.request(Method::DELETE, &path);
        expect_json(req.send().await?).await
    }

    /// `POST /api/v1/messages/:partitionId/:transactionId/retry`: pushes the dead letter's
    /// payload back under the same transactionId and removes its rows, in one transaction;
    /// answers `{"success":true,"partitionId":..,"offset":..,"replayed":n}`.
    pub async fn dlq_replay(&self, partition_id: &str, transaction_id: &str) -> Result<Value> {
        let path = format!("{}/retry", message_path(partition_id, transaction_id));
        let req = self.request(Method::POST, &path);
        expect_json(req.send().await?).await
    }

    /// `GET /api/v1/messages/:partitionId/:transactionId`: one message with its queue and
    /// per-group state.
    pub async fn message(&self, partition_id: &str, transaction_id: &str) -> Result<Value> {
        self.get_json(&message_path(partition_id, transaction_id), &[])
            .await
    }

    /// `POST /api/v1/consumer-groups/:group/queues/:queue[/partitions/:partition]/seek`.
    pub async fn seek(
        &self,
        group: &str,
        queue: &str,
        partition: Option<&str>,
        target: &SeekTarget,
    ) -> Result<Value> {
        let mut path = format!(
            "/api/v1/consumer-groups/{}/queues/{}",
            encode_segment(group),
            encode_segment(queue)
        );
        if let Some(p) = partition {
            path.push_str(&format!("/partitions/{}", encode_segment(p)));
        }
        path.push_str("/seek");
        let body = match target {
            SeekTarget::End => json!({ "toEnd": true }),
            SeekTarget::Timestamp(ts) => json!({ "timestamp": ts }),
        };
        let req = self.request(Method::POST, &path).json(&body);
        expect_json(req.send().await?).await
    }

    async fn get_json(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        let req = self.request(Method::GET, path).query(query);
        expect_json(req.send().await?).await
    }
}

fn message_path(partition_id: &str, transaction_id: &str) -> String {
    format!(
        "/api/v1/messages/{}/{}",
        encode_segment(partition_id),
        encode_segment(transaction_id)
    )
}
