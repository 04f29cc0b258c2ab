//! The targets of issue 12 (push across partitions, against pgmq and the segment ceiling, many
//! partitions per request, the first push into new partitions, broker memory, single-message
//! push latency) and issue 36 (delivery held under overload), read off one run's rows and the broker's memory and printed after the
//! tables: each line gives the measured figure, the target and whether it is met. Printed and
//! written to the results file, never asserted (the exit status does not depend on them). A
//! figure whose cell did not run in this run reads "not measured".

use serde::Serialize;

use crate::compare::{cell_text, num, ratio, Goal};
use crate::memwatch::BrokerMemory;
use crate::report::{self, Row};
use crate::scenarios::overload::{OF_FIRST_STEP, OF_STABLE};
use crate::scenarios::spread::FIRST_PUSH;

const OURS: &str = "queen-rs";

/// One target line.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub measure: String,
    pub value: Option<f64>,
    pub target: String,
    /// `None`: not measured in this run.
    pub met: Option<bool>,
    pub notes: String,
}

impl Line {
    fn new(measure: impl Into<String>, value: Option<f64>, goal: Goal, notes: String) -> Self {
        Self {
            measure: measure.into(),
            value,
            target: goal.text(),
            met: goal.met(value, None),
            notes,
        }
    }
}

fn find<'a>(rows: &'a [Row], scenario: &str, system: &str, cell: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.system == system && r.cell == cell)
}

fn push_row<'a>(rows: &'a [Row], cell: &str) -> Option<&'a Row> {
    find(rows, "push", OURS, cell)
}

fn msgs_per_s(r: Option<&Row>) -> Option<f64> {
    r.map(|r| r.msgs_per_s)
}

/// "a / b msg/s" for the notes of a ratio line (the figures that were measured).
fn pair(a: Option<&Row>, b: Option<&Row>) -> String {
    format!(
        "{} / {} msg/s",
        cell_text(msgs_per_s(a)),
        cell_text(msgs_per_s(b))
    )
}

/// Every target line of issue 12, in the order.
pub fn lines(rows: &[Row], memory: &BrokerMemory) -> Vec<Line> {
    let mut out = Vec::new();
    let (one, hundred) = (
        push_row(rows, "bp-1 part-1"),
        push_row(rows, "bp-1 part-100"),
    );
    out.push(Line::new(
        "push bp-1: 100 partitions / 1 partition",
        ratio(msgs_per_s(hundred), msgs_per_s(one)),
        Goal::AtLeast(0.9),
        pair(hundred, one),
    ));
    let (ours, pgmq) = (
        push_row(rows, "bp-100 part-1"),
        find(rows, "peer-push", "pgmq", "bp-100"),
    );
    out.push(Line::new(
        "push bp-100 part-1 / pgmq send_batch(100)",
        ratio(msgs_per_s(ours), msgs_per_s(pgmq)),
        Goal::AtLeast(2.0),
        pair(ours, pgmq),
    ));
    let ten = push_row(rows, "bp-100 part-10");
    let seg = ten.and_then(|r| {
        r.ceiling_fraction
            .filter(|_| r.ceiling_name.as_deref() == Some("seg100k"))
    });
    out.push(Line::new(
        "push bp-100 part-10 / seg100k ceiling",
        seg,
        Goal::AtLeast(0.6),
        format!("{} msg/s", cell_text(msgs_per_s(ten))),
    ));
    let wide = rows.iter().find(|r| {
        r.scenario == "push" && r.system == OURS && r.extra.contains_key("wide_vs_narrow")
    });
    // The wide queue's partition count is the profile's: the measures name the cells.
    out.push(Line::new(
        wide.map_or("push bp-100 spread wide / narrow".into(), |r| {
            format!("push {} / over 10 of 10", r.cell)
        }),
        wide.and_then(|r| r.extra.get("wide_vs_narrow").copied()),
        Goal::AtLeast(0.8),
        wide.map(|r| format!("{} msg/s", num(r.msgs_per_s)))
            .unwrap_or_default(),
    ));
    let first = rows
        .iter()
        .find(|r| r.scenario == "push" && r.system == OURS && r.cell.starts_with(FIRST_PUSH));
    out.push(Line::new(
        first.map_or(format!("{FIRST_PUSH} into new partitions, msg/s"), |r| {
            format!("{}, msg/s", r.cell)
        }),
        msgs_per_s(first),
        Goal::AtLeast(5000.0),
        first
            .and_then(|r| r.extra.get("seconds"))
            .map(|s| format!("{} s", num(*s)))
            .unwrap_or_default(),
    ));
    out.push(Line::new(
        "broker peak RSS over the run, MB",
        memory.peak_over_run_mb,
        Goal::AtMost(96.0),
        format!(
            "sampled every {} ms and per row{}",
            memory.sample_every_ms,
            memory.sampled_peak_at_s.map_or(String::new(), |at| format!(
                "; the samples' peak first seen {at:.0} s into the run"
            ))
        ),
    ));
    out.push(Line::new(
        "broker RSS idle right after start, MB",
        memory.idle_after_start_mb,
        Goal::AtMost(40.0),
        String::new(),
    ));
    out.extend(single_message_latency(rows));
    out.extend(overload(rows));
    out
}

