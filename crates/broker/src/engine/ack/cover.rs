//! The ack registry on the engine floor (docs/engine.md §6.4): what a leasing pop delivered
//! goes in (`births.rs`), and an ack group that covers it exactly comes out as one positional
//! cursor advance ([`try_cover`] for plain acks, [`proven_cover`] for the transaction wire)
//! instead of a hash resolution. The registry itself is `accel/ack_registry.rs`.
//!
//! The fast path fires for a (partition, group, lease) group only when every item is
//! `completed`, the group names a lease, no other group of the request carries a signal for
//! the same (partition, group) (a fence the positional call could not honour), and the set of
//! acked hashes equals the delivered set. Then the cover goes to PostgreSQL — one
//! `log_ack_at_v1` call, or a row of an ack-fusion flush — whose cover form re-checks the
//! lease and the batch under the cursor row's lock. Every other case, and every refusal,
//! takes the hash path unchanged; an unknown outcome (a lost connection) is a 503.

use foldhash::{HashMap, HashMapExt, HashSet};

use queen_proto::hash::txn_hash;
use queen_proto::tenant::{Tenant, SEPARATOR};

use super::{count, settle_and_wake, Ack, AckOutcome, AckStatus, Conn, PlannedGroup};
use crate::accel::ack_fusion::FusedAck;
use crate::accel::ack_registry::{Cover, TxnHash};
use crate::engine::ack::AckState;
use crate::error::{Error, Result};
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use crate::store::ack::{self as store, AckVerdict, CoverRow};
use crate::store::db_error::failure_text;

/// The registry's name for `group` of a partition of `tenant`: an ack by another tenant's
/// caller names another entry, so it can neither use nor drop this tenant's (the hash path
/// then refuses it, as for any partition it does not own).
pub(super) fn registry_group(tenant: &str, group: &str) -> String {
    match tenant {
        "" => group.to_string(),
        _ => format!("{tenant}{SEPARATOR}{group}"),
    }
}

/// The registry's answer for one ack group (its fence: the request's signals for the same
/// (partition, group) in other groups): the cover to commit when the fast path may fire.
/// Otherwise the group takes the hash path, and the registry drops the entry that path makes
/// doubtful.
pub fn proven_cover(
    state: &AckState,
    group: &[&Ack],
    fence: &[[u8; 16]],
    tenant: &Tenant,
) -> Option<Cover> {
    let registry = &state.registry;
    let first = group.first()?;
    if !registry.enabled() {
        return None;
    }
    let name = registry_group(tenant.id(), &first.group);
    let (pid, name, lease) = (
        first.partition_id.get(),
        name.as_str(),
        first.lease_id.as_str(),
    );
    let all_completed = group.iter().all(|a| a.status == AckStatus::Completed);
    if first.lease_id.is_none() || !fence.is_empty() || !all_completed {
        registry.forget(pid, name, lease);
        return None;
    }
    let acked: HashSet<TxnHash> = group.iter().map(|a| txn_hash(&a.transaction_id)).collect();
    registry.take(pid, name, lease, &acked)
}

/// The fast path of one ack group: `Some(outcomes)` when its cover committed; `None` when the
/// group must take the hash path (no cover, or PostgreSQL refused it, or a flush was refused
/// and nothing committed). A lost connection is an error: the cover may have committed.
pub(super) async fn try_cover(
    state: &AckState,
    conn: &mut Conn<'_>,
    group: &[&Ack],
    fence: &[[u8; 16]],
    tenant: &Tenant,
) -> Result<Option<Vec<AckOutcome>>> {
    let Some(cover) = proven_cover(state, group, fence, tenant) else {
        return Ok(None);
    };
    let first = group[0];
    let row = CoverRow {
        partition_id: first.partition_id.get(),
        group: &first.group,
        lease_id: first.lease_id.as_str(),
        batch_end: cover.batch_end,
        frames: cover.frames,
    };
    let Some(verdict) = commit(state, conn, &row).await? else {
        return Ok(None);
    };
    if !verdict.ok {
        state.registry.refused();
        return Ok(None);
    }
    let settled = settle_and_wake(state, &verdict, group);
    count(state, group, &settled);
    Ok(Some(settled))
}

/// With ack fusion on, the covers of every group alone on its (partition, consumer group) in
/// the request, submitted at once: one flush then carries a wide answer's covers instead of
/// one flush per group, and no group's order against another of the same cursor changes.
/// Per group: `None` when not tried here (fusion off, or the cursor is shared), else what
/// [`try_cover`] answers (`Ok(None)`: take the hash path).
pub(super) async fn fused_covers(
    state: &AckState,
    groups: &[Vec<&Ack>],
    planned: &[PlannedGroup],
    tenant: &Tenant,
) -> Vec<Option<Result<Option<Vec<AckOutcome>>>>> {
    let cursor = |g: &[&Ack]| g.first().map(|a| (a.partition_id, a.group.clone()));
    let mut sharing: HashMap<_, usize> = HashMap::new();
    for g in groups {
        *sharing.entry(cursor(g)).or_default() += 1;
    }
    let attempts = groups.iter().zip(planned).map(|(group, plan)| {
        let alone = sharing.get(&cursor(group)) == Some(&1);
        async move {
            if state.fusion.is_none() || !alone {
                return None;
            }
            // With fusion on the connection is only taken by a group's own SQL: none here.
            let mut unused = match Conn::open(state).await {
                Ok(conn) => conn,
                Err(e) => return Some(Err(e)),
            };
            Some(try_cover(state, &mut unused, group, &plan.fence, tenant).await)
        }
    });
    futures::future::join_all(attempts).await
}

/// Commits one cover through ack fusion, or by itself when fusion is off. `None`: nothing
/// committed and the cover was not judged (the statement or flush failed); the group then
/// takes the hash path, which decides on its own.
async fn commit(
    state: &AckState,
    conn: &mut Conn<'_>,
    row: &CoverRow<'_>,
) -> Result<Option<AckVerdict>> {
    let failure = match &state.fusion {
        Some(fusion) => {
            let fused = FusedAck {
                partition_id: row.partition_id,
                group: row.group.to_string(),
                worker: row.lease_id.to_string(),
                batch_end: row.batch_end,
                frames: row.frames,
            };
            match fusion.submit(fused).await {
                Ok(verdict) => return Ok(Some(verdict)),
                Err(f) if f.unavailable => return Err(Error::Unavailable(f.error)),
                Err(f) => f.error,
            }
        }
        None => match store::ack_cover(conn.get().await?, row).await {
            Ok(verdict) => return Ok(Some(verdict)),
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => failure_text(&e),
        },
    };
    static FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);
    if let Some(suppressed) = FAILURES.admit(&failure) {
        tracing::warn!(error = %failure, suppressed, "positional ack failed; taking the hash path");
    }
    Ok(None)
}
