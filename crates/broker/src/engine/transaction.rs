//! Transactions (`POST /api/v1/transaction`, docs/wire.md §10): pushes and acks applied in one
//! `queen.log_transaction_wire_v1` call, one PostgreSQL transaction, all or nothing.
//!
//! Every body form (JSON now, binary `QTB1` later) parses into a [`TxnRequest`] of flattened
//! operations and calls [`run`]. Pushes go through the same validation and segment builder as
//! plain pushes; acks are grouped by (partition, group, lease) like plain acks, so a nack is
//! never skipped by a later completed ack of the same bundle, and their verdicts map back with
//! the same rules. A group the ack registry proves (its whole batch, all completed, under its
//! lease) goes in the positional form instead of by hash (docs/engine.md §6.8). The DLQ
//! hand-off and long-poll wake-ups happen after the commit. The `timers` rider (and the timer
//! wheel's fire, engine/timer_wheel/fire.rs) rides the same call.

use std::collections::{HashMap, HashSet};
use std::ops::Deref;
use std::sync::Arc;

use queen_proto::frame::{Frame, ENCRYPTED};
use queen_proto::hash::txn_hash;
use queen_proto::LeaseId;
use uuid::Uuid;

use crate::accel::admission::Lane;
use crate::engine::ack::AckState;
use crate::engine::ack::{self, Ack, AckOutcome};
use crate::engine::encryption::Encryption;
use crate::engine::kv::KvLost;
use crate::engine::push::commit::after_commit_trouble;
use crate::engine::push::segment::{build_segment, BuiltSegment, INLINE_BUILD_BYTES};
use crate::engine::push::spool;
use crate::engine::push::PushState;
use crate::engine::push::{check_item, partition_or_default, transaction_id_or_id, PushItem};
use crate::engine::tenant::{self, Tenant};
use crate::engine::timers::{self, TimerOp, TimerOutcome};
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::ack::PurgedSpan;
use crate::store::push::{SegmentResult, SegmentWrite};
use crate::store::transaction::{self as store, WireAck, WireCover, WireRefusal};

/// One flattened operation: each pushed item is one, each ack is one.
#[derive(Debug, Clone)]
pub enum TxnOp {
    Push(PushItem),
    Ack(Ack),
}

/// A parsed bundle.
#[derive(Debug, Clone, Default)]
pub struct TxnRequest {
    pub ops: Vec<TxnOp>,
    /// The distinct lease ids the client holds; an ack without its own leaseId borrows the
    /// only one when there is exactly one.
    pub required_leases: Vec<LeaseId>,
    /// The `kv` rider: checked key-value operations (`http/kv/parse.rs`), applied by
    /// `queen.kv_apply_v1` inside the bundle's call, before any partition is locked.
    pub kv: Vec<serde_json::Value>,
    /// The `timers` rider (engine/timers.rs), applied in the same PostgreSQL transaction.
    pub timers: Vec<TimerOp>,
    /// A streams cycle's own part (engine/streams.rs): identity, answer, state operations and
    /// lease release, run by sql/functions/streams.sql around the bundle's pushes and acks.
    pub stream: Option<serde_json::Value>,
}

/// The result of one operation of a committed bundle, index-aligned with `TxnRequest::ops`.
#[derive(Debug, Clone)]
pub enum OpResult {
    Push {
        queue: String,
        transaction_id: String,
        message_id: Uuid,
        /// A repeat of an earlier item of the bundle: no frame of its own.
        duplicate: bool,
    },
    Ack {
        transaction_id: String,
        outcome: AckOutcome,
    },
    /// A `kv` rider operation's verdict (sql/functions/kv.sql); its flat index follows every
    /// push item and ack.
    Kv {
        op_index: usize,
        op: serde_json::Value,
        verdict: serde_json::Value,
    },
    /// A `timers` rider operation; these follow the `kv` rider's results (the flat index).
    Timer {
        op_index: usize,
        outcome: TimerOutcome,
    },
}

