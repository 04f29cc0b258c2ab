//! What the two fusions (push fusion, `push_fusion.rs`; ack fusion, `ack_fusion.rs`) share:
//! the choice of a key's shard task, the queue on which their shard tasks hand work out to
//! the engine ([`FusionWork`]: the fusions are called, they never call back), the guard that
//! reports a work item as settled even when it was dropped unsettled, and the shape of a flush
//! that did not commit.

use tokio::sync::mpsc;

/// Why a flush did not commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub error: String,
    /// The database could not be reached: nothing is wrong with what was asked, a retry after
    /// a pause will store it, and a statement in flight may or may not have committed.
    /// Otherwise the broker or the database refused the flush, and nothing committed.
    pub unavailable: bool,
    /// Refused by its queue's rules (no room under `maxSize`, an encrypted queue on a broker
    /// without the key): a definite per-item answer, not a failure of the request.
    pub refused: bool,
}

/// The shard of a key, by FNV-1a over its bytes: a key always lands on the same shard task,
/// which then owns that key's state alone.
pub fn shard_of(key: impl IntoIterator<Item = u8>, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % shards.max(1) as u64) as usize
}

/// The work a fusion's shard tasks hand out, pulled by the engine's loop (one per fusion):
/// the shards decide what goes out and when, the engine does it and settles each item through
/// the item itself. `None` once every shard task has ended.
pub struct FusionWork<T>(mpsc::UnboundedReceiver<T>);

impl<T> FusionWork<T> {
    /// The sending end, one clone per shard task, and this queue.
    pub(crate) fn channel() -> (mpsc::UnboundedSender<T>, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, FusionWork(rx))
    }

    /// The next work item.
    pub async fn next(&mut self) -> Option<T> {
        self.0.recv().await
    }
}

/// Sends its value to the shard task when dropped, so a work item is reported settled even if
/// the task doing it panicked (or it was never done) and the shard never waits for it forever.
pub struct DoneGuard<T> {
    value: Option<T>,
    tx: mpsc::UnboundedSender<T>,
}

impl<T> DoneGuard<T> {
    pub fn new(value: T, tx: mpsc::UnboundedSender<T>) -> Self {
        DoneGuard {
            value: Some(value),
            tx,
        }
    }

    /// Changes what will be reported.
    pub fn update(&mut self, change: impl FnOnce(&mut T)) {
        if let Some(value) = self.value.as_mut() {
            change(value);
        }
    }
}

impl<T> Drop for DoneGuard<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            let _ = self.tx.send(value); // the shard may have ended; nothing waits then
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_lands_on_one_shard_within_range() {
        for shards in [1, 3, 8] {
            for key in ["a", "queue\u{1f}p", ""] {
                let s = shard_of(key.bytes(), shards);
                assert!(s < shards);
                assert_eq!(s, shard_of(key.bytes(), shards));
            }
        }
        assert_eq!(shard_of(*b"x", 0), 0, "no shards is read as one");
    }

    #[tokio::test]
    async fn the_guard_reports_even_when_its_task_panics() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let _guard = DoneGuard::new(7, tx);
            panic!("flush task failed");
        });
        assert!(task.await.is_err());
        assert_eq!(rx.recv().await, Some(7));
    }
}
