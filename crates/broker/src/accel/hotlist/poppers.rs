//! How many pops consult one ring at once, recently (docs/engine.md §7, "for pop sizing"): the
//! number of consumers sharing a (queue, group), which the pop autopilot divides the ring's
//! ready partitions by. Consumers have no identity on the wire, so it counts pops in flight
//! (from arrival to answer, parked long-polls included) and keeps the highest count seen over
//! the last [`DWELL`]: a consumer between its pop and its ack is still a consumer, and under a
//! pop-then-ack loop every consumer is in a pop at some moment of a short window.
//!
//! A plain counter (no lock, no clock of its own); the ring wraps it in a mutex.

use std::time::Duration;

use tokio::time::Instant;

/// How long a peak count of pops is remembered.
pub const DWELL: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct Poppers {
    /// Pops in flight now.
    now: usize,
    /// The highest `now` since `since`.
    peak: usize,
    since: Instant,
}

impl Poppers {
    pub fn new(now: Instant) -> Self {
        Poppers {
            now: 0,
            peak: 0,
            since: now,
        }
    }

    /// A pop arrived.
    pub fn enter(&mut self, at: Instant) {
        self.roll(at);
        self.now += 1;
        self.peak = self.peak.max(self.now);
    }

    /// A pop answered (or went away).
    pub fn leave(&mut self) {
        self.now = self.now.saturating_sub(1);
    }

    /// Consumers of the ring, at least one: the most pops in flight at once over the last
    /// [`DWELL`] or so (between one and two dwells back), or now if more.
    pub fn recent(&mut self, at: Instant) -> usize {
        self.roll(at);
        self.peak.max(self.now).max(1)
    }

    /// Starts a new window once the current one is a dwell old; the old window's peak is
    /// carried into the new one only as far as pops are still in flight.
    fn roll(&mut self, at: Instant) {
        if at.duration_since(self.since) >= DWELL {
            self.peak = self.now;
            self.since = at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_of_a_dwell_counts_consumers_between_their_pops() {
        let t0 = Instant::now();
        let mut p = Poppers::new(t0);
        assert_eq!(p.recent(t0), 1, "never zero");
        for _ in 0..4 {
            p.enter(t0);
        }
        for _ in 0..3 {
            p.leave();
        }
        let soon = t0 + DWELL / 2;
        assert_eq!(p.recent(soon), 4, "three are acking, still consumers");
        p.enter(soon);
        assert_eq!(p.recent(soon), 4);
        let later = t0 + DWELL;
        assert_eq!(
            p.recent(later),
            2,
            "a new window starts from those in flight"
        );
        p.leave();
        p.leave();
        p.leave();
        assert_eq!(p.recent(later + DWELL), 1, "no underflow");
    }
}
