//! One run of the retention loop (docs/engine.md §10.3): the work list of due partitions, read
//! once from one database clock reading; every due partition drained by its phase's step
//! until the step says done, `RETENTION_PARALLELISM` partitions at a time, each on its own
//! pooled connection; then, on their own cadences, partition cleanup and the watermark
//! safety walk; every run, the key-value store's sweep of expired rows.
//!
//! A partition that rule 2 keeps holding back (its slowest cursor has not moved) is left out
//! of the work list for a growing number of runs, so a few stalled consumers cannot fill the
//! list's places with partitions that yield nothing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::watch;

use crate::engine::retention::RetentionState;
use crate::error::Result;
use crate::store::db_error::failure_text;
use crate::store::retention::{self as store, Due, Phase, Step};

/// Most runs a held-back partition sits out (at the default 5 s interval: 80 s).
const MAX_SKIP_RUNS: u64 = 16;
/// Tries of a step whose partition a writer holds, and the pause between them.
const LOCK_TRIES: u32 = 3;
const LOCK_PAUSE: Duration = Duration::from_millis(20);
/// Partition cleanup runs at most this often (upstream's `PARTITION_SWEEP_EVERY`), and at
/// least once per cleanup age when that is shorter.
const CLEANUP_EVERY: Duration = Duration::from_secs(60);
/// Partitions one step of the safety walk visits.
const WALK_BATCH: i32 = 5000;

/// What the loop remembers between runs while this broker stays the runner.
#[derive(Default)]
pub(super) struct RunState {
    run: u64,
    held_back: HashMap<i64, HeldBack>,
    last_cleanup: Option<Instant>,
    last_walk: Option<Instant>,
}

struct HeldBack {
    /// Left out of the work list until this run.
    until: u64,
    /// Consecutive runs in which rule 2 deleted nothing.
    streak: u32,
}

/// What draining one due partition came to.
struct Drained {
    deleted: i64,
    /// A writer held the partition at every try: nothing was learned.
    skipped: bool,
}

/// One run: the three deletion phases, then cleanup and the safety walk when they are due.
pub(super) async fn once(
    engine: &RetentionState,
    state: &mut RunState,
    closing: &watch::Receiver<bool>,
) -> Result<()> {
    state.run += 1;
    let run = state.run;
    let skip: Vec<i64> = state
        .held_back
        .iter()
        .filter(|(_, h)| h.until > run)
        .map(|(pid, _)| *pid)
        .collect();
    let due = {
        let db = engine.store.conn().await?;
        store::due(
            &db,
            engine.cfg.sidecar_purge_floor_s,
            engine.cfg.retention_due_cap(),
            &skip,
        )
        .await?
    };
    let parallelism = usize::from(engine.cfg.retention_parallelism);
    let outcomes: Vec<(Due, Option<Drained>)> = futures::stream::iter(due)
        .map(|d| async move {
            let drained = drain(engine, &d, closing).await;
            (d, drained)
        })
        .buffer_unordered(parallelism)
        .collect()
        .await;
    state.note(&outcomes);
    sweep_kv(engine, closing).await?;
    crate::engine::ephemeral::sweep_expired(engine, engine.cfg.retention_batch_size, closing)
        .await?;
    if state.cleanup_due(engine) {
        cleanup(engine, closing).await?;
        state.last_cleanup = Some(Instant::now());
    }
    if state.walk_due(engine) {
        walk(engine, closing).await?;
        state.last_walk = Some(Instant::now());
    }
    Ok(())
}

impl RunState {
    /// Updates the back-off of the retention phase's partitions after a run.
    fn note(&mut self, outcomes: &[(Due, Option<Drained>)]) {
        let run = self.run;
        let mut touched = HashSet::new();
        for (due, drained) in outcomes {
            let Some(drained) = drained else { continue };
            if due.phase != Phase::Retention || drained.skipped {
                continue;
            }
            touched.insert(due.partition_id);
            if drained.deleted > 0 || due.completed_cutoff.is_none() {
                self.held_back.remove(&due.partition_id);
                continue;
            }
            let held = self.held_back.entry(due.partition_id).or_insert(HeldBack {
                until: 0,
                streak: 0,
            });
            held.streak = held.streak.saturating_add(1);
            let sit_out = 1u64 << held.streak.min(5).saturating_sub(1);
            held.until = run + sit_out.min(MAX_SKIP_RUNS);
        }
        // A partition whose sit-out ended and that was not due again is not held back.
        self.held_back
            .retain(|pid, h| h.until > run || touched.contains(pid));
    }

    fn cleanup_due(&self, engine: &RetentionState) -> bool {
        if !engine.cfg.partition_cleanup_enabled {
            return false;
        }
        let every = cleanup_every(
            engine.cfg.partition_cleanup_age(),
            Duration::from_millis(engine.cfg.retention_interval_ms),
        );
        self.last_cleanup.is_none_or(|t| t.elapsed() >= every)
    }

    fn walk_due(&self, engine: &RetentionState) -> bool {
        let every = Duration::from_millis(engine.cfg.retention_safety_walk_ms);
        self.last_walk.is_none_or(|t| t.elapsed() >= every)
    }
}