/// Issue 36: each overload step delivers at least 0.9 of the stable rate, and the accepted
/// pushes of the 4× step answer within a second (losses fail the row's verification).
fn overload(rows: &[Row]) -> Vec<Line> {
    let mut steps = rows
        .iter()
        .filter(|r| r.scenario == "overload" && r.system == OURS);
    let mut out: Vec<Line> = steps
        .clone()
        .map(|r| {
            Line::new(
                format!("overload {}: delivered / stable rate", r.cell),
                r.extra.get(OF_STABLE).copied(),
                Goal::AtLeast(0.9),
                format!(
                    "offered {}, accepted {}, delivered {} msg/s ({} of the 1x step)",
                    cell_text(r.offered_msgs_per_s),
                    cell_text(r.extra.get("pushed_per_s").copied()),
                    num(r.msgs_per_s),
                    cell_text(r.extra.get(OF_FIRST_STEP).copied())
                ),
            )
        })
        .collect();
    let top = steps.next_back();
    out.push(Line::new(
        top.map_or(
            "overload top step: p99 of accepted pushes, ms".into(),
            |r| format!("overload {}: p99 of accepted pushes, ms", r.cell),
        ),
        top.and_then(|r| r.extra.get("push_p99_ms").copied()),
        Goal::AtMost(1000.0),
        String::new(),
    ));
    out
}

/// p99 of each single-message push cell's open-loop phase (latency from the scheduled instant
/// to the push's answer) at the rate it ran, normally 80 % of the cell's capacity.
fn single_message_latency(rows: &[Row]) -> Vec<Line> {
    let cells: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == "push" && r.system == OURS && r.cell.starts_with("bp-1 part-"))
        .collect();
    if cells.is_empty() {
        return vec![Line::new(
            "push bp-1 p99 at 80 % of capacity, ms",
            None,
            Goal::AtMost(10.0),
            String::new(),
        )];
    }
    cells
        .into_iter()
        .map(|r| {
            let at = r.extra.get("lat_at_msgs_per_s").copied();
            let share = ratio(at, Some(r.msgs_per_s)).map(|s| s * 100.0);
            let shed = r.extra.get("shed_pct").copied().unwrap_or(0.0);
            Line::new(
                format!("push {} p99 at 80 % of capacity, ms", r.cell),
                r.latency.map(|l| l.p99_ms),
                Goal::AtMost(10.0),
                format!(
                    "at {} msg/s ({} % of capacity), shed {} %",
                    cell_text(at),
                    cell_text(share),
                    num(shed)
                ),
            )
        })
        .collect()
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        None => "not measured",
        Some(true) => "met",
        Some(false) => "NOT met",
    }
}

