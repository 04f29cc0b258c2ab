//! The broker's Prometheus metrics (docs/wire.md §15): the name, help text and kind of every
//! metric, defined once here; the live recorder of what is counted as it happens (requests per
//! route, acknowledgements); and the scrape, a fresh recorder per `GET /metrics/prometheus`
//! holding the values read at that moment (counters kept by the engine, the pool, the
//! accelerators, the queue sample from PostgreSQL). Both render through
//! `metrics-exporter-prometheus` in text format 0.0.4; the crate's recorders are used render
//! only, never installed as the process's global recorder and with no listener of their own,
//! so every broker of a process (the tests run several) keeps its own series.
//!
//! Cardinality is bounded by construction: route labels are the router's templates, methods
//! outside the standard set read `other`, statuses are the few the broker answers, and the
//! per-queue series of a scrape are capped by `QUEEN_METRICS_MAX_QUEUES`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

/// What a metric measures, for its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric: its exported name, help text and kind.
#[derive(Debug)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

const fn metric(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric { name, help, kind }
}

// --- Counted as it happens (the live recorder) -------------------------------------------

pub const HTTP_REQUESTS: Metric = metric(
    "queen_http_requests_total",
    Kind::Counter,
    "HTTP requests answered, by method, matched route template and status code.",
);
pub const HTTP_REQUEST_DURATION: Metric = metric(
    "queen_http_request_duration_seconds",
    Kind::Histogram,
    "Seconds from a request's arrival to its response head, by method and matched route \
     template; long-poll pops include their wait.",
);
pub const MESSAGES_ACKED: Metric = metric(
    "queen_messages_acked_total",
    Kind::Counter,
    "Acknowledgements applied (plain acks and transactions), by status: completed, failed, \
     retry, dlq.",
);
pub const MESSAGES_DEAD_LETTERED: Metric = metric(
    "queen_messages_dead_lettered_total",
    Kind::Counter,
    "Messages this broker filed into the dead-letter queue.",
);
/// Reserved for the retention loop (docs/engine.md §10). Nothing sets it yet, so it is described
/// but absent from the output: a series exists only once something sets it.
pub const RETENTION_DELETED_MESSAGES: Metric = metric(
    "queen_retention_deleted_messages_total",
    Kind::Counter,
    "Messages deleted by retention.",
);
/// See [`RETENTION_DELETED_MESSAGES`].
pub const RETENTION_DELETED_SEGMENTS: Metric = metric(
    "queen_retention_deleted_segments_total",
    Kind::Counter,
    "Segments deleted by retention.",
);

// --- Read at scrape time -----------------------------------------------------------------

