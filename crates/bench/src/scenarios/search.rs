//! The search for a cell's highest stable rate, one procedure for our e2e cells and pgmq's, so
//! a ratio between two systems compares each at its own best rather than one keeping up with
//! the other's rate.
//!
//! Start at a given rate. After a stable attempt: halfway to the lowest unstable rate, or
//! double when none is known yet; up to [`FREE_CLIMBS`] such doublings are not charged to the
//! attempt budget, which is for narrowing (a search that ran out while still climbing knew
//! only a lower bound). After an unstable attempt (abandoned undrained): halfway to
//! the best stable rate, or 80 % of what its slowest group consumed while overloaded.
//!
//! The fastest stable rate is then confirmed by one more window, measured after every attempt
//! above it: one window can carry a rate the system cannot sustain (each attempt's backlog stays
//! in the database, and the overload cell offers multiples of this rate right after). A failed
//! confirmation steps down to 95 % of what was consumed and tries again. Reports the
//! confirming window (drained and verified), or the last attempt if none was stable.

use std::future::Future;

use anyhow::Result;

use crate::report::Row;

/// Attempts closer than this fraction to the lowest unstable rate end the search.
const CLOSE_ENOUGH: f64 = 0.05;
/// The note of a row whose every attempt was stable: the system's best is above it.
pub const LOWER_BOUND: &str = "no unstable rate reached: a lower bound";
/// Lowest rate an attempt after an overloaded one may try (msgs/s).
const FLOOR: f64 = 50.0;
/// Doublings from a stable start that do not use up the attempt budget (×64 at most).
const FREE_CLIMBS: u32 = 6;
/// Windows that may try to confirm the searched rate; the last one is drained whatever it shows.
const CONFIRMATIONS: u32 = 3;
/// A failed confirmation retries at this fraction of what its slowest group consumed.
const CONFIRM_STEP: f64 = 0.95;
/// The note of a row whose rate held a second window.
pub const CONFIRMED: &str = "confirmed by a second window";

/// Runs up to `attempts` attempts of `attempt(rate, may_abandon)` starting at `start` msgs/s
/// and returns the reported row with its producer rate. `may_abandon` lets an unstable attempt
/// return undrained and unverified (the caller never reports it). A row that failed
/// verification is returned at once: a loss is reported, never searched past.
pub async fn highest_stable<F, Fut>(
    label: &str,
    attempts: u32,
    start: f64,
    mut attempt: F,
) -> Result<(Row, f64)>
where
    F: FnMut(f64, bool) -> Fut,
    Fut: Future<Output = Result<Row>>,
{
    let attempts = attempts.max(1);
    let mut rate = start;
    let mut best: Option<(Row, f64)> = None;
    let mut lowest_unstable: Option<f64> = None;
    let mut tried = 0;
    let mut charged = 0;
    // A rate fixed on the command line (one attempt) is measured as given.
    let mut free_climbs = if attempts > 1 { FREE_CLIMBS } else { 0 };
    while charged < attempts {
        let last = charged + 1 == attempts;
        let row = attempt(rate, !last || best.is_some()).await?;
        tried += 1;
        if row.failed() {
            return Ok((row, rate));
        }
        let stable = row.stable_backlog == Some(true);
        eprintln!(
            "  {label} at {rate:.0} msg/s: {:.0} delivered/s, stable={stable}",
            row.msgs_per_s
        );
        if stable {
            best = Some((row, rate));
            match lowest_unstable {
                Some(hi) if hi - rate <= CLOSE_ENOUGH * rate => break,
                Some(hi) => rate = (rate + hi) / 2.0,
                None => rate *= 2.0,
            }
            if lowest_unstable.is_none() && free_climbs > 0 {
                free_climbs -= 1;
            } else {
                charged += 1;
            }
            continue;
        }
        charged += 1;
        lowest_unstable = Some(lowest_unstable.map_or(rate, |hi: f64| hi.min(rate)));
        if last && best.is_none() {
            best = Some((row, rate));
            break;
        }
        rate = match &best {
            Some((_, ok)) => (ok + rate) / 2.0,
            None => {
                let consumed = row
                    .extra
                    .get("min_group_delivered_per_s")
                    .copied()
                    .unwrap_or(rate / 2.0);
                (0.8 * consumed).min(0.9 * rate).max(FLOOR)
            }
        };
    }
    let (mut row, mut best_rate) = best.expect("at least one attempt ran");
    let lower_bound = lowest_unstable.is_none() && charged == attempts;
    if attempts > 1 && row.stable_backlog == Some(true) {
        (row, best_rate) = confirm(label, best_rate, &mut attempt).await?;
    }
    if tried > 1 {
        row.notes.push(format!("best stable of {tried} attempts"));
    }
    if row.stable_backlog == Some(true) && lower_bound {
        row.notes.push(LOWER_BOUND.into());
    }
    Ok((row, best_rate))
}

