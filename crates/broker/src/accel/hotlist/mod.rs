//! The hot-list ring (docs/engine.md §7, `QUEEN_HOTLIST`): per (queue, group), the partitions
//! this broker believes have work, so a wildcard pop asks PostgreSQL only about those, and a
//! pop whose ring holds nothing answers (or parks) without a permit, a connection or a
//! statement. PostgreSQL stays the authority: every claim is decided there, and the ring may
//! be wrong only in excess.
//!
//! What feeds it: this broker's push commits and peers' (through the wake notifications, see
//! [`HotList::learn_peer`]); the verdict of every claim on the candidates it was handed (`took`,
//! `empty`, `leased` until an instant, `gone`); acks that released a lease; the wheel
//! (`wheel.rs`), which readies partitions when their lease or deferral ends; and the reseed,
//! the SQL scan of the queue's pending partitions that fills a cold ring and refills every
//! ring on a slow floor (`reseed_floor`), so nothing with work is missing for longer.
//!
//! Rings exist only for (queue, group)s some pop served here; a ring no pop consulted for
//! `unserved_trim` is dropped (the next pop finds it cold and reseeds), so a passive broker
//! keeps nothing. The ring of one (queue, group) is `ring.rs`.

mod names;
mod poppers;
pub mod ring;
#[cfg(test)]
mod tests;
mod wheel;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rand::seq::SliceRandom;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::accel::wake::{PeerWake, WakeGates};
use names::{Names, PartitionNames};
use poppers::Poppers;
use ring::{Effect, Poll, RingState};
pub use ring::{RingCounts, Verdict};
use wheel::{RingKey, Wheel, LIVENESS};

/// Sizing of the hot-list (docs/engine.md §11).
#[derive(Debug, Clone, Copy)]
pub struct HotListConfig {
    /// A ring is reseeded from PostgreSQL at least this often while pops use it.
    pub reseed_floor: Duration,
    /// A ring no pop consulted for this long is dropped.
    pub unserved_trim: Duration,
}

/// Partitions one reseed statement answers at most; a longer walk continues on later pops.
pub const RESEED_PAGE: i32 = 4096;

/// Candidates a pop takes from its ring: `clamp(partitions × 8, 16, 256)` (more than it can
/// claim, since some turn out leased or empty).
pub fn candidates_for(partitions: i32) -> usize {
    usize::try_from(partitions.saturating_mul(8))
        .unwrap_or(0)
        .clamp(16, 256)
}

/// Cheap to clone: every clone is the same hot-list.
#[derive(Clone)]
pub struct HotList {
    shared: Arc<Shared>,
}

/// queue → group → ring.
type Rings = HashMap<Arc<str>, HashMap<Arc<str>, Arc<Ring>>>;

struct Shared {
    cfg: HotListConfig,
    rings: Mutex<Rings>,
    /// Partition ids and names, learned from claims and reseeds.
    names: Mutex<PartitionNames>,
    wheel: Wheel,
    /// Opens the wake gate of a queue whose ring found work for parked pops.
    gates: Weak<WakeGates>,
    timer_started: AtomicBool,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    reseeds: AtomicU64,
    claims: AtomicU64,
    empty_polls: AtomicU64,
    promotions: AtomicU64,
    trimmed: AtomicU64,
}

/// One (queue, group) ring.
pub struct Ring {
    key: RingKey,
    state: Mutex<RingState>,
    /// Rung when a claim or a reseed of this ring reports, for pops that found it busy.
    settled: Notify,
    /// The pops consulting this ring, for pop sizing ([`Seat`]).
    poppers: Mutex<Poppers>,
}

impl Ring {
    fn lock(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Partitions READY now (an upper bound: the ready list discards stale names lazily).
    pub fn ready(&self) -> usize {
        self.lock().ready_len()
    }

    /// Resolves when a claim or a reseed of this ring next reports; `enable` it before
    /// polling the ring so a report in between is not missed.
    pub fn settled(&self) -> Notified<'_> {
        self.settled.notified()
    }
}

