//! The push door (docs/engine.md §9, issue 36): refuses a push before its body is parsed when
//! push fusion is so far behind that the push could not be settled within
//! `QUEEN_PUSH_WAIT_BUDGET_MS`. The refusal is a `429` with `Retry-After` (the official client
//! backs off and sends again), and costs neither parsing, nor a permit, nor PostgreSQL work,
//! so a broker at capacity keeps its cores for the pushes it took and for the pops and acks
//! that drain them. What a push already admitted waits for is bounded by the same budget.
//!
//! Past the budget the door refuses a share of the pushes that grows with the excess, all of
//! them at twice the budget: refusing every push the moment the budget is passed sent every
//! producer away for the same second at once, and the fusion then idled between their waves.
//!
//! The drain rule: pushes are cheap and coalesce, so push fusion alone rarely falls a budget
//! behind, while the cores it takes are the ones delivery needs; offered twice what it could
//! carry end to end, the broker took pushes at 41 000 msg/s and delivered 17 600. So once fusion
//! queues at all (past half the budget: the broker is saturated) and this broker's pops are
//! delivering, pushes taken beyond [`DRAIN_HEADROOM`] times the delivery rate are refused too.
//! A broker whose consumers are gone or idle by choice is not saturated and refuses nothing.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::accel::flow::Rates;

use crate::engine::push::PushState;
use crate::error::{Error, Result};

/// How much faster than this broker delivers it may take pushes while saturated: a little, so
/// a backlog may still grow slowly behind a burst rather than not at all.
const DRAIN_HEADROOM: f64 = 1.05;

/// The longest `Retry-After` the door asks for, in seconds.
const MAX_RETRY_AFTER_SECS: u64 = 30;

/// Admits a push of `announced` body bytes, or refuses it with
/// [`Error::Overloaded`]. A budget of 0 turns the door off.
pub fn admit(state: &PushState, announced: usize) -> Result<()> {
    let budget = Duration::from_millis(state.cfg.push_wait_budget_ms);
    if budget.is_zero() {
        return Ok(());
    }
    let wait = state.fusion.backlog().expected_wait(announced);
    let mut share = refused_share(wait, budget);
    if share < 1.0 && wait > budget / 2 {
        let c = &state.counters;
        let rates = state.flow.rates(
            c.messages_pushed.load(Relaxed),
            c.messages_popped.load(Relaxed),
        );
        share = share.max(beyond_drain(rates));
    }
    if share <= 0.0 || rand::random::<f64>() >= share {
        return Ok(());
    }
    let retry_after = retry_after_secs(wait, budget);
    Err(Error::Overloaded {
        message: format!(
            "push refused: the broker is behind by {} ms, over its push wait budget of {} ms \
             (QUEEN_PUSH_WAIT_BUDGET_MS); retry after {retry_after} s",
            wait.as_millis(),
            budget.as_millis()
        ),
        retry_after_secs: retry_after,
    })
}

/// The `Retry-After` of a refusal: the excess over the budget, 1–30 s. A refusal by the drain
/// rule may come within the budget (past its half), so the excess saturates at zero.
fn retry_after_secs(wait: Duration, budget: Duration) -> u64 {
    wait.saturating_sub(budget)
        .as_secs()
        .clamp(1, MAX_RETRY_AFTER_SECS)
}

/// The share of pushes to refuse so that intake comes down to [`DRAIN_HEADROOM`] times the
/// drain; none while nothing is delivered (no consumers: the queue is there to hold it).
fn beyond_drain(r: Rates) -> f64 {
    let allowed = DRAIN_HEADROOM * r.drain;
    if r.drain <= 0.0 || r.intake <= allowed {
        return 0.0;
    }
    1.0 - allowed / r.intake
}

/// The share of pushes refused at an expected `wait`: none within the budget, then rising
/// in step with the excess, every push from twice the budget on.
fn refused_share(wait: Duration, budget: Duration) -> f64 {
    let over = wait.saturating_sub(budget).as_secs_f64();
    (over / budget.as_secs_f64()).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(100);

    #[test]
    fn within_the_budget_nothing_is_refused() {
        assert_eq!(refused_share(Duration::ZERO, BUDGET), 0.0);
        assert_eq!(refused_share(BUDGET, BUDGET), 0.0);
    }

    #[test]
    fn the_refused_share_grows_with_the_excess() {
        let half = refused_share(Duration::from_millis(150), BUDGET);
        assert!((half - 0.5).abs() < 1e-9, "{half}");
    }

    #[test]
    fn retry_after_is_the_excess_and_never_below_a_second() {
        let ms = Duration::from_millis;
        assert_eq!(retry_after_secs(ms(60), BUDGET), 1, "within the budget");
        assert_eq!(retry_after_secs(ms(3_100), BUDGET), 3);
        assert_eq!(retry_after_secs(ms(600_000), BUDGET), MAX_RETRY_AFTER_SECS);
    }

    #[test]
    fn intake_beyond_the_drain_is_refused_in_proportion() {
        let rates = |intake, drain| Rates { intake, drain };
        assert_eq!(beyond_drain(rates(10_000.0, 0.0)), 0.0, "no consumers");
        assert_eq!(beyond_drain(rates(10_000.0, 10_000.0)), 0.0);
        let share = beyond_drain(rates(42_000.0, 20_000.0));
        assert!((share - 0.5).abs() < 1e-9, "{share}");
    }

    #[test]
    fn from_twice_the_budget_every_push_is_refused() {
        assert_eq!(refused_share(2 * BUDGET, BUDGET), 1.0);
        assert_eq!(refused_share(30 * BUDGET, BUDGET), 1.0);
    }
}
