//! Helpers of the pop-path tests: raw pops that keep the headers, pushes of chosen
//! transactionIds, batch acks of a whole answer, cursor rows read straight from
//! PostgreSQL, and tenants (auth on, a view of a broker acting for one tenant). The push and
//! configure helpers of `common` are re-exported.

use std::time::{Duration, Instant};

use queen_broker::config::Config;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{ack_batch, ack_item, TestBroker};

pub use crate::common::{configure, push_txns, txns};

/// One pop answer, as received.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_length: Option<String>,
    pub raw: Vec<u8>,
    pub body: Value,
    pub elapsed: Duration,
}

impl Reply {
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn txns(&self) -> Vec<String> {
        self.messages()
            .iter()
            .map(|m| m["transactionId"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub fn lease_id(&self) -> String {
        self.body["leaseId"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Asserts the bodiless 204 of docs/spec/consuming.md: no body and no Content-Length.
    pub fn assert_empty(&self) {
        assert_eq!(
            self.status,
            StatusCode::NO_CONTENT,
            "expected 204, got {}: {}",
            self.status,
            self.body
        );
        assert!(self.raw.is_empty(), "a 204 has no body");
        assert_eq!(
            self.content_length, None,
            "a 204 announces no Content-Length"
        );
    }

    pub fn assert_delivered(&self) {
        assert_eq!(
            self.status,
            StatusCode::OK,
            "expected 200, got {}: {}",
            self.status,
            self.body
        );
    }
}

/// A cloneable handle on a broker, for pops running in spawned tasks.
#[derive(Clone)]
pub struct Handle {
    pub url: String,
    pub http: reqwest::Client,
}

impl Handle {
    pub fn of(b: &TestBroker) -> Self {
        Handle {
            url: b.url.clone(),
            http: b.http.clone(),
        }
    }

    /// `GET path` (e.g. `/api/v1/pop/queue/q?batch=1`), keeping what a 204 check needs.
    pub async fn get(&self, path: &str) -> Reply {
        fetch(&self.http, &format!("{}{}", self.url, path)).await
    }

    /// Acks every message of a leased answer's `body` as completed; asserts success.
    pub async fn ack_all(&self, group: &str, body: &Value) {
        let items: Vec<Value> = body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| ack_item(m, "completed"))
            .collect();
        let r = self
            .http
            .post(format!("{}/api/v1/ack/batch", self.url))
            .json(&serde_json::json!({ "acknowledgments": items, "consumerGroup": group }))
            .send()
            .await
            .expect("ack");
        assert_eq!(r.status(), StatusCode::OK);
        let answer: Value = r.json().await.expect("ack answer");
        for item in answer.as_array().expect("array") {
            assert_eq!(item["success"], true, "ack refused: {item}");
        }
    }
}

/// `GET path` on `b`.
pub async fn get(b: &TestBroker, path: &str) -> Reply {
    fetch(&b.http, &b.at(path)).await
}

async fn fetch(http: &reqwest::Client, url: &str) -> Reply {
    let started = Instant::now();
    let r = http.get(url).send().await.expect("GET");
    let status = r.status();
    let content_length = r
        .headers()
        .get("content-length")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let raw = r.bytes().await.expect("body").to_vec();
    let body = if raw.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&raw).expect("JSON body")
    };
    Reply {
        status,
        content_length,
        raw,
        body,
        elapsed: started.elapsed(),
    }
}

/// Wildcard pop of `queue` with a query string (without the leading `?`).
pub async fn pop(b: &TestBroker, queue: &str, query: &str) -> Reply {
    get(b, &format!("/api/v1/pop/queue/{queue}?{query}")).await
}

/// Acks every message of a leased answer as completed, under its leaseId; asserts success.
pub async fn ack_all(b: &TestBroker, group: &str, reply: &Reply) {
    let items = reply
        .messages()
        .iter()
        .map(|m| ack_item(m, "completed"))
        .collect();
    for r in ack_batch(b, Some(group), items).await {
        assert_eq!(r["success"], true, "ack refused: {r}");
    }
}

/// A cursor row: (committed, batch_end, worker_id, attempt_count, batch_retry_count).
pub async fn cursor(
    db: &tokio_postgres::Client,
    queue: &str,
    partition: &str,
    group: &str,
) -> Option<(i64, Option<i64>, Option<String>, i32, i32)> {
    db.query_opt(
        "SELECT c.committed, c.batch_end, c.worker_id, c.attempt_count, c.batch_retry_count
         FROM queen.log_consumers c
         JOIN queen.log_partitions p ON p.id = c.partition_id
         JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.name = $1 AND p.name = $2 AND c.consumer_group = $3",
        &[&queue, &partition, &group],
    )
    .await
    .expect("cursor query")
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
}

/// The `p`-th percentile (0–100) of `samples`, in milliseconds.
pub fn percentile_ms(samples: &[Duration], p: usize) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let i = ((ms.len().saturating_sub(1)) * p) / 100;
    ms.get(i).copied().unwrap_or(f64::NAN)
}

/// The HS256 secret of [`with_tenants`] brokers.
const TENANT_SECRET: &str = "queen-pop-tenant-secret-0123456789abcdef";

/// Turns auth on (HS256), so callers act for the tenant of their token.
pub fn with_tenants(cfg: &mut Config) {
    cfg.jwt.enabled = true;
    cfg.jwt.secret = Some(TENANT_SECRET.into());
}

/// A view of `b` (a [`with_tenants`] broker) whose requests carry an admin token acting for
/// `tenant` (none: the default tenant); every helper taking a `TestBroker` works through it.
/// Dropping the view leaves the broker running.
pub fn act_as(b: &TestBroker, tenant: Option<&str>) -> TestBroker {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let mut claims = json!({ "sub": "pop-tests", "role": "admin", "iat": now, "exp": now + 3600 });
    if let Some(t) = tenant {
        claims["tenant"] = t.into();
    }
    let key = jsonwebtoken::EncodingKey::from_secret(TENANT_SECRET.as_bytes()).expect("key");
    let token =
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).expect("token");
    let mut headers = HeaderMap::new();
    let bearer = HeaderValue::from_str(&format!("Bearer {token}")).expect("header");
    headers.insert(AUTHORIZATION, bearer);
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .pool_max_idle_per_host(64)
        .build()
        .expect("http client");
    TestBroker {
        url: b.url.clone(),
        http,
        pg: b.pg.clone(),
        server: None,
    }
}
