//! What the pop path remembers between requests: the minimum pop wait each queue configured
//! (learned from claim answers) and the per-queue delivery metrics of `/metrics`. The engine
//! reads PostgreSQL and feeds these; nothing here touches the database. (The pop maintenance
//! flag lives in `accel/maintenance.rs`, beside the push flag it is read with.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Per-broker pop state: the learned minimum pop waits, the long-poll's counters and the
/// per-queue delivery metrics.
#[derive(Default)]
pub struct PopCache {
    pub min_wait: MinPopWait,
    pub stats: PopStats,
    pub deliveries: Deliveries,
}

impl PopCache {
    /// Drops what this broker remembers of a deleted queue, so a stream of created and deleted
    /// names leaves nothing behind.
    pub fn forget(&self, queue: &str) {
        self.deliveries.forget(queue);
        self.min_wait.learn(queue, 0);
    }

    /// The pop path's counters and per-queue deliveries, for the `pop` section of `/metrics`
    /// (rendered by the http floor).
    pub fn metrics(&self) -> PopSnapshot {
        PopSnapshot {
            hint_claims: self.stats.hint_claims.load(Relaxed),
            hint_fallthroughs: self.stats.hint_fallthroughs.load(Relaxed),
            deadline_margin_skips: self.stats.deadline_margin_skips.load(Relaxed),
            queues: self.deliveries.snapshot(),
        }
    }
}

/// What [`PopCache::metrics`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopSnapshot {
    pub hint_claims: u64,
    pub hint_fallthroughs: u64,
    pub deadline_margin_skips: u64,
    /// Per queue that delivered since start (and was not deleted here), by name.
    pub queues: Vec<(String, QueueDeliveries)>,
}

/// How woken pops were scheduled, so the cheaper paths can be seen working.
#[derive(Default)]
pub struct PopStats {
    /// Woken wildcard pops served from their pushed-partition hints.
    pub hint_claims: AtomicU64,
    /// Hinted claims that delivered nothing and fell through to the wildcard scan.
    pub hint_fallthroughs: AtomicU64,
    /// Waiting pops that answered 204 instead of starting a claim inside the deadline margin.
    pub deadline_margin_skips: AtomicU64,
}

/// Per-queue delivery metrics (docs/spec/life-of-a-pop.md Step 7): answers and messages delivered,
/// and the delivery lag, i.e. how long the oldest message of an answer waited since its
/// segment was written (last answer's and the largest seen).
#[derive(Default)]
pub struct Deliveries {
    by_queue: Mutex<HashMap<String, QueueDeliveries>>,
}

/// One queue's deliveries: answers, messages, and the lag of the last and the slowest answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDeliveries {
    pub pops: u64,
    pub messages: u64,
    pub last_lag_ms: u64,
    pub max_lag_ms: u64,
}

/// What one answer delivered per queue: (queue, messages, oldest segment timestamp in µs).
pub struct Delivered(pub Vec<(String, u64, i64)>);

impl Deliveries {
    pub fn record(&self, delivered: Delivered, now_us: i64) {
        let mut map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        for (queue, messages, oldest_us) in delivered.0 {
            let lag_ms = u64::try_from(now_us.saturating_sub(oldest_us) / 1000).unwrap_or(0);
            let q = map.entry(queue).or_default();
            q.pops += 1;
            q.messages += messages;
            q.last_lag_ms = lag_ms;
            q.max_lag_ms = q.max_lag_ms.max(lag_ms);
        }
    }

    pub fn forget(&self, queue: &str) {
        let mut map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(queue);
    }

    pub fn snapshot(&self) -> Vec<(String, QueueDeliveries)> {
        let map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut queues: Vec<_> = map.iter().map(|(q, d)| (q.clone(), *d)).collect();
        queues.sort_by(|a, b| a.0.cmp(&b.0));
        queues
    }
}

/// `min_pop_wait_time` per queue, learned from the claims' answers. The relaxed flag stays
/// false on a broker where no queue ever configured it, so the default path pays one load.
#[derive(Default)]
pub struct MinPopWait {
    any: AtomicBool,
    by_queue: Mutex<HashMap<String, u64>>,
}

impl MinPopWait {
    pub fn window(&self, queue: &str) -> Option<Duration> {
        if !self.any.load(Relaxed) {
            return None;
        }
        let map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        map.get(queue).map(|&ms| Duration::from_millis(ms))
    }

    pub fn learn(&self, queue: &str, ms: i64) {
        let ms = u64::try_from(ms).unwrap_or(0);
        if ms == 0 && !self.any.load(Relaxed) {
            return;
        }
        let mut map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        if ms == 0 {
            map.remove(queue);
        } else {
            map.insert(queue.to_string(), ms);
            self.any.store(true, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_wait_is_off_until_some_queue_configures_it() {
        let w = MinPopWait::default();
        w.learn("q", 0);
        assert!(!w.any.load(Relaxed));
        assert_eq!(w.window("q"), None);
        w.learn("q", 250);
        assert_eq!(w.window("q"), Some(Duration::from_millis(250)));
        assert_eq!(w.window("other"), None);
        w.learn("q", 0);
        assert_eq!(w.window("q"), None);
    }
}
