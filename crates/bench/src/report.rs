//! Result rows, the printed table and the JSON results file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::meter::Usage;
use crate::sizes::Sample;
use crate::tracker::Verification;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| Self {
            count: h.len(),
            p50_ms: h.value_at_quantile(0.50) as f64 / 1000.0,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
            p999_ms: h.value_at_quantile(0.999) as f64 / 1000.0,
            max_ms: h.max() as f64 / 1000.0,
        })
    }
}

/// One result row. Scenario-specific numbers go to `extra`, remarks to `notes`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub scenario: String,
    pub cell: String,
    pub system: String,
    pub offered_msgs_per_s: Option<f64>,
    pub msgs: u64,
    pub msgs_per_s: f64,
    pub shed: u64,
    pub errors: u64,
    pub latency: Option<Latency>,
    /// Fraction of the matching PostgreSQL ceiling and which ceiling it is.
    pub ceiling_fraction: Option<f64>,
    pub ceiling_name: Option<String>,
    pub stable_backlog: Option<bool>,
    pub usage: Usage,
    pub wal_bytes_per_msg: Option<f64>,
    pub verification: Option<Verification>,
    /// Table sizes sampled while the cell ran (the soak), and whether they stayed flat.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<Sample>,
    pub flat_sizes: Option<bool>,
    pub extra: BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

impl Row {
    pub fn new(scenario: &str, cell: String, system: &str) -> Self {
        Self {
            scenario: scenario.into(),
            cell,
            system: system.into(),
            ..Default::default()
        }
    }

    /// Fills usage and WAL per message from `usage` and `msgs`.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        if self.msgs > 0 {
            self.wal_bytes_per_msg = Some(usage.wal_bytes as f64 / self.msgs as f64);
        }
        self.usage = usage;
        self
    }

    /// False when delivery verification ran and failed.
    pub fn verified(&self) -> bool {
        self.verification.as_ref().is_none_or(|v| v.ok)
    }

    /// Verification failed, or table sizes that had to stay flat grew.
    pub fn failed(&self) -> bool {
        !self.verified() || self.flat_sizes == Some(false)
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

fn verdict(r: &Row) -> String {
    match &r.verification {
        None => "-".into(),
        Some(v) if v.ok && v.redelivered == 0 => "ok".into(),
        Some(v) if v.ok => format!("ok ({} redeliv.)", v.redelivered),
        // Only surplus deliveries left: messages whose push was not acknowledged arrived.
        Some(v) if v.lost == 0 && v.duplicates == 0 && v.order_violations == 0 => {
            format!("FAIL unique={:?} of {}", v.delivered_unique, v.expected)
        }
        Some(v) => format!(
            "FAIL lost={} dup={} order={}",
            v.lost, v.duplicates, v.order_violations
        ),
    }
}

/// The load generator's CPU per message of the row, in µs: printed beside every row so a
/// lighter instrument is never mistaken for a faster broker.
fn gen_us_per_msg(r: &Row) -> Option<f64> {
    r.usage
        .bench_cpu_s
        .filter(|_| r.msgs > 0)
        .map(|s| s * 1e6 / r.msgs as f64)
}

/// The one table: every row, same columns.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "scenario",
        "cell",
        "system",
        "msg/s",
        "%ceil",
        "p50 ms",
        "p99 ms",
        "p999 ms",
        "shed",
        "err",
        "brk cpu s",
        "brk RSS MB",
        "pg cpu s",
        "WAL B/msg",
        "gen cpu s",
        "gen µs/msg",
        "other cpu s",
        "verify",
        "notes",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let l = r.latency;
            let mut notes: Vec<String> = r
                .extra
                .iter()
                .map(|(k, v)| format!("{k}={}", short(*v)))
                .collect();
            if let Some(s) = r.stable_backlog {
                notes.insert(
                    0,
                    if s {
                        "backlog stable".into()
                    } else {
                        "BACKLOG GREW".into()
                    },
                );
            }
            if let Some(flat) = r.flat_sizes {
                notes.insert(
                    0,
                    if flat {
                        "table sizes flat".into()
                    } else {
                        "TABLE SIZES GREW".into()
                    },
                );
            }
            // seg100k is the default denominator (footer); name only the others.
            if let Some(c) = r.ceiling_name.as_deref().filter(|c| *c != "seg100k") {
                notes.push(format!("vs {c}"));
            }
            notes.extend(r.notes.iter().cloned());
            vec![
                r.scenario.clone(),
                r.cell.clone(),
                r.system.clone(),
                if r.msgs > 0 {
                    format!("{:.0}", r.msgs_per_s)
                } else {
                    "-".into()
                },
                opt(r.ceiling_fraction.map(|f| f * 100.0), 0),
                opt(l.map(|l| l.p50_ms), 2),
                opt(l.map(|l| l.p99_ms), 2),
                opt(l.map(|l| l.p999_ms), 2),
                r.shed.to_string(),
                r.errors.to_string(),
                opt(r.usage.broker_cpu_s, 2),
                opt(r.usage.broker_peak_rss_mb, 0),
                opt(r.usage.pg_cpu_s, 2),
                opt(r.wal_bytes_per_msg, 0),
                opt(r.usage.bench_cpu_s, 2),
                opt(gen_us_per_msg(r), 1),
                opt(r.usage.other_cpu_s, 1),
                verdict(r),
                notes.join("; "),
            ]
        })
        .collect();
    render(&header, body)
}

/// A table with a header row, columns padded to their widest cell.
pub fn render(header: &[&str], body: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "| {} |", padded.join(" | "));
    };
    line(header.iter().map(|h| h.to_string()).collect(), &mut out);
    let _ = writeln!(
        out,
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in body {
        line(row, &mut out);
    }
    out
}

fn short(v: f64) -> String {
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Writes `{meta, rows}` as pretty JSON.
pub fn write_json(path: &Path, meta: &serde_json::Value, rows: &[Row]) -> Result<()> {
    let doc = serde_json::json!({ "meta": meta, "rows": rows });
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_verification_is_loud_in_the_table() {
        let mut r = Row::new("e2e", "part-1 cg-1".into(), "queen-rs");
        r.msgs = 10;
        r.verification = Some(Verification {
            expected: 10,
            delivered_unique: vec![9],
            lost: 1,
            duplicates: 0,
            redelivered: 0,
            order_violations: 0,
            ok: false,
        });
        assert!(r.failed());
        let t = table(&[r]);
        assert!(t.contains("FAIL lost=1 dup=0 order=0"), "{t}");
        assert_eq!(t.lines().count(), 3);
    }
}
