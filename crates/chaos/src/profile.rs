//! Run sizes. `small` is the CI profile (1–3 minutes on a debug build); `medium` reproduces
//! what only volume shows (deep backlogs, late groups with real history) in about ten
//! minutes; `full` is the proof run of issue 9 (≥ 1 000 000 messages, ≥ 20 faults).

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Profile {
    pub name: &'static str,
    /// Messages the producers push (each with its own stable transactionId).
    pub messages: usize,
    pub producers: usize,
    /// The producers spread their pushes over this long; faults are injected meanwhile.
    pub push_for: Duration,
    pub fault_every: Duration,
    pub consumers_per_group: usize,
    /// Queue `leaseTime`; stalling consumers sleep past it.
    pub lease_secs: u64,
    /// Queue `retryLimit`: explicit `failed` acks tolerated before dead-lettering.
    pub retry_limit: u32,
    /// After the producers finish, how long consumers may take to drain every group.
    pub drain_for: Duration,
    /// `DB_POOL_SIZE` of the brokers (small, so a burst exhausts it).
    pub pool_size: u32,
    /// HTTP fuzzer: requests per route.
    pub fuzz_per_route: usize,
    /// The far-behind variant (`--far-behind`): every hash-sidecar row is purged within
    /// moments of its push, so every batch a group is delivered lies behind the purge horizon.
    pub far_behind: bool,
    /// Named groups start consuming this long after the producers (a backlog far behind).
    pub late_groups: Duration,
}

impl Profile {
    pub fn small() -> Self {
        Self {
            name: "small",
            messages: 6_000,
            producers: 3,
            push_for: Duration::from_secs(50),
            fault_every: Duration::from_secs(6),
            consumers_per_group: 2,
            lease_secs: 3,
            retry_limit: 2,
            drain_for: Duration::from_secs(60),
            pool_size: 8,
            fuzz_per_route: 60,
            far_behind: false,
            late_groups: Duration::ZERO,
        }
    }

    /// Between the two: 60 000 messages over 4 minutes, every fault kind at least once,
    /// deep enough that far-behind groups start with thousands of messages per partition.
    pub fn medium() -> Self {
        Self {
            name: "medium",
            messages: 60_000,
            producers: 4,
            push_for: Duration::from_secs(240),
            fault_every: Duration::from_secs(20),
            consumers_per_group: 3,
            lease_secs: 5,
            retry_limit: 2,
            drain_for: Duration::from_secs(600),
            pool_size: 12,
            fuzz_per_route: 1_000,
            far_behind: false,
            late_groups: Duration::ZERO,
        }
    }

    pub fn full() -> Self {
        Self {
            name: "full",
            messages: 1_000_000,
            producers: 8,
            push_for: Duration::from_secs(1_100),
            fault_every: Duration::from_secs(50),
            // Three per group fell 170 000 messages behind the producers on a loaded 2-core
            // machine; the drain must deliver everything for "lost" to mean anything.
            consumers_per_group: 6,
            lease_secs: 5,
            retry_limit: 2,
            drain_for: Duration::from_secs(1_800),
            pool_size: 16,
            fuzz_per_route: 50_000,
            far_behind: false,
            late_groups: Duration::ZERO,
        }
    }

    /// The far-behind variant of this profile (issue 36 §2): the brokers purge hash-sidecar
    /// rows with no floor (`QUEEN_SIDECAR_PURGE_FLOOR_SECONDS=0`, a short retention interval),
    /// the queues keep them [`FAR_BEHIND_DEDUP_SECS`] at most, and the named groups join
    /// after two fifths of the push phase, so their whole backlog lies behind the horizon.
    pub fn far_behind(self) -> Self {
        Self {
            name: match self.name {
                "full" => "full far-behind",
                "medium" => "medium far-behind",
                _ => "small far-behind",
            },
            far_behind: true,
            late_groups: self.push_for * 2 / 5,
            ..self
        }
    }

    /// The failover variant (`--failover`, issue 38): the brokers on a pg_auto_failover
    /// formation (src/failover/), faults back to back since each failover takes seconds.
    pub fn failover(self) -> Self {
        Self {
            name: match self.name {
                "full" => "full failover",
                "full far-behind" => "full far-behind failover",
                "medium" => "medium failover",
                "medium far-behind" => "medium far-behind failover",
                "small far-behind" => "small far-behind failover",
                _ => "small failover",
            },
            // A full run injects a fault 2 s after the last ended; a cycle (the fault, node 0
            // promoted back) took 17 s on average in the run of 2026-12-07 (90 faults in
            // 1 500 s, RELIABILITY.md), and a lost primary now waits out the monitor's 30 s
            // fencing (crates/formation/src/monitor.rs) instead of 5 s, ~21 s on average: 2 700 s
            // give ~125, 20 of each of the six kinds, issue 38's target.
            fault_every: match self.name {
                "full" | "full far-behind" => Duration::from_secs(2),
                "medium" | "medium far-behind" => Duration::from_secs(5),
                _ => Duration::from_secs(2),
            },
            push_for: match self.name {
                "full" | "full far-behind" => Duration::from_secs(2_700),
                _ => self.push_for,
            },
            ..self
        }
    }

    /// The brokers' settings this profile adds to `DB_POOL_SIZE`.
    pub fn broker_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("DB_POOL_SIZE".to_string(), self.pool_size.to_string())];
        if self.far_behind {
            env.push(("QUEEN_SIDECAR_PURGE_FLOOR_SECONDS".into(), "0".into()));
            env.push(("RETENTION_INTERVAL".into(), "500".into()));
        }
        env
    }
}

/// `dedupWindowSeconds` of the deduplicating queue in the far-behind profile: short enough
/// that its hash rows are purged seconds after the push (the other queue has 0).
pub const FAR_BEHIND_DEDUP_SECS: u64 = 2;
