//! What an e2e producer does when the broker refuses a push for load (`429`, or `503` while
//! it cannot take pushes): it counts the refusal by status and holds its in-flight slot for
//! the answer's `Retry-After` (±20 % jitter, as the official client waits), so a refused
//! producer backs off instead of sending again at once. Also keeps the latency of accepted
//! pushes, from their scheduled instant, for the overload cell's push p99.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::openloop::new_histogram;
use crate::report::Row;

/// The wait when a refusal names none (the official client's base backoff).
const DEFAULT_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait a refusal may ask of a bench producer.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub struct Refusals {
    too_many: AtomicU64,
    unavailable: AtomicU64,
    accepted: Mutex<Histogram<u64>>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            too_many: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            accepted: Mutex::new(new_histogram()),
        }
    }
}

impl Refusals {
    /// Records an accepted push scheduled at `due`.
    pub fn accepted(&self, due: Instant) {
        let us = due.elapsed().as_micros().max(1) as u64;
        let mut h = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record(us);
    }

    /// A failed push: a load refusal is counted and waited out (`Ok`), anything else is the
    /// request's error. `n` spreads the jitter across requests.
    pub async fn back_off(&self, e: queen_client::Error, n: u64) -> Result<(), String> {
        let queen_client::Error::Api {
            status,
            retry_after,
            ..
        } = &e
        else {
            return Err(e.to_string());
        };
        let counter = match status.as_u16() {
            429 => &self.too_many,
            503 => &self.unavailable,
            _ => return Err(e.to_string()),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let wait = retry_after.unwrap_or(DEFAULT_BACKOFF).min(MAX_BACKOFF);
        tokio::time::sleep(wait.mul_f64(jitter(n))).await;
        Ok(())
    }

    /// Forgets the warm-up: counts and latencies start again with the measured window.
    pub fn open_window(&self) {
        self.too_many.store(0, Ordering::Relaxed);
        self.unavailable.store(0, Ordering::Relaxed);
        self.accepted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reset();
    }

    /// Adds the window's refusals and the accepted pushes' p99 to `row`'s extras.
    pub fn report(&self, row: &mut Row) {
        let refused = [
            ("refused_429", &self.too_many),
            ("refused_503", &self.unavailable),
        ];
        for (name, counter) in refused {
            let n = counter.load(Ordering::Relaxed);
            if n > 0 {
                row.extra.insert(name.into(), n as f64);
            }
        }
        let h = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        if !h.is_empty() {
            let p99 = h.value_at_quantile(0.99) as f64 / 1000.0;
            row.extra.insert("push_p99_ms".into(), p99);
        }
    }
}

/// 0.8–1.2, spread over request numbers by the golden ratio.
fn jitter(n: u64) -> f64 {
    let frac = (n as f64 * 0.618_033_988_75).fract();
    0.8 + 0.4 * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_fifth() {
        for n in 0..1000 {
            let j = jitter(n);
            assert!((0.8..=1.2).contains(&j), "{n}: {j}");
        }
    }
}
