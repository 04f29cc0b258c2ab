//! `GET /metrics/prometheus` against a real broker (docs/wire.md §15): the answer is the
//! Prometheus text format (every line understood by a real parser, `prometheus-parse`), its
//! counters move with pushes, pops and acks, a route that was hit has a latency histogram, the
//! queue sample reads PostgreSQL, and labels stay bounded whatever names clients send. Each
//! test has a broker of its own, whose series are its own (the recorders are per broker).

use std::collections::BTreeSet;

use futures::{stream, StreamExt};
use prometheus_parse::{LineInfo, Sample, Value as Metric};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, ack_batch, ack_item, configure, TestBroker};
use crate::layering::{rust_files, src};

/// One parsed scrape.
struct Scrape {
    text: String,
    parsed: prometheus_parse::Scrape,
}

impl Scrape {
    /// The samples of `metric` whose labels include every pair of `labels`.
    fn samples<'a>(&'a self, metric: &'a str, labels: &'a [(&str, &str)]) -> Vec<&'a Sample> {
        self.parsed
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .collect()
    }

    /// The value of the one counter or gauge sample of `metric` with `labels`; 0 when absent
    /// (a labelled counter appears with its first count).
    fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.samples(metric, labels);
        assert!(found.len() <= 1, "{metric} {labels:?}: {found:?}");
        match found.first().map(|s| &s.value) {
            None => 0.0,
            Some(Metric::Counter(v) | Metric::Gauge(v)) => *v,
            Some(other) => panic!("{metric} is not a counter or gauge: {other:?}"),
        }
    }

    /// Every value of label `label` on `metric`.
    fn label_values(&self, metric: &str, label: &str) -> BTreeSet<String> {
        self.samples(metric, &[])
            .iter()
            .filter_map(|s| s.labels.get(label).map(str::to_string))
            .collect()
    }
}

/// Scrapes `b`, checking the content type and that the parser understands every line.
async fn scrape(b: &TestBroker) -> Scrape {
    let r = b
        .http
        .get(b.at("/metrics/prometheus"))
        .send()
        .await
        .expect("GET /metrics/prometheus");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/plain; version=0.0.4"
    );
    let text = r.text().await.expect("body");
    for line in text.lines() {
        assert!(
            !matches!(LineInfo::parse(line), LineInfo::Ignored),
            "not a line of the text format: {line:?}"
        );
    }
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("parse the exposition");
    Scrape { text, parsed }
}

async fn pop(b: &TestBroker, queue: &str) -> Vec<Value> {
    let (status, body) = b
        .get(&format!("/api/v1/pop/queue/{queue}?batch=10&wait=false"))
        .await;
    assert_eq!(status, StatusCode::OK, "pop {queue}: {body}");
    body["messages"].as_array().cloned().expect("messages")
}

