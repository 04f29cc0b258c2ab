//! Rate limiting for the error logs written per request or per flush. During a database outage
//! every request fails with the same error, and logging each one buried the log (60 000 lines
//! in 90 s). Each call site owns a [`LogLimit`]; an identical text is logged at most once per
//! window, and the line that ends a quiet window says how many repeats it swallowed. Distinct
//! texts are limited separately, so a new error is never hidden behind an old one.

use std::hash::{DefaultHasher, Hash, Hasher};
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

#[cfg(test)]
mod tests {
    use super::*;

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
