//! The dedup cache's counters as operators read them (`dedupCache` of `/metrics` and the
//! `queen_dedup_cache_*` / `queen_accelerator_*` series of `/metrics/prometheus`) move as the
//! cache works: a hydration on first use, vouched pushes counted as hits once hydrated, a
//! duplicate as a hint and a full probe, evictions and the bytes held under a tiny budget, and
//! the scans of a partition too large to cache.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::Value;

use crate::common;
use crate::common::TestBroker;
use crate::dedup_cache::{assert_duplicates_of, ids_of, push, push_one};

/// The `dedupCache` object of `/metrics`.
async fn cache_json(b: &TestBroker) -> Value {
    let (status, body) = b.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    body["dedupCache"].clone()
}

/// The value of the series `name{labels}` of a scrape; it must be there.
async fn series(b: &TestBroker, name: &str, labels: &str) -> f64 {
    b.series(name, labels)
        .await
        .unwrap_or_else(|| panic!("no series {name}{{{labels}}} in the scrape"))
}

fn n(m: &Value, field: &str) -> u64 {
    m[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {m}"))
}

#[tokio::test]
async fn a_hydrated_partition_counts_hits_and_a_duplicate_counts_a_hint_and_a_miss() {
    let b = common::broker().await;
    let hits = r#"accelerator="dedup_cache""#;
    push(&b, "dm.hits", "p", &common::txns("first", 3)).await;
    let m = cache_json(&b).await;
    assert_eq!(n(&m, "hydrations"), 1, "the first push hydrates: {m}");
    assert_eq!(
        series(&b, "queen_dedup_cache_events_total", r#"event="hydration""#).await,
        1.0
    );

    let before = series(&b, "queen_accelerator_hits_total", hits).await;
    for i in 0..10 {
        push(&b, "dm.hits", "p", &[format!("fresh-{i}")]).await;
    }
    let after = series(&b, "queen_accelerator_hits_total", hits).await;
    assert_eq!(
        after - before,
        10.0,
        "each fresh push vouched once hydrated"
    );
    let m = cache_json(&b).await;
    assert!(m["hitRate"].as_f64().is_some_and(|r| r > 0.5), "{m}");
    assert_eq!(series(&b, "queen_dedup_cache_partitions", "").await, 1.0);
    assert_eq!(series(&b, "queen_dedup_cache_hashes", "").await, 13.0);
    let bytes = series(&b, "queen_dedup_cache_bytes", "").await;
    assert!(
        bytes > 13.0 * 16.0,
        "the hashes and their bookkeeping: {bytes}"
    );
    assert_eq!(bytes, n(&m, "bytes") as f64);

    let misses = series(&b, "queen_accelerator_misses_total", hits).await;
    push(&b, "dm.hits", "p", &["fresh-3".to_string()]).await;
    assert_eq!(
        series(&b, "queen_accelerator_misses_total", hits).await - misses,
        1.0,
        "a cached hash sends the push to the full probe"
    );
    let hint = r#"event="duplicate_hint""#;
    assert_eq!(
        series(&b, "queen_dedup_cache_events_total", hint).await,
        1.0
    );
}

#[tokio::test]
async fn a_tiny_budget_evicts_and_holds_at_most_its_bytes() {
    let b = common::broker_with(|cfg| cfg.dedup_cache_mb = 1).await;
    // 80 k hashes of 8 bytes (their keys) fill more than half of 1 MiB: two partitions
    // cannot stay.
    for partition in ["a", "b"] {
        for chunk in 0..8 {
            let txns = common::txns(&format!("{partition}{chunk}"), 10_000);
            push(&b, "dm.evict", partition, &txns).await;
        }
    }
    let m = cache_json(&b).await;
    assert!(n(&m, "evictions") >= 1, "{m}");
    assert_eq!(n(&m, "partitions"), 1, "{m}");
    assert!(n(&m, "bytes") <= 1 << 20, "{m}");
    let evictions = series(&b, "queen_dedup_cache_events_total", r#"event="eviction""#).await;
    assert_eq!(evictions, n(&m, "evictions") as f64);
    assert_eq!(
        series(&b, "queen_dedup_cache_budget_bytes", "").await,
        (1 << 20) as f64
    );
}

#[tokio::test]
async fn a_partition_larger_than_the_budget_is_scanned_not_cached() {
    let b = common::broker_with(|cfg| cfg.dedup_cache_mb = 1).await;
    // Written by another broker: 140 k in-window hashes, more than a 1 MiB read may hold
    // (131 072 keys of 8 bytes).
    let writer = b.sibling(|cfg| cfg.dedup_cache = false).await;
    let mut originals = HashMap::new();
    for chunk in 0..14 {
        let txns = common::txns(&format!("x{chunk}"), 10_000);
        originals.extend(ids_of(&push(&writer, "dm.big", "p", &txns).await[..8]));
    }
    let answers = push(&b, "dm.big", "p", &["x3-7".into(), "fresh".into()]).await;
    assert_duplicates_of(&answers[..1], &originals);
    assert_eq!(answers[1]["status"], "queued", "{answers:?}");
    let m = cache_json(&b).await;
    assert_eq!(n(&m, "suppressions"), 1, "{m}");
    assert_eq!((n(&m, "partitions"), n(&m, "bytes")), (0, 0), "{m}");
    // A segment with a duplicate writes nothing; its fresh frames go again, scanned again.
    let scanned = (n(&m, "scans"), n(&m, "hits"), n(&m, "vouchedPushes"));
    assert_eq!(scanned, (2, 1, 1), "{m}");
    // The window's oldest hash is scanned too; a fresh push is vouched for by its scan.
    assert_duplicates_of(&[push_one(&b, "dm.big", "p", "x0-0").await], &originals);
    let fresh = push_one(&b, "dm.big", "p", "fresh-2").await;
    assert_eq!(fresh["status"], "queued", "{fresh}");
    let again = push_one(&b, "dm.big", "p", "fresh-2").await;
    assert_eq!(again["status"], "duplicate", "{again}");
    let m = cache_json(&b).await;
    let scanned = (n(&m, "scans"), n(&m, "hits"), n(&m, "vouchedPushes"));
    assert_eq!(scanned, (5, 3, 2), "{m}");
    assert_eq!(n(&m, "suppressions"), 1, "one read found it too large: {m}");
}