#[tokio::test]
async fn counters_move_with_push_pop_and_ack() {
    // Every scrape reads its own queue sample (none is held for the next).
    let b = common::broker_with(|cfg| cfg.metrics_cache_ms = 0).await;
    let before = scrape(&b).await;
    assert_eq!(before.value("queen_database_up", &[]), 1.0);

    b.push("prom-q", "p", &[json!(1), json!(2), json!(3)]).await;
    let popped = pop(&b, "prom-q").await;
    assert_eq!(popped.len(), 3);
    let items = popped.iter().map(|m| ack_item(m, "completed")).collect();
    let acked = ack_batch(&b, None, items).await;
    assert!(acked.iter().all(|a| a["success"] == true), "{acked:?}");
    b.push("prom-q", "p", &[json!(4), json!(5)]).await;
    let after = scrape(&b).await;

    let moved = |metric: &str, labels: &[(&str, &str)]| {
        after.value(metric, labels) - before.value(metric, labels)
    };
    assert_eq!(moved("queen_messages_pushed_total", &[]), 5.0);
    assert_eq!(moved("queen_messages_popped_total", &[]), 3.0);
    let completed = [("status", "completed")];
    assert_eq!(moved("queen_messages_acked_total", &completed), 3.0);
    assert_eq!(
        moved("queen_messages_acked_total", &[("status", "failed")]),
        0.0
    );
    let push = [
        ("method", "POST"),
        ("route", "/api/v1/push"),
        ("status", "201"),
    ];
    assert_eq!(moved("queen_http_requests_total", &push), 2.0);
    let pop_route = [("route", "/api/v1/pop/queue/:queue"), ("status", "200")];
    assert_eq!(moved("queen_http_requests_total", &pop_route), 1.0);
    // The store sent statements; the count is process-wide, so only its movement is certain.
    assert!(moved("queen_pg_statements_total", &[]) >= 5.0);

    // The queue sample: the two unconsumed messages, for the queue and its queue-mode group.
    assert_eq!(after.value("queen_pending_messages", &[]), 2.0);
    let queue = [("queue", "prom-q")];
    assert_eq!(after.value("queen_queue_pending_messages", &queue), 2.0);
    assert_eq!(after.value("queen_queue_dead_letter_messages", &queue), 0.0);
    let lag = [("queue", "prom-q"), ("group", "__QUEUE_MODE__")];
    assert_eq!(after.value("queen_group_lag_messages", &lag), 2.0);

    // The pool and the accelerators.
    assert_eq!(after.value("queen_db_pool_max_connections", &[]), 32.0);
    let in_use = after.value("queen_db_pool_connections", &[("state", "in_use")]);
    let idle = after.value("queen_db_pool_connections", &[("state", "idle")]);
    assert!(in_use + idle >= 1.0, "in use {in_use}, idle {idle}");
    for accelerator in ["dedup_cache", "pop_hints", "segment_cache"] {
        let which = [("accelerator", accelerator)];
        assert_eq!(
            after.samples("queen_accelerator_hits_total", &which).len(),
            1
        );
        assert_eq!(
            after
                .samples("queen_accelerator_misses_total", &which)
                .len(),
            1
        );
    }
    // The dedup cache saw two pushes, each either vouched for or fully probed.
    let dedup = [("accelerator", "dedup_cache")];
    let pushes = moved("queen_accelerator_hits_total", &dedup)
        + moved("queen_accelerator_misses_total", &dedup);
    assert_eq!(pushes, 2.0);

    // Every family has its help text; retention has counted nothing and is absent.
    for family in ["queen_http_requests_total", "queen_group_lag_messages"] {
        assert!(
            after.parsed.docs.contains_key(family),
            "no HELP for {family}"
        );
    }
    // Retention has deleted nothing on this broker: its counters are exported, at zero.
    for family in [
        "queen_retention_deleted_messages_total",
        "queen_retention_deleted_segments_total",
    ] {
        assert_eq!(after.samples(family, &[]).len(), 1, "{family} is exported");
        assert_eq!(after.value(family, &[]), 0.0, "{family}");
    }
}

#[tokio::test]
async fn dead_letters_are_counted_and_sampled() {
    let b = common::broker().await;
    configure(&b, "prom-dlq", json!({ "retryLimit": 0 })).await;
    b.push("prom-dlq", "p", &[json!("poison")]).await;
    let popped = pop(&b, "prom-dlq").await;
    let failed = ack_batch(&b, None, vec![ack_item(&popped[0], "failed")]).await;
    assert_eq!(failed[0]["dlq"], true, "{failed:?}");
    let s = scrape(&b).await;
    assert_eq!(s.value("queen_messages_dead_lettered_total", &[]), 1.0);
    assert_eq!(
        s.value("queen_messages_acked_total", &[("status", "failed")]),
        1.0
    );
    assert_eq!(s.value("queen_dead_letter_messages", &[]), 1.0);
    let queue = [("queue", "prom-dlq")];
    assert_eq!(s.value("queen_queue_dead_letter_messages", &queue), 1.0);
    assert_eq!(s.value("queen_queue_pending_messages", &queue), 0.0);
}

