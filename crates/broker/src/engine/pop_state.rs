//! What the pop path learns and counts in memory, per queue: the minimum pop wait each
//! queue configured (learned from claim answers) and the delivery metrics of `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use crate::store::pop::PopAnswer;

/// Per-queue delivery metrics (spec "Life of a pop", step 7): answers and messages delivered,
/// and the delivery lag, i.e. how long the oldest message of an answer waited since its
/// segment was written (last answer's and the largest seen).
#[derive(Default)]
pub struct Deliveries {
    by_queue: Mutex<HashMap<String, QueueDeliveries>>,
}

#[derive(Default)]
struct QueueDeliveries {
    pops: u64,
    messages: u64,
    last_lag_ms: u64,
    max_lag_ms: u64,
}

/// What one answer delivered per queue: (queue, messages, oldest segment timestamp in µs).
pub struct Delivered(Vec<(String, u64, i64)>);

impl Delivered {
    pub fn of(answer: &PopAnswer) -> Self {
        let mut per_queue: Vec<(String, u64, i64)> = Vec::new();
        for part in &answer.partitions {
            let taken: u64 = part
                .segments
                .iter()
                .map(|s| u64::try_from(s.take).unwrap_or(0))
                .sum();
            let oldest = part.segments.iter().map(|s| s.created_at).min();
            let (Some(oldest), true) = (oldest, taken > 0) else {
                continue;
            };
            match per_queue.iter_mut().find(|(q, ..)| *q == part.queue) {
                Some(entry) => {
                    entry.1 += taken;
                    entry.2 = entry.2.min(oldest);
                }
                None => per_queue.push((part.queue.clone(), taken, oldest)),
            }
        }
        Delivered(per_queue)
    }
}

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

    pub fn snapshot(&self) -> Value {
        let map = self.by_queue.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .map(|(queue, q)| {
                let v = json!({
                    "pops": q.pops,
                    "messages": q.messages,
                    "lastLagMs": q.last_lag_ms,
                    "maxLagMs": q.max_lag_ms,
                });
                (queue.clone(), v)
            })
            .collect::<serde_json::Map<String, Value>>()
            .into()
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

    #[test]
    fn deliveries_count_messages_and_the_oldest_wait_per_queue() {
        use crate::store::pop::{ClaimedPartition, ClaimedSegment};
        let part = |queue: &str, created: &[(i32, i64)]| ClaimedPartition {
            partition: "p".into(),
            partition_id: 1,
            queue: queue.into(),
            delivery_attempt: 1,
            segments: created
                .iter()
                .map(|&(take, created_at)| ClaimedSegment {
                    base: 0,
                    start_idx: 0,
                    take,
                    msg_count: take,
                    created_at,
                })
                .collect(),
        };
        let answer = PopAnswer {
            partitions: vec![
                part("a", &[(2, 5_000_000), (3, 6_000_000)]),
                part("b", &[(1, 9_000_000)]),
                part("a", &[(4, 2_000_000)]),
            ],
            min_pop_wait_ms: None,
            blobs: Vec::new(),
        };
        let d = Deliveries::default();
        d.record(Delivered::of(&answer), 10_000_000);
        d.record(Delivered::of(&answer), 10_500_000);
        let v = d.snapshot();
        assert_eq!(
            v["a"],
            json!({"pops": 2, "messages": 18, "lastLagMs": 8500, "maxLagMs": 8500})
        );
        assert_eq!(
            v["b"],
            json!({"pops": 2, "messages": 2, "lastLagMs": 1500, "maxLagMs": 1500})
        );
    }
}
