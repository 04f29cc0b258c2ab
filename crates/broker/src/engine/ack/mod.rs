//! Acknowledgements (docs/spec/ack-internals.md, docs/wire.md §8): status normalisation, grouping by
//! (partition, group, lease), one `queen.log_ack_by_hash_v1` call per group, the mapping of
//! its hash lists back to per-item verdicts, and the DLQ hand-off a verdict may ask for.
//!
//! The broker hashes; SQL only compares bytes. Every decision about the cursor is SQL's.
//!
//! Beside it: [`cover`], the ack registry's fast path (a group that acks exactly the batch a
//! pop of this broker delivered becomes one positional cursor advance), and [`fusion`], the
//! commit of ack fusion, which folds many such advances into one transaction; and [`span`],
//! the positional resolution of a leased batch whose hash-sidecar rows were purged.

pub mod births;
pub mod cover;
pub mod fusion;
pub mod span;
mod state;

pub use state::AckState;

use foldhash::{HashMap, HashMapExt};

use queen_proto::hash::{to_hex, txn_hash};
use queen_proto::{LeaseId, PartitionId};

use deadpool_postgres::{GenericClient, Object};

use crate::accel::admission::{Lane, Permit};
use crate::engine::dlq::{self, HandOff, Nack};
use crate::engine::tenant::Tenant;
use crate::error::{Error, Result};
use crate::store::ack::{self as store, AckVerdict, HashAck};
use crate::store::db_error::failure_text;
use crate::telemetry::{MESSAGES_ACKED, MESSAGES_DEAD_LETTERED};

/// The error of an item that can no longer have an effect: its transactionId is unknown to the
/// partition (or its hash row was purged), or it is a signal for a message below the cursor.
/// One text for both: it contains "unresolv" and "committed", which the official clients test.
pub const UNSETTLED: &str =
    "transaction is unresolvable, already committed, or acknowledgment is stale";

/// An acknowledgement's status after normalisation (docs/wire.md §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    Completed,
    Failed,
    Retry,
    Dlq,
}

impl AckStatus {
    /// absent, empty, `completed`, `success`, `acked`, `ok` → completed; `retry`; `dlq`;
    /// anything else → failed.
    pub fn normalise(text: Option<&str>) -> Self {
        let Some(text) = text.map(str::trim) else {
            return AckStatus::Completed;
        };
        match text.to_ascii_lowercase().as_str() {
            "" | "completed" | "success" | "acked" | "ok" => AckStatus::Completed,
            "retry" => AckStatus::Retry,
            "dlq" => AckStatus::Dlq,
            _ => AckStatus::Failed,
        }
    }

    /// The status text `log_ack_by_hash_v1` understands.
    pub fn as_sql(self) -> &'static str {
        match self {
            AckStatus::Completed => "completed",
            AckStatus::Failed => "failed",
            AckStatus::Retry => "retry",
            AckStatus::Dlq => "dlq",
        }
    }

    /// failed, retry and dlq are explicit signals: the cursor never skips them.
    pub fn is_signal(self) -> bool {
        self != AckStatus::Completed
    }
}

/// One well-formed acknowledgement.
#[derive(Debug, Clone)]
pub struct Ack {
    pub transaction_id: String,
    pub partition_id: PartitionId,
    pub status: AckStatus,
    /// The nack reason, filed as the DLQ row's error text.
    pub error: Option<String>,
    /// Consumer group; `__QUEUE_MODE__` for queue mode.
    pub group: String,
    /// The lease the client holds; none for a lease-less ack.
    pub lease_id: LeaseId,
}

/// The verdict for one item, rendered as one element of the ack answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    pub success: bool,
    /// `None` whenever `success` is true: clients count a non-empty error as a failure.
    pub error: Option<String>,
    pub lease_released: bool,
    pub dlq: bool,
    pub noop: bool,
}

impl AckOutcome {
    pub fn refused(error: impl Into<String>) -> Self {
        AckOutcome {
            success: false,
            error: Some(error.into()),
            ..Default::default()
        }
    }
}