pub const MESSAGES_PUSHED: Metric = metric(
    "queen_messages_pushed_total",
    Kind::Counter,
    "Messages stored by pushes and transactions through this broker.",
);
pub const MESSAGES_POPPED: Metric = metric(
    "queen_messages_popped_total",
    Kind::Counter,
    "Messages delivered by pops through this broker.",
);
pub const PUSH_SEGMENTS_PREPARED: Metric = metric(
    "queen_push_segments_prepared_total",
    Kind::Counter,
    "Push segments built and compressed while their partition's previous flush was written \
     (QUEEN_V2_PUSH_PIPELINE).",
);
pub const PG_STATEMENTS: Metric = metric(
    "queen_pg_statements_total",
    Kind::Counter,
    "Statements sent to PostgreSQL by the store (one round trip each; a connection's first \
     use of a statement adds a prepare), process-wide.",
);
pub const POOL_CONNECTIONS: Metric = metric(
    "queen_db_pool_connections",
    Kind::Gauge,
    "Pooled PostgreSQL connections, by state: in_use or idle.",
);
pub const POOL_MAX: Metric = metric(
    "queen_db_pool_max_connections",
    Kind::Gauge,
    "Most pooled PostgreSQL connections (DB_POOL_SIZE).",
);
pub const POOL_WAITING: Metric = metric(
    "queen_db_pool_waiting",
    Kind::Gauge,
    "Requests waiting for a pooled PostgreSQL connection.",
);
pub const ACCEL_HITS: Metric = metric(
    "queen_accelerator_hits_total",
    Kind::Counter,
    "Work an accelerator saved, by accelerator: dedup_cache (a push that vouched for its \
     hashes), pop_hints (a woken pop served from its pushed-partition hints), segment_cache \
     (a claimed segment rendered from frames this broker kept, not decompressed).",
);
pub const ACCEL_MISSES: Metric = metric(
    "queen_accelerator_misses_total",
    Kind::Counter,
    "Work an accelerator could not save, by accelerator: dedup_cache (a push that probed the \
     whole dedup window), pop_hints (hints that delivered nothing; the full scan ran), \
     segment_cache (a claimed segment decompressed).",
);
pub const DEDUP_CACHE_BYTES: Metric = metric(
    "queen_dedup_cache_bytes",
    Kind::Gauge,
    "Heap bytes the dedup cache holds, as charged to its budget.",
);
pub const DEDUP_CACHE_BUDGET: Metric = metric(
    "queen_dedup_cache_budget_bytes",
    Kind::Gauge,
    "The dedup cache's budget (QUEEN_DEDUP_CACHE_MB) in bytes.",
);
pub const DEDUP_CACHE_PARTITIONS: Metric = metric(
    "queen_dedup_cache_partitions",
    Kind::Gauge,
    "Partitions the dedup cache holds (its entries).",
);
pub const DEDUP_CACHE_HASHES: Metric = metric(
    "queen_dedup_cache_hashes",
    Kind::Gauge,
    "transactionId hashes the dedup cache holds.",
);
pub const DEDUP_CACHE_EVENTS: Metric = metric(
    "queen_dedup_cache_events_total",
    Kind::Counter,
    "What the dedup cache did, by event: hydration, catch_up, eviction (a partition dropped \
     for the budget), suppression (a partition too large to cache, left uncached for a while), \
     scan (a push to such a partition looked for its hashes in one read of the window), \
     fetch_error, invalidation, duplicate_hint (an incoming hash found cached or scanned).",
);
pub const DATABASE_UP: Metric = metric(
    "queen_database_up",
    Kind::Gauge,
    "1 when this scrape read its queue sample from PostgreSQL, 0 when that failed (the \
     queue, group and dead-letter series are then absent).",
);
pub const PENDING: Metric = metric(
    "queen_pending_messages",
    Kind::Gauge,
    "Messages still to be consumed, summed over every queue (per queue: what its slowest \
     member group has left).",
);
pub const DEAD_LETTERS: Metric = metric(
    "queen_dead_letter_messages",
    Kind::Gauge,
    "Dead-letter rows over every queue.",
);
pub const QUEUE_PENDING: Metric = metric(
    "queen_queue_pending_messages",
    Kind::Gauge,
    "Messages the slowest member group of a queue has still to consume, for the \
     QUEEN_METRICS_MAX_QUEUES queues with the most.",
);
pub const QUEUE_DEAD_LETTERS: Metric = metric(
    "queen_queue_dead_letter_messages",
    Kind::Gauge,
    "Dead-letter rows of a queue, for the same queues as queen_queue_pending_messages.",
);
pub const GROUP_LAG: Metric = metric(
    "queen_group_lag_messages",
    Kind::Gauge,
    "Messages a consumer group has still to consume on a queue, for the \
     QUEEN_METRICS_MAX_QUEUES (queue, group) pairs furthest behind.",
);

/// Every metric, described on each recorder (a description alone renders nothing).
const ALL: &[&Metric] = &[
    &HTTP_REQUESTS,
    &HTTP_REQUEST_DURATION,
    &MESSAGES_ACKED,
    &MESSAGES_DEAD_LETTERED,
    &RETENTION_DELETED_MESSAGES,
    &RETENTION_DELETED_SEGMENTS,
    &MESSAGES_PUSHED,
    &MESSAGES_POPPED,
    &PUSH_SEGMENTS_PREPARED,
    &PG_STATEMENTS,
    &POOL_CONNECTIONS,
    &POOL_MAX,
    &POOL_WAITING,
    &ACCEL_HITS,
    &ACCEL_MISSES,
    &DEDUP_CACHE_BYTES,
    &DEDUP_CACHE_BUDGET,
    &DEDUP_CACHE_PARTITIONS,
    &DEDUP_CACHE_HASHES,
    &DEDUP_CACHE_EVENTS,
    &DATABASE_UP,
    &PENDING,
    &DEAD_LETTERS,
    &QUEUE_PENDING,
    &QUEUE_DEAD_LETTERS,
    &GROUP_LAG,
];

/// Upper bounds (seconds) of the request-latency buckets: sub-millisecond calls up to
/// long-polls at their default 30 s deadline.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// How often samples recorded into histograms are folded into their buckets, which bounds the
/// memory they take between scrapes (the exporter's own default period).
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// The metadata the exporter is handed with each registration (it reads none of it).
const METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// Statements the store sent to PostgreSQL, process-wide: the store's call sites hold a
/// connection, not the broker they serve.
static STATEMENTS_SENT: AtomicU64 = AtomicU64::new(0);

/// Counts one statement sent to PostgreSQL (called by the store).
pub fn statement_sent() {
    STATEMENTS_SENT.fetch_add(1, Relaxed);
}

/// Statements sent to PostgreSQL since the process started.
pub fn statements_sent() -> u64 {
    STATEMENTS_SENT.load(Relaxed)
}