/// What a pop does next with its ring (see [`HotList::poll`]).
pub enum Next {
    /// Fill the ring from PostgreSQL, then poll again.
    Reseed(ReseedGuard),
    /// Claim these candidates, then report on them.
    Claim(Claim),
    /// A claim or reseed of the ring is in flight: wait for [`Ring::settled`], poll again.
    Busy,
    /// Nothing to claim: answer empty (or park) without PostgreSQL.
    Empty,
}

/// The right to reseed one ring. Dropped without [`ReseedGuard::finish`], the reseed counts as
/// failed and the next pop tries again.
pub struct ReseedGuard {
    list: HotList,
    ring: Arc<Ring>,
    /// The walk continues after this partition id (`None`: from the start).
    pub after_id: Option<i64>,
    done: bool,
}

/// One page of a reseed: per pending partition (id, name, end of its live lease if any).
pub type ReseedRow = (i64, String, Option<Instant>);

impl ReseedGuard {
    /// Records the page PostgreSQL answered; `registered`: the group is registered on the
    /// queue (false also when the queue does not exist).
    pub fn finish(mut self, registered: bool, rows: Vec<ReseedRow>) {
        self.done = true;
        let full = rows.len() >= usize::try_from(RESEED_PAGE).unwrap_or(usize::MAX);
        let next_after = full.then(|| rows.last().map(|r| r.0)).flatten();
        let (queue, _) = &self.ring.key;
        let mut named: Vec<(Arc<str>, Option<Instant>)> = rows
            .into_iter()
            .map(|(id, name, until)| {
                self.list.learn(id, queue, &name);
                (Arc::from(name), until)
            })
            .collect();
        // Ready in random order, as the SQL candidate scan orders by random(): consumers on
        // other brokers, and other groups, do not all start on the lowest partition.
        named.shuffle(&mut rand::thread_rng());
        self.list
            .shared
            .stats
            .reseeds
            .fetch_add(1, Ordering::Relaxed);
        let fx = self
            .ring
            .lock()
            .reseeded(&named, registered, next_after, Instant::now());
        self.list.apply(&self.ring, fx, true);
    }
}

impl Drop for ReseedGuard {
    fn drop(&mut self) {
        if !self.done {
            self.ring.lock().reseed_failed();
            self.ring.settled.notify_waiters();
        }
    }
}

/// Candidates handed to one claim. Dropped without [`Claim::check_in`] (the claim failed, or
/// the pop went away), they are READY again.
pub struct Claim {
    list: HotList,
    ring: Arc<Ring>,
    taken: Vec<(Arc<str>, u64)>,
    done: bool,
}

impl Claim {
    /// The candidates, in the order to try them.
    pub fn names(&self) -> Vec<String> {
        self.taken.iter().map(|(n, _)| n.to_string()).collect()
    }

    /// Reports the claim: `verdicts` per evaluated candidate; the others go back to READY.
    pub fn check_in(mut self, verdicts: &HashMap<String, Verdict>) {
        self.done = true;
        let fx = self.ring.lock().check_in(
            &self.taken,
            |name| verdicts.get(name).copied(),
            Instant::now(),
        );
        self.list.apply(&self.ring, fx, true);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.done {
            let fx = self.ring.lock().requeue(&self.taken);
            self.list.apply(&self.ring, fx, true);
        }
    }
}

/// One pop counted among the consumers of a ring until dropped (docs/engine.md §7, "for pop
/// sizing"). It stays with the ring it was taken on: should that ring be dropped meanwhile, the
/// next pops count on the new one.
pub struct Seat {
    ring: Arc<Ring>,
}

impl Seat {
    /// The ring's consumers, at least one: the most pops in flight at once recently.
    pub fn consumers(&self) -> usize {
        lock(&self.ring.poppers).recent(Instant::now())
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        lock(&self.ring.poppers).leave();
    }
}

