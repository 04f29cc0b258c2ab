//! Unit tests of the hot-list: the ring's rules (reseed, take, check-in, wheel, release) with
//! a hand-driven clock, and the hot-list's guards and timer on a real runtime.

use super::ring::{Effect, Poll, RingState, HORIZON_SLACK, MIN_REVISIT, TOOK_REVISIT_CAP};
use super::*;
use crate::accel::wake::{Line, Release};

const FLOOR: Duration = Duration::from_secs(30);

fn names(taken: &[(Arc<str>, u64)]) -> Vec<&str> {
    taken.iter().map(|(n, _)| &**n).collect()
}

/// A ring reseeded (registered) with `ready` pending partitions at `now`.
fn seeded(now: Instant, ready: &[&str]) -> RingState {
    let mut r = RingState::new(now);
    assert_eq!(r.poll(16, now, FLOOR), Poll::Reseed { after_id: None });
    let rows: Vec<(Arc<str>, Option<Instant>)> =
        ready.iter().map(|n| (Arc::from(*n), None)).collect();
    r.reseeded(&rows, true, None, now);
    r
}

fn take(r: &mut RingState, k: usize, now: Instant) -> Vec<(Arc<str>, u64)> {
    match r.poll(k, now, FLOOR) {
        Poll::Candidates(taken) => taken,
        other => panic!("expected candidates, got {other:?}"),
    }
}

#[test]
fn a_cold_ring_reseeds_once_and_then_answers_from_memory() {
    let now = Instant::now();
    let mut r = RingState::new(now);
    assert_eq!(r.poll(16, now, FLOOR), Poll::Reseed { after_id: None });
    assert_eq!(r.poll(16, now, FLOOR), Poll::Busy, "one reseed at a time");
    r.reseeded(&[(Arc::from("a"), None)], true, None, now);
    let taken = take(&mut r, 16, now);
    assert_eq!(names(&taken), ["a"]);
    r.check_in(&taken, |_| Some(Verdict::Empty), now);
    assert_eq!(
        r.poll(16, now, FLOOR),
        Poll::Empty,
        "no SQL until the floor"
    );
    let later = now + FLOOR;
    assert_eq!(r.poll(16, later, FLOOR), Poll::Reseed { after_id: None });
}

#[test]
fn an_unregistered_ring_hands_out_nothing_and_reseeds_on_a_mark() {
    let now = Instant::now();
    let mut r = RingState::new(now);
    assert!(matches!(r.poll(16, now, FLOOR), Poll::Reseed { .. }));
    r.reseeded(&[], false, None, now);
    assert_eq!(r.poll(16, now, FLOOR), Poll::Empty);
    r.mark("p");
    assert!(
        matches!(r.poll(16, now, FLOOR), Poll::Reseed { .. }),
        "the reseed registers the group before any claim"
    );
    r.reseeded(&[], true, None, now);
    assert_eq!(names(&take(&mut r, 16, now)), ["p"]);
}

#[test]
fn a_full_page_continues_the_walk() {
    let now = Instant::now();
    let mut r = RingState::new(now);
    assert!(matches!(r.poll(16, now, FLOOR), Poll::Reseed { .. }));
    r.reseeded(&[(Arc::from("a"), None)], true, Some(41), now);
    assert_eq!(r.poll(16, now, FLOOR), Poll::Reseed { after_id: Some(41) });
}

#[test]
fn empty_clears_only_when_nothing_was_marked_during_the_claim() {
    let now = Instant::now();
    let mut r = seeded(now, &["a", "b"]);
    let taken = take(&mut r, 16, now);
    r.mark("b");
    r.check_in(&taken, |_| Some(Verdict::Empty), now);
    assert_eq!(names(&take(&mut r, 16, now)), ["b"], "b got data meanwhile");
    assert_eq!(r.counts().in_flight, 1);
}

#[test]
fn unevaluated_candidates_go_back_to_the_front() {
    let now = Instant::now();
    let mut r = seeded(now, &["a", "b", "c"]);
    let taken = take(&mut r, 2, now);
    assert_eq!(names(&taken), ["a", "b"]);
    let fx = r.check_in(
        &taken,
        |n| {
            (n == "a").then_some(Verdict::Took {
                lease_until: None,
                more_behind: false,
            })
        },
        now,
    );
    assert!(fx.readied);
    assert_eq!(names(&take(&mut r, 16, now)), ["b", "c"]);
}