/// Why a bundle was rolled back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackReason {
    RejectedAck,
    Duplicate,
    /// A push would take its queue past its `maxSize`.
    Full,
    /// A timer fire's claim was taken over (the wheel's own bundles only).
    TimerLost,
}

impl RollbackReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RollbackReason::RejectedAck => "rejected_ack",
            RollbackReason::Duplicate => "duplicate",
            RollbackReason::Full => "full",
            RollbackReason::TimerLost => "timer_claim_lost",
        }
    }
}

/// What became of a bundle. A malformed one never gets here: it is an `Error::BadRequest`.
#[derive(Debug, Clone)]
pub enum TxnOutcome {
    Committed(Vec<OpResult>),
    /// Nothing was written; `error` ends in "transaction rolled back".
    RolledBack {
        reason: RollbackReason,
        error: String,
    },
    /// A `required` rider operation's precondition did not hold: nothing was written.
    /// `failed_index` is its flat index (after every push item and ack).
    PreconditionLost {
        lost: KvLost,
        failed_index: usize,
    },
    /// The bundle's stream cycle was committed before: nothing was written; the answer it
    /// was given then.
    Replayed(serde_json::Value),
}

/// The pushes of a bundle grouped into one segment per (queue, partition).
struct PushPlan {
    segments: Vec<PlannedSegment>,
    /// Stamped on every frame of the bundle.
    producer_sub: Option<Arc<str>>,
    /// Per op index of a push: its result (message id fixed before the write).
    results: HashMap<usize, OpResult>,
}

struct PlannedSegment {
    queue: String,
    partition: String,
    /// Its payloads are sealed (the queue encrypts, as last learned).
    encrypted: bool,
    /// (message id, transactionId, item) of each leader, in op order.
    frames: Vec<(Uuid, String, PushItem)>,
}

/// What a transaction writes through: the push concept's state (the spool's refusal, segments,
/// the commit's effects) and the ack concept's (covers and their verdicts). It derefs to the
/// part both share.
#[derive(Clone, Copy)]
pub struct Writers<'a> {
    pub push: &'a PushState,
    pub ack: &'a AckState,
}

impl Deref for Writers<'_> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        self.push
    }
}

