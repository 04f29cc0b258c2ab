//! Unit tests of the dedup cache's bookkeeping: vouching, hints, extension and interleave
//! detection, catch-up, metadata refresh, expiry, budget eviction and suppression. The SQL
//! side (hydration read, probe honouring p_verified) is covered by tests/push/dedup_cache.rs.

use super::ring::{HashRing, BLOCK_HASHES, HOT_TAIL_MAX, MAX_RUN_BLOCKS};
use super::*;

const SEC: i64 = 1_000_000;
/// An arbitrary database clock reading (µs since the epoch) the tests hydrate at.
const NOW: i64 = 1_800_000_000 * SEC;

fn limits() -> Limits {
    Limits::with_budget_mb(64)
}

/// A 16-byte sidecar of hashes whose keys (first 8 bytes) are the given values; the other 8
/// bytes are the key's complement, so equal keys mean equal hashes unless a test says otherwise.
fn sidecar(keys: &[u64]) -> Vec<u8> {
    keys.iter()
        .flat_map(|k| k.to_be_bytes().into_iter().chain((!k).to_be_bytes()))
        .collect()
}

/// A hydration of partition `pid` (window `window_s`) read at `NOW`, one row per
/// `(base, created_us, hashes)`.
fn hydration(pid: i64, window_s: i32, rows: &[(i64, i64, Vec<u64>)]) -> Hydration {
    let last = rows
        .last()
        .map_or(-1, |(base, _, h)| base + h.len() as i64 - 1);
    Hydration {
        pid,
        window_s,
        last,
        since_us: NOW - i64::from(window_s) * SEC - 5 * SEC,
        now_us: NOW,
        rows: rows
            .iter()
            .map(|(base, created_us, h)| HashRow {
                base: *base,
                created_us: *created_us,
                keys: h.clone(),
            })
            .collect(),
    }
}

fn ticket(plan: Plan) -> Ticket {
    match plan {
        Plan::Fetch(t) => t,
        other => panic!("expected a fetch, got {other:?}"),
    }
}

/// A cache with (q, p) hydrated from `h`.
fn hydrated(limits: Limits, h: Hydration) -> DedupCache {
    let cache = DedupCache::new(true, limits);
    let t = ticket(cache.plan("q", "p", &sidecar(&[1]), true));
    assert_eq!(t.after, -1, "an unknown partition hydrates from scratch");
    assert_eq!(cache.install("q", "p", t, Some(h)), Installed::Done);
    cache
}

#[test]
fn vouches_for_absent_hashes_and_hints_on_present_ones() {
    let cache = hydrated(limits(), hydration(7, 3600, &[(0, NOW, vec![10, 11, 12])]));
    assert_eq!(cache.plan("q", "p", &sidecar(&[99]), true), Plan::Send(2));
    assert_eq!(
        cache.plan("q", "p", &sidecar(&[99, 11]), true),
        Plan::Send(-1),
        "a cached hash is a hint: SQL must find the original"
    );
    let m = cache.metrics();
    assert_eq!((Some(m.vouched_pushes), Some(m.hits)), (Some(1), Some(1)));
}

#[test]
fn a_hash_sharing_only_its_key_with_a_cached_one_is_a_hit_not_a_vouch() {
    let cache = hydrated(limits(), hydration(7, 3600, &[(0, NOW, vec![10])]));
    cache.committed("q", "p", 7, 1, &sidecar(&[11]), NOW);
    // Same first 8 bytes as the hash at offset 1, different last 8: another transactionId.
    let mut twin = sidecar(&[11]);
    twin[15] ^= 1;
    assert_eq!(cache.plan("q", "p", &twin, true), Plan::Send(-1));
    assert_eq!(cache.plan("q", "p", &sidecar(&[12]), true), Plan::Send(1));
    assert_eq!(cache.metrics().hits, 1);
}

