//! Admission (docs/engine.md §9): the one limiter in front of the connection pool. Every
//! PostgreSQL transaction of a push, a pop claim or an ack takes a permit first and a pooled
//! connection second, and gives both back when it ends; a parked pop holds neither, and a pop
//! the hot-list ring says is empty never asks for one.
//!
//! Permits are grouped in lanes. Each lane has a cap below the budget (when the budget is at
//! least two), so no lane can hold every permit, and a floor: permits no other lane may take
//! while this lane holds fewer, so a busy consumer fleet (acks and pops, whose caps together
//! exceed the budget) cannot starve producers, nor a push storm the acks. A freed permit goes
//! to the waiting lane of the highest priority that fits (Ack, then Pop, then Push: an ack ends
//! a lease and lets a pop deliver, a pop frees PostgreSQL work that pushes only add to), first
//! come first served within a lane. The push lane's cap is what push fusion's batching feeds on: ready
//! partitions that find no permit wait and coalesce (docs/engine.md §4.3).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// What a permit is for. The order is the wake priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Ack = 0,
    Pop = 1,
    Push = 2,
}

const LANES: [Lane; 3] = [Lane::Ack, Lane::Pop, Lane::Push];

/// The budget and per-lane caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Permits in all lanes together.
    pub budget: usize,
    /// Most permits one lane may hold, by [`Lane`] index.
    pub caps: [usize; 3],
    /// Permits kept for each lane: others may not take the last free ones while it holds
    /// fewer than this.
    pub floors: [usize; 3],
}

impl Limits {
    /// Sized from the pool: the budget leaves an eighth of the pool (at most 16) to the
    /// connections taken without a permit (has-pending probes, the maintenance flag, the
    /// admin routes); acks and pops may each hold three fifths of it, pushes `push_cap`
    /// (`QUEEN_ADMISSION_PUSH_CAP`), and no lane all of it. The push cap is not a share of
    /// the pool: it is the number of push transactions PostgreSQL works on at once, and the
    /// fewer they are the more each bundle carries (docs/engine.md §4.3). Each lane keeps a
    /// floor of a fifth of the budget (the push lane at most its cap), from a budget of 3 up.
    pub fn for_pool(pool_size: usize, push_cap: usize) -> Self {
        let pool = pool_size.max(1);
        let budget = (pool - (pool / 8).min(16)).max(1);
        let most = if budget >= 2 { budget - 1 } else { budget };
        let share = |n: usize| n.clamp(1, most);
        let caps = [
            share(budget * 3 / 5),
            share(budget * 3 / 5),
            share(push_cap),
        ];
        let floor = if budget >= 3 { (budget / 5).max(1) } else { 0 };
        Limits {
            budget,
            caps,
            floors: caps.map(|cap| floor.min(cap)),
        }
    }

    /// Unfilled floors of the lanes other than `lane`: room `lane` must leave free.
    fn kept_for_others(&self, by_lane: &[usize; 3], lane: Lane) -> usize {
        LANES
            .iter()
            .filter(|l| **l != lane)
            .map(|l| self.floors[*l as usize].saturating_sub(by_lane[*l as usize]))
            .sum()
    }
}

/// Cheap to clone: every clone is the same limiter.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    state: Mutex<State>,
    granted: [AtomicU64; 3],
    waited: [AtomicU64; 3],
}

#[derive(Default)]
struct State {
    in_use: usize,
    by_lane: [usize; 3],
    waiters: [VecDeque<oneshot::Sender<Permit>>; 3],
}

/// A held permit; dropping it gives it back (to the next waiter, if any).
pub struct Permit {
    inner: Arc<Inner>,
    lane: Lane,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.release(self.lane);
    }
}

