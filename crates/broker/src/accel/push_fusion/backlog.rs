//! How far push fusion is behind: the bytes handed to it and not yet settled, and the rate at
//! which it settles them while it has work. From the two, [`Backlog::expected_wait`] tells
//! how long a push arriving now would wait (Little's law), or how long the work in hand has
//! made no progress, whichever is longer; the push door (`engine/push/door.rs`) refuses
//! pushes whose wait would pass their budget.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The settle rate is sampled over windows at least this long.
const WINDOW: Duration = Duration::from_millis(100);

#[derive(Default)]
pub struct Backlog {
    pending: AtomicUsize,
    rate: Mutex<Rate>,
}

#[derive(Default)]
struct Rate {
    /// Settled bytes per second, smoothed; 0 until first measured.
    per_s: f64,
    window_start: Option<Instant>,
    window_bytes: usize,
    /// Since when the fusion has held work without settling any (the later of the last
    /// settle and the moment work arrived at an idle fusion).
    progress_at: Option<Instant>,
}

impl Backlog {
    /// `bytes` were handed to fusion.
    pub fn arrived(&self, bytes: usize) {
        if self.pending.fetch_add(bytes, Relaxed) == 0 {
            let mut r = self.lock();
            let now = Instant::now();
            r.progress_at = Some(now);
            r.window_start = Some(now);
            r.window_bytes = 0;
        }
    }

    /// `bytes` handed to fusion settled (stored, refused or failed).
    pub fn settled(&self, bytes: usize) {
        let left = self.pending.fetch_sub(bytes, Relaxed).saturating_sub(bytes);
        let now = Instant::now();
        let mut r = self.lock();
        r.progress_at = Some(now);
        r.window_bytes += bytes;
        let start = *r.window_start.get_or_insert(now);
        let spent = now.duration_since(start);
        if spent >= WINDOW {
            let sample = r.window_bytes as f64 / spent.as_secs_f64();
            r.per_s = if r.per_s > 0.0 {
                0.5 * r.per_s + 0.5 * sample
            } else {
                sample
            };
            r.window_start = Some(now);
            r.window_bytes = 0;
        }
        if left == 0 {
            r.window_start = None;
        }
    }

    /// How long `incoming` more bytes would wait to be settled, by what is pending and the
    /// settle rate, or the time the work in hand has gone without progress if that is longer.
    /// Zero while nothing is pending.
    pub fn expected_wait(&self, incoming: usize) -> Duration {
        let pending = self.pending.load(Relaxed);
        if pending == 0 {
            return Duration::ZERO;
        }
        let r = self.lock();
        let stalled = r.progress_at.map_or(Duration::ZERO, |t| t.elapsed());
        if r.per_s <= 0.0 {
            return stalled;
        }
        let queued = Duration::from_secs_f64((pending + incoming) as f64 / r.per_s);
        queued.max(stalled)
    }

    fn lock(&self) -> MutexGuard<'_, Rate> {
        self.rate.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_pending_waits_nothing() {
        let b = Backlog::default();
        b.arrived(100);
        b.settled(100);
        assert_eq!(b.expected_wait(1 << 20), Duration::ZERO);
    }

    #[test]
    fn work_without_progress_waits_as_long_as_it_has_stalled() {
        let b = Backlog::default();
        b.arrived(100);
        std::thread::sleep(Duration::from_millis(30));
        assert!(b.expected_wait(0) >= Duration::from_millis(30));
    }

    #[test]
    fn the_wait_is_the_backlog_over_the_settle_rate() {
        let b = Backlog::default();
        b.arrived(10_000);
        std::thread::sleep(WINDOW);
        b.settled(5_000); // about 50 000 B/s
        let wait = b.expected_wait(20_000); // 25 000 B pending after it
        assert!(
            wait >= Duration::from_millis(300) && wait <= Duration::from_millis(600),
            "{wait:?}"
        );
    }
}
