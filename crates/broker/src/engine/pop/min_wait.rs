//! The minimum pop wait (docs/engine.md §5.5, per-queue `min_pop_wait_time`): an under-full
//! claim on a non-empty queue is held back so one commit carries more messages. The wait
//! happens here, in the broker, before any permit or connection is taken for the claim; the
//! value per queue is learned in `accel/min_pop_wait.rs`.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::pop::admit::pop_failed;
use crate::engine::pop::longpoll::{claim_cutoff, Armed, Woke};
use crate::engine::pop::request::PopRequest;
use crate::engine::pop::state::PopState;
use crate::error::Result;
use crate::store::pop as sql;

/// The minimum pop wait: holds an under-full claim on a non-empty queue, in the broker and
/// before any connection is held for the claim, until the batch could be full, the window
/// elapses or the caller's deadline (less the claim margin) passes. A push to the queue
/// re-evaluates at once.
pub(super) async fn hold_underfull(
    st: &PopState,
    req: &PopRequest,
    queue: &str,
    partition: Option<&str>,
    window: Duration,
    deadline: Instant,
    closing: &mut watch::Receiver<bool>,
) -> Result<()> {
    let until = (Instant::now() + window).min(claim_cutoff(deadline));
    let gate = st.wake.gate(queue);
    loop {
        let armed = Armed::on_gate(&gate);
        let pending = {
            let Some(conn) = st.store.conn_before(until).await? else {
                return Ok(());
            };
            sql::pending_estimate(&conn, queue, partition, &req.group, i64::from(req.batch))
                .await
                .map_err(pop_failed)?
        };
        if pending == 0 || pending >= i64::from(req.batch) {
            return Ok(());
        }
        if armed.park(window, until, closing).await == Woke::Done {
            return Ok(());
        }
    }
}