/// The series of `metric` with `labels`.
fn key(metric: &Metric, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|&(name, value)| Label::new(name, value.to_owned()))
        .collect();
    Key::from_parts(metric.name, labels)
}

/// A recorder with every description, and with buckets for the latency histogram.
fn recorder() -> PrometheusRecorder {
    let rec = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(HTTP_REQUEST_DURATION.name.into()),
            &LATENCY_BUCKETS,
        )
        .expect("the latency buckets are not empty")
        .build_recorder();
    for m in ALL {
        let (name, help) = (m.name.into(), m.help.into());
        match m.kind {
            Kind::Counter => rec.describe_counter(name, None, help),
            Kind::Gauge => rec.describe_gauge(name, None, help),
            Kind::Histogram => rec.describe_histogram(name, None, help),
        }
    }
    rec
}

/// The broker's live series.
pub struct Telemetry {
    live: PrometheusRecorder,
}

impl Telemetry {
    /// Empty series; histograms keep their raw samples until [`Telemetry::start`]'s upkeep
    /// or a render folds them.
    pub fn new() -> Self {
        Telemetry { live: recorder() }
    }

    /// Empty series with their upkeep running on the current Tokio runtime.
    pub fn start() -> Self {
        let telemetry = Telemetry::new();
        let handle = telemetry.live.handle();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(UPKEEP_PERIOD);
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        });
        telemetry
    }

    /// Records one answered request. `route` must be a route template (or another value from
    /// a small fixed set), never a raw path.
    pub fn request(&self, method: &'static str, route: &str, status: u16, took: Duration) {
        let method = Label::new("method", method);
        let route = Label::new("route", route.to_owned());
        let status = Label::new("status", status.to_string());
        let counted = Key::from_parts(
            HTTP_REQUESTS.name,
            vec![method.clone(), route.clone(), status],
        );
        self.live.register_counter(&counted, &METADATA).increment(1);
        let timed = Key::from_parts(HTTP_REQUEST_DURATION.name, vec![method, route]);
        self.live
            .register_histogram(&timed, &METADATA)
            .record(took.as_secs_f64());
    }

    /// Adds `n` to a live counter; it appears in the output from its first count on.
    pub fn count(&self, metric: &Metric, labels: &[(&'static str, &str)], n: u64) {
        debug_assert_eq!(metric.kind, Kind::Counter);
        self.live
            .register_counter(&key(metric, labels), &METADATA)
            .increment(n);
    }

    /// The text exposition of the live series followed by `scrape`'s.
    pub fn render(&self, scrape: Scrape) -> String {
        let mut out = self.live.handle().render();
        out.push_str(&scrape.0.handle().render());
        out
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}

/// The values one scrape reads, on a recorder of their own: a queue that left the top N or was
/// deleted leaves no stale series behind.
pub struct Scrape(PrometheusRecorder);

impl Scrape {
    pub fn new() -> Self {
        Scrape(recorder())
    }

    /// A counter kept elsewhere, at its current value.
    pub fn counter(&self, metric: &Metric, labels: &[(&'static str, &str)], value: u64) {
        debug_assert_eq!(metric.kind, Kind::Counter);
        self.0
            .register_counter(&key(metric, labels), &METADATA)
            .absolute(value);
    }

    pub fn gauge(&self, metric: &Metric, labels: &[(&'static str, &str)], value: f64) {
        debug_assert_eq!(metric.kind, Kind::Gauge);
        self.0
            .register_gauge(&key(metric, labels), &METADATA)
            .set(value);
    }
}

impl Default for Scrape {
    fn default() -> Self {
        Scrape::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = ALL.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for m in ALL {
            assert!(m.name.starts_with("queen_"), "{}", m.name);
            let counter_suffix = m.name.ends_with("_total");
            assert_eq!(counter_suffix, m.kind == Kind::Counter, "{}", m.name);
        }
    }

    #[test]
    fn renders_live_and_scraped_series_with_help() {
        let t = Telemetry::new();
        t.request("GET", "/health", 200, Duration::from_millis(3));
        let scrape = Scrape::new();
        scrape.gauge(&QUEUE_PENDING, &[("queue", "a \"b\"")], 7.0);
        let text = t.render(scrape);
        assert!(text.contains("# TYPE queen_http_request_duration_seconds histogram"));
        assert!(text.contains(
            "queen_http_requests_total{method=\"GET\",route=\"/health\",status=\"200\"} 1"
        ));
        assert!(text.contains("# HELP queen_queue_pending_messages Messages"));
        assert!(text.contains("queen_queue_pending_messages{queue=\"a \\\"b\\\"\"} 7"));
        // Described but never counted: absent.
        assert!(!text.contains(RETENTION_DELETED_MESSAGES.name));
    }
}