/// The printed summary.
pub fn table(lines: &[Line]) -> String {
    let body = lines
        .iter()
        .map(|l| {
            vec![
                l.measure.clone(),
                cell_text(l.value),
                l.target.clone(),
                verdict(l.met).into(),
                l.notes.clone(),
            ]
        })
        .collect();
    report::render(&["measure", "measured", "target", "verdict", "notes"], body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    fn row(scenario: &str, cell: &str, system: &str, msgs_per_s: f64) -> Row {
        let mut r = Row::new(scenario, cell.into(), system);
        r.msgs = 1000;
        r.msgs_per_s = msgs_per_s;
        r
    }

    fn find_line<'a>(lines: &'a [Line], measure: &str) -> &'a Line {
        lines
            .iter()
            .find(|l| l.measure.starts_with(measure))
            .unwrap_or_else(|| panic!("no {measure} in {lines:?}"))
    }

    #[test]
    fn ratios_and_figures_are_judged_against_their_targets() {
        let mut seg = row("push", "bp-100 part-10", OURS, 70_000.0);
        seg.ceiling_fraction = Some(0.32);
        seg.ceiling_name = Some("seg100k".into());
        let mut wide = row("push", "bp-100 over 100 of 10000 part", OURS, 8_000.0);
        wide.extra.insert("wide_vs_narrow".into(), 0.5);
        let mut fast = row("push", "bp-1 part-1", OURS, 10_000.0);
        fast.latency = Some(Latency {
            p99_ms: 8.2,
            ..Default::default()
        });
        fast.extra.insert("lat_at_msgs_per_s".into(), 8_000.0);
        fast.extra.insert("shed_pct".into(), 2.9);
        let rows = vec![
            fast,
            row("push", "bp-1 part-100", OURS, 9_500.0),
            row("push", "bp-100 part-1", OURS, 30_000.0),
            row("peer-push", "bp-100", "pgmq", 60_000.0),
            seg,
            wide,
            row(
                "push",
                "first push bp-100 over 100 new of 10000 part",
                OURS,
                470.0,
            ),
        ];
        let memory = BrokerMemory {
            idle_after_start_mb: Some(22.0),
            peak_over_run_mb: Some(555.0),
            sampled_peak_at_s: Some(12.0),
            samples: 10,
            sample_every_ms: 100,
        };
        let lines = lines(&rows, &memory);
        let l = find_line(&lines, "push bp-1: 100 partitions");
        assert_eq!((l.value, l.met), (Some(0.95), Some(true)));
        assert_eq!(l.notes, "9500 / 10000 msg/s");
        let l = find_line(&lines, "push bp-100 part-1 / pgmq");
        assert_eq!((l.value, l.met), (Some(0.5), Some(false)));
        assert_eq!(find_line(&lines, "push bp-100 part-10").met, Some(false));
        let l = find_line(&lines, "push bp-100 over 100 of 10000 part / over 10 of 10");
        assert_eq!((l.value, l.met), (Some(0.5), Some(false)));
        let l = find_line(
            &lines,
            "first push bp-100 over 100 new of 10000 part, msg/s",
        );
        assert_eq!((l.value, l.met), (Some(470.0), Some(false)));
        let l = find_line(&lines, "broker peak RSS");
        assert_eq!((l.met, l.target.as_str()), (Some(false), "<= 96"));
        assert_eq!(find_line(&lines, "broker RSS idle").met, Some(true));
        let l = find_line(&lines, "push bp-1 part-1 p99");
        assert_eq!((l.value, l.met), (Some(8.2), Some(true)));
        assert_eq!(l.notes, "at 8000 msg/s (80.0 % of capacity), shed 2.90 %");

        let t = table(&lines);
        assert!(t.contains("| NOT met"), "{t}");
        assert!(t.contains("| met"), "{t}");
    }

    #[test]
    fn cells_that_did_not_run_are_not_measured() {
        let rows = vec![row("push", "bp-1 part-1", OURS, 10_000.0)];
        let lines = lines(&rows, &BrokerMemory::default());
        let l = find_line(&lines, "push bp-100 part-1 / pgmq");
        assert_eq!((l.value, l.met), (None, None));
        assert_eq!(find_line(&lines, "push bp-1: 100 partitions").met, None);
        assert_eq!(find_line(&lines, "broker peak RSS").met, None);
        assert_eq!(
            find_line(&lines, "push bp-100 spread wide / narrow").met,
            None
        );
        assert_eq!(
            find_line(&lines, "first push into new partitions").met,
            None
        );
        assert!(table(&lines).contains("not measured"));
        assert_eq!(
            find_line(&lines, "push bp-1 part-1 p99").met,
            None,
            "no latency phase, no verdict"
        );
    }
}