/// Applies `req` atomically for `tenant` (its queue names qualified, its acks refused on other
/// tenants' partitions); its pushed messages carry `producer_sub` (the caller's validated
/// identity, `None` with auth off).
pub async fn run(
    state: Writers<'_>,
    mut req: TxnRequest,
    producer_sub: Option<Arc<str>>,
    tenant: &Tenant,
) -> Result<TxnOutcome> {
    if req.ops.is_empty() && req.kv.is_empty() && req.timers.is_empty() && req.stream.is_none() {
        return Err(Error::bad("transaction has no operations"));
    }
    timers::check(&req.timers)?;
    let mut pushes_any = false;
    for (index, op) in req.ops.iter_mut().enumerate() {
        if let TxnOp::Push(item) = op {
            check_item(index, item)?;
            tenant::qualify_in_place(tenant, "queue", &mut item.queue)?;
            pushes_any = true;
        }
    }
    if pushes_any {
        spool::refuse_transaction(state.push).await?;
    }
    lend_leases(&mut req);

    let acks: Vec<(usize, &Ack)> = req
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            TxnOp::Ack(a) => Some((i, a)),
            TxnOp::Push(_) => None,
        })
        .collect();
    let planned = ack::group_by_lease(acks.iter().map(|&(_, a)| a));
    let ack_groups: Vec<Vec<(usize, &Ack)>> = planned
        .iter()
        .map(|g| g.members.iter().map(|&m| acks[m]).collect())
        .collect();
    let mut wire_acks: Vec<WireAck<'_>> = ack_groups
        .iter()
        .zip(planned)
        .map(|(members, planned)| {
            let first = members[0].1;
            let group: Vec<&Ack> = members.iter().map(|(_, a)| *a).collect();
            let cover = ack::cover::proven_cover(state.ack, &group, &planned.fence, tenant);
            WireAck {
                partition_id: first.partition_id.get(),
                group: &first.group,
                lease_id: first.lease_id.as_str(),
                hashes: members
                    .iter()
                    .map(|(_, a)| txn_hash(&a.transaction_id))
                    .collect(),
                statuses: members.iter().map(|(_, a)| a.status.as_sql()).collect(),
                fence: planned.fence,
                cover: cover.map(|c| WireCover {
                    batch_end: c.batch_end,
                    frames: c.frames,
                }),
                span: None,
            }
        })
        .collect();

    // Sealed before the permit and the connection are taken; again only after a refusal.
    let mut timer_ops = timers::to_sql(&req.timers, tenant, &state.encryption)?;
    // A transaction is a push commit first: it takes the push lane's permit.
    let _permit = state.admission.acquire(Lane::Push).await;
    let db = state.store.conn().await?;
    let mut plan = plan_pushes(&req.ops, producer_sub);
    // A queue that turned out to encrypt is sealed and the bundle (rolled back) runs again;
    // once per queue, so this ends.
    let mut learned = HashSet::new();
    let (plan, built, committed) = loop {
        for seg in &mut plan.segments {
            seg.encrypted = state.encryption.wants(&seg.queue);
        }
        let (planned, built) = build_segments(&state, plan).await?;
        plan = planned;
        let pushes = segment_writes(&plan, &built);
        let answered = store::transaction_wire(
            &db,
            &pushes,
            &wire_acks,
            &req.kv,
            &timer_ops,
            req.stream.as_ref(),
            tenant.id(),
        )
        .await;
        state.store.charge(&db, SegmentWrite::load(&pushes));
        let refusal = match answered? {
            Ok(committed) => break (plan, built, committed),
            Err(refusal) => refusal,
        };
        if matches!(refusal, WireRefusal::RejectedAck(_)) && uncover(state.ack, &mut wire_acks) {
            // A cover PostgreSQL refused (the lease or the batch changed since the pop) rolled
            // the bundle back; the hash form is the authority, so the bundle runs again with it.
            continue;
        }
        let (reason, error) = match refusal {
            // A hash-form ack's leased batch lost its hash rows: resolved by position from
            // the segments (engine/ack/span.rs), the bundle runs again. Each group needs it
            // once at most; a group asking twice is refused like any unresolvable ack.
            WireRefusal::PurgedSpan(needed) => {
                if let Some(ack) = wire_acks.iter_mut().find(|a| {
                    a.span.is_none()
                        && a.cover.is_none()
                        && a.partition_id == needed.partition_id
                        && a.group == needed.group
                        && a.lease_id == needed.worker
                }) {
                    let purged = PurgedSpan {
                        from: needed.from,
                        to: needed.to,
                    };
                    ack.span = Some(ack::span::read(&db, needed.partition_id, purged).await?);
                    continue;
                }
                let error = format!(
                    "ack of partition {} group \"{}\" is unresolvable; transaction rolled back",
                    needed.partition_id, needed.group
                );
                (RollbackReason::RejectedAck, error)
            }
            WireRefusal::Encrypt(queue) if learned.insert(queue.clone()) => {
                state.encryption.learn(&queue, true);
                timer_ops = timers::to_sql(&req.timers, tenant, &state.encryption)?;
                continue;
            }
            WireRefusal::Encrypt(queue) => {
                return Err(Error::internal(format!(
                    "queue {queue} refused a sealed transaction push or timer"
                )))
            }
            WireRefusal::Duplicate(error) => (RollbackReason::Duplicate, error),
            WireRefusal::RejectedAck(error) => (RollbackReason::RejectedAck, error),
            WireRefusal::Full(error) => (RollbackReason::Full, error),
            WireRefusal::TimerLost(error) => (RollbackReason::TimerLost, error),
            WireRefusal::Replayed(answer) => return Ok(TxnOutcome::Replayed(answer)),
            WireRefusal::KvPrecondition(lost) => {
                let failed_index = req.ops.len() + lost.op_index;
                return Ok(TxnOutcome::PreconditionLost { lost, failed_index });
            }
        };
        let error = tenant::local_text(&error).into_owned();
        return Ok(TxnOutcome::RolledBack { reason, error });
    };
    let pushes = segment_writes(&plan, &built);
    // Committed: the shared post-commit step, then the ack work. An answer of the SQL that
    // makes no sense is logged; the bundle committed, so it is answered as committed.
    if let Some(bad) = committed
        .pushes
        .iter()
        .find(|r| !matches!(r, SegmentResult::Queued { .. }))
    {
        after_commit_trouble(&format!(
            "log_transaction_wire_v1 committed a non-queued push: {bad:?}"
        ));
    }
    state.push.effects.committed(&pushes, &committed.pushes);

    let mut results = plan.results;
    for (members, verdict) in ack_groups.iter().zip(&committed.acks) {
        let group: Vec<&Ack> = members.iter().map(|(_, a)| *a).collect();
        let outcomes = ack::conclude(state.ack, &db, &group, verdict).await?;
        for ((index, a), outcome) in members.iter().zip(outcomes) {
            results.insert(
                *index,
                OpResult::Ack {
                    transaction_id: a.transaction_id.clone(),
                    outcome,
                },
            );
        }
    }
    let mut ordered = (0..req.ops.len())
        .map(|i| {
            results
                .remove(&i)
                .ok_or_else(|| Error::internal(format!("operation {i} has no result")))
        })
        .collect::<Result<Vec<_>>>()?;
    ordered.extend(
        req.kv
            .iter()
            .zip(committed.kv)
            .enumerate()
            .map(|(op_index, (op, verdict))| OpResult::Kv {
                op_index,
                op: op["op"].clone(),
                verdict,
            }),
    );
    timers::committed(&state, &req.timers);
    let timer_outcomes = timers::outcomes(&req.timers, committed.timers);
    ordered.extend(
        timer_outcomes
            .into_iter()
            .enumerate()
            .map(|(op_index, outcome)| OpResult::Timer { op_index, outcome }),
    );
    Ok(TxnOutcome::Committed(ordered))
}

