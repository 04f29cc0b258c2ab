//! Linearizability of the key-value store, per key. Versions give the order (the broker draws
//! each write's version after it holds the key), so no search is needed:
//! - applied writes have distinct versions;
//! - an applied compare-and-set with `expect = v` got a version above `v`, and no version known
//!   to exist lies strictly between (two applied CAS on one `v` is a lost update);
//! - real time: a version an operation produced (strictly) or observed (a get, a refusal) is
//!   not older than any version an operation that completed before it was invoked knew;
//! - an observed row was written: its value is a write's whose version (when answered) is the
//!   one observed, invoked before the observer completed.
//!
//! Writes without an answer may or may not have applied: they only supply values to reads.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Stats, Violation};
use crate::history::{KvAnswer, KvRec, Log};

pub const PROPERTY: &str = "kv not linearizable";

pub fn linearizable(log: &Log, v: &mut Vec<Violation>, stats: &mut Stats) {
    let mut by_key: BTreeMap<&str, Vec<&KvRec>> = BTreeMap::new();
    for r in &log.kv {
        by_key.entry(&r.key).or_default().push(r);
        let kind = match (&r.write, &r.answer) {
            (_, KvAnswer::Unknown) => "kv operations without answer",
            (None, _) => "kv gets answered",
            (Some(_), KvAnswer::Applied(_)) => "kv writes applied",
            (Some(_), KvAnswer::Observed { .. }) => "kv writes refused",
        };
        *stats.kv.entry(kind).or_default() += 1;
    }
    for (key, ops) in by_key {
        check_key(key, &ops, v);
    }
}

fn violation(v: &mut Vec<Violation>, key: &str, detail: String) {
    v.push(Violation {
        property: PROPERTY,
        detail: format!("key {key}: {detail}"),
    });
}

/// The version an operation produced (`true`) or observed (`false`).
fn version(r: &KvRec) -> Option<(i64, bool)> {
    match r.answer {
        KvAnswer::Applied(x) => Some((x, true)),
        KvAnswer::Observed { version, .. } => Some((version, false)),
        KvAnswer::Unknown => None,
    }
}

fn check_key(key: &str, ops: &[&KvRec], v: &mut Vec<Violation>) {
    let mut applied: HashMap<i64, &KvRec> = HashMap::new();
    let mut known = BTreeSet::new();
    for r in ops {
        match version(r) {
            Some((x, true)) => {
                if applied.insert(x, r).is_some() {
                    violation(v, key, format!("two writes applied at version {x}"));
                }
                known.insert(x);
            }
            Some((x, false)) if x > 0 => {
                known.insert(x);
            }
            _ => {}
        }
    }
    chain(key, ops, &known, v);
    real_time(key, ops, v);
    reads_written(key, ops, v);
}

/// Each applied compare-and-set follows exactly the version it expected.
fn chain(key: &str, ops: &[&KvRec], known: &BTreeSet<i64>, v: &mut Vec<Violation>) {
    for r in ops {
        let (Some(w), KvAnswer::Applied(x)) = (&r.write, &r.answer) else {
            continue;
        };
        let Some(e) = w.expect else { continue };
        if *x <= e {
            violation(v, key, format!("`{}` expected {e} and got {x}", w.value));
        } else if let Some(between) = known.range(e + 1..*x).next() {
            violation(
                v,
                key,
                format!(
                    "`{}` expected {e} and got {x}, but version {between} lies between (lost update)",
                    w.value
                ),
            );
        }
    }
}

/// No operation knows a version older than one known by an operation that completed before
/// it was invoked (a write's own version must be newer still).
fn real_time(key: &str, ops: &[&KvRec], v: &mut Vec<Violation>) {
    let mut done: Vec<(u64, i64)> = ops
        .iter()
        .filter_map(|r| version(r).map(|(x, _)| (r.completed, x)))
        .collect();
    done.sort_unstable();
    // floor[i]: the newest version among done[..=i].
    let floor: Vec<i64> = done
        .iter()
        .scan(0, |m, &(_, x)| {
            *m = (*m).max(x);
            Some(*m)
        })
        .collect();
    for r in ops {
        let Some((x, produced)) = version(r) else {
            continue;
        };
        let before = done.partition_point(|&(c, _)| c < r.invoked);
        let Some(&f) = before.checked_sub(1).and_then(|i| floor.get(i)) else {
            continue;
        };
        if x < f || (produced && x == f) {
            let what = if produced { "wrote" } else { "saw" };
            violation(
                v,
                key,
                format!(
                    "an operation invoked at {} µs {what} version {x}, but version {f} was known before it",
                    r.invoked
                ),
            );
        }
    }
}

/// Every observed row was written by a write invoked before the observer completed.
fn reads_written(key: &str, ops: &[&KvRec], v: &mut Vec<Violation>) {
    let writes: HashMap<&str, &KvRec> = ops
        .iter()
        .filter_map(|r| r.write.as_ref().map(|w| (w.value.as_str(), *r)))
        .collect();
    for r in ops {
        let KvAnswer::Observed {
            version,
            value: Some(value),
        } = &r.answer
        else {
            continue;
        };
        let Some(w) = writes.get(value.as_str()) else {
            violation(
                v,
                key,
                format!("version {version} holds `{value}`, never written"),
            );
            continue;
        };
        match w.answer {
            KvAnswer::Applied(x) if x != *version => violation(
                v,
                key,
                format!("`{value}` was written at version {x} but seen at {version}"),
            ),
            KvAnswer::Observed { .. } => {
                violation(v, key, format!("`{value}` was refused but seen"));
            }
            _ => {}
        }
        if w.invoked > r.completed {
            violation(
                v,
                key,
                format!("`{value}` was seen before its write was invoked"),
            );
        }
    }
}
