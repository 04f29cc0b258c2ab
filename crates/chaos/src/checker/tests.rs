//! Each property on a hand-written history: the violating one is reported, the innocent
//! variant is not. (Pure logic; the run itself is exercised by tests/smoke.rs.)

use std::collections::HashSet;

use super::*;
use crate::history::{AckAnswer, AckRec, Delivery, FaultRec, HttpRec, Log, PushOutcome, PushRec};

const P: &str = "7";

fn db(dlq: &[(&str, i64, &str)]) -> DbState {
    DbState {
        dlq: dlq
            .iter()
            .map(|&(g, _, txn)| DlqKey {
                partition_id: P.into(),
                group: g.into(),
                txn: txn.into(),
            })
            .collect(),
        dlq_by_txn: dlq
            .iter()
            .map(|&(g, _, t)| ("q".into(), t.into(), g.into()))
            .collect(),
    }
}

fn push(txn: &str) -> PushRec {
    PushRec {
        queue: "q".into(),
        partition: "p".into(),
        txn: txn.into(),
        outcome: PushOutcome::Stored("queued".into()),
    }
}

fn delivery(group: &str, offset: i64, lease: &str, pop_sent: u64, received: u64) -> Delivery {
    Delivery {
        seq: 0,
        group: group.into(),
        queue: "q".into(),
        partition_id: P.into(),
        txn: format!("t{offset}"),
        offset,
        lease: lease.into(),
        lease_secs: 30,
        pop_sent,
        received,
    }
}

fn ack(
    call: u64,
    offset: i64,
    status: &'static str,
    lease: Option<&str>,
    sent: u64,
    answer: Option<(bool, bool)>,
) -> AckRec {
    AckRec {
        call,
        group: "g".into(),
        partition_id: P.into(),
        txn: format!("t{offset}"),
        offset,
        status,
        lease: lease.map(str::to_string),
        via_transaction: false,
        sent,
        answered: sent + 5,
        answer: answer.map(|(success, dlq)| AckAnswer {
            success,
            lease_released: success,
            dlq,
        }),
    }
}

fn log(deliveries: Vec<Delivery>, acks: Vec<AckRec>) -> Log {
    let mut log = Log::default();
    for (i, mut d) in deliveries.into_iter().enumerate() {
        d.seq = i as u64;
        log.deliveries.push(d);
    }
    log.acks = acks;
    log
}

fn violated(log: &Log, db: &DbState, groups: &[&str]) -> HashSet<&'static str> {
    check(log, db, groups, 2)
        .violations
        .iter()
        .map(|v| v.property)
        .collect()
}

#[test]
fn a_stored_message_missing_from_a_group_is_lost_unless_dead_lettered() {
    let mut l = log(vec![delivery("a", 0, "L", 0, 1)], vec![]);
    l.pushes.push(push("t0"));
    assert!(violated(&l, &db(&[]), &["a", "b"]).contains("lost"));
    assert!(violated(&l, &db(&[("b", 0, "t0")]), &["a", "b"]).is_empty());
}

#[test]
fn first_deliveries_must_follow_offsets_but_redeliveries_may_repeat() {
    let out_of_order = log(
        vec![delivery("g", 5, "", 0, 1), delivery("g", 3, "", 2, 3)],
        vec![],
    );
    assert!(violated(&out_of_order, &db(&[]), &[]).contains("first deliveries out of offset order"));
    let redelivery = log(
        vec![
            delivery("g", 3, "", 0, 1),
            delivery("g", 5, "", 2, 3),
            delivery("g", 3, "", 4, 5),
        ],
        vec![],
    );
    assert!(!violated(&redelivery, &db(&[]), &[]).contains("first deliveries out of offset order"));
}

