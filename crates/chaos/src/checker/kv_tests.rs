//! The key-value linearizability check on hand-written histories of one key: a linearizable
//! one (with concurrent, refused and unanswered writes) passes; each anomaly is reported.

use super::*;
use crate::history::{KvAnswer, KvRec, KvWrite, Log};

fn put(value: &str, expect: Option<i64>, invoked: u64, completed: u64, answer: KvAnswer) -> KvRec {
    KvRec {
        key: "k".into(),
        write: Some(KvWrite {
            value: value.into(),
            expect,
        }),
        invoked,
        completed,
        answer,
    }
}

fn seen(version: i64, value: &str) -> KvAnswer {
    KvAnswer::Observed {
        version,
        value: Some(value.into()),
    }
}

fn get(invoked: u64, completed: u64, version: i64, value: &str) -> KvRec {
    KvRec {
        key: "k".into(),
        write: None,
        invoked,
        completed,
        answer: seen(version, value),
    }
}

fn violations(kv: Vec<KvRec>) -> Vec<String> {
    let mut log = Log::default();
    log.kv = kv;
    let mut v = Vec::new();
    let mut stats = Stats::default();
    kv::linearizable(&log, &mut v, &mut stats);
    assert!(v.iter().all(|x| x.property == kv::PROPERTY));
    v.into_iter().map(|x| x.detail).collect()
}

/// Created at 1; a CAS on 1 wins at 5 while another on 1 is refused (sees 5); an unanswered
/// write lands at 6 (a get sees it); a CAS on 6 wins at 7.
fn linearizable() -> Vec<KvRec> {
    vec![
        put("a", Some(0), 0, 10, KvAnswer::Applied(1)),
        get(11, 20, 1, "a"),
        put("b", Some(1), 21, 30, KvAnswer::Applied(5)),
        put("c", Some(1), 22, 31, seen(5, "b")),
        get(21, 29, 1, "a"),
        put("d", None, 25, 40, KvAnswer::Unknown),
        get(26, 35, 6, "d"),
        put("e", Some(6), 41, 50, KvAnswer::Applied(7)),
        get(51, 60, 7, "e"),
        KvRec {
            key: "other".into(),
            write: None,
            invoked: 61,
            completed: 62,
            answer: KvAnswer::Observed {
                version: 0,
                value: None,
            },
        },
    ]
}

#[test]
fn a_linearizable_history_passes() {
    assert_eq!(violations(linearizable()), Vec::<String>::new());
}

#[test]
fn a_stale_read_fails() {
    let mut h = linearizable();
    h.push(get(61, 70, 5, "b"));
    let v = violations(h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("saw version 5, but version 7"), "{v:?}");
}

#[test]
fn a_lost_compare_and_set_fails() {
    let v = violations(vec![
        put("a", Some(0), 0, 10, KvAnswer::Applied(1)),
        put("b", Some(1), 20, 30, KvAnswer::Applied(2)),
        put("c", Some(1), 21, 31, KvAnswer::Applied(3)),
    ]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("lost update"), "{v:?}");
}

#[test]
fn a_real_time_inversion_fails() {
    let v = violations(vec![
        put("a", None, 0, 10, KvAnswer::Applied(5)),
        put("b", None, 20, 30, KvAnswer::Applied(3)),
    ]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("wrote version 3, but version 5"), "{v:?}");
}

#[test]
fn two_writes_at_one_version_fail() {
    let v = violations(vec![
        put("a", None, 0, 10, KvAnswer::Applied(4)),
        put("b", None, 5, 15, KvAnswer::Applied(4)),
    ]);
    assert!(
        v.iter()
            .any(|d| d.contains("two writes applied at version 4")),
        "{v:?}"
    );
}

#[test]
fn a_read_of_a_refused_unwritten_or_future_value_fails() {
    let mut h = linearizable();
    h.push(get(61, 70, 7, "c"));
    h.push(get(61, 70, 7, "zz"));
    h.push(put("f", None, 80, 90, KvAnswer::Unknown));
    h.push(get(71, 75, 7, "f"));
    let v = violations(h);
    assert!(
        v.iter().any(|d| d.contains("`c` was refused but seen")),
        "{v:?}"
    );
    assert!(v.iter().any(|d| d.contains("`zz`, never written")), "{v:?}");
    assert!(
        v.iter()
            .any(|d| d.contains("`f` was seen before its write")),
        "{v:?}"
    );
}

#[test]
fn a_value_seen_at_another_version_than_written_fails() {
    let mut h = linearizable();
    h.push(get(61, 70, 8, "e"));
    let v = violations(h);
    assert!(
        v.iter()
            .any(|d| d.contains("written at version 7 but seen at 8")),
        "{v:?}"
    );
}
