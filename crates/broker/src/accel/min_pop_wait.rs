//! The minimum pop wait each queue configured (`min_pop_wait_time`, docs/engine.md §5.5),
//! learned from the claim answers. A relaxed flag stays false on a broker where no queue ever
//! configured it, so the default pop path pays one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// `min_pop_wait_time` per queue, as last learned.
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