#[test]
fn a_second_lease_while_the_first_is_live_is_reported() {
    let overlapping = log(
        vec![
            delivery("g", 0, "L1", 0, 10),
            delivery("g", 0, "L2", 900, 1_000),
        ],
        vec![],
    );
    assert!(violated(&overlapping, &db(&[]), &[]).contains("two live leases"));
    let released = log(
        vec![
            delivery("g", 0, "L1", 0, 10),
            delivery("g", 0, "L2", 900, 1_000),
        ],
        vec![ack(1, 0, "retry", Some("L1"), 500, Some((true, false)))],
    );
    assert!(!violated(&released, &db(&[]), &[]).contains("two live leases"));
}

#[test]
fn an_accepted_nack_needs_a_redelivery_a_dead_letter_or_a_lease_less_commit() {
    let nack = || ack(1, 3, "retry", Some("L"), 100, Some((true, false)));
    let skipped = log(vec![delivery("g", 3, "L", 0, 10)], vec![nack()]);
    assert!(violated(&skipped, &db(&[]), &[]).contains("nack skipped"));
    let redelivered = log(
        vec![
            delivery("g", 3, "L", 0, 10),
            delivery("g", 3, "M", 150, 200),
        ],
        vec![nack()],
    );
    assert!(!violated(&redelivered, &db(&[]), &[]).contains("nack skipped"));
    let superseded = log(
        vec![delivery("g", 3, "L", 0, 10)],
        vec![
            nack(),
            ack(2, 5, "completed", None, 150, Some((true, false))),
        ],
    );
    let verdict = check(&superseded, &db(&[]), &[], 2);
    assert!(verdict
        .violations
        .iter()
        .all(|v| v.property != "nack skipped"));
    assert_eq!(verdict.stats.nacks_superseded, 1);
}

#[test]
fn a_redelivery_after_an_answered_ack_is_reported_but_not_one_that_raced_it() {
    let acked = || ack(1, 0, "completed", Some("L1"), 20, Some((true, false)));
    let after = log(
        vec![
            delivery("g", 0, "L1", 0, 10),
            delivery("g", 0, "L2", 40, 50),
        ],
        vec![acked()],
    );
    assert!(violated(&after, &db(&[]), &[]).contains("redelivered after a successful ack"));
    let raced = log(
        vec![
            delivery("g", 0, "L1", 0, 10),
            delivery("g", 0, "L2", 22, 50),
        ],
        vec![acked()],
    );
    assert!(!violated(&raced, &db(&[]), &[]).contains("redelivered after a successful ack"));
}

#[test]
fn dead_letters_follow_the_retry_budget() {
    let fail = |call, sent, dlq| ack(call, 0, "failed", Some("L"), sent, Some((true, dlq)));
    let d = db(&[("g", 0, "t0")]);
    let early = log(
        vec![delivery("g", 0, "L", 0, 1)],
        vec![fail(1, 10, false), fail(2, 20, true)],
    );
    assert!(violated(&early, &d, &[]).contains("dlq budget"));
    let spent = log(
        vec![delivery("g", 0, "L", 0, 1)],
        vec![fail(1, 10, false), fail(2, 20, false), fail(3, 30, true)],
    );
    assert!(violated(&spent, &d, &[]).is_empty());
    let late = log(
        vec![delivery("g", 0, "L", 0, 1)],
        vec![fail(1, 10, false), fail(2, 20, false), fail(3, 30, false)],
    );
    assert!(violated(&late, &db(&[]), &[]).contains("dlq budget"));
    assert!(violated(&spent, &db(&[]), &[]).contains("dlq answer without row"));
    assert!(
        violated(&log(vec![delivery("g", 0, "L", 0, 1)], vec![]), &d, &[])
            .contains("dlq row without cause")
    );
}

