//! One flight for an expensive read that many callers want at once (the queue sample of
//! `/metrics/prometheus`, docs/wire.md §15): per key, at most one read runs at a time; a caller
//! that arrives while one runs waits for it and takes its answer, and an answer serves every
//! caller for `ttl` after its read started. So a loop of callers costs one read per `ttl` (and
//! per key), however many there are and however fast they ask. Nothing here reaches the
//! database: the caller passes the read.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most keys held at once; past it the held answers are forgotten (they are only a cache).
const MAX_KEYS: usize = 1024;

/// Per key, the last answer and the lock its next read runs under.
pub struct OneFlight<K, V> {
    ttl: Duration,
    slots: Mutex<HashMap<K, Arc<Slot<V>>>>,
}

type Slot<V> = tokio::sync::Mutex<Option<Taken<V>>>;

/// An answer, when its read started and when it ended.
struct Taken<V> {
    started: Instant,
    ended: Instant,
    value: V,
}

impl<K: Eq + Hash + Clone, V: Clone> OneFlight<K, V> {
    pub fn new(ttl: Duration) -> Self {
        OneFlight {
            ttl,
            slots: Mutex::default(),
        }
    }

    /// The answer for `key`: the held one when its read started less than `ttl` ago or ended
    /// after this call began (the flight in progress when we came), else the answer of `read`, run now while the
    /// key's other callers wait. Cancel-safe: a caller that goes away mid-read leaves the
    /// lock to the next one, which reads again.
    pub async fn get<F, Fut>(&self, key: &K, read: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let asked = Instant::now();
        let slot = self.slot(key);
        let mut held = slot.lock().await;
        if let Some(taken) = held.as_ref() {
            if taken.ended >= asked || taken.started.elapsed() < self.ttl {
                return taken.value.clone();
            }
        }
        let started = Instant::now();
        let value = read().await;
        *held = Some(Taken {
            started,
            ended: Instant::now(),
            value: value.clone(),
        });
        value
    }

    fn slot(&self, key: &K) -> Arc<Slot<V>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if !slots.contains_key(key) && slots.len() >= MAX_KEYS {
            slots.clear();
        }
        slots.entry(key.clone()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use super::*;

    #[tokio::test]
    async fn concurrent_callers_share_one_read_and_ttl_zero_still_coalesces() {
        let flight = Arc::new(OneFlight::<&str, usize>::new(Duration::ZERO));
        let reads = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let (flight, reads) = (flight.clone(), reads.clone());
                tokio::spawn(async move {
                    flight
                        .get(&"k", || async {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            reads.fetch_add(1, SeqCst) + 1
                        })
                        .await
                })
            })
            .collect();
        for c in callers {
            assert_eq!(c.await.expect("caller"), 1);
        }
        assert_eq!(reads.load(SeqCst), 1);
        // Later, with a zero ttl, a new caller reads again.
        let again = flight.get(&"k", || async { 2 }).await;
        assert_eq!(again, 2);
    }

    #[tokio::test]
    async fn an_answer_serves_its_ttl_and_keys_are_apart() {
        let flight = OneFlight::<&str, u32>::new(Duration::from_secs(60));
        assert_eq!(flight.get(&"a", || async { 1 }).await, 1);
        assert_eq!(flight.get(&"a", || async { 2 }).await, 1, "held");
        assert_eq!(flight.get(&"b", || async { 3 }).await, 3, "another key");
    }
}
