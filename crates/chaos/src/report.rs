//! The run's table: what was pushed and delivered, key-value operations by outcome, duplicates by cause, faults injected, and
//! violations per property with their first pieces of evidence.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::checker::{Verdict, PROPERTIES};
use crate::history::FaultRec;

/// Evidence lines shown per property (the count is always complete).
const SHOWN: usize = 10;

pub fn render(profile: &str, secs: f64, faults: &[FaultRec], verdict: &Verdict) -> String {
    let s = &verdict.stats;
    let mut out = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "  {k:<46} {v:>12}");
    };
    row("profile", profile.to_string());
    row("duration (s)", format!("{secs:.0}"));
    row(
        "messages answered queued/duplicate/buffered",
        s.messages_stored.to_string(),
    );
    row(
        "messages with only unknown push answers",
        s.messages_unknown_only.to_string(),
    );
    row(
        "push items answered failed (then retried)",
        s.push_items_failed.to_string(),
    );
    row("deliveries", s.deliveries.to_string());
    for (cause, n) in &s.redeliveries {
        row(&format!("  redelivered: {cause}"), n.to_string());
    }
    row(
        "transactionIds stored at two offsets",
        s.stored_twice.to_string(),
    );
    for (status, n) in &s.acks {
        row(&format!("ack items `{status}`"), n.to_string());
    }
    row("dead letters (rows)", s.dlq_rows.to_string());
    row(
        "nacks superseded by lease-less acks",
        s.nacks_superseded.to_string(),
    );
    for (kind, n) in &s.kv {
        row(kind, n.to_string());
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for f in faults {
        *kinds.entry(f.kind).or_default() += 1;
    }
    row("faults injected", faults.len().to_string());
    for (k, n) in kinds {
        row(&format!("  {k}"), n.to_string());
    }
    row(
        "5xx inside outage windows (tolerated)",
        s.tolerated_5xx.to_string(),
    );
    for (k, n) in &s.http {
        row(&format!("  http {k}"), n.to_string());
    }
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for v in &verdict.violations {
        by.entry(v.property).or_default().push(&v.detail);
    }
    row("VIOLATIONS", verdict.violations.len().to_string());
    for p in PROPERTIES {
        row(&format!("  {p}"), by.get(p).map_or(0, Vec::len).to_string());
    }
    let _ = writeln!(out, "\nfaults:");
    for f in faults {
        let _ = writeln!(
            out,
            "  {:>8.1} s – {:>8.1} s  {}{}: {}",
            f.start as f64 / 1e6,
            f.end as f64 / 1e6,
            f.kind,
            if f.outage { " (outage)" } else { "" },
            f.detail
        );
    }
    for (p, details) in by {
        let _ = writeln!(out, "\n{p} ({}):", details.len());
        for d in details.iter().take(SHOWN) {
            let _ = writeln!(out, "  - {d}");
        }
    }
    out
}