#[test]
fn each_stored_copy_of_a_transaction_id_has_its_own_retry_budget() {
    // "dup" stored at offsets 0 and 3: the first copy spends its budget and is filed, the
    // second is nacked once. Three accepted `failed` of one transactionId, within budget.
    let fail = |call, offset, sent, dlq| {
        let mut a = ack(call, offset, "failed", Some("L"), sent, Some((true, dlq)));
        a.txn = "dup".into();
        a
    };
    let copy = |offset, at| {
        let mut d = delivery("g", offset, "L", at, at + 1);
        d.txn = "dup".into();
        d
    };
    let l = log(
        vec![copy(0, 0), copy(3, 40)],
        vec![
            fail(1, 0, 10, false),
            fail(2, 0, 20, false),
            fail(3, 0, 30, true),
            fail(4, 3, 50, false),
        ],
    );
    assert!(violated(&l, &db(&[("g", 0, "dup")]), &[]).is_empty());
}

#[test]
fn server_errors_are_tolerated_only_around_an_outage() {
    let mut l = Log::default();
    l.http.push(HttpRec {
        route: "pop",
        status: 500,
        at: 10_000_000,
        detail: String::new(),
    });
    assert!(violated(&l, &db(&[]), &[]).contains("5xx outside an outage"));
    l.faults.push(FaultRec {
        kind: "x",
        start: 1_000_000,
        end: 8_000_000,
        outage: true,
        detail: String::new(),
    });
    assert!(violated(&l, &db(&[]), &[]).is_empty());
}

#[test]
fn an_accepted_dlq_ack_must_dead_letter() {
    let d = delivery("g", 0, "L", 0, 1);
    let refused_filing = log(
        vec![d.clone()],
        vec![ack(1, 0, "dlq", Some("L"), 10, Some((true, false)))],
    );
    assert!(violated(&refused_filing, &db(&[]), &[]).contains("dlq ack not dead-lettered"));
    let filed = log(
        vec![d],
        vec![ack(1, 0, "dlq", Some("L"), 10, Some((true, true)))],
    );
    assert!(violated(&filed, &db(&[("g", 0, "t0")]), &[]).is_empty());
}

#[test]
fn an_ack_of_a_transaction_id_stored_twice_may_take_either_copy() {
    // "tx" sits at offsets 1 and 5; the `dlq` of the copy at 5 is filed (and clamps) at 1.
    let mut first = delivery("g", 1, "L", 0, 1);
    let mut second = delivery("g", 5, "L", 0, 1);
    first.txn = "tx".into();
    second.txn = "tx".into();
    let middle = delivery("g", 3, "L", 0, 1);
    let mut dlq = ack(1, 5, "dlq", Some("L"), 10, Some((true, true)));
    dlq.txn = "tx".into();
    let completed = ack(1, 3, "completed", Some("L"), 10, Some((true, false)));
    let again = delivery("g", 3, "M", 20, 21);
    let l = log(vec![first, middle, second, again], vec![dlq, completed]);
    assert!(violated(&l, &db(&[("g", 1, "tx")]), &[]).is_empty());
}

#[test]
fn an_ack_refused_while_its_lease_was_live_is_reported_unless_something_ended_it() {
    // lease_secs 30: live until 30 000 000 µs after the pop was sent.
    let refused = |sent| ack(1, 0, "completed", Some("L"), sent, Some((false, false)));
    let early = log(vec![delivery("g", 0, "L", 0, 10)], vec![refused(20)]);
    assert!(violated(&early, &db(&[]), &[]).contains("ack refused under a live lease"));
    let late = log(
        vec![delivery("g", 0, "L", 0, 10)],
        vec![refused(30_000_000)],
    );
    assert!(!violated(&late, &db(&[]), &[]).contains("ack refused under a live lease"));
    let overtaken = log(
        vec![delivery("g", 0, "L", 0, 10)],
        vec![
            ack(2, 0, "completed", None, 15, Some((true, false))),
            refused(20),
        ],
    );
    assert!(!violated(&overtaken, &db(&[]), &[]).contains("ack refused under a live lease"));
    let mut outage = log(vec![delivery("g", 0, "L", 0, 10)], vec![refused(20)]);
    outage.faults.push(FaultRec {
        kind: "postgres crash",
        start: 0,
        end: 5,
        outage: true,
        detail: String::new(),
    });
    assert!(!violated(&outage, &db(&[]), &[]).contains("ack refused under a live lease"));
}