#[test]
fn contiguous_commits_extend_and_interleaved_ones_need_a_catch_up() {
    let cache = hydrated(limits(), hydration(7, 3600, &[(0, NOW, vec![10, 11])]));
    cache.committed("q", "p", 7, 2, &sidecar(&[12, 13]), NOW + SEC);
    assert_eq!(cache.plan("q", "p", &sidecar(&[99]), true), Plan::Send(3));
    assert_eq!(cache.plan("q", "p", &sidecar(&[13]), true), Plan::Send(-1));

    // Offsets 4..5 went to another writer: this commit at 6 cannot extend.
    cache.committed("q", "p", 7, 6, &sidecar(&[16]), NOW + 2 * SEC);
    let t = ticket(cache.plan("q", "p", &sidecar(&[99]), true));
    assert_eq!(
        t.after, 3,
        "the catch-up reads what came after verified_upto"
    );
    assert_eq!(
        cache.plan("q", "p", &sidecar(&[99]), false),
        Plan::Send(-1),
        "behind and not allowed to read: full probe"
    );
    let gap = hydration(
        7,
        3600,
        &[(4, NOW + SEC, vec![14, 15]), (6, NOW + 2 * SEC, vec![16])],
    );
    assert_eq!(cache.install("q", "p", t, Some(gap)), Installed::Done);
    assert_eq!(cache.plan("q", "p", &sidecar(&[99]), true), Plan::Send(6));
    assert_eq!(
        cache.plan("q", "p", &sidecar(&[15]), true),
        Plan::Send(-1),
        "the other writer's hashes are known after the catch-up"
    );
}

#[test]
fn a_catch_up_keeps_only_rows_past_what_commits_already_added() {
    let cache = hydrated(limits(), hydration(7, 3600, &[(0, NOW, vec![10])]));
    cache.committed("q", "p", 7, 2, &sidecar(&[12]), NOW);
    let t = ticket(cache.plan("q", "p", &sidecar(&[99]), true));
    // While the read ran, the writer of the gap (offset 1) reported it too.
    cache.committed("q", "p", 7, 1, &sidecar(&[11]), NOW);
    let read = hydration(7, 3600, &[(1, NOW, vec![11]), (2, NOW, vec![12])]);
    cache.install("q", "p", t, Some(read));
    assert_eq!(cache.plan("q", "p", &sidecar(&[99]), true), Plan::Send(2));
    assert_eq!(cache.metrics().hashes, 3, "no hash added twice");
}

#[test]
fn a_commit_under_another_partition_id_forgets_the_entry() {
    let cache = hydrated(limits(), hydration(7, 3600, &[(0, NOW, vec![10])]));
    cache.committed("q", "p", 8, 0, &sidecar(&[20]), NOW);
    assert_eq!(
        ticket(cache.plan("q", "p", &sidecar(&[99]), true)).after,
        -1
    );
}

#[test]
fn a_catch_up_seeing_another_window_or_id_rehydrates_from_scratch() {
    for (pid, window) in [(7, 60), (8, 3600)] {
        let cache = hydrated(limits(), hydration(7, 3600, &[(0, NOW, vec![10])]));
        cache.committed("q", "p", 7, 5, &sidecar(&[15]), NOW);
        let t = ticket(cache.plan("q", "p", &sidecar(&[99]), true));
        let changed = hydration(pid, window, &[(1, NOW, vec![11])]);
        match cache.install("q", "p", t, Some(changed)) {
            Installed::NeedsFull(full) => assert_eq!(full.after, -1),
            Installed::Done => panic!("pid {pid} window {window}: must rehydrate"),
        }
        assert_eq!(
            ticket(cache.plan("q", "p", &sidecar(&[99]), true)).after,
            -1
        );
    }
}

#[test]
fn stale_metadata_is_refreshed_before_vouching() {
    let fresh_never = Limits {
        meta_ttl: Duration::ZERO,
        ..limits()
    };
    let cache = hydrated(fresh_never, hydration(7, 3600, &[(0, NOW, vec![10])]));
    let t = ticket(cache.plan("q", "p", &sidecar(&[99]), true));
    assert_eq!(t.after, 0, "a refresh is a catch-up from verified_upto");
    assert_eq!(cache.plan("q", "p", &sidecar(&[99]), false), Plan::Send(-1));
}

