//! The SQL candidate path (docs/engine.md §5.2, "without the hot-list"): every targeted and
//! discovery pop, and wildcard pops with `QUEEN_HOTLIST=false`. A woken wildcard pop first
//! claims from the partitions its wake gate was told were pushed; otherwise the cheap
//! has-pending probe runs on a connection taken without a permit (false means definitively
//! nothing: no permit is spent on an empty re-poll), and only then the claim of the pop's
//! shape takes a pop permit and a connection. The wildcard shape's claim is the SQL wildcard
//! procedure, which carries the group-first-contact bulk seed.

use std::sync::atomic::Ordering::Relaxed;

use deadpool_postgres::GenericClient;
use tokio::time::Instant;

use crate::engine::pop::admit::{admit, pop_failed, Claimed};
use crate::engine::pop::request::{PopRequest, PopShape};
use crate::engine::pop::state::PopState;
use crate::error::Result;
use crate::store::pop::{self as sql, ClaimArgs, PopAnswer};

/// One claim on the SQL candidate path, started only before `start_by`.
pub(super) async fn claim(
    st: &PopState,
    req: &PopRequest,
    hints: &[String],
    args: &ClaimArgs<'_>,
    start_by: Instant,
) -> Result<Claimed> {
    let mut admitted = None;
    if let (PopShape::Wildcard { queue }, false) = (&req.shape, hints.is_empty()) {
        let Some(held) = admit(st, start_by).await? else {
            return Ok(Claimed::OutOfTime);
        };
        if let Some(answer) = claim_hinted(st, &held.1, queue, hints, args).await? {
            st.store.charge(&held.1, answer.load());
            return Ok(Claimed::Answer(answer));
        }
        // Admitted already: the probe and the backstop run on the same connection.
        admitted = Some(held);
    }
    if st.cfg.pop_pending_gate {
        let pending = match &admitted {
            Some((_, conn)) => has_pending(conn, req).await,
            None => {
                let Some(conn) = st.store.conn_before(start_by).await? else {
                    return Ok(Claimed::OutOfTime);
                };
                has_pending(&conn, req).await
            }
        };
        if !pending.map_err(pop_failed)? {
            return Ok(Claimed::Nothing);
        }
    }
    let (_permit, conn) = match admitted {
        Some(held) => held,
        None => match admit(st, start_by).await? {
            Some(held) => held,
            None => return Ok(Claimed::OutOfTime),
        },
    };
    let answer = claim_shape(&conn, req, args).await.map_err(pop_failed)?;
    st.store.charge(&conn, answer.load());
    Ok(Claimed::Answer(answer))
}

/// A woken wildcard pop's targeted claims on its pushed-partition hints, cheaper than a
/// candidate scan. `None` when they delivered nothing: the caller then runs the wildcard pop,
/// the backstop for missed wakes and older backlog, so a stale hint never hides work.
async fn claim_hinted(
    st: &PopState,
    db: &impl GenericClient,
    queue: &str,
    hints: &[String],
    args: &ClaimArgs<'_>,
) -> Result<Option<PopAnswer>> {
    let answer = sql::pop_hinted(db, queue, hints, args)
        .await
        .map_err(pop_failed)?;
    if answer.partitions.is_empty() {
        st.cache.stats.hint_fallthroughs.fetch_add(1, Relaxed);
        return Ok(None);
    }
    st.cache.stats.hint_claims.fetch_add(1, Relaxed);
    Ok(Some(answer))
}

/// The cheap probe: false means definitively nothing to deliver.
async fn has_pending(db: &impl GenericClient, req: &PopRequest) -> Result<bool> {
    match &req.shape {
        PopShape::Wildcard { queue } => sql::has_pending(db, queue, &req.group).await,
        PopShape::Targeted { queue, partition } => {
            sql::partition_has_pending(db, queue, partition, &req.group).await
        }
        PopShape::Discovery { namespace, task } => {
            sql::discover_has_pending(db, namespace, task, &req.group).await
        }
    }
}

async fn claim_shape(
    db: &impl GenericClient,
    req: &PopRequest,
    args: &ClaimArgs<'_>,
) -> Result<PopAnswer> {
    match &req.shape {
        PopShape::Wildcard { queue } => sql::pop_wildcard(db, queue, args).await,
        PopShape::Targeted { queue, partition } => {
            sql::pop_specific(db, queue, partition, args).await
        }
        PopShape::Discovery { namespace, task } => {
            sql::pop_discover(db, namespace, task, args).await
        }
    }
}
