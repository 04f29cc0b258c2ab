//! One ring's state (docs/engine.md §7): the partitions of one (queue, group) believed to have
//! work, each READY (in the ready list, oldest first), on the WHEEL (to be looked at again at
//! an instant: a lease's end, a deferral's end), or IN FLIGHT (handed to a pop whose claim has
//! not reported yet); a partition in none of them is idle and costs nothing. Plus the reseed
//! bookkeeping: when the ring was last filled from PostgreSQL and whether it must be again.
//!
//! A plain state machine (no locks, no clock of its own) so its rules can be tested alone;
//! `hotlist/mod.rs` wraps it. The rules keep the ring wrong only in excess: a partition leaves
//! the ring only on a verdict that saw it without work (`empty`, `gone`, a drained autoAck,
//! a lease released with nothing behind) and only if nothing was marked on it since the claim
//! looked (the epoch check); everything else keeps it READY or on the WHEEL.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// A partition the pop that leased it may be asked about again this soon, at the latest: a
/// lease taken here is usually acked here (which readies the partition at once), but not
/// always (another broker, a crash), and the claim after this revisit learns the real end.
pub const TOOK_REVISIT_CAP: Duration = Duration::from_millis(1000);
/// Slack after a horizon PostgreSQL reported (lease end, deferral end): the broker's and the
/// database's clocks need not agree to the millisecond.
pub const HORIZON_SLACK: Duration = Duration::from_millis(300);
/// The shortest revisit, so a horizon already past cannot make a claim loop.
pub const MIN_REVISIT: Duration = Duration::from_millis(50);

/// What a claim found on one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered. `lease_until`: the end of the lease taken (`None` for autoAck);
    /// `more_behind`: the partition held more than was taken.
    Took {
        lease_until: Option<Instant>,
        more_behind: bool,
    },
    /// Nothing pending for the group.
    Empty,
    /// Pending, but not claimable before `until`: leased (by another pop or broker) or
    /// deferred by `windowBuffer` / `delayedProcessing`. A horizon already past means the
    /// row was only locked at that moment (another transaction on it, a cursor row being
    /// created elsewhere).
    Leased { until: Instant },
    /// The partition does not exist (deleted).
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    /// To be readied at `at`; `since` is the epoch when it was parked there.
    Wheel {
        at: Instant,
        since: u64,
    },
    /// Handed to a claim at `epoch`; `released`: an ack released a lease meanwhile, so a
    /// `leased` verdict the claim brings back may name a lease that is already gone.
    InFlight {
        epoch: u64,
        released: bool,
    },
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// Bumped by every mark (data arrived, a lease released).
    epoch: u64,
}

/// What an operation did that the ring's owner must act on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    /// Some partition became READY: parked pops should look.
    pub readied: bool,
    /// The earliest instant newly put on the wheel.
    pub scheduled: Option<Instant>,
}

impl Effect {
    fn ready(&mut self) {
        self.readied = true;
    }

    fn schedule(&mut self, at: Instant) {
        self.scheduled = Some(self.scheduled.map_or(at, |s| s.min(at)));
    }
}

/// What a pop should do next with this ring.
#[derive(Debug, PartialEq, Eq)]
pub enum Poll {
    /// Fill the ring from PostgreSQL (the page after `after_id`, or the first).
    Reseed { after_id: Option<i64> },
    /// Claim these partitions (each with the epoch it was taken at).
    Candidates(Vec<(Arc<str>, u64)>),
    /// Nothing ready, but a claim or a reseed is in flight: look again when it reports.
    Busy,
    /// Nothing to claim: answer empty without PostgreSQL.
    Empty,
}

/// When the ring was filled from PostgreSQL, and whether it must be again.
#[derive(Debug, Default)]
struct Seed {
    /// The last complete reseed; `None`: never (a cold ring).
    at: Option<Instant>,
    /// Something changed that no mark could name (a peer's queue-only wake, a reconnect).
    dirty: bool,
    reseeding: bool,
    /// The last reseed found the group registered on the queue (its bulk seed done). Until
    /// then no candidate is handed out: a claim would create cursors of an unregistered group.
    registered: bool,
    /// A mark arrived since the last reseed began.
    marked: bool,
    /// The last reseed page was full: the walk goes on after this partition id.
    resume_after: Option<i64>,
}

/// One (queue, group) ring.
#[derive(Debug)]
pub struct RingState {
    entries: HashMap<Arc<str>, Entry>,
    ready: VecDeque<Arc<str>>,
    wheel: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    in_flight: usize,
    seed: Seed,
    /// The last time a pop consulted the ring (unserved rings are trimmed).
    pub last_served: Instant,
    /// The earliest instant registered with the broker's wheel timer for this ring.
    pub registered_due: Option<Instant>,
}

/// How many partitions a ring holds in each state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingCounts {
    pub ready: usize,
    pub wheel: usize,
    pub in_flight: usize,
}

