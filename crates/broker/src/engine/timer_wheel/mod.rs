//! The timer wheel (docs/engine.md §16.2): one task per broker that sleeps until the next
//! timer is due, fires what is due, and sleeps again. It never polls per timer: each turn is
//! one index probe for the earliest due time (`queen.log_timers_next_v1`) and, when something
//! is due, a claim of up to [`CLAIM_LIMIT`] rows with `FOR UPDATE SKIP LOCKED`, so the wheels
//! of several brokers on one database split the due timers between them and none is fired
//! twice (`fire.rs`). A schedule on this broker due sooner than the wheel's longest sleep wakes
//! it at once (`engine::timers::committed`); a timer scheduled through another broker is seen at the
//! next probe, at most [`WHEEL_MAX_SLEEP_MS`] later. The task ends when the broker shuts down.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

mod fire;

use crate::engine::ack::AckState;
use crate::engine::push::PushState;
use crate::engine::timers::WHEEL_MAX_SLEEP_MS;
use crate::engine::transaction::Writers;
use crate::engine::Shared;
use crate::error::Result;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::failure_text;
use crate::store::timers as store;

/// Its shortest: when due rows exist but another broker's claim holds them.
const MIN_SLEEP_MS: i64 = 5;
/// Timers one claim takes (and one fire transaction pushes, per tenant).
const CLAIM_LIMIT: i32 = 256;
/// How long a claim hides its rows from the other wheels: the time the fire has to commit.
/// A broker that dies holding a claim delays those timers by at most this.
pub const CLAIM_MS: i32 = 10_000;

/// Rate limit of the wheel's failure logs (a database outage fails every turn alike).
static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// Starts the wheel, which fires timers through the push and ack states; it runs until the
/// engine begins shutting down.
pub fn start(push: Arc<PushState>, ack: Arc<AckState>) -> JoinHandle<()> {
    tokio::spawn(run(push, ack))
}

async fn run(push: Arc<PushState>, ack: Arc<AckState>) {
    let writers = Writers {
        push: &push,
        ack: &ack,
    };
    let engine: &Shared = &push;
    let mut closing = engine.closing.subscribe();
    while !*closing.borrow() {
        let sleep_ms = match turn(writers).await {
            Ok(ms) => ms,
            Err(e) => {
                let text = failure_text(&e);
                if let Some(suppressed) = FAILURES.admit(&text) {
                    tracing::warn!(error = %text, suppressed, "timer wheel turn failed");
                }
                WHEEL_MAX_SLEEP_MS
            }
        };
        let pause = Duration::from_millis(u64::try_from(sleep_ms).unwrap_or(0));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = engine.timer_wheel.notified() => {}
            _ = closing.wait_for(|c| *c) => break,
        }
    }
}

/// Fires everything due now; answers how long to sleep before the next turn.
async fn turn(writers: Writers<'_>) -> Result<i64> {
    let engine: &Shared = &writers;
    loop {
        let claimed = {
            let db = engine.store.conn().await?;
            match store::next_due_ms(&db).await? {
                None => return Ok(WHEEL_MAX_SLEEP_MS),
                Some(ms) if ms > 0 => return Ok(ms.min(WHEEL_MAX_SLEEP_MS)),
                Some(_) => store::claim(&db, CLAIM_LIMIT, CLAIM_MS).await?,
            }
        };
        if claimed.is_empty() {
            return Ok(MIN_SLEEP_MS);
        }
        fire::fire(writers, claimed).await;
        if *engine.closing.borrow() {
            return Ok(0);
        }
    }
}