#[test]
fn a_missing_partition_is_learned_from_its_first_commit() {
    let cache = DedupCache::new(true, limits());
    let t = ticket(cache.plan("q", "p", &sidecar(&[1]), true));
    cache.install("q", "p", t, None);
    assert_eq!(cache.plan("q", "p", &sidecar(&[1]), true), Plan::Send(-1));
    cache.committed("q", "p", 3, 0, &sidecar(&[1, 2]), NOW);
    assert_eq!(cache.plan("q", "p", &sidecar(&[9]), true), Plan::Send(1));
    assert_eq!(cache.plan("q", "p", &sidecar(&[2]), true), Plan::Send(-1));
    // Someone else created and wrote it first: offset 0 was not ours.
    let other = DedupCache::new(true, limits());
    let t = ticket(other.plan("q", "p", &sidecar(&[1]), true));
    other.install("q", "p", t, None);
    other.committed("q", "p", 3, 4, &sidecar(&[5]), NOW);
    assert_eq!(ticket(other.plan("q", "p", &sidecar(&[9]), true)).after, -1);
}

#[test]
fn expiry_drops_whole_blocks_past_window_and_slack_and_stays_sound() {
    let old: Vec<u64> = (0..BLOCK_HASHES as u64).collect();
    let n = old.len() as i64;
    let rows = [(0, NOW - 100 * SEC, old), (n, NOW, vec![1_000_000])];
    let cache = hydrated(limits(), hydration(7, 10, &rows));
    assert_eq!(cache.metrics().hashes, BLOCK_HASHES as u64 + 1);
    // The sealed block is 100 s old, past 10 s + 5 s: dropped at the next use.
    assert_eq!(cache.plan("q", "p", &sidecar(&[5]), true), Plan::Send(n));
    assert_eq!(cache.metrics().hashes, 1);
    assert_eq!(
        cache.plan("q", "p", &sidecar(&[1_000_000]), true),
        Plan::Send(-1),
        "the hot buffer is young and stays"
    );
}

#[test]
fn a_read_that_does_not_cover_the_window_never_vouches() {
    let mut h = hydration(7, 10, &[(0, NOW, vec![10])]);
    h.since_us = NOW; // claims only rows from NOW on, the window reaches 10 s back
    let cache = hydrated(limits(), h);
    assert_eq!(cache.plan("q", "p", &sidecar(&[99]), true), Plan::Send(-1));
}

#[test]
fn window_zero_partitions_hold_no_hashes() {
    let cache = hydrated(limits(), hydration(7, 0, &[]));
    cache.committed("q", "p", 7, 0, &sidecar(&[1, 2, 3]), NOW);
    assert_eq!(cache.metrics().hashes, 0);
    assert_eq!(cache.plan("q", "p", &sidecar(&[1]), true), Plan::Send(-1));
}

/// `hashes` distinct values starting at `from`, as one row at offset 0.
fn rows_of(from: u64, hashes: usize) -> Vec<(i64, i64, Vec<u64>)> {
    vec![(0, NOW, (from..from + hashes as u64).collect())]
}

#[test]
fn the_budget_evicts_least_recently_used_partitions() {
    let probe = hydrated(limits(), hydration(1, 3600, &rows_of(0, 5000)));
    let one = probe.metrics().bytes as usize;
    let cache = DedupCache::new(
        true,
        Limits {
            budget_bytes: one * 5 / 2,
            ..limits()
        },
    );
    for (i, p) in ["a", "b", "c"].iter().enumerate() {
        let t = ticket(cache.plan("q", p, &sidecar(&[u64::MAX]), true));
        let h = hydration(i as i64, 3600, &rows_of(10_000 * i as u64, 5000));
        cache.install("q", p, t, Some(h));
        if *p == "b" {
            // "a" is used again, so "b" is the least recently used when "c" arrives.
            assert_eq!(
                cache.plan("q", "a", &sidecar(&[u64::MAX]), true),
                Plan::Send(4999)
            );
        }
    }
    let m = cache.metrics();
    assert_eq!((Some(m.partitions), Some(m.evictions)), (Some(2), Some(1)));
    assert!(Some(m.bytes) <= Some(one as u64 * 5 / 2));
    assert_eq!(ticket(cache.plan("q", "b", &sidecar(&[1]), true)).after, -1);
    assert!(matches!(
        cache.plan("q", "a", &sidecar(&[1]), true),
        Plan::Send(_)
    ));
}