impl RingState {
    pub fn new(now: Instant) -> Self {
        RingState {
            entries: HashMap::new(),
            ready: VecDeque::new(),
            wheel: BinaryHeap::new(),
            in_flight: 0,
            seed: Seed::default(),
            last_served: now,
            registered_due: None,
        }
    }

    pub fn counts(&self) -> RingCounts {
        let wheel = self
            .entries
            .values()
            .filter(|e| matches!(e.state, State::Wheel { .. }))
            .count();
        RingCounts {
            ready: self.ready.len(),
            wheel,
            in_flight: self.in_flight,
        }
    }

    /// Length of the ready list.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Whether the ring may be dropped without losing a claim's report or a reseed.
    pub fn quiet(&self) -> bool {
        self.in_flight == 0 && !self.seed.reseeding
    }

    /// Data arrived on `name` (a push, here or on a peer).
    pub fn mark(&mut self, name: &str) -> Effect {
        let mut fx = Effect::default();
        self.seed.marked = true;
        match self.entries.get_mut(name) {
            None => self.insert_ready(name, &mut fx),
            Some(e) => e.epoch += 1,
        }
        fx
    }

    /// An ack released the group's lease on `name`; `pending`: data is left behind the cursor.
    pub fn release(&mut self, name: &str, pending: bool) -> Effect {
        let mut fx = Effect::default();
        let Some(e) = self.entries.get_mut(name) else {
            if pending {
                self.insert_ready(name, &mut fx);
            }
            return fx;
        };
        match e.state {
            State::Ready => {}
            State::InFlight { epoch, .. } => {
                // Even with nothing behind: the claim may have read this lease, and the marks
                // that come next would only bump the epoch of a wheel entry due at its end.
                if pending {
                    e.epoch += 1;
                }
                e.state = State::InFlight {
                    epoch,
                    released: true,
                };
            }
            State::Wheel { since, .. } => {
                if pending || e.epoch != since {
                    self.ready_again(&Arc::from(name), false, &mut fx);
                } else {
                    self.entries.remove(name);
                }
            }
        }
        fx
    }

    /// Something the ring cannot name changed: reseed on the next pop.
    pub fn set_dirty(&mut self) {
        self.seed.dirty = true;
    }

    /// What a pop should do: reseed when due (the ring is cold, dirty, past its `floor`, in
    /// the middle of a walk, or unregistered with marks), else take up to `k` READY
    /// partitions.
    pub fn poll(&mut self, k: usize, now: Instant, floor: Duration) -> Poll {
        self.last_served = now;
        let s = &self.seed;
        let due = s.at.is_none_or(|at| now >= at + floor)
            || s.dirty
            || s.resume_after.is_some()
            || (!s.registered && s.marked);
        if due && !s.reseeding {
            let after_id = self.seed.resume_after;
            self.seed.reseeding = true;
            self.seed.dirty = false;
            self.seed.marked = false;
            return Poll::Reseed { after_id };
        }
        if self.seed.registered {
            let taken = self.take(k);
            if !taken.is_empty() {
                return Poll::Candidates(taken);
            }
        }
        if self.seed.reseeding || self.in_flight > 0 {
            Poll::Busy
        } else {
            Poll::Empty
        }
    }

    fn take(&mut self, k: usize) -> Vec<(Arc<str>, u64)> {
        let mut taken = Vec::new();
        while taken.len() < k {
            let Some(name) = self.ready.pop_front() else {
                break;
            };
            let Some(e) = self.entries.get_mut(&name) else {
                continue;
            };
            if e.state != State::Ready {
                continue;
            }
            e.state = State::InFlight {
                epoch: e.epoch,
                released: false,
            };
            taken.push((name, e.epoch));
        }
        self.in_flight += taken.len();
        taken
    }

    /// A claim's report on the candidates it was handed: the verdict of each it evaluated
    /// (`verdict(name)`); the others go back to the front of the ready list.
    pub fn check_in(
        &mut self,
        taken: &[(Arc<str>, u64)],
        verdict: impl Fn(&str) -> Option<Verdict>,
        now: Instant,
    ) -> Effect {
        let mut fx = Effect::default();
        let mut unevaluated = Vec::new();
        for (name, _) in taken {
            let Some(e) = self.entries.get_mut(name) else {
                continue;
            };
            let State::InFlight { epoch, released } = e.state else {
                continue;
            };
            self.in_flight -= 1;
            let changed = e.epoch != epoch;
            let ready_if = |yes: bool| if yes { Next::Ready } else { Next::Idle };
            let next = match verdict(name) {
                None => {
                    unevaluated.push(name.clone());
                    continue;
                }
                Some(Verdict::Took {
                    lease_until: Some(end),
                    ..
                }) => Next::Wheel(end.min(now + TOOK_REVISIT_CAP).max(now + MIN_REVISIT)),
                Some(Verdict::Took {
                    lease_until: None,
                    more_behind,
                }) => ready_if(more_behind || changed),
                Some(Verdict::Empty | Verdict::Gone) => ready_if(changed),
                Some(Verdict::Leased { .. }) if released => Next::Ready,
                // Only locked: claimable again as soon as the lock goes, which nothing will
                // announce. READY for the next pop that comes, without waking parked pops
                // (they would only meet the lock again).
                Some(Verdict::Leased { until }) if until <= now => Next::ReadyQuietly,
                Some(Verdict::Leased { until }) => {
                    Next::Wheel((until + HORIZON_SLACK).max(now + MIN_REVISIT))
                }
            };
            self.settle(name, next, &mut fx);
        }
        for name in unevaluated.into_iter().rev() {
            self.ready_again(&name, true, &mut fx);
        }
        fx
    }