/// What [`Admission::metrics`] reports, per lane in [`Lane`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionSnapshot {
    pub budget: usize,
    pub caps: [usize; 3],
    pub in_use: [usize; 3],
    pub waiting: [usize; 3],
    /// Permits granted since start.
    pub granted: [u64; 3],
    /// Of those, the ones that had to wait.
    pub waited: [u64; 3],
}

impl Admission {
    pub fn new(limits: Limits) -> Self {
        Admission {
            inner: Arc::new(Inner {
                limits,
                state: Mutex::default(),
                granted: Default::default(),
                waited: Default::default(),
            }),
        }
    }

    /// A permit of `lane` if one is free right now and nobody of the lane waits for one.
    pub fn try_acquire(&self, lane: Lane) -> Option<Permit> {
        let mut st = self.inner.lock();
        if !st.waiters[lane as usize].is_empty() || !self.inner.fits(&st, lane) {
            return None;
        }
        Some(self.inner.grant(&mut st, lane))
    }

    /// A permit of `lane`, waiting in line for it. Cancel-safe: a permit granted to a waiter
    /// that went away is handed on.
    pub async fn acquire(&self, lane: Lane) -> Permit {
        let waiting = {
            let mut st = self.inner.lock();
            if st.waiters[lane as usize].is_empty() && self.inner.fits(&st, lane) {
                return self.inner.grant(&mut st, lane);
            }
            let (tx, rx) = oneshot::channel();
            st.waiters[lane as usize].push_back(tx);
            rx
        };
        self.inner.waited[lane as usize].fetch_add(1, Relaxed);
        // The sender lives in the waiter list until it is sent a permit; the limiter outlives
        // this call (we hold it), so the channel cannot close unanswered.
        waiting
            .await
            .expect("admission waiters are answered before they are dropped")
    }

