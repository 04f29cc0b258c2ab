//! The search for a cell's highest stable rate, one procedure for our e2e cells and pgmq's, so
//! a ratio between two systems compares each at its own best rather than one keeping up with
//! the other's rate.
//!
//! Start at a given rate. After a stable attempt: halfway to the lowest unstable rate, or
//! double when none is known yet; up to [`FREE_CLIMBS`] such doublings are not charged to the
//! attempt budget, which is for narrowing (a search that ran out while still climbing knew
//! only a lower bound). After an unstable attempt (abandoned undrained): halfway to
//! the best stable rate, or 80 % of what its slowest group consumed while overloaded. Reports
//! the fastest stable attempt (drained and verified), or the last attempt if none was stable.

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
    let (mut row, best_rate) = best.expect("at least one attempt ran");
    if tried > 1 {
        row.notes.push(format!("best stable of {tried} attempts"));
    }
    if row.stable_backlog == Some(true) && lowest_unstable.is_none() && charged == attempts {
        row.notes.push(LOWER_BOUND.into());
    }
    Ok((row, best_rate))
}

#[cfg(test)]
mod tests {
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
    async fn climbs_past_a_stable_start_and_narrows_on_the_capacity() {
        let (rate, calls) = search(1000.0, 3000.0, 5).await;
        let rates: Vec<f64> = calls.iter().map(|c| c.0).collect();
        assert_eq!(rates[..3], [1000.0, 2000.0, 4000.0]);
        assert!(rate > 2000.0 && rate <= 3000.0, "{rates:?} -> {rate}");
    }

    #[tokio::test]
    async fn climbing_is_free_until_far_above_the_start() {
        // Two attempts of budget still bracket a capacity 3× the start.
        let (rate, calls) = search(1000.0, 3000.0, 2).await;
        assert_eq!(calls.len(), 4, "{calls:?}");
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
        assert_eq!(calls, vec![(10_000.0, true), (2400.0, false)]);
        assert_eq!(rate, 2400.0);
    }

    #[tokio::test]
    async fn the_last_attempt_is_kept_and_drained_when_nothing_was_stable() {
        let (rate, calls) = search(10_000.0, 10.0, 2).await;
        assert_eq!(calls, vec![(10_000.0, true), (FLOOR, false)]);
        assert_eq!(rate, FLOOR);
    }
}