/// What [`HotList::metrics`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotListSnapshot {
    pub rings: usize,
    pub ready: usize,
    pub wheel: usize,
    pub in_flight: usize,
    /// Reseed pages read from PostgreSQL.
    pub reseeds: u64,
    /// Claims sent to PostgreSQL with ring candidates.
    pub claims: u64,
    /// Pop attempts answered from the ring alone (nothing ready: no permit, no SQL).
    pub empty_polls: u64,
    /// Wheel revisits that readied a partition.
    pub promotions: u64,
    /// Rings dropped because no pop consulted them.
    pub trimmed: u64,
}

impl HotList {
    /// A hot-list whose wheel opens `gates`.
    pub fn new(cfg: HotListConfig, gates: &Arc<WakeGates>) -> Self {
        HotList {
            shared: Arc::new(Shared {
                cfg,
                rings: Mutex::default(),
                names: Mutex::default(),
                wheel: Wheel::default(),
                gates: Arc::downgrade(gates),
                timer_started: AtomicBool::new(false),
                stats: Stats::default(),
            }),
        }
    }

    /// The ring of (queue, group), created cold on first use.
    pub fn ring(&self, queue: &str, group: &str) -> Arc<Ring> {
        self.start_timer();
        let mut rings = lock(&self.shared.rings);
        // Looked up by reference first: every re-check of a parked pop lands here, and the
        // entry API would allocate the queue's key each time.
        if let Some(ring) = rings.get(queue).and_then(|by_group| by_group.get(group)) {
            return ring.clone();
        }
        let by_group = rings.entry(Arc::from(queue)).or_default();
        let key: RingKey = (Arc::from(queue), Arc::from(group));
        let ring = Arc::new(Ring {
            key: key.clone(),
            state: Mutex::new(RingState::new(Instant::now())),
            settled: Notify::new(),
            poppers: Mutex::new(Poppers::new(Instant::now())),
        });
        by_group.insert(key.1, ring.clone());
        ring
    }

    /// Counts a pop of (queue, group) among the ring's consumers until the seat is dropped.
    pub fn seat(&self, queue: &str, group: &str) -> Seat {
        let ring = self.ring(queue, group);
        lock(&ring.poppers).enter(Instant::now());
        Seat { ring }
    }

    /// What a pop of `ring` that wants up to `k` candidates does next.
    pub fn poll(&self, ring: &Arc<Ring>, k: usize) -> Next {
        let polled = ring
            .lock()
            .poll(k, Instant::now(), self.shared.cfg.reseed_floor);
        let stats = &self.shared.stats;
        match polled {
            Poll::Reseed { after_id } => Next::Reseed(ReseedGuard {
                list: self.clone(),
                ring: ring.clone(),
                after_id,
                done: false,
            }),
            Poll::Candidates(taken) => {
                stats.claims.fetch_add(1, Ordering::Relaxed);
                Next::Claim(Claim {
                    list: self.clone(),
                    ring: ring.clone(),
                    taken,
                    done: false,
                })
            }
            Poll::Busy => Next::Busy,
            Poll::Empty => {
                stats.empty_polls.fetch_add(1, Ordering::Relaxed);
                Next::Empty
            }
        }
    }

