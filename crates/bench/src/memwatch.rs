//! The broker's memory over a whole run: its resident set once right after it is ready (idle),
//! and its peak over every scenario, sampled in the background. The per-row peaks of the
//! meter reset `VmHWM` when each row starts, so no single reading holds the run's peak: the
//! watcher keeps the largest `VmRSS` and `VmHWM` it sampled, and the run's peak also folds in
//! every row's own peak (which covers each measured window whole). It also keeps when its
//! largest sample was first seen, so a peak outside every row (an abandoned search attempt, a
//! drain) can be placed against the scenario timestamps of the run's log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;

use crate::procstat;
use crate::report::Row;

/// How often the watcher reads `/proc/<pid>/status`.
const EVERY: Duration = Duration::from_millis(100);
const MIB: f64 = 1024.0 * 1024.0;

/// What the results file and the targets summary report.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct BrokerMemory {
    /// `VmRSS` once, right after the broker answered its health check (for `--url`: when the
    /// bench started).
    pub idle_after_start_mb: Option<f64>,
    /// The largest resident set seen over the whole run.
    pub peak_over_run_mb: Option<f64>,
    /// Seconds from the start of sampling to the first sample that showed the sampled peak
    /// (`VmHWM` is reset per row, so the peak itself came at most one row earlier).
    pub sampled_peak_at_s: Option<f64>,
    pub samples: u64,
    pub sample_every_ms: u64,
}

/// The background sampler of one broker process.
pub struct Watch {
    idle: Option<u64>,
    peak: Arc<AtomicU64>,
    peak_at_ms: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    task: Option<JoinHandle<()>>,
}

impl Watch {
    /// Reads the idle RSS of `pid` now, then samples it until [`Watch::stop`]. Without a pid
    /// (a running broker given without `--broker-pid`) it reports nothing.
    pub fn start(pid: Option<u32>) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let peak_at_ms = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        let task = pid.map(|pid| {
            let (peak, peak_at_ms, samples) = (peak.clone(), peak_at_ms.clone(), samples.clone());
            let started = std::time::Instant::now();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(EVERY);
                loop {
                    tick.tick().await;
                    let seen = procstat::rss_bytes(pid).max(procstat::peak_rss_bytes(pid));
                    if let Some(bytes) = seen {
                        if bytes > peak.fetch_max(bytes, Ordering::Relaxed) {
                            let ms = started.elapsed().as_millis() as u64;
                            peak_at_ms.store(ms, Ordering::Relaxed);
                        }
                        samples.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        });
        Self {
            idle: pid.and_then(procstat::rss_bytes),
            peak,
            peak_at_ms,
            samples,
            task,
        }
    }

    /// Stops sampling; the idle figure and the run's peak (the samples' and `rows`' own).
    pub fn stop(mut self, rows: &[Row]) -> BrokerMemory {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        let sampled = Some(self.peak.load(Ordering::Relaxed))
            .filter(|b| *b > 0)
            .map(|b| b as f64 / MIB);
        BrokerMemory {
            idle_after_start_mb: self.idle.map(|b| b as f64 / MIB),
            peak_over_run_mb: run_peak(sampled, rows),
            sampled_peak_at_s: sampled
                .map(|_| self.peak_at_ms.load(Ordering::Relaxed) as f64 / 1e3),
            samples: self.samples.load(Ordering::Relaxed),
            sample_every_ms: EVERY.as_millis() as u64,
        }
    }
}

/// The largest of the sampled peak and every row's own broker peak.
fn run_peak(sampled: Option<f64>, rows: &[Row]) -> Option<f64> {
    rows.iter()
        .filter_map(|r| r.usage.broker_peak_rss_mb)
        .chain(sampled)
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(peak: Option<f64>) -> Row {
        let mut r = Row::new("push", "bp-1 part-1".into(), "queen-rs");
        r.usage.broker_peak_rss_mb = peak;
        r
    }

    #[test]
    fn the_run_peak_is_the_largest_of_samples_and_rows() {
        let rows = [row(Some(40.0)), row(None), row(Some(75.5))];
        assert_eq!(run_peak(Some(60.0), &rows), Some(75.5));
        assert_eq!(run_peak(Some(90.0), &rows), Some(90.0));
        assert_eq!(run_peak(None, &rows[1..2]), None);
    }

    #[tokio::test]
    async fn watching_this_process_sees_its_memory() {
        let watch = Watch::start(Some(std::process::id()));
        tokio::time::sleep(EVERY * 2).await;
        let m = watch.stop(&[]);
        assert!(m.idle_after_start_mb.unwrap() > 0.0);
        assert!(m.peak_over_run_mb.unwrap() > 0.0);
        assert!(m.samples >= 1);
        assert!(m.sampled_peak_at_s.unwrap() < 1.0, "{m:?}");
        let none = Watch::start(None).stop(&[]);
        assert_eq!((none.idle_after_start_mb, none.samples), (None, 0));
    }
}