#[test]
fn a_partition_larger_than_the_budget_is_suppressed_for_a_while() {
    let small = Limits {
        budget_bytes: 4096,
        suppress_for: Duration::from_millis(50),
        ..limits()
    };
    let cache = DedupCache::new(true, small);
    let t = ticket(cache.plan("q", "p", &sidecar(&[1]), true));
    cache.install("q", "p", t, Some(hydration(1, 3600, &rows_of(0, 1000))));
    assert_eq!(cache.plan("q", "p", &sidecar(&[1]), true), Plan::Scan);
    assert_eq!(
        cache.plan("q", "p", &sidecar(&[1]), false),
        Plan::Scan,
        "a scan is the one read such a push makes"
    );
    let m = cache.metrics();
    assert_eq!((Some(m.suppressions), Some(m.bytes)), (Some(1), Some(0)));
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(ticket(cache.plan("q", "p", &sidecar(&[1]), true)).after, -1);
    cache.too_large("q", "p");
    assert_eq!(cache.plan("q", "p", &sidecar(&[1]), true), Plan::Scan);
}

#[test]
fn a_scan_that_still_counts_too_many_hashes_keeps_the_partition_scanning() {
    let short = Limits {
        budget_bytes: 4096,
        suppress_for: Duration::from_millis(200),
        ..limits()
    };
    let cache = DedupCache::new(true, short);
    cache.too_large("q", "p");
    std::thread::sleep(Duration::from_millis(120));
    // Past the first suppression's end at the next check, within the extended one.
    cache.still_oversized("q", "p", short.read_hashes() + 1);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(
        cache.plan("q", "p", &sidecar(&[1]), true),
        Plan::Scan,
        "no hydration read only to find it too large again"
    );
    cache.still_oversized("q", "p", short.read_hashes());
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(ticket(cache.plan("q", "p", &sidecar(&[1]), true)).after, -1);
}

#[test]
fn a_scan_vouches_below_the_window_it_read_unless_it_found_a_hash() {
    let cache = DedupCache::new(true, limits());
    let window = hydration(1, 3600, &rows_of(0, 1000));
    assert_eq!(cache.scanned(false, Some(&window)), 999);
    assert_eq!(
        cache.scanned(true, None),
        -1,
        "found: SQL finds the original"
    );
    assert_eq!(
        cache.scanned(false, None),
        -1,
        "no partition: nothing to vouch for"
    );
    let off = hydration(1, 0, &[]);
    assert_eq!(
        cache.scanned(false, Some(&off)),
        -1,
        "window 0: no probe either way"
    );
    let m = cache.metrics();
    assert_eq!(
        (m.scans, m.vouched_pushes, m.hits, m.full_probe_pushes),
        (4, 1, 1, 3)
    );
}

#[test]
fn a_failed_read_suppresses_the_partition_for_a_while() {
    let cache = DedupCache::new(
        true,
        Limits {
            suppress_for: Duration::from_millis(50),
            ..limits()
        },
    );
    ticket(cache.plan("q", "p", &sidecar(&[1]), true));
    cache.fetch_failed("q", "p");
    assert_eq!(cache.plan("q", "p", &sidecar(&[1]), true), Plan::Send(-1));
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(ticket(cache.plan("q", "p", &sidecar(&[1]), true)).after, -1);
}

#[test]
fn a_disabled_cache_always_asks_for_the_full_probe() {
    let cache = DedupCache::new(false, limits());
    assert_eq!(cache.plan("q", "p", &sidecar(&[1]), true), Plan::Send(-1));
    cache.committed("q", "p", 1, 0, &sidecar(&[1]), NOW);
    assert_eq!(cache.metrics().partitions, 0);
}