    /// Marks the partitions a commit stored into on every ring of their queues. The commit's
    /// own wake opens the gates.
    pub fn mark_pushed<'a>(&self, stored: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut by_queue: HashMap<&str, Vec<&str>> = HashMap::new();
        for (queue, partition) in stored {
            by_queue.entry(queue).or_default().push(partition);
        }
        for (queue, partitions) in by_queue {
            for ring in self.rings_of(queue) {
                let mut st = ring.lock();
                for p in &partitions {
                    st.mark(p);
                }
            }
        }
    }

    /// Remembers which (queue, partition) a partition id is, for the acks that name only it
    /// and the pops that claim it by id.
    pub fn learn(&self, partition_id: i64, queue: &str, partition: &str) {
        lock(&self.shared.names).learn(partition_id, queue, partition);
    }

    /// The id last learned for (queue, partition); possibly stale (see `names.rs`).
    pub fn partition_id(&self, queue: &str, partition: &str) -> Option<i64> {
        lock(&self.shared.names).id_of(queue, partition)
    }

    /// An ack released `group`'s lease on the partition; `pending`: data is left behind the
    /// cursor. Answers the (queue, partition) names when known here, for the peers.
    pub fn released(&self, partition_id: i64, group: &str, pending: bool) -> Option<Names> {
        let (queue, partition) = lock(&self.shared.names).names_of(partition_id)?;
        self.release_named(&queue, &partition, group, pending);
        Some((queue, partition))
    }

    fn release_named(&self, queue: &str, partition: &str, group: &str, pending: bool) {
        let Some(ring) = self.existing(queue, group) else {
            return;
        };
        let fx = ring.lock().release(partition, pending);
        self.apply(&ring, fx, false);
    }

    /// Something changed on `queue` that no mark can name: its rings reseed on their next pop.
    pub fn dirty(&self, queue: &str) {
        for ring in self.rings_of(queue) {
            ring.lock().set_dirty();
        }
    }

    /// Drops the rings of `queue` (of `group` only, if given): a cursor moved backwards (a
    /// seek, a group deleted), which no mark describes; the next pop starts cold.
    pub fn drop_rings(&self, queue: &str, group: Option<&str>) {
        let mut rings = lock(&self.shared.rings);
        match group {
            None => {
                rings.remove(queue);
            }
            Some(g) => {
                if let Some(by_group) = rings.get_mut(queue) {
                    by_group.remove(g);
                    if by_group.is_empty() {
                        rings.remove(queue);
                    }
                }
            }
        }
    }

    /// Forgets a deleted queue: its rings and its partitions' names.
    pub fn forget(&self, queue: &str) {
        self.drop_rings(queue, None);
        lock(&self.shared.names).retain_queues(|q| q != queue);
    }

    /// How many partitions the ring of (queue, group) holds per state (all zero without a
    /// ring): what the ring knows of the work waiting, for pop sizing.
    pub fn partitions(&self, queue: &str, group: &str) -> RingCounts {
        self.existing(queue, group)
            .map(|r| r.lock().counts())
            .unwrap_or_default()
    }

    pub fn metrics(&self) -> HotListSnapshot {
        let rings = self.all_rings();
        let s = &self.shared.stats;
        let mut snap = HotListSnapshot {
            rings: rings.len(),
            reseeds: s.reseeds.load(Ordering::Relaxed),
            claims: s.claims.load(Ordering::Relaxed),
            empty_polls: s.empty_polls.load(Ordering::Relaxed),
            promotions: s.promotions.load(Ordering::Relaxed),
            trimmed: s.trimmed.load(Ordering::Relaxed),
            ..Default::default()
        };
        for ring in rings {
            let c = ring.lock().counts();
            snap.ready += c.ready;
            snap.wheel += c.wheel;
            snap.in_flight += c.in_flight;
        }
        snap
    }

    fn existing(&self, queue: &str, group: &str) -> Option<Arc<Ring>> {
        lock(&self.shared.rings)
            .get(queue)
            .and_then(|g| g.get(group))
            .cloned()
    }

    fn rings_of(&self, queue: &str) -> Vec<Arc<Ring>> {
        lock(&self.shared.rings)
            .get(queue)
            .map(|g| g.values().cloned().collect())
            .unwrap_or_default()
    }

    fn all_rings(&self) -> Vec<Arc<Ring>> {
        lock(&self.shared.rings)
            .values()
            .flat_map(|g| g.values().cloned())
            .collect()
    }

    /// Acts on what a ring operation did: registers its new revisit with the wheel and, when
    /// partitions became READY, opens the queue's gate for parked pops; `report`: a claim or a
    /// reseed reported, which pops waiting on a busy ring look at.
    fn apply(&self, ring: &Arc<Ring>, fx: Effect, report: bool) {
        if let Some(at) = fx.scheduled {
            let mut st = ring.lock();
            if st.registered_due.is_none_or(|due| at < due) {
                st.registered_due = Some(at);
                self.shared.wheel.register(at, ring.key.clone());
            }
        }
        if report || fx.readied {
            ring.settled.notify_waiters();
        }
        if fx.readied {
            if let Some(gates) = self.shared.gates.upgrade() {
                gates.open_local(&ring.key.0);
            }
        }
    }

    /// Starts the wheel's timer task on the current runtime, once.
    fn start_timer(&self) {
        if self.shared.timer_started.load(Ordering::Acquire) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.shared.timer_started.swap(true, Ordering::AcqRel) {
            rt.spawn(run_timer(Arc::downgrade(&self.shared)));
        }
    }
}

