//! Which queues encrypt their payloads, as this broker last learned it (from `/configure`
//! answers and from the push SQL refusing a plaintext segment for an encrypted queue). A push
//! seals the payloads of the queues named here before they leave the broker.
//!
//! Stale in both directions, harmlessly: a queue missing here costs one refused round (the
//! push SQL, which reads the queue row under the partition lock, is the authority and never
//! stores plaintext for an encrypted queue); a queue listed here after its encryption was
//! turned off gets envelopes that every reader still opens. Entries age out after
//! [`REMEMBER`], so a queue turned off through another broker stops being sealed here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a queue learned as encrypted is sealed without asking again.
pub const REMEMBER: Duration = Duration::from_secs(60);

/// The encrypted queues this broker knows of, with when it learned each.
#[derive(Default)]
pub struct EncryptedQueues {
    learned: Mutex<HashMap<String, Instant>>,
}

impl EncryptedQueues {
    /// Whether pushes to `queue` are sealed.
    pub fn contains(&self, queue: &str) -> bool {
        let learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        learned.get(queue).is_some_and(|at| at.elapsed() < REMEMBER)
    }

    /// Records what the database said of `queue`; expired entries go on the way.
    pub fn learn(&self, queue: &str, encrypted: bool) {
        let mut learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        learned.retain(|_, at| at.elapsed() < REMEMBER);
        if encrypted {
            learned.insert(queue.to_string(), Instant::now());
        } else {
            learned.remove(queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_and_forgets() {
        let q = EncryptedQueues::default();
        assert!(!q.contains("a"));
        q.learn("a", true);
        assert!(q.contains("a"));
        assert!(!q.contains("b"));
        q.learn("a", false);
        assert!(!q.contains("a"));
    }
}
