//! `GET /metrics/prometheus` (docs/wire.md §15): the broker's metrics in the Prometheus text
//! format 0.0.4, public unless `QUEEN_METRICS_ACCESS` names a role. The live series (requests
//! per route, acknowledgements) are the engine's telemetry; everything else is read at scrape
//! time: the engine's counters, the pool, the accelerators' snapshots and one bounded queue
//! sample from PostgreSQL over the caller's tenant's queues only (a caller without a token is
//! the default tenant), shared by the scrapes of `QUEEN_METRICS_CACHE_MS` (one flight,
//! `engine::resources::metrics_sample`). When that sample fails the scrape still answers 200,
//! with `queen_database_up 0` and no queue series, so a database outage does not also blind
//! the broker's own metrics.

use queen_proto::tenant::{local, tenant_of};
use std::sync::atomic::Ordering::Relaxed;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::engine::tenant::Tenant;
use crate::engine::{resources, DedupSnapshot, Engine};
use crate::http::auth::CallerTenant;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::telemetry::{self as t, Scrape};

/// The exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Failed queue samples, logged at most once per window per cause.
static SAMPLE_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

pub fn routes() -> Router<Engine> {
    Router::new().route("/metrics/prometheus", get(prometheus))
}

async fn prometheus(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
) -> impl IntoResponse {
    let scrape = Scrape::new();
    read_broker(&st, &scrape);
    read_queues(&st, &tenant, &scrape).await;
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        st.telemetry.render(scrape),
    )
}

/// What this process keeps: message counters, statements, the pool, the accelerators.
fn read_broker(st: &Engine, s: &Scrape) {
    s.counter(
        &t::MESSAGES_PUSHED,
        &[],
        st.counters.messages_pushed.load(Relaxed),
    );
    s.counter(
        &t::MESSAGES_POPPED,
        &[],
        st.counters.messages_popped.load(Relaxed),
    );
    s.counter(
        &t::PUSH_SEGMENTS_PREPARED,
        &[],
        st.counters.segments_prepared.load(Relaxed),
    );
    s.counter(&t::PG_STATEMENTS, &[], t::statements_sent());
    let retention = st.retention.counters.snapshot();
    s.counter(
        &t::RETENTION_DELETED_MESSAGES,
        &[],
        retention.messages_deleted + retention.messages_evicted,
    );
    s.counter(
        &t::RETENTION_DELETED_SEGMENTS,
        &[],
        retention.segments_deleted + retention.segments_evicted,
    );
    let pool = st.pool_status();
    let in_use = pool.size.saturating_sub(pool.available);
    s.gauge(&t::POOL_CONNECTIONS, &[("state", "in_use")], in_use as f64);
    s.gauge(
        &t::POOL_CONNECTIONS,
        &[("state", "idle")],
        pool.available as f64,
    );
    s.gauge(&t::POOL_MAX, &[], pool.max_size as f64);
    s.gauge(&t::POOL_WAITING, &[], pool.waiting as f64);
    let dedup = st.push.dedup_cache.metrics();
    read_dedup(&dedup, s);
    let hints = &st.pop.cache.stats;
    let segments = st.pop.segments.tally();
    for (accelerator, hits, misses) in [
        ("dedup_cache", dedup.vouched_pushes, dedup.full_probe_pushes),
        (
            "pop_hints",
            hints.hint_claims.load(Relaxed),
            hints.hint_fallthroughs.load(Relaxed),
        ),
        ("segment_cache", segments.hits, segments.misses),
    ] {
        s.counter(&t::ACCEL_HITS, &[("accelerator", accelerator)], hits);
        s.counter(&t::ACCEL_MISSES, &[("accelerator", accelerator)], misses);
    }
}

/// The dedup cache's size and events (its hits and misses are `queen_accelerator_*`).
fn read_dedup(d: &DedupSnapshot, s: &Scrape) {
    s.gauge(&t::DEDUP_CACHE_BYTES, &[], d.bytes as f64);
    s.gauge(&t::DEDUP_CACHE_BUDGET, &[], d.budget_bytes as f64);
    s.gauge(&t::DEDUP_CACHE_PARTITIONS, &[], d.partitions as f64);
    s.gauge(&t::DEDUP_CACHE_HASHES, &[], d.hashes as f64);
    for (event, n) in [
        ("hydration", d.hydrations),
        ("catch_up", d.catch_ups),
        ("eviction", d.evictions),
        ("suppression", d.suppressions),
        ("scan", d.scans),
        ("fetch_error", d.fetch_errors),
        ("invalidation", d.invalidations),
        ("duplicate_hint", d.hits),
    ] {
        s.counter(&t::DEDUP_CACHE_EVENTS, &[("event", event)], n);
    }
}

/// A stored queue name as labels: its tenant (`""`: the default) and the name its clients know.
fn named(stored: &str) -> [(&'static str, &str); 2] {
    [("tenant", tenant_of(stored)), ("queue", local(stored))]
}

/// Totals, the busiest queues and the groups furthest behind over `tenant`'s queues, from
/// PostgreSQL.
async fn read_queues(st: &Engine, tenant: &Tenant, s: &Scrape) {
    let sample = match resources::metrics_sample(st, &st.metrics_samples, tenant).await {
        Ok(sample) => sample,
        Err(cause) => {
            if let Some(suppressed) = SAMPLE_FAILURES.admit(&cause) {
                tracing::warn!(error = %cause, suppressed, "metrics: queue sample failed");
            }
            s.gauge(&t::DATABASE_UP, &[], 0.0);
            return;
        }
    };
    s.gauge(&t::DATABASE_UP, &[], 1.0);
    s.gauge(&t::PENDING, &[], sample.total.pending as f64);
    s.gauge(&t::DEAD_LETTERS, &[], sample.total.dead_letter as f64);
    for q in &sample.queues {
        let queue = named(&q.queue);
        s.gauge(&t::QUEUE_PENDING, &queue, q.pending as f64);
        s.gauge(&t::QUEUE_DEAD_LETTERS, &queue, q.dead_letter as f64);
    }
    for g in &sample.groups {
        let [tenant, queue] = named(&g.queue);
        let labels = [tenant, queue, ("group", g.group.as_str())];
        s.gauge(&t::GROUP_LAG, &labels, g.pending as f64);
    }
}