/// The bundle's pushes as the SQL takes them, one per planned segment.
fn segment_writes<'a>(plan: &'a PushPlan, built: &'a [BuiltSegment]) -> Vec<SegmentWrite<'a>> {
    plan.segments
        .iter()
        .zip(built)
        .map(|(seg, b)| SegmentWrite {
            queue: &seg.queue,
            partition: &seg.partition,
            msg_count: b.msg_count,
            hashes: &b.hashes,
            // The bundle's SQL probes the whole window itself.
            verified: -1,
            blob: &b.blob,
            frames: Some(&b.frames),
            encrypted: seg.encrypted,
        })
        .collect()
}

/// Turns the bundle's positional acks back into the hash form; whether there were any. Each
/// counts as a refused hit: the rollback does not say which ack was refused.
fn uncover(state: &AckState, acks: &mut [WireAck<'_>]) -> bool {
    let mut any = false;
    for ack in acks.iter_mut() {
        if ack.cover.take().is_some() {
            state.registry.refused();
            any = true;
        }
    }
    any
}

/// One segment per planned (queue, partition). Compression is CPU-bound, so a large bundle
/// (the body limit allows tens of MiB) builds on the blocking pool, not on an async worker.
async fn build_segments(state: &Shared, plan: PushPlan) -> Result<(PushPlan, Vec<BuiltSegment>)> {
    let bytes: usize = plan
        .segments
        .iter()
        .flat_map(|seg| &seg.frames)
        .map(|(_, txn, item)| txn.len() + item.payload.len())
        .sum();
    let (level, encryption) = (state.cfg.zstd_level, state.encryption.clone());
    if bytes <= INLINE_BUILD_BYTES {
        let built = build_planned(&plan, level, &encryption)?;
        return Ok((plan, built));
    }
    tokio::task::spawn_blocking(move || {
        build_planned(&plan, level, &encryption).map(|built| (plan, built))
    })
    .await
    .map_err(|e| Error::internal(format!("segment build task failed: {e}")))?
}

fn build_planned(
    plan: &PushPlan,
    level: i32,
    encryption: &Encryption,
) -> Result<Vec<BuiltSegment>> {
    plan.segments
        .iter()
        .map(|seg| {
            let sealed: Vec<Vec<u8>> = if seg.encrypted {
                seg.frames
                    .iter()
                    .map(|(_, _, item)| encryption.seal(&seg.queue, &item.payload))
                    .collect::<Result<_>>()?
            } else {
                Vec::new()
            };
            let frames: Vec<Frame<'_>> = seg
                .frames
                .iter()
                .enumerate()
                .map(|(k, (id, txn, item))| Frame {
                    flags: if seg.encrypted { ENCRYPTED } else { 0 },
                    message_id: *id.as_bytes(),
                    trace_id: item.trace_id.map(|t| *t.as_bytes()),
                    transaction_id: txn,
                    producer_sub: plan.producer_sub.as_deref(),
                    payload: sealed.get(k).map_or(&item.payload[..], Vec::as_slice),
                })
                .collect();
            build_segment(&frames, level).map_err(|e| Error::bad(format!("push: {e}")))
        })
        .collect()
}

/// An ack without its own lease borrows the bundle's only required lease (docs/wire.md §10.1).
fn lend_leases(req: &mut TxnRequest) {
    let distinct: HashSet<&LeaseId> = req
        .required_leases
        .iter()
        .filter(|l| !l.is_none())
        .collect();
    if distinct.len() != 1 {
        return;
    }
    let Some(only) = distinct.into_iter().next().cloned() else {
        return;
    };
    for op in &mut req.ops {
        if let TxnOp::Ack(a) = op {
            if a.lease_id.is_none() {
                a.lease_id = only.clone();
            }
        }
    }
}

/// Mints ids, applies the defaults and in-bundle dedup (a repeat of (queue, partition,
/// transactionId) is a follower: no frame, the leader's id), and groups leaders by
/// (queue, partition).
fn plan_pushes(ops: &[TxnOp], producer_sub: Option<Arc<str>>) -> PushPlan {
    let mut segments: Vec<PlannedSegment> = Vec::new();
    let mut segment_of: HashMap<(String, String), usize> = HashMap::new();
    let mut leaders: HashMap<(usize, String), Uuid> = HashMap::new();
    let mut results = HashMap::new();
    for (index, op) in ops.iter().enumerate() {
        let TxnOp::Push(item) = op else { continue };
        let minted = item.message_id.unwrap_or_else(queen_proto::new_v7);
        let partition = partition_or_default(item.partition.clone());
        let txn = transaction_id_or_id(item.transaction_id.clone(), minted);
        let seg = *segment_of
            .entry((item.queue.clone(), partition.clone()))
            .or_insert_with(|| {
                segments.push(PlannedSegment {
                    queue: item.queue.clone(),
                    partition,
                    encrypted: false,
                    frames: Vec::new(),
                });
                segments.len() - 1
            });
        let (message_id, duplicate) = match leaders.get(&(seg, txn.clone())) {
            Some(&leader) => (leader, true),
            None => {
                leaders.insert((seg, txn.clone()), minted);
                segments[seg]
                    .frames
                    .push((minted, txn.clone(), item.clone()));
                (minted, false)
            }
        };
        results.insert(
            index,
            OpResult::Push {
                queue: item.queue.clone(),
                transaction_id: txn,
                message_id,
                duplicate,
            },
        );
    }
    PushPlan {
        segments,
        producer_sub,
        results,
    }
}