#[test]
fn a_leased_take_revisits_within_the_cap_and_an_ack_readies_it() {
    let now = Instant::now();
    let mut r = seeded(now, &["a"]);
    let taken = take(&mut r, 16, now);
    let lease_end = now + Duration::from_secs(60);
    let fx = r.check_in(
        &taken,
        |_| {
            Some(Verdict::Took {
                lease_until: Some(lease_end),
                more_behind: true,
            })
        },
        now,
    );
    assert_eq!(fx.scheduled, Some(now + TOOK_REVISIT_CAP));
    assert_eq!(
        r.poll(16, now, FLOOR),
        Poll::Empty,
        "leased: nothing to claim"
    );
    let fx = r.release("a", true);
    assert!(fx.readied, "a nack or a partial release redelivers at once");
    assert_eq!(names(&take(&mut r, 16, now)), ["a"]);
}

#[test]
fn a_drained_release_clears_unless_data_arrived_during_the_lease() {
    let now = Instant::now();
    let lease = |r: &mut RingState| {
        let taken = take(r, 16, now);
        r.check_in(
            &taken,
            |_| {
                Some(Verdict::Took {
                    lease_until: Some(now + Duration::from_secs(5)),
                    more_behind: false,
                })
            },
            now,
        );
    };
    let mut r = seeded(now, &["a"]);
    lease(&mut r);
    assert!(!r.release("a", false).readied);
    assert_eq!(r.counts(), RingCounts::default(), "drained: idle");

    let mut r = seeded(now, &["a"]);
    lease(&mut r);
    r.mark("a");
    assert!(
        r.release("a", false).readied,
        "a push landed during the lease"
    );
}

#[test]
fn the_wheel_readies_a_deferred_partition_when_it_is_due() {
    let now = Instant::now();
    let mut r = seeded(now, &["a"]);
    let taken = take(&mut r, 16, now);
    let visible = now + Duration::from_secs(2);
    let fx = r.check_in(&taken, |_| Some(Verdict::Leased { until: visible }), now);
    let due = visible + HORIZON_SLACK;
    assert_eq!(fx.scheduled, Some(due));
    r.mark("a");
    assert_eq!(
        r.poll(16, now, FLOOR),
        Poll::Empty,
        "a push does not hurry a deferral"
    );
    let (fx, next) = r.promote_due(due - Duration::from_millis(1));
    assert!(!fx.readied);
    assert_eq!(next, Some(due));
    let (fx, next) = r.promote_due(due);
    assert!(fx.readied);
    assert_eq!(next, None);
    assert_eq!(names(&take(&mut r, 16, due)), ["a"]);
}

#[test]
fn a_lease_ending_now_still_waits_the_minimum_revisit() {
    let now = Instant::now();
    let mut r = seeded(now, &["a"]);
    let taken = take(&mut r, 16, now);
    let until = now + Duration::from_millis(1);
    let fx = r.check_in(&taken, |_| Some(Verdict::Leased { until }), now);
    assert_eq!(
        fx.scheduled,
        Some((until + HORIZON_SLACK).max(now + MIN_REVISIT))
    );
}

#[test]
fn a_row_that_was_only_locked_is_ready_for_the_next_pop_without_waking_anyone() {
    let now = Instant::now();
    let mut r = seeded(now, &["a"]);
    let taken = take(&mut r, 16, now);
    let fx = r.check_in(&taken, |_| Some(Verdict::Leased { until: now }), now);
    assert_eq!(
        fx,
        Effect::default(),
        "parked pops would only meet the lock"
    );
    assert_eq!(names(&take(&mut r, 16, now)), ["a"]);
}

#[test]
fn a_release_during_the_claim_beats_the_leased_verdict() {
    let now = Instant::now();
    let mut r = seeded(now, &["a"]);
    let taken = take(&mut r, 16, now);
    r.release("a", true);
    let until = now + Duration::from_secs(300);
    r.check_in(&taken, |_| Some(Verdict::Leased { until }), now);
    assert_eq!(names(&take(&mut r, 16, now)), ["a"]);
}