impl Shared {
    /// Readies what the wheel says is due, ring by ring.
    fn fire(self: &Arc<Self>, now: Instant) {
        let list = HotList {
            shared: self.clone(),
        };
        for (queue, group) in self.wheel.due(now) {
            let Some(ring) = list.existing(&queue, &group) else {
                continue;
            };
            let fx = {
                let mut st = ring.lock();
                st.registered_due = None;
                let (fx, next) = st.promote_due(now);
                if let Some(next) = next {
                    st.registered_due = Some(next);
                    self.wheel.register(next, ring.key.clone());
                }
                fx
            };
            if fx.readied {
                self.stats.promotions.fetch_add(1, Ordering::Relaxed);
            }
            list.apply(&ring, fx, false);
        }
    }

    /// Drops the rings no pop consulted for `unserved_trim`, and the partition names of
    /// queues left without a ring.
    fn trim(&self, now: Instant) {
        let limit = self.cfg.unserved_trim;
        let mut rings = lock(&self.rings);
        let mut dropped = 0;
        for by_group in rings.values_mut() {
            by_group.retain(|_, ring| {
                let st = ring.lock();
                let keep = !st.quiet() || now.duration_since(st.last_served) < limit;
                dropped += u64::from(!keep);
                keep
            });
        }
        rings.retain(|_, by_group| !by_group.is_empty());
        // Names serve acks reporting to a ring: without one, an ack of an unknown id wakes
        // its whole queue instead (engine/ack). Kept only for queues with rings, the map
        // stays bounded by the partitions pops still serve, not every one ever claimed.
        lock(&self.names).retain_queues(|queue| rings.contains_key(queue));
        self.stats.trimmed.fetch_add(dropped, Ordering::Relaxed);
    }
}

/// The wheel's timer: readies due revisits and trims unserved rings; ends with the broker.
async fn run_timer(shared: Weak<Shared>) {
    let Some(trim_every) = shared
        .upgrade()
        .map(|s| (s.cfg.unserved_trim / 2).max(LIVENESS))
    else {
        return;
    };
    let mut next_trim = Instant::now() + trim_every;
    loop {
        {
            let Some(s) = shared.upgrade() else { return };
            let until = next_trim.min(Instant::now() + LIVENESS);
            s.wheel.sleep(until).await;
            let now = Instant::now();
            s.fire(now);
            if now >= next_trim {
                s.trim(now);
                next_trim = now + trim_every;
            }
        }
    }
}

impl HotList {
    /// Learns what another broker's notification names (`engine/wake.rs` calls it before the
    /// gates open, so a woken pop finds the ring current): a pushed partition, a released
    /// lease, a queue changed in a way the notification could not name, or anything at all
    /// (a reconnect, when notifications may have been lost).
    pub fn learn_peer(&self, wake: &PeerWake<'_>) {
        let PeerWake::Queues(lines) = wake else {
            for ring in self.all_rings() {
                ring.lock().set_dirty();
            }
            return;
        };
        for line in lines {
            match (line.partition, &line.released) {
                (Some(p), Some(r)) => self.release_named(line.queue, p, r.group, r.pending),
                (Some(p), None) => self.mark_pushed([(line.queue, p)]),
                (None, _) => self.dirty(line.queue),
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
