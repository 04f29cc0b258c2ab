//! Intake against drain: how fast this broker takes pushed messages and how fast its pops
//! deliver them, as rates smoothed over short windows from the engine's two message counters.
//! The push door (`engine/push/door.rs`) reads it when the broker is saturated: a broker that
//! takes pushes faster than it can deliver them spends the cores its consumers need on a
//! backlog nobody can drain (issue 36). Like admission it caches nothing PostgreSQL owns.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Rates are sampled over windows at least this long.
const WINDOW: Duration = Duration::from_millis(250);

/// Messages per second taken in and delivered, as last measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub intake: f64,
    pub drain: f64,
}

#[derive(Default)]
pub struct Flow {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last: Option<(Instant, u64, u64)>,
    rates: Rates,
}

impl Flow {
    /// The rates, given the counters' totals now (`pushed`, `delivered`); a window that has
    /// ended is folded in first (half the old estimate, half the window's).
    pub fn rates(&self, pushed: u64, delivered: u64) -> Rates {
        self.rates_at(Instant::now(), pushed, delivered)
    }

    fn rates_at(&self, now: Instant, pushed: u64, delivered: u64) -> Rates {
        let mut st = self.lock();
        let Some((at, p0, d0)) = st.last else {
            st.last = Some((now, pushed, delivered));
            return st.rates;
        };
        let spent = now.duration_since(at);
        if spent >= WINDOW {
            let per_s = |n: u64, n0: u64| n.saturating_sub(n0) as f64 / spent.as_secs_f64();
            // An estimate older than a few windows (the door asks only while saturated) is
            // replaced, not blended.
            let fresh = spent <= 4 * WINDOW;
            let blend = |old: f64, new: f64| if fresh { 0.5 * old + 0.5 * new } else { new };
            st.rates = Rates {
                intake: blend(st.rates.intake, per_s(pushed, p0)),
                drain: blend(st.rates.drain, per_s(delivered, d0)),
            };
            st.last = Some((now, pushed, delivered));
        }
        st.rates
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_the_counters_window_by_window() {
        let flow = Flow::default();
        let t0 = Instant::now();
        assert_eq!(flow.rates_at(t0, 0, 0), Rates::default());
        // Within a window nothing is folded in.
        assert_eq!(flow.rates_at(t0 + WINDOW / 2, 500, 100), Rates::default());
        let r = flow.rates_at(t0 + Duration::from_secs(1), 4_000, 2_000);
        assert_eq!((r.intake, r.drain), (2_000.0, 1_000.0));
        let r = flow.rates_at(t0 + Duration::from_secs(2), 4_000, 4_000);
        assert_eq!((r.intake, r.drain), (1_000.0, 1_500.0));
    }
}
