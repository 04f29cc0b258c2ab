//! `/health`, `/metrics` and `/status`: liveness with the database state, and counters. The
//! per-queue counters of `/metrics` are the caller's tenant's only (docs/wire.md §15).

use std::sync::atomic::Ordering::Relaxed;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::maintenance::{self, SpoolState};
use crate::engine::tenant::{self, Tenant};
use crate::engine::{
    AckFusionSnapshot, AckRegistrySnapshot, AdmissionSnapshot, DedupSnapshot, Engine,
    HotListSnapshot, PopSnapshot, RetentionSnapshot, ServerView,
};
use crate::http::auth::CallerTenant;

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/api/v1/status", get(status))
}

async fn health(State(st): State<Engine>) -> (StatusCode, Json<Value>) {
    let up = st.database_up().await;
    let body = json!({
        "status": if up { "healthy" } else { "unhealthy" },
        "database": if up { "connected" } else { "disconnected" },
        "engine": "queen-rs",
        "version": env!("CARGO_PKG_VERSION"),
        "server": render_server(&st.database_server()),
    });
    let code = if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

/// The server the broker writes to (the one its newest connection reached) and its switches
/// (docs/wire.md §15); `null` fields before the first connection.
fn render_server(v: &ServerView) -> Value {
    let current = v.current.as_ref();
    let stamp = |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339());
    json!({
        "address": current.and_then(|s| s.address.clone()),
        "port": current.and_then(|s| s.port),
        "systemIdentifier": current.map(|s| s.system_identifier.clone()),
        "inRecovery": current.map(|s| s.in_recovery),
        "since": stamp(v.since),
        "switches": v.switches,
        "lastSwitchAt": stamp(v.last_switch),
        "writable": v.writable,
    })
}

async fn metrics(State(st): State<Engine>, CallerTenant(tenant): CallerTenant) -> Json<Value> {
    let uptime = st.started.elapsed().as_secs_f64().max(1e-9);
    let requests = st.counters.requests.load(Relaxed);
    let pushed = st.counters.messages_pushed.load(Relaxed);
    let popped = st.counters.messages_popped.load(Relaxed);
    let pool = st.pool_status();
    let buffers = st.store.buffers().metrics();
    Json(json!({
        "uptime": uptime as u64,
        "requests": { "total": requests, "rate": requests as f64 / uptime },
        "messages": {
            "total": pushed,
            "rate": pushed as f64 / uptime,
            "pushed": pushed,
            "popped": popped,
        },
        "pop": render_pop(&st.pop.cache.metrics(), &tenant),
        "hotlist": render_hotlist(st.cfg.hotlist, &st.pop.hotlist.metrics()),
        "admission": render_admission(&st.admission.metrics()),
        "wake": { "gates": st.wake.gate_count() },
        "dedupCache": render_dedup(&st.push.dedup_cache.metrics()),
        "retention": render_retention(&st.retention.counters.snapshot()),
        "spool": render_spool(&maintenance::spool_state(st.push.spool.as_deref())),
        "ackRegistry": render_ack_registry(&st.ack.registry.metrics()),
        "ackFusion": render_ack_fusion(st.ack.fusion_metrics().as_ref()),
        "database": {
            "poolSize": pool.max_size,
            "connections": pool.size,
            "idleConnections": pool.available,
            "waitingRequests": pool.waiting,
            "buffers": {
                "budgetBytes": buffers.budget_bytes,
                "bytes": buffers.bytes,
                "chargedConnections": buffers.connections,
                "retired": buffers.retired,
            },
        },
        "memory": { "rssBytes": rss_bytes() },
        "cpu": { "processSeconds": cpu_seconds() },
    }))
}

fn render_spool(s: &SpoolState) -> Value {
    json!({
        "enabled": s.enabled,
        "messages": s.messages,
        "bytes": s.bytes,
        "healthy": s.healthy,
    })
}

/// The pop counters; per queue only `tenant`'s queues, by the names its client knows.
fn render_pop(p: &PopSnapshot, tenant: &Tenant) -> Value {
    let queues: serde_json::Map<String, Value> = p
        .queues
        .iter()
        .filter(|(queue, _)| tenant::owns(tenant, queue))
        .map(|(queue, d)| {
            let v = json!({
                "pops": d.pops,
                "messages": d.messages,
                "lastLagMs": d.last_lag_ms,
                "maxLagMs": d.max_lag_ms,
            });
            (tenant::local(queue).to_string(), v)
        })
        .collect();
    json!({
        "hintClaims": p.hint_claims,
        "hintFallthroughs": p.hint_fallthroughs,
        "deadlineMarginSkips": p.deadline_margin_skips,
        "queues": queues,
    })
}