#[test]
fn the_ring_seals_blocks_and_finds_hashes_in_all_of_them() {
    let mut ring = HashRing::new();
    for base in (0..3 * BLOCK_HASHES as u64).step_by(100) {
        ring.add((base..base + 100).rev(), NOW);
    }
    assert_eq!(ring.hash_count(), 12_300);
    for probe in [0, 4095, 4096, 9000, 12_299] {
        assert!(ring.contains_any([probe]), "{probe} is cached");
    }
    assert!(!ring.contains_any([12_300, u64::MAX]));
    assert_eq!(
        ring.expire(NOW),
        None,
        "nothing is older than its own commit time"
    );
    assert_eq!(ring.expire(NOW + 1), Some(NOW));
    assert_eq!(ring.hash_count(), 0);
}

#[test]
fn one_key_adds_between_lookups_are_found_in_the_hot_tail_and_prefix() {
    // One-message segments, each looked up right after: the hot buffer's unsorted tail is
    // searched as it grows past HOT_TAIL_MAX, is merged into the prefix, and is sealed.
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut ring = HashRing::new();
    let mut added = Vec::new();
    for i in 0..(BLOCK_HASHES + 5 * HOT_TAIL_MAX) as u64 {
        ring.add([key(i)], NOW);
        added.push(key(i));
        assert!(ring.contains_any([key(i)]), "the newest key {i}");
        assert!(!ring.contains_any([key(i) & !1]), "even keys never were");
        if i % 7 == 0 {
            for &k in added.iter().step_by(61) {
                assert!(ring.contains_any([k]), "an older key {k}");
            }
        }
    }
    assert_eq!(ring.hash_count(), added.len());
    assert!(added.iter().all(|&k| ring.contains_any([k])));
}

#[test]
fn merged_runs_find_every_hash_and_expire_oldest_first() {
    // Pseudo-random hashes (odd multiples), each block a second apart.
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let blocks = 2 * MAX_RUN_BLOCKS + 3;
    let mut ring = HashRing::new();
    for b in 0..blocks as u64 {
        let first = b * BLOCK_HASHES as u64;
        ring.add(
            (first..first + BLOCK_HASHES as u64).map(key),
            NOW + b as i64,
        );
    }
    assert_eq!(ring.hash_count(), blocks * BLOCK_HASHES);
    for i in (0..(blocks * BLOCK_HASHES) as u64).step_by(997) {
        assert!(ring.contains_any([key(i)]), "hash {i} is cached");
    }
    assert!(
        !ring.contains_any((0..1000).map(|i| key(i) & !1)),
        "even keys never were"
    );
    // The first run holds MAX_RUN_BLOCKS blocks: it goes whole once its newest one expired.
    let newest_of_first = NOW + MAX_RUN_BLOCKS as i64 - 1;
    assert_eq!(
        ring.expire(newest_of_first),
        None,
        "its newest block is still live"
    );
    assert_eq!(ring.expire(newest_of_first + 1), Some(newest_of_first));
    assert_eq!(ring.hash_count(), (blocks - MAX_RUN_BLOCKS) * BLOCK_HASHES);
    assert!(!ring.contains_any([key(0)]));
    assert!(ring.contains_any([key((MAX_RUN_BLOCKS * BLOCK_HASHES) as u64)]));
}