    /// Candidates whose claim never reported (it failed, or the pop went away): READY again,
    /// at the front.
    pub fn requeue(&mut self, taken: &[(Arc<str>, u64)]) -> Effect {
        let mut fx = Effect::default();
        for (name, _) in taken.iter().rev() {
            if let Some(e) = self.entries.get(name) {
                if matches!(e.state, State::InFlight { .. }) {
                    self.in_flight -= 1;
                    self.ready_again(name, true, &mut fx);
                }
            }
        }
        fx
    }

    /// A reseed page: each pending partition, with the end of its live lease if it has one.
    /// `registered`: the group is registered on the queue; `next_after`: the page was full and
    /// the walk continues after that id.
    pub fn reseeded(
        &mut self,
        rows: &[(Arc<str>, Option<Instant>)],
        registered: bool,
        next_after: Option<i64>,
        now: Instant,
    ) -> Effect {
        let mut fx = Effect::default();
        for (name, until) in rows {
            match (self.entries.get_mut(name), until) {
                (None, None) => self.insert_ready(name, &mut fx),
                (None, Some(until)) => {
                    let at = (*until + HORIZON_SLACK).max(now + MIN_REVISIT);
                    self.entries.insert(
                        name.clone(),
                        Entry {
                            state: State::Wheel { at, since: 0 },
                            epoch: 0,
                        },
                    );
                    self.wheel.push(Reverse((at, name.clone())));
                    fx.schedule(at);
                }
                (Some(e), None) => match e.state {
                    State::Wheel { .. } => self.ready_again(name, false, &mut fx),
                    State::InFlight { .. } => e.epoch += 1,
                    State::Ready => {}
                },
                (Some(_), Some(_)) => {}
            }
        }
        self.seed.reseeding = false;
        self.seed.registered = registered;
        self.seed.resume_after = next_after;
        if next_after.is_none() {
            self.seed.at = Some(now);
        }
        fx
    }

    /// A reseed that did not finish: the next pop tries again.
    pub fn reseed_failed(&mut self) {
        self.seed.reseeding = false;
        self.seed.dirty = true;
    }

    /// Readies every wheel entry due by `now`; answers the effect and the next due instant.
    pub fn promote_due(&mut self, now: Instant) -> (Effect, Option<Instant>) {
        let mut fx = Effect::default();
        while let Some(Reverse((at, _))) = self.wheel.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, name))) = self.wheel.pop() else {
                break;
            };
            let Some(e) = self.entries.get_mut(&name) else {
                continue;
            };
            if matches!(e.state, State::Wheel { at: due, .. } if due == at) {
                self.ready_again(&name, false, &mut fx);
            }
        }
        (fx, self.wheel.peek().map(|Reverse((at, _))| *at))
    }

    fn insert_ready(&mut self, name: &str, fx: &mut Effect) {
        let name: Arc<str> = Arc::from(name);
        self.entries.insert(
            name.clone(),
            Entry {
                state: State::Ready,
                epoch: 0,
            },
        );
        self.ready.push_back(name);
        fx.ready();
    }

    /// Puts an existing entry back in the ready list, at the front (it was taken first) or at
    /// the back (its turn comes again).
    fn ready_again(&mut self, name: &Arc<str>, front: bool, fx: &mut Effect) {
        if let Some(e) = self.entries.get_mut(name) {
            e.state = State::Ready;
            if front {
                self.ready.push_front(name.clone());
            } else {
                self.ready.push_back(name.clone());
            }
            fx.ready();
        }
    }

    /// Applies a claim's outcome to an entry that was in flight.
    fn settle(&mut self, name: &Arc<str>, next: Next, fx: &mut Effect) {
        match next {
            Next::Idle => {
                self.entries.remove(name);
            }
            Next::Ready => self.ready_again(name, false, fx),
            Next::ReadyQuietly => self.ready_again(name, false, &mut Effect::default()),
            Next::Wheel(at) => {
                if let Some(e) = self.entries.get_mut(name) {
                    e.state = State::Wheel { at, since: e.epoch };
                    self.wheel.push(Reverse((at, name.clone())));
                    fx.schedule(at);
                }
            }
        }
    }
}

/// Where a claimed partition goes after its verdict.
enum Next {
    Idle,
    Ready,
    /// READY, but nobody is told.
    ReadyQuietly,
    Wheel(Instant),
}