    /// A permit of `lane` if one comes before `until`.
    pub async fn acquire_before(&self, lane: Lane, until: tokio::time::Instant) -> Option<Permit> {
        tokio::time::timeout_at(until, self.acquire(lane))
            .await
            .ok()
    }

    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    pub fn metrics(&self) -> AdmissionSnapshot {
        let st = self.inner.lock();
        AdmissionSnapshot {
            budget: self.inner.limits.budget,
            caps: self.inner.limits.caps,
            in_use: st.by_lane,
            waiting: LANES.map(|l| st.waiters[l as usize].len()),
            granted: LANES.map(|l| self.inner.granted[l as usize].load(Relaxed)),
            waited: LANES.map(|l| self.inner.waited[l as usize].load(Relaxed)),
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Under the budget and the lane's cap, and either within the lane's own floor or
    /// leaving the other lanes' unfilled floors free.
    fn fits(&self, st: &State, lane: Lane) -> bool {
        let l = &self.limits;
        let held = st.by_lane[lane as usize];
        st.in_use < l.budget
            && held < l.caps[lane as usize]
            && (held < l.floors[lane as usize]
                || l.budget - st.in_use > l.kept_for_others(&st.by_lane, lane))
    }

    fn grant(self: &Arc<Self>, st: &mut State, lane: Lane) -> Permit {
        st.in_use += 1;
        st.by_lane[lane as usize] += 1;
        self.granted[lane as usize].fetch_add(1, Relaxed);
        Permit {
            inner: self.clone(),
            lane,
        }
    }

    /// Gives a permit back and hands the freed room to the waiters it now fits, by priority.
    /// Permits are sent outside the lock; one whose waiter has gone comes straight back here
    /// through its `Drop`.
    fn release(self: &Arc<Self>, lane: Lane) {
        let mut handed = Vec::new();
        {
            let mut st = self.lock();
            st.in_use -= 1;
            st.by_lane[lane as usize] -= 1;
            for next in LANES {
                while self.fits(&st, next) {
                    let Some(tx) = st.waiters[next as usize].pop_front() else {
                        break;
                    };
                    if tx.is_closed() {
                        continue;
                    }
                    let permit = self.grant(&mut st, next);
                    handed.push((tx, permit));
                }
            }
        }
        for (tx, permit) in handed {
            let _ = tx.send(permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: usize, caps: [usize; 3]) -> Admission {
        Admission::new(Limits {
            budget,
            caps,
            floors: [0; 3],
        })
    }

    #[test]
    fn sizing_leaves_every_lane_short_of_the_whole_budget() {
        let l = Limits::for_pool(160, 4);
        assert_eq!(l.budget, 144);
        assert_eq!(l.caps, [86, 86, 4]);
        assert_eq!(l.floors, [28, 28, 4]);
        assert!(l.floors.iter().sum::<usize>() <= l.budget);
        let l = Limits::for_pool(2, 4);
        assert_eq!((l.budget, l.caps, l.floors), (2, [1, 1, 1], [0; 3]));
        let l = Limits::for_pool(1, 4);
        assert_eq!((l.budget, l.caps), (1, [1, 1, 1]));
        let l = Limits::for_pool(32, 400);
        assert_eq!((l.budget, l.caps), (28, [16, 16, 27]));
    }

    #[test]
    fn a_lane_stops_at_its_cap_and_the_budget_binds_all() {
        let a = limits(3, [2, 2, 2]);
        let p1 = a.try_acquire(Lane::Pop).expect("first pop");
        let _p2 = a.try_acquire(Lane::Pop).expect("second pop");
        assert!(a.try_acquire(Lane::Pop).is_none(), "pop cap");
        let _k = a.try_acquire(Lane::Ack).expect("ack room left");
        assert!(a.try_acquire(Lane::Push).is_none(), "budget spent");
        drop(p1);
        assert!(a.try_acquire(Lane::Push).is_some());
    }

    #[tokio::test]
    async fn a_freed_permit_goes_to_the_waiting_ack_before_waiting_pops() {
        let a = limits(1, [1, 1, 1]);
        let held = a.try_acquire(Lane::Push).expect("the only permit");
        let (a1, a2) = (a.clone(), a.clone());
        let pop = tokio::spawn(async move { a1.acquire(Lane::Pop).await.lane });
        tokio::task::yield_now().await;
        let ack = tokio::spawn(async move {
            let p = a2.acquire(Lane::Ack).await;
            tokio::task::yield_now().await;
            p.lane
        });
        tokio::task::yield_now().await;
        assert_eq!(a.metrics().waiting, [1, 1, 0]);
        drop(held);
        assert_eq!(ack.await.expect("ack"), Lane::Ack);
        assert_eq!(pop.await.expect("pop"), Lane::Pop);
        assert_eq!(a.metrics().in_use, [0, 0, 0]);
        assert_eq!(a.metrics().waited, [1, 1, 0]);
    }

    /// Acks and pops together may cap above the budget; they still leave the push floor.
    #[test]
    fn acks_and_pops_leave_the_push_floor_free() {
        let a = Admission::new(Limits {
            budget: 6,
            caps: [5, 5, 4],
            floors: [1, 1, 1],
        });
        let mut held = Vec::new();
        while let Some(p) = a.try_acquire(Lane::Ack) {
            held.push(p);
        }
        assert_eq!(held.len(), 4, "acks stop short of the pop and push floors");
        held.push(a.try_acquire(Lane::Pop).expect("the pop floor"));
        assert!(a.try_acquire(Lane::Pop).is_none(), "the push floor is kept");
        assert!(a.try_acquire(Lane::Push).is_some(), "the push floor");
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_does_not_keep_the_permit() {
        let a = limits(1, [1, 1, 1]);
        let held = a.try_acquire(Lane::Pop).expect("the only permit");
        let soon = tokio::time::Instant::now() + std::time::Duration::from_millis(10);
        assert!(a.acquire_before(Lane::Ack, soon).await.is_none());
        drop(held);
        assert!(a.try_acquire(Lane::Push).is_some(), "nobody holds it");
    }
}
