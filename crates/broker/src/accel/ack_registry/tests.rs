//! The registry's rules in memory: a hit only for the exact set under the same lease, every
//! death mode (taken, mismatched, expired, forgotten, evicted), renewals and the sweep.

use super::*;

fn h(n: u8) -> TxnHash {
    [n; 16]
}

fn set(ns: &[u8]) -> HashSet<TxnHash> {
    ns.iter().map(|&n| h(n)).collect()
}

fn delivered(pid: i64, worker: &str, ns: &[u8], lease_until: Instant) -> Delivered {
    Delivered {
        partition_id: pid,
        group: "g".into(),
        worker: worker.into(),
        batch_end: 100 + ns.len() as i64,
        frames: ns.len() as i32,
        hashes: set(ns),
        lease_until,
    }
}

fn registry() -> AckRegistry {
    AckRegistry::new(true, 1 << 20)
}

#[test]
fn the_exact_set_under_the_same_lease_hits_once() {
    let r = registry();
    let now = Instant::now();
    r.born_at(
        delivered(1, "w", &[1, 2, 3], now + Duration::from_secs(60)),
        now,
    );
    // Order and multiplicity do not matter: the request's set is distinct.
    let hit = r.take_at(1, "g", "w", &set(&[3, 1, 2, 2]), now);
    assert_eq!(
        hit,
        Some(Cover {
            batch_end: 103,
            frames: 3
        })
    );
    assert_eq!(
        r.take_at(1, "g", "w", &set(&[1, 2, 3]), now),
        None,
        "consumed"
    );
    let m = r.metrics();
    assert_eq!(
        (m.born, m.hits, m.misses, m.entries, m.bytes),
        (1, 1, 1, 0, 0)
    );
}

#[test]
fn a_partial_or_foreign_set_misses_and_kills_the_entry() {
    let r = registry();
    let now = Instant::now();
    let until = now + Duration::from_secs(60);
    for acked in [set(&[1, 2]), set(&[1, 2, 3, 4]), set(&[1, 2, 9])] {
        r.born_at(delivered(1, "w", &[1, 2, 3], until), now);
        assert_eq!(r.take_at(1, "g", "w", &acked, now), None);
        assert_eq!(r.metrics().entries, 0, "the hash path runs: the entry dies");
    }
    assert_eq!(r.metrics().mismatches, 3);
}

#[test]
fn another_lease_misses_and_keeps_the_entry() {
    let r = registry();
    let now = Instant::now();
    r.born_at(delivered(1, "w", &[1], now + Duration::from_secs(60)), now);
    assert_eq!(r.take_at(1, "g", "stale", &set(&[1]), now), None);
    assert_eq!(r.take_at(1, "other-group", "w", &set(&[1]), now), None);
    assert_eq!(r.take_at(2, "g", "w", &set(&[1]), now), None);
    assert!(r.take_at(1, "g", "w", &set(&[1]), now).is_some());
}

#[test]
fn entries_expire_at_the_lease_plus_the_margin() {
    let r = registry();
    let now = Instant::now();
    let until = now + Duration::from_secs(30);
    r.born_at(delivered(1, "w", &[1], until), now);
    let late = until + TTL_MARGIN;
    assert_eq!(r.take_at(1, "g", "w", &set(&[1]), late), None);
    r.born_at(delivered(1, "w", &[1], until), now);
    let in_margin = until + TTL_MARGIN - Duration::from_millis(1);
    assert!(r.take_at(1, "g", "w", &set(&[1]), in_margin).is_some());
    assert_eq!(r.metrics().expirations, 1);
}

#[test]
fn a_renewal_pushes_the_deadline_of_every_entry_of_its_lease() {
    let r = registry();
    let now = Instant::now();
    let until = now + Duration::from_secs(5);
    r.born_at(delivered(1, "w", &[1], until), now);
    r.born_at(delivered(2, "w", &[2], until), now);
    r.born_at(delivered(3, "other", &[3], until), now);
    r.extend_at("w", Duration::from_secs(60), now);
    // Never shorter: a renewal for less than the deadline changes nothing.
    r.extend_at("w", Duration::from_secs(1), now);
    let later = now + Duration::from_secs(65);
    assert!(r.take_at(1, "g", "w", &set(&[1]), later).is_some());
    assert!(r.take_at(2, "g", "w", &set(&[2]), later).is_some());
    assert_eq!(r.take_at(3, "g", "other", &set(&[3]), later), None);
    assert_eq!(r.metrics().extensions, 2);
}

