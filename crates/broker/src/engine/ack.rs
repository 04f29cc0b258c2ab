//! Acknowledgements (docs/spec/ack-internals.md, docs/wire.md §8): status normalisation, grouping by
//! (partition, group, lease), one `queen.log_ack_by_hash_v1` call per group, the mapping of
//! its hash lists back to per-item verdicts, and the DLQ hand-off a verdict may ask for.
//!
//! The broker hashes; SQL only compares bytes. Every decision about the cursor is SQL's.

use std::collections::HashMap;

use queen_proto::hash::{to_hex, txn_hash};

use deadpool_postgres::GenericClient;

use crate::engine::dlq;
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::ack::{self as store, HashAckVerdict};
use crate::store::migrations::db_message;

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
    pub partition_id: i64,
    pub status: AckStatus,
    /// The nack reason, filed as the DLQ row's error text.
    pub error: Option<String>,
    /// Consumer group; `__QUEUE_MODE__` for queue mode.
    pub group: String,
    /// The lease the client holds; empty for a lease-less ack.
    pub lease_id: String,
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
///
/// Each group is its own transaction, so a group that fails (a database error) does not undo
/// those before it: its items fail with the cause and the later groups still run. Only when
/// no group reached PostgreSQL at all does the request fail as a whole (nothing happened, so
/// retrying it is safe).
pub async fn acknowledge(state: &AppState, acks: &[Ack]) -> Result<Vec<AckOutcome>> {
    let mut outcomes = vec![AckOutcome::default(); acks.len()];
    if acks.is_empty() {
        return Ok(outcomes);
    }
    let db = state.store.conn().await?;
    let mut first_failure = None;
    let mut answered = false;
    for planned in group_by_lease(acks) {
        let group: Vec<&Ack> = planned.members.iter().map(|&i| &acks[i]).collect();
        let settled = match apply_group(state, &db, &group, &planned.fence).await {
            Ok(settled) => {
                answered = true;
                settled
            }
            Err(e) => {
                let first = group[0];
                let cause = failure_text(&e);
                tracing::error!(
                    partition_id = first.partition_id, group = %first.group, error = %cause,
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

/// One group's SQL call, its verdict mapped to outcomes, the DLQ hand-off and wake-ups.
async fn apply_group(
    state: &AppState,
    db: &impl GenericClient,
    group: &[&Ack],
    fence: &[[u8; 16]],
) -> Result<Vec<AckOutcome>> {
    let first = group[0];
    let hashes: Vec<[u8; 16]> = group.iter().map(|a| txn_hash(&a.transaction_id)).collect();
    let hash_refs: Vec<&[u8]> = hashes.iter().map(|h| h.as_slice()).collect();
    let fence_refs: Vec<&[u8]> = fence.iter().map(|h| h.as_slice()).collect();
    let statuses: Vec<&str> = group.iter().map(|a| a.status.as_sql()).collect();
    let verdict = store::ack_by_hash(
        db,
        first.partition_id,
        &first.group,
        &first.lease_id,
        &hash_refs,
        &statuses,
        &fence_refs,
    )
    .await?;
    let mut settled = settle(&verdict, group);
    if verdict.ok && verdict.dlq {
        dlq::hand_off(
            state,
            db,
            first.partition_id,
            &first.group,
            &verdict,
            group,
            &mut settled,
        )
        .await;
    }
    if let Some(queue) = &verdict.wake_queue {
        state.wake.wake_queue(queue);
    }
    Ok(settled)
}

/// The cause of a failed group as its items report it: a database error carries the
/// server's own message, which the error's display hides.
pub(crate) fn failure_text(e: &Error) -> String {
    match e {
        Error::Db(db) => format!("database error: {}", db_message(db)),
        other => other.to_string(),
    }
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
    let mut index: HashMap<(i64, &str, &str), usize> = HashMap::new();
    let mut groups: Vec<PlannedGroup> = Vec::new();
    // Per (partition, group): (slot, hash) of every signal, to fence the other slots.
    let mut signals: HashMap<(i64, &str), Vec<SlotSignal>> = HashMap::new();
    let mut cursor_of: Vec<(i64, &str)> = Vec::new();
    let mut lease_less: Vec<bool> = Vec::new();
    for (i, a) in acks.into_iter().enumerate() {
        let key = (a.partition_id, a.group.as_str(), a.lease_id.as_str());
        let slot = *index.entry(key).or_insert_with(|| {
            groups.push(PlannedGroup {
                members: Vec::new(),
                fence: Vec::new(),
            });
            cursor_of.push((a.partition_id, a.group.as_str()));
            lease_less.push(a.lease_id.is_empty());
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
pub fn settle(verdict: &HashAckVerdict, group: &[&Ack]) -> Vec<AckOutcome> {
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
mod tests {
    use super::*;

    fn ack(txn: &str, status: AckStatus) -> Ack {
        Ack {
            transaction_id: txn.into(),
            partition_id: 1,
            status,
            error: None,
            group: "g".into(),
            lease_id: "w".into(),
        }
    }

    #[test]
    fn statuses_normalise_like_the_wire_says() {
        for text in [
            None,
            Some(""),
            Some("completed"),
            Some("SUCCESS"),
            Some("acked"),
            Some("ok"),
        ] {
            assert_eq!(AckStatus::normalise(text), AckStatus::Completed, "{text:?}");
        }
        assert_eq!(AckStatus::normalise(Some("retry")), AckStatus::Retry);
        assert_eq!(AckStatus::normalise(Some("dlq")), AckStatus::Dlq);
        for text in ["failed", "nope", "error"] {
            assert_eq!(
                AckStatus::normalise(Some(text)),
                AckStatus::Failed,
                "{text}"
            );
        }
    }

    #[test]
    fn leased_groups_come_first_and_nacks_fence_the_others() {
        let mut acks = vec![
            ack("a", AckStatus::Completed),
            ack("b", AckStatus::Completed),
        ];
        acks[1].partition_id = 2;
        acks.insert(
            0,
            Ack {
                lease_id: String::new(),
                ..ack("d", AckStatus::Completed)
            },
        );
        acks.push(ack("c", AckStatus::Failed));
        let groups = group_by_lease(&acks);
        let members: Vec<&[usize]> = groups.iter().map(|g| g.members.as_slice()).collect();
        // Leased groups run before lease-less ones.
        assert_eq!(members, [&[1, 3][..], &[2], &[0]]);
        // The failed "c" fences the lease-less group of its (partition, group) only.
        let fences: Vec<&[[u8; 16]]> = groups.iter().map(|g| g.fence.as_slice()).collect();
        assert_eq!(fences, [&[][..], &[], &[txn_hash("c")]]);
    }

    #[test]
    fn settle_maps_hash_lists_back_to_items() {
        let items = [
            ack("done-before", AckStatus::Completed),
            ack("nacked-before", AckStatus::Failed),
            ack("unknown", AckStatus::Completed),
            ack("fresh", AckStatus::Completed),
        ];
        let refs: Vec<&Ack> = items.iter().collect();
        let hex = |t: &str| to_hex(&txn_hash(t));
        let verdict = HashAckVerdict {
            ok: true,
            lease_released: true,
            noop_hashes: vec![hex("done-before")],
            stale_hashes: vec![hex("nacked-before")],
            unresolved_hashes: vec![hex("unknown")],
            ..Default::default()
        };
        let out = settle(&verdict, &refs);
        assert!(out[0].success && out[0].noop && out[0].error.is_none());
        assert!(!out[1].success && out[1].error.as_deref() == Some(UNSETTLED));
        assert!(!out[2].success && out[2].error.as_deref() == Some(UNSETTLED));
        assert!(out[3].success && !out[3].noop && out[3].lease_released);

        let refused = HashAckVerdict {
            ok: false,
            error: Some("invalid or expired lease".into()),
            ..Default::default()
        };
        assert!(settle(&refused, &refs)
            .iter()
            .all(|o| !o.success && o.error.as_deref() == Some("invalid or expired lease")));
    }
}