/// How often partition cleanup runs: once per cleanup `age`, at most every [`CLEANUP_EVERY`],
/// and never more often than the loop runs (an `interval` past a minute is a valid setting:
/// `clamp` would panic on it).
fn cleanup_every(age: Duration, interval: Duration) -> Duration {
    age.min(CLEANUP_EVERY).max(interval)
}

/// Calls the phase's step on one partition until it is done; `None` when it failed (counted
/// and logged; the next run tries again).
async fn drain(
    engine: &RetentionState,
    due: &Due,
    closing: &watch::Receiver<bool>,
) -> Option<Drained> {
    match drain_steps(engine, due, closing).await {
        Ok(drained) => Some(drained),
        Err(e) => {
            super::failed(engine, "retention step failed", &failure_text(&e));
            None
        }
    }
}

async fn drain_steps(
    engine: &RetentionState,
    due: &Due,
    closing: &watch::Receiver<bool>,
) -> Result<Drained> {
    let db = engine.store.conn().await?;
    let max_rows = engine.cfg.retention_batch_size;
    let mut deleted = 0;
    let mut locked_tries = 0;
    while !*closing.borrow() {
        let step = match due.phase {
            Phase::Retention => {
                store::retention_step(
                    &db,
                    due.partition_id,
                    due.all_cutoff,
                    due.completed_cutoff,
                    max_rows,
                )
                .await?
            }
            Phase::Evict => {
                store::retention_step(&db, due.partition_id, due.all_cutoff, None, max_rows).await?
            }
            Phase::Sidecar => {
                store::sidecar_step(&db, due.partition_id, due.all_cutoff, max_rows).await?
            }
        };
        if step.skipped {
            locked_tries += 1;
            if locked_tries >= LOCK_TRIES {
                engine.counters.lock_skips.fetch_add(1, Relaxed);
                return Ok(Drained {
                    deleted,
                    skipped: deleted == 0,
                });
            }
            tokio::time::sleep(LOCK_PAUSE).await;
            continue;
        }
        count(engine, due.phase, &step);
        deleted += step.deleted;
        if step.done {
            break;
        }
    }
    Ok(Drained {
        deleted,
        skipped: false,
    })
}

/// Adds one step's deletions to the broker's counters.
fn count(engine: &RetentionState, phase: Phase, step: &Step) {
    let c = &engine.counters;
    let add = |counter: &AtomicU64, n: i64| {
        counter.fetch_add(u64::try_from(n).unwrap_or(0), Relaxed);
    };
    match phase {
        Phase::Retention => {
            add(&c.segments_deleted, step.deleted);
            add(&c.messages_deleted, step.messages);
        }
        Phase::Evict => {
            add(&c.segments_evicted, step.deleted);
            add(&c.messages_evicted, step.messages);
        }
        Phase::Sidecar => add(&c.sidecar_rows_purged, step.deleted),
    }
}

/// The key-value store's expired rows (docs/engine.md §15), already absent to every reader:
/// deleted in batches until one comes back short.
async fn sweep_kv(engine: &RetentionState, closing: &watch::Receiver<bool>) -> Result<()> {
    let db = engine.store.conn().await?;
    let batch = engine.cfg.retention_batch_size;
    while !*closing.borrow() {
        if crate::store::kv::sweep_step(&db, batch).await? < i64::from(batch) {
            break;
        }
    }
    Ok(())
}

/// Partition cleanup: batches until one comes back short.
async fn cleanup(engine: &RetentionState, closing: &watch::Receiver<bool>) -> Result<()> {
    let db = engine.store.conn().await?;
    let idle_s = engine.cfg.partition_cleanup_age().as_secs_f64();
    let batch = engine.cfg.retention_batch_size;
    while !*closing.borrow() {
        let n = store::cleanup_step(&db, idle_s, batch).await?;
        engine
            .counters
            .partitions_cleaned
            .fetch_add(u64::try_from(n).unwrap_or(0), Relaxed);
        if n < i64::from(batch) {
            break;
        }
    }
    Ok(())
}

/// The watermark safety walk over every partition, in id order.
async fn walk(engine: &RetentionState, closing: &watch::Receiver<bool>) -> Result<()> {
    let db = engine.store.conn().await?;
    let mut after = 0;
    while !*closing.borrow() {
        let (last, fixed) = store::watermark_walk_step(&db, after, WALK_BATCH).await?;
        engine
            .counters
            .watermarks_repaired
            .fetch_add(u64::try_from(fixed).unwrap_or(0), Relaxed);
        match last {
            Some(id) => after = id,
            None => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_runs_per_age_bounded_by_a_minute_and_the_loop() {
        let s = Duration::from_secs;
        assert_eq!(cleanup_every(s(30), s(5)), s(30));
        assert_eq!(cleanup_every(s(3600), s(5)), CLEANUP_EVERY);
        assert_eq!(
            cleanup_every(s(1), s(5)),
            s(5),
            "not more often than the loop"
        );
        // A loop interval past a minute (a valid setting) once panicked in `clamp`.
        assert_eq!(cleanup_every(s(3600), s(120)), s(120));
    }
}
