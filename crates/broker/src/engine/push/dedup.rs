//! The push paths' side of the dedup cache (accel/dedup_cache.rs, docs/engine.md §4.2): the
//! `p_verified` of each segment about to be written — hydrating or catching up the cache
//! first, all partitions of a write in one query, and scanning the windows of partitions too
//! large to cache in one more — and the report of every committed segment, which is what keeps
//! the cache's entries extendable. A failed read only costs the full-window probe; it never
//! fails the push.

use std::collections::HashSet;

use deadpool_postgres::GenericClient;

use crate::accel::dedup_cache::{DedupCache, Installed, Plan, Ticket};
use crate::error::Error;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::db_message;
use crate::store::push::dedup::{hydrate, scan, HydrateAsk, Hydrated, Scanned};
use crate::store::push::{SegmentResult, SegmentWrite};

/// `p_verified` for each of `segs`, in order.
pub async fn verified_offsets(
    cache: &DedupCache,
    db: &impl GenericClient,
    segs: &[SegmentWrite<'_>],
) -> Vec<i64> {
    let mut verified = vec![-1; segs.len()];
    let mut reads: Vec<(usize, Ticket)> = Vec::new();
    let mut scans: Vec<usize> = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        match cache.plan(s.queue, s.partition, s.hashes, true) {
            Plan::Send(v) => verified[i] = v,
            Plan::Scan => scans.push(i),
            Plan::Fetch(t) => {
                let same = |&(j, _): &(usize, Ticket)| {
                    segs[j].queue == s.queue && segs[j].partition == s.partition
                };
                if !reads.iter().any(same) {
                    reads.push((i, t));
                }
            }
        }
    }
    if !reads.is_empty() {
        let rehydrate = read_and_install(cache, db, segs, &reads).await;
        read_and_install(cache, db, segs, &rehydrate).await;
        for (i, s) in segs.iter().enumerate() {
            let fetched = reads
                .iter()
                .any(|&(j, _)| segs[j].queue == s.queue && segs[j].partition == s.partition);
            if fetched {
                match cache.plan(s.queue, s.partition, s.hashes, false) {
                    Plan::Send(v) => verified[i] = v,
                    Plan::Scan => scans.push(i),
                    Plan::Fetch(_) => {}
                }
            }
        }
    }
    scan_windows(cache, db, segs, &scans, &mut verified).await;
    verified
}

/// Sets `verified` of the segments `scans` names from one scan of their partitions' windows.
async fn scan_windows(
    cache: &DedupCache,
    db: &impl GenericClient,
    segs: &[SegmentWrite<'_>],
    scans: &[usize],
    verified: &mut [i64],
) {
    if scans.is_empty() {
        return;
    }
    let asks: Vec<HydrateAsk<'_>> = scans
        .iter()
        .map(|&i| HydrateAsk {
            queue: segs[i].queue,
            partition: segs[i].partition,
            after: -1,
        })
        .collect();
    let wanted: Vec<HashSet<u64>> = scans
        .iter()
        .map(|&i| queen_proto::sidecar::keys(segs[i].hashes).collect())
        .collect();
    match scan(db, &asks, &wanted).await {
        Ok(answers) => {
            for (&i, answer) in scans.iter().zip(answers) {
                verified[i] = match answer {
                    Scanned::Missing => cache.scanned(false, None),
                    Scanned::Found => cache.scanned(true, None),
                    Scanned::Clear { window, hashes } => {
                        cache.still_oversized(segs[i].queue, segs[i].partition, hashes);
                        cache.scanned(false, Some(&window))
                    }
                };
            }
        }
        Err(e) => {
            warn_read_failed(&e, "scan", scans.len());
            for &i in scans {
                cache.fetch_failed(segs[i].queue, segs[i].partition);
            }
        }
    }
}

/// Logs a failed read of the cache (rate-limited): its partitions probe the whole window for a
/// while.
fn warn_read_failed(e: &Error, read: &'static str, partitions: usize) {
    let text = match e {
        Error::Db(db) => db_message(db),
        other => other.to_string(),
    };
    static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);
    if let Some(suppressed) = FAILURES.admit(&text) {
        tracing::warn!(error = %text, read, partitions, suppressed,
            "dedup cache read failed; these partitions probe the whole window for a while");
    }
}

/// Runs the reads of `reads` in one query and installs the answers; returns the catch-ups
/// that found the partition changed and must hydrate from scratch.
async fn read_and_install(
    cache: &DedupCache,
    db: &impl GenericClient,
    segs: &[SegmentWrite<'_>],
    reads: &[(usize, Ticket)],
) -> Vec<(usize, Ticket)> {
    if reads.is_empty() {
        return Vec::new();
    }
    let asks: Vec<HydrateAsk<'_>> = reads
        .iter()
        .map(|&(i, t)| HydrateAsk {
            queue: segs[i].queue,
            partition: segs[i].partition,
            after: t.after,
        })
        .collect();
    let answers = match hydrate(db, &asks, cache.read_hashes()).await {
        Ok(answers) => answers,
        Err(e) => {
            warn_read_failed(&e, "hydrate", reads.len());
            for &(i, _) in reads {
                cache.fetch_failed(segs[i].queue, segs[i].partition);
            }
            return Vec::new();
        }
    };
    reads
        .iter()
        .zip(answers)
        .filter_map(|(&(i, t), answer)| {
            let (queue, partition) = (segs[i].queue, segs[i].partition);
            let fetched = match answer {
                Hydrated::Missing => None,
                Hydrated::Rows(h) => Some(h),
                Hydrated::TooLarge => {
                    cache.too_large(queue, partition);
                    return None;
                }
            };
            match cache.install(queue, partition, t, fetched) {
                Installed::Done => None,
                Installed::NeedsFull(full) => Some((i, full)),
            }
        })
        .collect()
}

/// Reports what a write committed: each queued segment of `segs`, by its result.
pub fn report_commits(cache: &DedupCache, segs: &[SegmentWrite<'_>], results: &[SegmentResult]) {
    for (seg, result) in segs.iter().zip(results) {
        let SegmentResult::Queued {
            partition_id,
            base_offset,
            created_at,
        } = result
        else {
            continue;
        };
        match queen_proto::time::parse_iso(created_at) {
            Some(at) => cache.committed(
                seg.queue,
                seg.partition,
                *partition_id,
                *base_offset,
                seg.hashes,
                at.timestamp_micros(),
            ),
            None => cache.forget(seg.queue, seg.partition),
        }
    }
}