/// Applies `acks` (request order) and returns one outcome per ack, in the same order.
/// Items sharing (partition, group, lease) form one group, resolved by one SQL call, so a
/// nack and a later completed ack of the same batch are judged together and the nack wins;
/// the fences of [`group_by_lease`] keep that true across groups of one (partition, group).
/// With ack fusion on, the registry's covers of groups alone on their cursor are committed
/// first, together (`cover::fused_covers`); the other groups then run in order.
///
/// Each group is its own transaction, so a group PostgreSQL refuses (a database error) does
/// not undo those before it: its items fail with the cause and the later groups still run.
/// The request fails as a whole when no group reached PostgreSQL, and when the connection is
/// lost: a group in flight may have committed before its answer was lost, so its items can be
/// neither accepted nor refused; the 503 says "unknown", and a retry meets the settled state.
/// The same holds for a fused flush that loses its connection (docs/engine.md §6.5).
pub async fn acknowledge(
    state: &AckState,
    acks: &[Ack],
    tenant: &Tenant,
) -> Result<Vec<AckOutcome>> {
    let mut outcomes = vec![AckOutcome::default(); acks.len()];
    if acks.is_empty() {
        return Ok(outcomes);
    }
    let mut db = Conn::open(state).await?;
    let mut first_failure = None;
    let mut answered = false;
    let planned = group_by_lease(acks);
    let groups: Vec<Vec<&Ack>> = planned
        .iter()
        .map(|p| p.members.iter().map(|&i| &acks[i]).collect())
        .collect();
    let mut fused = cover::fused_covers(state, &groups, &planned, tenant).await;
    for ((planned, group), fused) in planned.into_iter().zip(&groups).zip(&mut fused) {
        let applied = match fused.take() {
            Some(Ok(Some(settled))) => Ok(settled),
            Some(Err(e)) => Err(e),
            Some(Ok(None)) => {
                apply_group(state, &mut db, group, &planned.fence, tenant, false).await
            }
            None => apply_group(state, &mut db, group, &planned.fence, tenant, true).await,
        };
        db.end_group();
        let settled = match applied {
            Ok(settled) => {
                answered = true;
                settled
            }
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => {
                let first = group[0];
                let cause = failure_text(&e);
                tracing::error!(
                    partition_id = first.partition_id.get(), group = %first.group, error = %cause,
                    "ack group failed; its items are answered as not applied"
                );
                first_failure.get_or_insert(e);
                group
                    .iter()
                    .map(|_| AckOutcome::refused(format!("ack not applied: {cause}")))
                    .collect()
            }
        };
        for (i, outcome) in planned.members.into_iter().zip(settled) {
            outcomes[i] = outcome;
        }
    }
    match first_failure {
        Some(e) if !answered => Err(e),
        _ => Ok(outcomes),
    }
}

/// The pooled connection of one ack request. With ack fusion off it is taken once, up front,
/// and held across the request's groups. With fusion on it is taken only when a group needs
/// SQL of its own and given back after each group: a request parked on a flush must hold no
/// connection, or once more requests park than the pool is deep, the flush (which needs a
/// connection from the same pool) could never start.
struct Conn<'a> {
    state: &'a AckState,
    held: Option<(Permit, Object)>,
    keep: bool,
}

impl<'a> Conn<'a> {
    async fn open(state: &'a AckState) -> Result<Self> {
        let keep = state.fusion.is_none();
        let held = match keep {
            true => Some(Self::take(state).await?),
            false => None,
        };
        Ok(Conn { state, held, keep })
    }

    /// An ack permit (`accel/admission.rs`), then a pooled connection.
    async fn take(state: &AckState) -> Result<(Permit, Object)> {
        let permit = state.admission.acquire(Lane::Ack).await;
        Ok((permit, state.store.conn().await?))
    }

    async fn get(&mut self) -> Result<&Object> {
        if self.held.is_none() {
            self.held = Some(Self::take(self.state).await?);
        }
        self.held
            .as_ref()
            .map(|(_, conn)| conn)
            .ok_or_else(|| Error::internal("ack connection not taken"))
    }

    fn end_group(&mut self) {
        if !self.keep {
            self.held = None;
        }
    }
}

