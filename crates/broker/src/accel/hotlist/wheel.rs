//! The wheel (docs/engine.md §7, §8.1): the broker's one timer over every ring's revisit
//! instants (a lease's end, a `windowBuffer` or `delayedProcessing` horizon). When one comes,
//! the ring readies the partition and the queue's wake gate opens, so a parked pop delivers
//! on time without re-polling PostgreSQL. Each ring keeps its own min-heap of entries; the
//! timer only holds, per ring, the earliest instant it was told about (stale instants cost a
//! spurious look, nothing more). It sleeps until the earliest instant, so an idle broker's
//! wheel costs nothing but a liveness check per second.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A ring's address: (queue, group).
pub type RingKey = (Arc<str>, Arc<str>);

/// The pending revisits of all rings, earliest first.
#[derive(Default)]
pub struct Wheel {
    heap: Mutex<BinaryHeap<Reverse<(Instant, RingKey)>>>,
    /// Rung when an instant earlier than every other is registered.
    earlier: Notify,
}

/// How long the timer task holds the broker between looks at whether it still exists.
pub const LIVENESS: Duration = Duration::from_secs(1);

impl Wheel {
    fn lock(&self) -> MutexGuard<'_, BinaryHeap<Reverse<(Instant, RingKey)>>> {
        self.heap.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for a look at ring `key` at `at`.
    pub fn register(&self, at: Instant, key: RingKey) {
        let mut heap = self.lock();
        let earliest = heap.peek().is_none_or(|Reverse((first, _))| at < *first);
        heap.push(Reverse((at, key)));
        drop(heap);
        if earliest {
            self.earlier.notify_one();
        }
    }

    /// The rings whose instant has come by `now`.
    pub fn due(&self, now: Instant) -> Vec<RingKey> {
        let mut heap = self.lock();
        let mut due = Vec::new();
        while heap.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            if let Some(Reverse((_, key))) = heap.pop() {
                due.push(key);
            }
        }
        due
    }

    /// Sleeps until the earliest registered instant, `until`, or an earlier registration,
    /// whichever comes first.
    pub async fn sleep(&self, until: Instant) {
        // `notify_one` keeps its permit when nobody waits, so a registration racing this
        // read still ends the sleep.
        let earlier = self.earlier.notified();
        let next = self.lock().peek().map(|Reverse((at, _))| *at);
        let wake_at = next.map_or(until, |n| n.min(until));
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = earlier => {}
        }
    }
}
