//! The pop maintenance flag (docs/spec/life-of-a-pop.md: while it is on, every pop answers 204
//! at once): the last value read from PostgreSQL, trusted for [`MAINTENANCE_TTL`], and the rule
//! that only one pop at a time re-reads it while the others wait for that answer. The engine
//! supplies the read; nothing here touches the database.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long a read of pop maintenance mode is trusted.
pub const MAINTENANCE_TTL: Duration = Duration::from_secs(1);

/// Pop maintenance mode as last read, trusted for [`MAINTENANCE_TTL`].
#[derive(Default)]
pub struct MaintenanceFlag {
    cached: Mutex<Option<(Instant, bool)>>,
    /// One refresh at a time; the others wait for its answer.
    refresh: tokio::sync::Mutex<()>,
}

impl MaintenanceFlag {
    /// The flag, when the last read is fresh.
    pub fn fresh(&self) -> Option<bool> {
        let cached = *self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .filter(|(at, _)| at.elapsed() < MAINTENANCE_TTL)
            .map(|(_, on)| on)
    }

    /// The right to refresh, or `None` when another refresh holds it past `until`.
    pub async fn refreshing(&self, until: Instant) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        tokio::time::timeout_at(until, self.refresh.lock())
            .await
            .ok()
    }

    /// Records a fresh read.
    pub fn set(&self, on: bool) {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), on));
    }

    /// The flag: the cached value while fresh, else what `read` answers (one reader at a
    /// time; the others take its answer). `None` when it cannot be learnt before `until`
    /// (another refresh, or `read` itself, takes longer): the caller then must not claim.
    pub async fn get_or_read<F, Fut, E>(&self, until: Instant, read: F) -> Result<Option<bool>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<bool>, E>>,
    {
        if let Some(on) = self.fresh() {
            return Ok(Some(on));
        }
        let Some(_refreshing) = self.refreshing(until).await else {
            return Ok(None);
        };
        if let Some(on) = self.fresh() {
            return Ok(Some(on));
        }
        let read = read().await?;
        if let Some(on) = read {
            self.set(on);
        }
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn one_read_serves_every_pop_while_fresh() {
        let flag = MaintenanceFlag::default();
        let reads = AtomicUsize::new(0);
        let until = Instant::now() + Duration::from_secs(1);
        for _ in 0..3 {
            let on = flag
                .get_or_read(until, || async {
                    reads.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ()>(Some(true))
                })
                .await;
            assert_eq!(on, Ok(Some(true)));
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        let unknown = MaintenanceFlag::default()
            .get_or_read(until, || async { Ok::<_, ()>(None) })
            .await;
        assert_eq!(unknown, Ok(None), "no answer in time: not known");
    }
}