fn render_hotlist(enabled: bool, h: &HotListSnapshot) -> Value {
    json!({
        "enabled": enabled,
        "rings": h.rings,
        "readyPartitions": h.ready,
        "wheelPartitions": h.wheel,
        "inFlightPartitions": h.in_flight,
        "reseeds": h.reseeds,
        "claims": h.claims,
        "emptyPolls": h.empty_polls,
        "wheelPromotions": h.promotions,
        "trimmedRings": h.trimmed,
    })
}

/// Per lane (ack, pop, push): cap, held, waiting, granted and granted after a wait.
fn render_admission(a: &AdmissionSnapshot) -> Value {
    let lane = |i: usize| {
        json!({
            "cap": a.caps[i],
            "inUse": a.in_use[i],
            "waiting": a.waiting[i],
            "granted": a.granted[i],
            "waited": a.waited[i],
        })
    };
    json!({
        "budget": a.budget,
        "ack": lane(0),
        "pop": lane(1),
        "push": lane(2),
    })
}

fn render_dedup(d: &DedupSnapshot) -> Value {
    json!({
        "enabled": d.enabled,
        "budgetBytes": d.budget_bytes,
        "bytes": d.bytes,
        "partitions": d.partitions,
        "hashes": d.hashes,
        "suppressedPartitions": d.suppressed_partitions,
        "hydrations": d.hydrations,
        "catchUps": d.catch_ups,
        "fetchErrors": d.fetch_errors,
        "vouchedPushes": d.vouched_pushes,
        "fullProbePushes": d.full_probe_pushes,
        "hitRate": hit_rate(d.vouched_pushes, d.full_probe_pushes),
        "hits": d.hits,
        "extensions": d.extensions,
        "invalidations": d.invalidations,
        "evictions": d.evictions,
        "suppressions": d.suppressions,
        "scans": d.scans,
    })
}

/// Share of pushes that vouched (`None` before the first push).
fn hit_rate(vouched: u64, full_probes: u64) -> Option<f64> {
    let all = vouched + full_probes;
    (all > 0).then(|| vouched as f64 / all as f64)
}

fn render_retention(r: &RetentionSnapshot) -> Value {
    json!({
        "runner": r.runner,
        "takeovers": r.takeovers,
        "runs": r.runs,
        "lastRunMs": r.last_run_ms,
        "segmentsDeleted": r.segments_deleted,
        "messagesDeleted": r.messages_deleted,
        "segmentsEvicted": r.segments_evicted,
        "messagesEvicted": r.messages_evicted,
        "sidecarRowsPurged": r.sidecar_rows_purged,
        "partitionsCleaned": r.partitions_cleaned,
        "watermarksRepaired": r.watermarks_repaired,
        "lockSkips": r.lock_skips,
        "errors": r.errors,
    })
}

fn render_ack_registry(r: &AckRegistrySnapshot) -> Value {
    json!({
        "enabled": r.enabled,
        "budgetBytes": r.budget_bytes,
        "bytes": r.bytes,
        "entries": r.entries,
        "born": r.born,
        "hits": r.hits,
        "misses": r.misses,
        "mismatches": r.mismatches,
        "refusals": r.refusals,
        "expirations": r.expirations,
        "evictions": r.evictions,
        "forgotten": r.forgotten,
        "extensions": r.extensions,
    })
}

/// `None`: fusion is off.
fn render_ack_fusion(f: Option<&AckFusionSnapshot>) -> Value {
    let Some(f) = f else {
        return json!({ "enabled": false });
    };
    json!({
        "enabled": true,
        "shards": f.shards,
        "commits": f.commits,
        "rows": f.rows,
        "acks": f.acks,
        "failures": f.failures,
    })
}

async fn status() -> Json<Value> {
    Json(json!({ "status": "ok", "engine": "queen-rs", "version": env!("CARGO_PKG_VERSION") }))
}

/// Resident set size from /proc (Linux); 0 elsewhere.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// User + system CPU seconds of this process from /proc (Linux); 0 elsewhere.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}
