//! What one claim on either candidate path (`hotlist.rs`, `scan.rs`) comes to, and what every
//! statement of a pop shares: a pop permit then a pooled connection, both before the claim's
//! start-by instant (docs/engine.md §5.1 step 4), and the answer a failed statement gives.

use deadpool_postgres::Object;
use tokio::time::Instant;

use crate::accel::admission::{Lane, Permit};
use crate::engine::pop::state::PopState;
use crate::error::{Error, Result};
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::db_error::db_message;
use crate::store::pop::PopAnswer;

/// What a candidate path's claim came to.
pub(super) enum Claimed {
    Answer(PopAnswer),
    /// Nothing claimable now (no statement may have run).
    Nothing,
    /// No permit or connection came before the attempt's start-by instant.
    OutOfTime,
}

/// A pop permit, then a pooled connection (always in that order), both before `start_by`;
/// `None` when either comes too late.
pub(super) async fn admit(st: &PopState, start_by: Instant) -> Result<Option<(Permit, Object)>> {
    let Some(permit) = st.admission.acquire_before(Lane::Pop, start_by).await else {
        return Ok(None);
    };
    Ok(st
        .store
        .conn_before(start_by)
        .await?
        .map(|conn| (permit, conn)))
}

/// A failed claim is a server fault: log PostgreSQL's own message (identical ones once per
/// window), answer `pop failed`, or 503 when the database could not be reached.
pub(super) fn pop_failed(e: Error) -> Error {
    static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);
    let Error::Db(db) = &e else {
        return e;
    };
    let text = db_message(db);
    if let Some(suppressed) = FAILURES.admit(&text) {
        tracing::error!(error = %text, suppressed, "pop failed");
    }
    if e.is_unavailable() {
        return Error::Unavailable(text);
    }
    Error::internal("pop failed")
}