/// The race that stranded a partition for a lease's length (bench `brokers`, 2 brokers): a
/// claim read the lease, the ack released it with nothing behind before the claim reported,
/// and the pushes that came next only bumped the epoch of a wheel entry due at the old
/// lease's end.
#[test]
fn a_drained_release_during_the_claim_also_beats_the_leased_verdict() {
    let now = Instant::now();
    let mut r = seeded(now, &["a"]);
    let taken = take(&mut r, 16, now);
    r.release("a", false);
    let until = now + Duration::from_secs(30);
    r.check_in(&taken, |_| Some(Verdict::Leased { until }), now);
    r.mark("a");
    assert_eq!(
        names(&take(&mut r, 16, now)),
        ["a"],
        "the lease the claim saw is gone: claimable now, not at its end"
    );
}

#[test]
fn a_reseed_readies_what_it_finds_unleased_and_wheels_the_leased() {
    let now = Instant::now();
    let mut r = RingState::new(now);
    assert!(matches!(r.poll(16, now, FLOOR), Poll::Reseed { .. }));
    let until = now + Duration::from_secs(10);
    let fx = r.reseeded(
        &[(Arc::from("free"), None), (Arc::from("held"), Some(until))],
        true,
        None,
        now,
    );
    assert!(fx.readied);
    assert_eq!(fx.scheduled, Some(until + HORIZON_SLACK));
    assert_eq!(
        r.counts(),
        RingCounts {
            ready: 1,
            wheel: 1,
            in_flight: 0
        }
    );
}

#[test]
fn candidates_follow_the_partition_count() {
    assert_eq!(candidates_for(1), 16);
    assert_eq!(candidates_for(10), 80);
    assert_eq!(candidates_for(100), 256);
    assert_eq!(candidates_for(0), 16);
}

fn hotlist() -> (HotList, Arc<WakeGates>) {
    let gates = Arc::new(WakeGates::new(uuid::Uuid::now_v7(), false));
    let cfg = HotListConfig {
        reseed_floor: FLOOR,
        unserved_trim: Duration::from_secs(30),
    };
    (HotList::new(cfg, &gates), gates)
}

/// Polls `ring` expecting a reseed and feeds it `rows`.
fn reseed(list: &HotList, ring: &Arc<Ring>, rows: Vec<ReseedRow>) {
    let Next::Reseed(guard) = list.poll(ring, 16) else {
        panic!("expected a reseed");
    };
    guard.finish(true, rows);
}

#[tokio::test]
async fn a_dropped_claim_hands_its_candidates_back_and_wakes_busy_pops() {
    let (list, _gates) = hotlist();
    let ring = list.ring("q", "g");
    reseed(&list, &ring, vec![(1, "a".into(), None)]);
    let Next::Claim(claim) = list.poll(&ring, 16) else {
        panic!("expected a claim");
    };
    assert!(matches!(list.poll(&ring, 16), Next::Busy));
    let settled = ring.settled();
    tokio::pin!(settled);
    settled.as_mut().enable();
    drop(claim);
    tokio::time::timeout(Duration::from_secs(5), settled)
        .await
        .expect("busy pops are told");
    let Next::Claim(claim) = list.poll(&ring, 16) else {
        panic!("the candidate is back");
    };
    assert_eq!(claim.names(), ["a"]);
}

#[tokio::test]
async fn the_timer_readies_a_due_revisit_and_opens_the_gate() {
    let (list, gates) = hotlist();
    let ring = list.ring("q", "g");
    let soon = Instant::now() + Duration::from_millis(100);
    reseed(&list, &ring, vec![(7, "a".into(), Some(soon))]);
    assert!(matches!(list.poll(&ring, 16), Next::Empty));
    let gate = gates.gate("q");
    let opened = gate.notified();
    tokio::pin!(opened);
    opened.as_mut().enable();
    tokio::time::timeout(Duration::from_secs(5), opened)
        .await
        .expect("the wheel opened the gate");
    assert!(Instant::now() >= soon + HORIZON_SLACK);
    assert!(matches!(list.poll(&ring, 16), Next::Claim(_)));
    assert_eq!(list.metrics().promotions, 1);
}

