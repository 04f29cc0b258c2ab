//! Rate limiting for the error logs written per request or per flush. During a database outage
//! every request fails with the same error, and logging each one buried the log (60 000 lines
//! in 90 s). Each call site owns a [`LogLimit`]; an identical text is logged at most once per
//! window, and the line that ends a quiet window says how many repeats it swallowed. Distinct
//! texts are limited separately, so a new error is never hidden behind an old one.
//!
//! Also the [`Tally`] behind the periodic summaries of hot paths (push and ack fusion's
//! coalescing lines): counts are summed between lines, and one line is written per window.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The window of the call sites that log per request or per flush.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// Distinct texts remembered per call site; beyond it the oldest is forgotten (and may then be
/// logged early), which bounds the memory arbitrary error texts can take.
const MAX_TEXTS: usize = 64;

/// One call site's memory of what it logged recently.
pub struct LogLimit {
    window: Duration,
    seen: Mutex<Vec<Seen>>,
}

struct Seen {
    key: u64,
    logged_at: Instant,
    suppressed: u64,
}

impl LogLimit {
    pub const fn new(window: Duration) -> Self {
        LogLimit {
            window,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// Whether `text` is to be logged now: `Some(n)` with the `n` repeats suppressed since it
    /// was last logged, `None` to stay quiet.
    pub fn admit(&self, text: &str) -> Option<u64> {
        self.admit_at(text, Instant::now())
    }

    fn admit_at(&self, text: &str, now: Instant) -> Option<u64> {
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let key = hasher.finish();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = seen.iter_mut().find(|s| s.key == key) {
            if now.saturating_duration_since(entry.logged_at) < self.window {
                entry.suppressed += 1;
                return None;
            }
            entry.logged_at = now;
            return Some(std::mem::take(&mut entry.suppressed));
        }
        if seen.len() >= MAX_TEXTS {
            if let Some(oldest) = (0..seen.len()).min_by_key(|&i| seen[i].logged_at) {
                seen.swap_remove(oldest);
            }
        }
        seen.push(Seen {
            key,
            logged_at: now,
            suppressed: 0,
        });
        Some(0)
    }
}

/// `N` counters summed between the summary lines of one call site, one line per window.
pub struct Tally<const N: usize> {
    window: Duration,
    counts: [AtomicU64; N],
    since: Mutex<Instant>,
}

impl<const N: usize> Tally<N> {
    pub fn new(window: Duration) -> Self {
        Tally {
            window,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            since: Mutex::new(Instant::now()),
        }
    }

    /// Adds `deltas`; once per window, the sums since the last summary and the time they
    /// cover (then counting starts again), else `None`.
    pub fn add(&self, deltas: [u64; N]) -> Option<([u64; N], Duration)> {
        self.add_at(deltas, Instant::now())
    }

    fn add_at(&self, deltas: [u64; N], now: Instant) -> Option<([u64; N], Duration)> {
        for (count, delta) in self.counts.iter().zip(deltas) {
            count.fetch_add(delta, Relaxed);
        }
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(*since);
        if elapsed < self.window {
            return None;
        }
        *since = now;
        drop(since);
        Some((
            std::array::from_fn(|i| self.counts[i].swap(0, Relaxed)),
            elapsed,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_reports_its_sums_once_per_window() {
        let tally = Tally::<2>::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(tally.add_at([1, 5], t0), None);
        assert_eq!(tally.add_at([2, 5], t0 + Duration::from_secs(9)), None);
        let (sums, elapsed) = tally
            .add_at([3, 5], t0 + Duration::from_secs(10))
            .expect("a summary");
        assert_eq!(sums, [6, 15]);
        assert!(elapsed >= Duration::from_secs(10));
        assert_eq!(tally.add_at([1, 1], t0 + Duration::from_secs(11)), None);
        let (sums, _) = tally
            .add_at([0, 0], t0 + Duration::from_secs(21))
            .expect("the next summary");
        assert_eq!(sums, [1, 1], "counting started again");
    }

    #[test]
    fn repeats_are_counted_and_logged_once_per_window() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.admit_at("db down", t0), Some(0));
        for s in 1..=5 {
            assert_eq!(limit.admit_at("db down", t0 + Duration::from_secs(s)), None);
        }
        // Another text is not hidden behind the first one.
        assert_eq!(
            limit.admit_at("other", t0 + Duration::from_secs(1)),
            Some(0)
        );
        assert_eq!(
            limit.admit_at("db down", t0 + Duration::from_secs(10)),
            Some(5)
        );
        assert_eq!(
            limit.admit_at("db down", t0 + Duration::from_secs(11)),
            None
        );
    }

    #[test]
    fn memory_is_bounded_by_distinct_texts() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for i in 0..(MAX_TEXTS * 3) {
            assert_eq!(limit.admit_at(&format!("error {i}"), t0), Some(0));
        }
        assert_eq!(limit.seen.lock().unwrap().len(), MAX_TEXTS);
    }
}