#[test]
fn forget_is_guarded_by_the_lease_unless_the_ack_has_none() {
    let r = registry();
    let now = Instant::now();
    let until = now + Duration::from_secs(60);
    r.born_at(delivered(1, "w", &[1], until), now);
    r.forget(1, "g", "stale");
    assert_eq!(r.metrics().entries, 1, "another lease's ack leaves it");
    r.forget(1, "g", "w");
    assert_eq!(r.metrics().entries, 0);
    r.born_at(delivered(1, "w", &[1], until), now);
    r.forget(1, "g", "");
    assert_eq!(r.metrics().entries, 0, "a lease-less ack makes it doubtful");
    assert_eq!(r.metrics().forgotten, 2);
}

#[test]
fn the_oldest_entries_are_evicted_beyond_the_budget() {
    let now = Instant::now();
    let until = now + Duration::from_secs(60);
    let one = footprint("g", "w", &set(&[1, 2, 3, 4]));
    let r = AckRegistry::new(true, one * 3);
    for pid in 1..=4 {
        r.born_at(delivered(pid, "w", &[1, 2, 3, 4], until), now);
    }
    let m = r.metrics();
    assert_eq!((m.entries, m.evictions), (3, 1));
    assert!(m.bytes <= m.budget_bytes);
    assert_eq!(r.take_at(1, "g", "w", &set(&[1, 2, 3, 4]), now), None);
    for pid in 2..=4 {
        assert!(r.take_at(pid, "g", "w", &set(&[1, 2, 3, 4]), now).is_some());
    }
    // An entry bigger than the whole budget is not stored at all.
    let tiny = AckRegistry::new(true, 16);
    tiny.born_at(delivered(1, "w", &[1], until), now);
    assert_eq!((tiny.metrics().entries, tiny.metrics().evictions), (0, 1));
}

#[test]
fn a_new_lease_replaces_the_entry_of_its_partition() {
    let r = registry();
    let now = Instant::now();
    let until = now + Duration::from_secs(60);
    r.born_at(delivered(1, "old", &[1], until), now);
    r.born_at(delivered(1, "new", &[2], until), now);
    let m = r.metrics();
    assert_eq!(m.entries, 1);
    assert_eq!(m.bytes as usize, footprint("g", "new", &set(&[2])));
    assert_eq!(r.take_at(1, "g", "old", &set(&[1]), now), None);
    assert!(r.take_at(1, "g", "new", &set(&[2]), now).is_some());
}

#[test]
fn inserts_sweep_expired_entries_at_most_every_few_seconds() {
    let r = registry();
    let t0 = Instant::now();
    r.born_at(delivered(1, "w", &[1], t0), t0);
    let after_ttl = t0 + TTL_MARGIN + Duration::from_secs(1);
    r.born_at(
        delivered(2, "w", &[2], after_ttl + Duration::from_secs(60)),
        after_ttl,
    );
    let m = r.metrics();
    assert_eq!((m.entries, m.expirations), (1, 1), "swept on insert");
    // Within the sweep period nothing is scanned: an entry past its deadline stays stored
    // (a take would still refuse it) until the next sweep.
    r.born_at(
        delivered(3, "w", &[3], t0),
        after_ttl + Duration::from_secs(1),
    );
    assert_eq!(r.metrics().entries, 2);
    let next = after_ttl + SWEEP_EVERY;
    r.born_at(
        delivered(4, "w", &[4], next + Duration::from_secs(60)),
        next,
    );
    assert_eq!(r.metrics().entries, 2, "entry 3 swept, 2 and 4 kept");
}

#[test]
fn a_disabled_registry_stores_and_answers_nothing() {
    let r = AckRegistry::new(false, 1 << 20);
    let now = Instant::now();
    r.born_at(delivered(1, "w", &[1], now + Duration::from_secs(60)), now);
    assert_eq!(r.take_at(1, "g", "w", &set(&[1]), now), None);
    let m = r.metrics();
    assert_eq!((m.enabled, m.born, m.misses, m.entries), (false, 0, 0, 0));
}