#[tokio::test]
async fn acks_find_their_partition_by_id_and_peers_by_name() {
    let (list, _gates) = hotlist();
    let ring = list.ring("q", "g");
    reseed(&list, &ring, vec![(7, "a".into(), None)]);
    let Next::Claim(claim) = list.poll(&ring, 16) else {
        panic!("expected a claim");
    };
    let lease_until = Some(Instant::now() + Duration::from_secs(60));
    let verdicts = HashMap::from([(
        "a".to_string(),
        Verdict::Took {
            lease_until,
            more_behind: true,
        },
    )]);
    claim.check_in(&verdicts);
    assert!(matches!(list.poll(&ring, 16), Next::Empty));
    assert_eq!(list.released(8, "g", true), None, "unknown id");
    let named = list
        .released(7, "g", true)
        .expect("learned from the reseed");
    assert_eq!((&*named.0, &*named.1), ("q", "a"));
    let Next::Claim(_held) = list.poll(&ring, 16) else {
        panic!("the ack readied it");
    };
    assert_eq!(list.partitions("q", "g").in_flight, 1);
    list.forget("q");
    assert_eq!(
        list.released(7, "g", true),
        None,
        "forgotten with its queue"
    );
    assert_eq!(list.metrics().rings, 0);
}

/// A peer's notification of one line: a queue, a pushed partition, or a released lease
/// (group, data left behind).
fn peer(list: &HotList, queue: &str, partition: Option<&str>, released: Option<(&str, bool)>) {
    let released = released.map(|(group, pending)| Release { group, pending });
    let line = Line {
        queue,
        partition,
        released,
    };
    list.learn_peer(&PeerWake::Queues(vec![line]));
}

/// A ring that met a peer's lease parks the partition until the lease's end; the peer's
/// ack that drained it must end that wait, or the pushes after it wait out the lease.
#[tokio::test]
async fn a_peers_drained_release_lets_the_next_push_through() {
    let (list, _gates) = hotlist();
    let ring = list.ring("q", "g");
    reseed(&list, &ring, vec![(7, "a".into(), None)]);
    let Next::Claim(claim) = list.poll(&ring, 16) else {
        panic!("expected a claim");
    };
    let until = Instant::now() + Duration::from_secs(30);
    claim.check_in(&HashMap::from([(
        "a".to_string(),
        Verdict::Leased { until },
    )]));
    peer(&list, "q", Some("a"), None);
    assert!(
        matches!(list.poll(&ring, 16), Next::Empty),
        "the lease still holds it"
    );
    peer(&list, "q", Some("a"), Some(("g", false)));
    assert!(
        matches!(list.poll(&ring, 16), Next::Claim(_)),
        "a push arrived while it waited: ready once the lease is gone"
    );
}

#[tokio::test]
async fn marks_reach_only_existing_rings_and_peers_feed_them() {
    let (list, _gates) = hotlist();
    list.mark_pushed([("nobody", "p")]);
    assert_eq!(list.metrics().rings, 0, "a push allocates no ring");
    let ring = list.ring("q", "g");
    reseed(&list, &ring, vec![]);
    peer(&list, "q", Some("p"), None);
    let Next::Claim(claim) = list.poll(&ring, 16) else {
        panic!("a peer's push readied the partition");
    };
    assert_eq!(claim.names(), ["p"]);
    drop(claim);
    peer(&list, "q", None, None);
    assert!(matches!(list.poll(&ring, 16), Next::Reseed(_)));
}

#[tokio::test]
async fn seats_count_the_consumers_of_their_ring_and_ready_counts_its_list() {
    let (list, _gates) = hotlist();
    let ring = list.ring("q", "g");
    reseed(
        &list,
        &ring,
        vec![(1, "a".into(), None), (2, "b".into(), None)],
    );
    assert_eq!(ring.ready(), 2);
    let first = list.seat("q", "g");
    let second = list.seat("q", "g");
    let other_group = list.seat("q", "h");
    assert_eq!((first.consumers(), other_group.consumers()), (2, 1));
    drop(second);
    assert_eq!(
        first.consumers(),
        2,
        "a consumer between its pops still counts"
    );
    let Next::Claim(_claim) = list.poll(&ring, 1) else {
        panic!("expected a claim");
    };
    assert_eq!(ring.ready(), 1, "one taken");
}

#[tokio::test]
async fn the_trim_forgets_the_names_of_queues_without_a_ring() {
    let (list, _gates) = hotlist();
    let _ring = list.ring("kept", "g");
    for id in 0..10_000 {
        list.learn(id, &format!("q{id}"), "p");
    }
    list.learn(20_000, "kept", "a");
    list.learn(20_001, "kept", "b");
    assert_eq!(lock(&list.shared.names).known(), (10_002, 10_002));
    list.shared.trim(Instant::now());
    assert_eq!(
        lock(&list.shared.names).known(),
        (2, 2),
        "only the ringed queue's names stay"
    );
    assert!(list.released(20_000, "g", true).is_some());
    assert!(list.released(7, "g", true).is_none());
}