/// One group: the registry's fast path when it proves a cover (unless `try_fast` is false:
/// the cover was already tried), else the SQL call by hash and its [`conclude`]d outcomes.
async fn apply_group(
    state: &AckState,
    conn: &mut Conn<'_>,
    group: &[&Ack],
    fence: &[[u8; 16]],
    tenant: &Tenant,
    try_fast: bool,
) -> Result<Vec<AckOutcome>> {
    if try_fast {
        if let Some(settled) = cover::try_cover(state, conn, group, fence, tenant).await? {
            return Ok(settled);
        }
    }
    let db = conn.get().await?;
    let first = group[0];
    let hashes: Vec<[u8; 16]> = group.iter().map(|a| txn_hash(&a.transaction_id)).collect();
    let hash_refs: Vec<&[u8]> = hashes.iter().map(|h| h.as_slice()).collect();
    let fence_refs: Vec<&[u8]> = fence.iter().map(|h| h.as_slice()).collect();
    let statuses: Vec<&str> = group.iter().map(|a| a.status.as_sql()).collect();
    let mut call = HashAck {
        partition_id: first.partition_id.get(),
        group: &first.group,
        lease_id: first.lease_id.as_str(),
        hashes: &hash_refs,
        statuses: &statuses,
        fence: &fence_refs,
        tenant: tenant.id(),
        span: None,
    };
    let mut verdict = store::ack_by_hash(db, &call).await?;
    // The leased batch starts below the sidecar purge watermark: resolve it by position and
    // ask again (nothing changed in between; the second call re-judges under the lock).
    if let Some(purged) = verdict.purged_span.filter(|_| !verdict.ok) {
        let positions = span::read(db, call.partition_id, purged).await?;
        call.span = Some(&positions);
        verdict = store::ack_by_hash(db, &call).await?;
    }
    conclude(state, db, group, &verdict).await
}

/// What a committed verdict means for its group (plain acks and a transaction's alike): the
/// per-item outcomes, the DLQ hand-off it may ask for, and, when it released a lease, the
/// hot-list ring's update and (with data pending) the wake-up of parked pops. Fails only
/// when the hand-off's outcome is unknown.
pub async fn conclude(
    state: &AckState,
    db: &impl GenericClient,
    group: &[&Ack],
    verdict: &AckVerdict,
) -> Result<Vec<AckOutcome>> {
    let mut settled = settle_and_wake(state, verdict, group);
    if verdict.ok && verdict.dlq {
        hand_off(state, db, verdict, group, &mut settled).await?;
    }
    count(state, group, &settled);
    Ok(settled)
}

/// Counts the applied items by status, and the dead letters filed (docs/wire.md §15); a
/// refused item and a harmless `noop` changed nothing and are not counted.
fn count(state: &AckState, group: &[&Ack], outcomes: &[AckOutcome]) {
    use AckStatus::*;
    for status in [Completed, Failed, Retry, Dlq] {
        let applied = group
            .iter()
            .zip(outcomes)
            .filter(|(ack, o)| ack.status == status && o.success && !o.noop)
            .count() as u64;
        if applied > 0 {
            let labels = [("status", status.as_sql())];
            state.telemetry.count(&MESSAGES_ACKED, &labels, applied);
        }
    }
    let dead_lettered = outcomes.iter().filter(|o| o.dlq).count() as u64;
    if dead_lettered > 0 {
        state
            .telemetry
            .count(&MESSAGES_DEAD_LETTERED, &[], dead_lettered);
    }
}

/// [`settle`], and what the verdict means for the hot-list ring and parked pops: a released
/// lease (with data pending, a wake-up), and a retryDelay hold's late wake.
fn settle_and_wake(state: &AckState, verdict: &AckVerdict, group: &[&Ack]) -> Vec<AckOutcome> {
    if verdict.lease_released || verdict.wake_queue.is_some() {
        released(state, group[0], verdict.wake_queue.as_deref());
    }
    // A retryDelay hold: the pop woken now meets the hold and the ring puts the partition on
    // the wheel until it ends; the late wake serves the SQL path (ring off) on time too.
    if let (Some(queue), ms @ 1..) = (&verdict.wake_queue, verdict.wake_after_ms) {
        let hold = std::time::Duration::from_millis(ms);
        state.wake.wake_queue_after(queue, hold);
    }
    settle(verdict, group)
}

