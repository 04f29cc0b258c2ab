//! Per-queue delivery metrics of `/metrics` (docs/spec/life-of-a-pop.md Step 7): answers and
//! messages delivered, and the delivery lag, i.e. how long the oldest message of an answer
//! waited since its segment was written (the last answer's and the largest seen).

use std::collections::HashMap;
use std::sync::Mutex;

/// Per queue that delivered since start, by name.
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
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delivered(pub Vec<(String, u64, i64)>);

impl Delivered {
    /// Sums an answer's claimed partitions, given as (queue, messages taken, oldest segment
    /// timestamp in µs), per queue; partitions that delivered nothing are left out.
    pub fn per_queue<'a>(parts: impl IntoIterator<Item = (&'a str, u64, Option<i64>)>) -> Self {
        let mut per_queue: Vec<(String, u64, i64)> = Vec::new();
        for (queue, taken, oldest) in parts {
            let (Some(oldest), true) = (oldest, taken > 0) else {
                continue;
            };
            match per_queue.iter_mut().find(|(q, ..)| q == queue) {
                Some(entry) => {
                    entry.1 += taken;
                    entry.2 = entry.2.min(oldest);
                }
                None => per_queue.push((queue.to_string(), taken, oldest)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_count_messages_and_the_oldest_wait_per_queue() {
        let answer = || {
            Delivered::per_queue([
                ("a", 5, Some(5_000_000)),
                ("b", 1, Some(9_000_000)),
                ("a", 4, Some(2_000_000)),
                ("c", 0, None),
            ])
        };
        assert_eq!(
            answer(),
            Delivered(vec![("a".into(), 9, 2_000_000), ("b".into(), 1, 9_000_000)])
        );
        let d = Deliveries::default();
        d.record(answer(), 10_000_000);
        d.record(answer(), 10_500_000);
        let v: HashMap<_, _> = d.snapshot().into_iter().collect();
        let stats = |pops, messages, last_lag_ms, max_lag_ms| QueueDeliveries {
            pops,
            messages,
            last_lag_ms,
            max_lag_ms,
        };
        assert_eq!(v["a"], stats(2, 18, 8500, 8500));
        assert_eq!(v["b"], stats(2, 2, 1500, 1500));
        assert!(!v.contains_key("c"));
    }
}