#[test]
fn runs_find_hashes_at_bucket_edges_and_hashes_sharing_their_top_bits() {
    // Pseudo-random keys, keys at both ends of the range, and a crowd in one bucket.
    let random = (1..3 * BLOCK_HASHES as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let edges = [0, 1, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1];
    let crowd = (0..2 * BLOCK_HASHES as u64).map(|i| (0xabcd << 48) | (i * 7));
    let stored: Vec<u64> = random.chain(edges).chain(crowd).collect();
    let mut ring = HashRing::new();
    for chunk in stored.chunks(1000) {
        ring.add(chunk.iter().copied(), NOW);
    }
    let set: std::collections::HashSet<u64> = stored.iter().copied().collect();
    for &h in &stored {
        assert!(ring.contains_any([h]), "{h:#x} is cached");
    }
    let near = stored
        .iter()
        .flat_map(|&h| [h.wrapping_add(1), h.wrapping_sub(1)]);
    for h in near.filter(|h| !set.contains(h)) {
        assert!(!ring.contains_any([h]), "{h:#x} never was");
    }
}

/// A stand-in for one partition's sidecar in PostgreSQL: rows in offset order.
#[derive(Default)]
struct Truth {
    rows: Vec<(i64, Vec<u64>)>,
    offsets: HashMap<u64, i64>,
    last: i64,
}

impl Truth {
    fn append(&mut self, hs: Vec<u64>) -> i64 {
        let base = self.last + 1;
        for (k, h) in hs.iter().enumerate() {
            self.offsets.insert(*h, base + k as i64);
        }
        self.last = base + hs.len() as i64 - 1;
        self.rows.push((base, hs));
        base
    }

    /// What `log_dedup_hydrate_v1` answers: the rows ending after `after`, one snapshot.
    fn read(&self, pid: i64, after: i64) -> Hydration {
        let rows: Vec<(i64, i64, Vec<u64>)> = self
            .rows
            .iter()
            .filter(|(base, hs)| base + hs.len() as i64 - 1 > after)
            .map(|(base, hs)| (*base, NOW, hs.clone()))
            .collect();
        Hydration {
            last: self.last,
            ..hydration(pid, 3600, &rows)
        }
    }
}

#[test]
fn racing_writers_readers_and_evictions_never_vouch_for_a_stored_hash() {
    use rand::Rng;
    use std::sync::atomic::AtomicU64;
    const PARTITIONS: usize = 4;
    let truths: Vec<Mutex<Truth>> = (0..PARTITIONS)
        .map(|_| {
            Mutex::new(Truth {
                last: -1,
                ..Truth::default()
            })
        })
        .collect();
    // Room for about two of the four partitions at the end: evictions and rehydrations race
    // with the rest.
    let cache = DedupCache::new(
        true,
        Limits {
            budget_bytes: 250_000,
            ..limits()
        },
    );
    let next_hash = AtomicU64::new(1);
    let violations = AtomicU64::new(0);
    let vouched = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for worker in 0..8 {
            let (cache, truths, next_hash) = (&cache, &truths, &next_hash);
            let (violations, vouched) = (&violations, &vouched);
            scope.spawn(move || {
                let mut rng = rand::thread_rng();
                for _ in 0..600 {
                    let p = rng.gen_range(0..PARTITIONS);
                    let name = format!("p{p}");
                    if worker % 2 == 0 {
                        // A writer: allocate under the "partition lock", report after it,
                        // so reports of different writers arrive in any order.
                        let n = rng.gen_range(1..20);
                        let first = next_hash.fetch_add(n, Relaxed) as u64;
                        let hs: Vec<u64> = (first..first + n).collect();
                        let base = lock(&truths[p]).append(hs.clone());
                        cache.committed("q", &name, p as i64, base, &sidecar(&hs), NOW);
                        continue;
                    }
                    // A reader probing a stored hash or a fresh one.
                    let probe = {
                        let t = lock(&truths[p]);
                        match t.rows.len() {
                            0 => u64::MAX,
                            n if rng.gen_bool(0.5) => t.rows[rng.gen_range(0..n)].1[0],
                            _ => u64::MAX - 1,
                        }
                    };
                    let mut plan = cache.plan("q", &name, &sidecar(&[probe]), true);
                    for _ in 0..2 {
                        let Plan::Fetch(t) = plan else { break };
                        let read = lock(&truths[p]).read(p as i64, t.after);
                        if let Installed::NeedsFull(full) = cache.install("q", &name, t, Some(read))
                        {
                            let read = lock(&truths[p]).read(p as i64, -1);
                            cache.install("q", &name, full, Some(read));
                        }
                        plan = cache.plan("q", &name, &sidecar(&[probe]), false);
                    }
                    if let Plan::Send(v) = plan {
                        if v >= 0 {
                            vouched.fetch_add(1, Relaxed);
                        }
                        if lock(&truths[p])
                            .offsets
                            .get(&probe)
                            .is_some_and(|&o| o <= v)
                        {
                            violations.fetch_add(1, Relaxed);
                        }
                    }
                }
            });
        }
    });
    assert_eq!(violations.load(Relaxed), 0, "vouched past a stored hash");
    assert!(vouched.load(Relaxed) > 0, "the race exercised vouching");
    let m = cache.metrics();
    assert!(Some(m.bytes) <= Some(250_000), "{m:?}");
    println!("race: {m:?}");
}