/// Files the dead letter `verdict` asks for and, when it was filed, marks the group's
/// outcomes: every item saw its lease released, and the items carrying the poison message's
/// transactionId were dead-lettered.
///
/// A refusal by PostgreSQL is not returned: the ack itself has already committed, and a
/// hand-off that did not happen leaves the lease to expire, so the message redelivers with its
/// retry budget still spent and the next failed ack files it again. Redelivery over loss. It
/// is logged, and the group's signal items (whose verdict was this dead letter) are answered
/// as refused with the cause: `success:true` would claim a verdict that did not take effect.
/// The same when the lease moved on between the ack's commit and the hand-off (it expired
/// and a pop claimed the span, or a concurrent ack under the lease filed it first): this
/// signal filed nothing, and the budget it found spent is still spent.
///
/// A connection lost on the way is returned: the dead letter may have committed before the
/// answer was lost, so neither `dlq:true` nor a refusal would be honest; the request's
/// answer is a 503 (outcome unknown), and the client's retry meets the settled state.
async fn hand_off(
    state: &AckState,
    db: &impl GenericClient,
    verdict: &AckVerdict,
    acks: &[&Ack],
    outcomes: &mut [AckOutcome],
) -> Result<()> {
    let (partition_id, group) = (acks[0].partition_id.get(), acks[0].group.as_str());
    let refusal = match dlq::file(db, partition_id, group, verdict, &nacks(acks)).await {
        Ok(HandOff::Filed(filed)) => {
            for (ack, outcome) in acks.iter().zip(outcomes.iter_mut()) {
                outcome.lease_released = true;
                outcome.dlq = ack.transaction_id == filed.transaction_id;
            }
            released(state, acks[0], filed.wake_queue.as_deref());
            return Ok(());
        }
        Ok(HandOff::RetainedAway) => return Ok(()),
        // The budget was spent and the dead letter is this signal's only effect: without it
        // `success:true, dlq:false` would claim one more accepted retry past `retryLimit`.
        Ok(HandOff::LeaseMovedOn(cause)) => format!(
            "the lease moved on before the dead letter was filed ({cause}); nothing was filed"
        ),
        Err(e) if e.is_unavailable() => return Err(e),
        Err(e) => {
            let cause = failure_text(&e);
            tracing::warn!(
                partition_id, group, off = verdict.off, error = %cause,
                "DLQ hand-off failed; the lease will expire and the message redeliver"
            );
            format!(
                "dead-letter hand-off failed ({cause}); the message redelivers when its lease expires"
            )
        }
    };
    for (ack, outcome) in acks.iter().zip(outcomes.iter_mut()) {
        if ack.status.is_signal() {
            *outcome = AckOutcome::refused(refusal.clone());
        }
    }
    Ok(())
}

/// A lease of `ack`'s (partition, group) was released; `pending_on`: the queue, when data is
/// left behind the cursor. The ring learns it (a nack redelivers at once instead of at the
/// lease's end; a drained partition leaves the ring), and so do the peers' rings when this
/// broker knows the partition's name (a ring that met the lease would otherwise hold the
/// partition until the lease's end). With data pending the queue's parked pops wake, here
/// and on the peers; a partition this broker does not know marks the rings for a reseed.
pub(crate) fn released(state: &AckState, ack: &Ack, pending_on: Option<&str>) {
    let pid = ack.partition_id.get();
    let named = state
        .hotlist
        .released(pid, &ack.group, pending_on.is_some());
    match (named, pending_on) {
        (Some((queue, partition)), Some(_)) => {
            state.wake.wake_released(&queue, &partition, &ack.group)
        }
        (Some((queue, partition)), None) => state.wake.tell_drained(&queue, &partition, &ack.group),
        (None, Some(queue)) => {
            state.hotlist.dirty(queue);
            state.wake.wake_queue(queue);
        }
        (None, None) => {}
    }
}

/// The group's nacks, whose errors give the dead letter its reason.
fn nacks<'a>(acks: &[&'a Ack]) -> Vec<Nack<'a>> {
    acks.iter()
        .filter(|a| a.status.is_signal())
        .map(|a| Nack {
            transaction_id: &a.transaction_id,
            error: a.error.as_deref(),
        })
        .collect()
}

/// One (partition, group, lease) group of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedGroup {
    /// Positions of its acks in the request.
    pub members: Vec<usize>,
    /// Hashes of the signals (failed, retry, dlq) the request's other groups carry for the
    /// same (partition, group): `log_ack_by_hash_v1` never moves the cursor onto or past
    /// them, whatever order the groups run in.
    pub fence: Vec<[u8; 16]>,
}