#[tokio::test]
async fn a_hit_route_has_a_latency_histogram() {
    let b = common::broker().await;
    b.push("prom-h", "p", &[json!("x")]).await;
    let s = scrape(&b).await;
    let push = [("method", "POST"), ("route", "/api/v1/push")];
    let found = s.samples("queen_http_request_duration_seconds", &push);
    assert_eq!(found.len(), 1, "{found:?}");
    let Metric::Histogram(buckets) = &found[0].value else {
        panic!("not a histogram: {:?}", found[0].value);
    };
    assert!(buckets.len() > 10, "{buckets:?}");
    assert!(buckets.windows(2).all(|w| w[0].less_than < w[1].less_than));
    assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count));
    let last = buckets.last().unwrap();
    assert!(last.less_than.is_infinite());
    assert_eq!(last.count, 1.0);
    let count = s.samples("queen_http_request_duration_seconds_count", &push);
    assert_eq!(count.len(), 1);
    assert!(matches!(count[0].value, Metric::Untyped(n) if n == 1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_stay_bounded_whatever_the_names() {
    let b = common::broker_with(|cfg| cfg.metrics_max_queues = 5).await;
    // 200 queues, one message each (popped, not acked: still pending), one more on q-077 and
    // two more on q-123; every name also misses the router once.
    stream::iter(0..200)
        .for_each_concurrent(16, |i| {
            let b = &b;
            async move {
                let queue = format!("q-{i:03}");
                b.push(&queue, "p", &[json!(i)]).await;
                let (status, _) = b
                    .get(&format!("/api/v1/pop/queue/{queue}?wait=false"))
                    .await;
                assert_eq!(status, StatusCode::OK);
                let (status, _) = b.get(&format!("/no/such/{queue}")).await;
                assert_eq!(status, StatusCode::NOT_FOUND);
            }
        })
        .await;
    b.push("q-077", "p", &[json!("more")]).await;
    b.push("q-123", "p", &[json!("more"), json!("more")]).await;
    let s = scrape(&b).await;

    let routes = s.label_values("queen_http_requests_total", "route");
    let expected: BTreeSet<String> = [
        "/api/v1/push",
        "/api/v1/pop/queue/:queue",
        "/metrics/prometheus",
        "unmatched",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert!(routes.is_subset(&expected), "route labels: {routes:?}");
    assert!(routes.contains("/api/v1/push") && routes.contains("unmatched"));
    let timed = s.label_values("queen_http_request_duration_seconds", "route");
    assert!(
        timed.is_subset(&expected),
        "histogram route labels: {timed:?}"
    );
    assert!(
        !s.text.contains("q-050"),
        "a queue name outside the top 5 leaked"
    );

    // Five queues of their own, the fullest first (ties by name); totals over all 200.
    let top: BTreeSet<String> = ["q-123", "q-077", "q-000", "q-001", "q-002"]
        .into_iter()
        .map(String::from)
        .collect();
    let queues = s.label_values("queen_queue_pending_messages", "queue");
    assert_eq!(queues, top, "{queues:?}");
    assert_eq!(
        s.value("queen_queue_pending_messages", &[("queue", "q-123")]),
        3.0
    );
    assert_eq!(s.value("queen_pending_messages", &[]), 203.0);
    // Queue mode is the one group; its five furthest behind.
    let groups = s.label_values("queen_group_lag_messages", "queue");
    assert_eq!(groups, top);
    let lag = [("queue", "q-123"), ("group", "__QUEUE_MODE__")];
    assert_eq!(s.value("queen_group_lag_messages", &lag), 3.0);
}

#[tokio::test]
async fn a_failed_queue_sample_still_answers_with_the_broker_series() {
    let b = common::broker().await;
    b.push("prom-down", "p", &[json!(1)]).await;
    // The sample's function vanishing stands for a database that cannot answer it.
    let db = b.sql().await;
    db.batch_execute(
        "ALTER FUNCTION queen.admin_metrics_v1(int, text) RENAME TO admin_metrics_gone",
    )
    .await
    .expect("rename the sample function");
    let s = scrape(&b).await;
    assert_eq!(s.value("queen_database_up", &[]), 0.0);
    assert_eq!(s.value("queen_messages_pushed_total", &[]), 1.0);
    assert!(s.samples("queen_queue_pending_messages", &[]).is_empty());
    assert!(s.samples("queen_pending_messages", &[]).is_empty());
}

/// Counts the broker's reads of the queue sample: the sample function is wrapped by one that
/// counts its calls in a sequence and takes `delay_ms`, so scrapes sent together overlap.
async fn count_sample_reads(b: &TestBroker, delay_ms: u32) {
    let db = b.sql().await;
    db.batch_execute(&format!(
        "CREATE SEQUENCE public.sample_reads;
         ALTER FUNCTION queen.admin_metrics_v1(int, text) RENAME TO admin_metrics_counted;
         CREATE FUNCTION queen.admin_metrics_v1(p_limit int, p_tenant text DEFAULT '')
         RETURNS TABLE(queue_name text, consumer_group text, pending bigint, dead_letter bigint)
         LANGUAGE plpgsql VOLATILE AS $$
         BEGIN
             PERFORM nextval('public.sample_reads');
             PERFORM pg_sleep({delay_ms} / 1000.0);
             RETURN QUERY SELECT * FROM queen.admin_metrics_counted(p_limit, p_tenant);
         END $$;"
    ))
    .await
    .expect("wrap the sample function");
}

async fn sample_reads(b: &TestBroker) -> i64 {
    let row = b
        .sql()
        .await
        .query_one(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.sample_reads",
            &[],
        )
        .await
        .expect("read the counter");
    row.get(0)
}

/// Pop-lane permits admission granted so far (`/metrics`).
async fn pop_permits(b: &TestBroker) -> u64 {
    let (_, m) = b.get("/metrics").await;
    m["admission"]["pop"]["granted"].as_u64().expect("granted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scrapes_share_one_sample_read_charged_to_admission() {
    let b = common::broker_with(|cfg| cfg.metrics_cache_ms = 60_000).await;
    b.push("prom-flight", "p", &[json!(1)]).await;
    count_sample_reads(&b, 300).await;
    let permits = pop_permits(&b).await;
    let scrapes = stream::iter(0..32)
        .map(|_| scrape(&b))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    for s in &scrapes {
        assert_eq!(s.value("queen_database_up", &[]), 1.0);
        let queue = [("queue", "prom-flight")];
        assert_eq!(s.value("queen_queue_pending_messages", &queue), 1.0);
    }
    assert_eq!(sample_reads(&b).await, 1, "32 scrapes, one read");
    assert_eq!(
        pop_permits(&b).await - permits,
        1,
        "the read took one admission permit"
    );
    // Within QUEEN_METRICS_CACHE_MS the answer is held (its aging: accel/one_flight.rs, and
    // `counters_move_with_push_pop_and_ack` with 0).
    scrape(&b).await;
    assert_eq!(sample_reads(&b).await, 1, "held");
}

/// `queen_pg_statements_total` counts where the store takes a statement (`store::prepare`): a
/// `prepare_cached` anywhere else in `src/` would run statements the counter never sees. (The
/// schema application at boot is left out by design.)
#[test]
fn statements_are_prepared_in_one_place() {
    let allowed = [
        src().join("store/mod.rs"),
        src().join("store/migrations.rs"),
    ];
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut bypasses = Vec::new();
    for file in files.iter().filter(|f| !allowed.contains(f)) {
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if line.contains("prepare_cached(") {
                bypasses.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        bypasses.is_empty(),
        "use crate::store::prepare instead of prepare_cached: {bypasses:?}"
    );
}