/// Measures `rate` once more, stepping down after each unstable window (abandoned, except the
/// last, which is drained and reported as it is). Also for a rate found earlier in the run.
pub async fn confirm<F, Fut>(label: &str, mut rate: f64, attempt: &mut F) -> Result<(Row, f64)>
where
    F: FnMut(f64, bool) -> Fut,
    Fut: Future<Output = Result<Row>>,
{
    let mut left = CONFIRMATIONS;
    loop {
        left -= 1;
        let mut row = attempt(rate, left > 0).await?;
        let stable = row.stable_backlog == Some(true);
        if !row.failed() {
            eprintln!(
                "  {label} confirming {rate:.0} msg/s: {:.0} delivered/s, stable={stable}",
                row.msgs_per_s
            );
        }
        if stable {
            row.notes.push(CONFIRMED.into());
        }
        if stable || left == 0 || row.failed() {
            return Ok((row, rate));
        }
        let consumed = row
            .extra
            .get("min_group_delivered_per_s")
            .copied()
            .unwrap_or(rate);
        rate = (CONFIRM_STEP * consumed.min(rate)).max(FLOOR);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A system that keeps up with anything up to `capacity` msgs/s.
    fn fake(rate: f64, capacity: f64) -> Row {
        let mut row = Row::new("e2e", "x".into(), "fake");
        row.msgs_per_s = rate.min(capacity);
        row.stable_backlog = Some(rate <= capacity);
        row.extra
            .insert("min_group_delivered_per_s".into(), rate.min(capacity));
        row
    }

    async fn search(start: f64, capacity: f64, attempts: u32) -> (f64, Vec<(f64, bool)>) {
        let mut calls = Vec::new();
        let (_, rate) = highest_stable("t", attempts, start, |rate, abandon| {
            calls.push((rate, abandon));
            async move { Ok(fake(rate, capacity)) }
        })
        .await
        .unwrap();
        (rate, calls)
    }

    #[tokio::test]
    async fn climbs_past_a_stable_start_narrows_on_the_capacity_and_confirms() {
        let (rate, calls) = search(1000.0, 3000.0, 5).await;
        let rates: Vec<f64> = calls.iter().map(|c| c.0).collect();
        assert_eq!(rates[..3], [1000.0, 2000.0, 4000.0]);
        assert!(rate > 2000.0 && rate <= 3000.0, "{rates:?} -> {rate}");
        assert_eq!(*calls.last().unwrap(), (rate, true), "confirmed: {calls:?}");
    }

    #[tokio::test]
    async fn climbing_is_free_until_far_above_the_start() {
        // Two attempts of budget still bracket a capacity 3× the start.
        let (rate, calls) = search(1000.0, 3000.0, 2).await;
        assert_eq!(calls.len(), 5, "{calls:?}");
        assert_eq!(rate, 3000.0);
        let (row, rate) = highest_stable(
            "t",
            2,
            1000.0,
            |rate, _| async move { Ok(fake(rate, 1e12)) },
        )
        .await
        .unwrap();
        assert_eq!(rate, 1000.0 * f64::from(1 << (FREE_CLIMBS + 1)));
        assert!(
            row.notes.iter().any(|n| n == LOWER_BOUND),
            "{:?}",
            row.notes
        );
    }

    #[tokio::test]
    async fn a_single_attempt_is_measured_as_given() {
        let (rate, calls) = search(1000.0, 3000.0, 1).await;
        assert_eq!((rate, calls), (1000.0, vec![(1000.0, false)]));
    }

    #[tokio::test]
    async fn backs_off_from_an_overloaded_start_to_what_was_consumed() {
        let (rate, calls) = search(10_000.0, 3000.0, 2).await;
        assert_eq!(
            calls,
            vec![(10_000.0, true), (2400.0, false), (2400.0, true)]
        );
        assert_eq!(rate, 2400.0);
    }

    #[tokio::test]
    async fn the_last_attempt_is_kept_and_drained_when_nothing_was_stable() {
        let (rate, calls) = search(10_000.0, 10.0, 2).await;
        assert_eq!(calls, vec![(10_000.0, true), (FLOOR, false)]);
        assert_eq!(rate, FLOOR);
    }

    #[tokio::test]
    async fn a_rate_the_system_no_longer_sustains_steps_down_until_confirmed() {
        // Capacity 4000 until an attempt overloads it, 3000 after.
        let overloaded = Cell::new(false);
        let mut calls = Vec::new();
        let (row, rate) = highest_stable("t", 5, 1000.0, |rate, abandon| {
            calls.push((rate, abandon));
            let capacity = if overloaded.get() { 3000.0 } else { 4000.0 };
            overloaded.set(overloaded.get() || rate > capacity);
            async move { Ok(fake(rate, capacity)) }
        })
        .await
        .unwrap();
        // 1000, 2000, 4000 stable; 8000 overloads; the narrowing finds nothing above 4000;
        // 4000 is confirmed at 95 % of the 3000 consumed.
        assert_eq!(
            &calls[..4],
            &[
                (1000.0, true),
                (2000.0, true),
                (4000.0, true),
                (8000.0, true)
            ]
        );
        assert_eq!(rate, 2850.0, "{calls:?}");
        assert_eq!(row.stable_backlog, Some(true));
        assert!(row.notes.iter().any(|n| n == CONFIRMED), "{:?}", row.notes);
    }

    #[tokio::test]
    async fn the_last_confirmation_is_drained_and_reported_unconfirmed() {
        let attempts = Cell::new(0);
        let mut calls = Vec::new();
        let (row, _) = highest_stable("t", 2, 1000.0, |rate, abandon| {
            calls.push((rate, abandon));
            attempts.set(attempts.get() + 1);
            // Stable twice, then nothing is.
            let capacity = if attempts.get() <= 2 { 1e9 } else { 1.0 };
            async move { Ok(fake(rate, capacity)) }
        })
        .await
        .unwrap();
        let confirming = &calls[calls.len() - CONFIRMATIONS as usize..];
        assert!(confirming[..2].iter().all(|c| c.1), "{calls:?}");
        assert!(!confirming[2].1, "the last one is drained: {calls:?}");
        assert_eq!(row.stable_backlog, Some(false));
    }
}