/// A signal's group slot and transactionId hash.
type SlotSignal = (usize, [u8; 16]);

/// The request's acks grouped by (partition, group, lease), each with its fence: groups
/// holding a lease first, then the lease-less ones, each kind in first-appearance order. A
/// lease-less group may end the lease (its advance reaches batch_end, or it acts on a nack),
/// which would refuse a later leased group of the same request; run the other way round,
/// both are judged on the state the client saw.
pub fn group_by_lease<'a>(acks: impl IntoIterator<Item = &'a Ack>) -> Vec<PlannedGroup> {
    let mut index: HashMap<(PartitionId, &str, &str), usize> = HashMap::new();
    let mut groups: Vec<PlannedGroup> = Vec::new();
    // Per (partition, group): (slot, hash) of every signal, to fence the other slots.
    let mut signals: HashMap<(PartitionId, &str), Vec<SlotSignal>> = HashMap::new();
    let mut cursor_of: Vec<(PartitionId, &str)> = Vec::new();
    let mut lease_less: Vec<bool> = Vec::new();
    for (i, a) in acks.into_iter().enumerate() {
        let key = (a.partition_id, a.group.as_str(), a.lease_id.as_str());
        let slot = *index.entry(key).or_insert_with(|| {
            groups.push(PlannedGroup {
                members: Vec::new(),
                fence: Vec::new(),
            });
            cursor_of.push((a.partition_id, a.group.as_str()));
            lease_less.push(a.lease_id.is_none());
            groups.len() - 1
        });
        groups[slot].members.push(i);
        if a.status.is_signal() {
            let entry = (slot, txn_hash(&a.transaction_id));
            signals
                .entry((a.partition_id, &a.group))
                .or_default()
                .push(entry);
        }
    }
    for (slot, group) in groups.iter_mut().enumerate() {
        let Some(theirs) = signals.get(&cursor_of[slot]) else {
            continue;
        };
        group.fence = theirs
            .iter()
            .filter(|(s, _)| *s != slot)
            .map(|&(_, h)| h)
            .collect();
        group.fence.sort_unstable();
        group.fence.dedup();
    }
    // A stable sort: first appearance is kept within each kind.
    let mut ordered: Vec<(bool, PlannedGroup)> = lease_less.into_iter().zip(groups).collect();
    ordered.sort_by_key(|&(lease_less, _)| lease_less);
    ordered.into_iter().map(|(_, g)| g).collect()
}

/// Per-item outcomes of one group's verdict: a refused group refuses every item; otherwise
/// completed items below the cursor are harmless `noop`s, while unresolvable items and
/// signals below the cursor fail with [`UNSETTLED`]. `dlq` is set later by the hand-off.
pub fn settle(verdict: &AckVerdict, group: &[&Ack]) -> Vec<AckOutcome> {
    if !verdict.ok {
        let error = verdict
            .error
            .clone()
            .unwrap_or_else(|| "acknowledgement refused".into());
        return group
            .iter()
            .map(|_| AckOutcome::refused(error.clone()))
            .collect();
    }
    // An ordinary ack leaves all three lists empty: then no item needs hashing a second time.
    let listed = !(verdict.unresolved_hashes.is_empty()
        && verdict.noop_hashes.is_empty()
        && verdict.stale_hashes.is_empty());
    group
        .iter()
        .map(|ack| {
            let hex = listed.then(|| to_hex(&txn_hash(&ack.transaction_id)));
            let in_list = |list: &[String]| hex.as_ref().is_some_and(|h| list.contains(h));
            let unresolved = in_list(&verdict.unresolved_hashes);
            let noop = !ack.status.is_signal() && in_list(&verdict.noop_hashes);
            let stale = ack.status.is_signal() && in_list(&verdict.stale_hashes);
            if unresolved || stale {
                AckOutcome {
                    lease_released: verdict.lease_released,
                    ..AckOutcome::refused(UNSETTLED)
                }
            } else {
                AckOutcome {
                    success: true,
                    error: None,
                    lease_released: verdict.lease_released,
                    dlq: false,
                    noop,
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
