//! The cluster-wide maintenance flags as this broker last read them (docs/engine.md §2.9): push
//! maintenance (pushes go to the disk spool) and pop maintenance (pops answer 204 at once). A
//! read is trusted for [`MAINTENANCE_TTL`], so a toggle made through any broker of the database
//! reaches every other one within that time, at no cost while nobody pushes or pops. The
//! engine reads PostgreSQL and feeds this; nothing here touches the database.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long a read of the flags is trusted: half the one second within which a toggle must
/// reach every broker, leaving the other half for the read itself.
pub const MAINTENANCE_TTL: Duration = Duration::from_millis(500);

/// Both flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub push: bool,
    pub pop: bool,
}

/// The flags as last read, trusted for [`MAINTENANCE_TTL`].
#[derive(Default)]
pub struct MaintenanceFlags {
    cached: Mutex<Option<(Instant, Flags)>>,
    /// One refresh at a time; the others wait for its answer.
    refresh: tokio::sync::Mutex<()>,
}

impl MaintenanceFlags {
    /// The flags, when the last read is fresh.
    pub fn fresh(&self) -> Option<Flags> {
        let cached = *self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .filter(|(at, _)| at.elapsed() < MAINTENANCE_TTL)
            .map(|(_, flags)| flags)
    }

    /// The flags as last read, however old (`None` before the first read).
    pub fn last(&self) -> Option<Flags> {
        let cached = *self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached.map(|(_, flags)| flags)
    }

    /// The right to refresh when nobody else is refreshing.
    pub fn try_refreshing(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        self.refresh.try_lock().ok()
    }

    /// The right to refresh, or `None` when another refresh holds it past `until`.
    pub async fn refreshing(&self, until: Instant) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        tokio::time::timeout_at(until, self.refresh.lock())
            .await
            .ok()
    }

    /// Records a fresh read (or a toggle this broker just made).
    pub fn set(&self, flags: Flags) {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), flags));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_is_fresh_for_the_ttl_and_kept_after_it() {
        let flags = MaintenanceFlags::default();
        assert_eq!((flags.fresh(), flags.last()), (None, None));
        let on = Flags {
            push: true,
            pop: false,
        };
        flags.set(on);
        assert_eq!(flags.fresh(), Some(on));
        tokio::time::sleep(MAINTENANCE_TTL).await;
        assert_eq!(flags.fresh(), None, "stale after the TTL");
        assert_eq!(flags.last(), Some(on), "still known");
        let guard = flags.try_refreshing().expect("nobody refreshes");
        assert!(flags.try_refreshing().is_none(), "one refresh at a time");
        drop(guard);
        assert!(flags.try_refreshing().is_some());
    }
}
