//! The push door (docs/engine.md §9, issue 36): refuses a push before its body is parsed when
//! push fusion is so far behind that the push could not be settled within
//! `QUEEN_PUSH_WAIT_BUDGET_MS`. The refusal is a `429` with `Retry-After` (the official client
//! backs off and sends again), and costs neither parsing, nor a permit, nor PostgreSQL work,
//! so a broker at capacity keeps its cores for the pushes it took and for the pops and acks
//! that drain them. What a push already admitted waits for is bounded by the same budget.

use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// The longest `Retry-After` the door asks for, in seconds.
const MAX_RETRY_AFTER_SECS: u64 = 30;

/// Admits a push of `announced` body bytes, or refuses it with
/// [`Error::Overloaded`]. A budget of 0 turns the door off.
pub fn admit(state: &Engine, announced: usize) -> Result<()> {
    let budget = Duration::from_millis(state.cfg.push_wait_budget_ms);
    if budget.is_zero() {
        return Ok(());
    }
    let wait = state.push_fusion.backlog().expected_wait(announced);
    if wait <= budget {
        return Ok(());
    }
    let retry_after = (wait - budget).as_secs().clamp(1, MAX_RETRY_AFTER_SECS);
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
