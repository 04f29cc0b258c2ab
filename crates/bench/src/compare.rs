//! The accelerator comparison and the targets of issue 11.
//!
//! The main run measures every scenario against a broker with its accelerators at their
//! defaults. With `--compare-accelerators`, a second broker (same binary, same `--broker-env`,
//! a fresh embedded PostgreSQL) with every accelerator switched off runs the comparison cells
//! again: the e2e cells on 10 partitions (one group, and each fan-out of the profile), the
//! light-load latency cell and the idle cell. Its rows carry the system `queen-rs accel-off`;
//! it reuses the main run's PostgreSQL ceilings and push capacities (same machine, same
//! PostgreSQL build), so both e2e searches start from the same rate.
//!
//! [`table`] prints, per comparison cell, each measure with accelerators on and off, the
//! on/off ratio, the target and whether the figure meets it (printed, never asserted: the exit
//! status does not depend on it); then queen-rs against pgmq, each at its own highest stable
//! e2e rate.

use std::path::Path;

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use queen_client::Queen;

use crate::meter::Meter;
use crate::report::{self, Row};
use crate::scenarios::{e2e, idle, search, Ctx, Scenario};
use crate::target::Target;

/// The broker's accelerator switches (crates/broker/src/config.rs); admission and push fusion
/// have none (always on).
pub const ACCELERATORS: &[&str] = &[
    "QUEEN_HOTLIST",
    "QUEEN_ACK_REGISTRY",
    "QUEEN_ACK_FUSION",
    "QUEEN_DEDUP_CACHE",
    "QUEEN_POP_PENDING_GATE",
];
/// The accelerators `/metrics` reports on (`<key>.enabled`), by switch; the pending gate
/// reports nothing.
const REPORTED: &[(&str, &str)] = &[
    ("hotlist", "QUEEN_HOTLIST"),
    ("ackRegistry", "QUEEN_ACK_REGISTRY"),
    ("ackFusion", "QUEEN_ACK_FUSION"),
    ("dedupCache", "QUEEN_DEDUP_CACHE"),
];
/// The system of the rows measured with every accelerator off.
pub const OFF_SYSTEM: &str = "queen-rs accel-off";
const ON_SYSTEM: &str = "queen-rs";
/// Partition count of the compared e2e cells.
const PARTITIONS: u32 = 10;

/// `base` with every accelerator switch set to false (replacing any value `base` gives one).
pub fn off_env(base: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base
        .iter()
        .filter(|(k, _)| !ACCELERATORS.contains(&k.as_str()))
        .cloned()
        .collect();
    env.extend(ACCELERATORS.iter().map(|k| (k.to_string(), "false".into())));
    env
}

/// Which accelerators the broker behind `queen` says are enabled, by switch name. An error when
/// `/metrics` does not say (a broker without the switches would ignore them silently).
pub async fn switches(queen: &Queen) -> Result<BTreeMap<String, bool>> {
    let m = queen.metrics().await?;
    REPORTED
        .iter()
        .map(|(key, switch)| {
            let on = m[*key]["enabled"].as_bool().ok_or_else(|| {
                anyhow!("/metrics has no {key}.enabled: cannot tell whether {switch} applies")
            })?;
            Ok((switch.to_string(), on))
        })
        .collect()
}

/// Starts the accelerators-off broker in place of `ctx`'s (already shut down) target, runs the
/// comparison cells of the selected `scenarios` and stops it. A cell that fails is recorded in
/// `problems` and the others still run.
pub async fn run_off(
    ctx: &mut Ctx,
    bin: &Path,
    keep_data: bool,
    base_env: &[(String, String)],
    scenarios: &[Scenario],
    problems: &mut Vec<String>,
) -> Result<Vec<Row>> {
    eprintln!("starting {} with every accelerator off ...", bin.display());
    let target = Target::spawn(bin, keep_data, &off_env(base_env)).await?;
    ctx.meter = Meter::new(&target).await?;
    ctx.admin = target.connect(None).await?;
    ctx.queen = Queen::new(target.url.clone());
    ctx.target = target;
    let still_on: Vec<String> = switches(&ctx.queen)
        .await?
        .into_iter()
        .filter_map(|(k, on)| on.then_some(k))
        .collect();
    if !still_on.is_empty() {
        bail!("the accelerators-off broker reports {still_on:?} enabled");
    }
    let mut rows = Vec::new();
    for s in scenarios {
        let result = match s {
            Scenario::E2e => {
                let mut cells = Vec::new();
                for groups in ctx.profile.groups.clone() {
                    cells.push(e2e::search(ctx, PARTITIONS, groups).await.map(|r| r.0));
                }
                cells.into_iter().collect()
            }
            Scenario::Latency => e2e::run_latency(ctx).await,
            Scenario::Idle => idle::run(ctx).await,
            _ => continue,
        };
        eprintln!("  accelerators off: {s:?} done");
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => problems.push(format!("{s:?} with accelerators off: {e:#}")),
        }
    }
    ctx.target.shutdown();
    for r in &mut rows {
        r.system = OFF_SYSTEM.into();
    }
    Ok(rows)
}

/// What a figure should be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    None,
    AtMost(f64),
    AtLeast(f64),
    /// on ÷ off at least.
    RatioAtLeast(f64),
}

impl Goal {
    pub fn text(self) -> String {
        match self {
            Goal::None => "-".into(),
            Goal::AtMost(x) => format!("<= {x}"),
            Goal::AtLeast(x) => format!(">= {x}"),
            Goal::RatioAtLeast(x) => format!("on/off >= {x}"),
        }
    }

    /// Whether `on` (with `off`, for a ratio goal) meets it; `None` without the figures.
    pub fn met(self, on: Option<f64>, off: Option<f64>) -> Option<bool> {
        match self {
            Goal::None => None,
            Goal::AtMost(x) => on.map(|v| v <= x),
            Goal::AtLeast(x) => on.map(|v| v >= x),
            Goal::RatioAtLeast(x) => ratio(on, off).map(|r| r >= x),
        }
    }
}

/// One measure of one cell, with accelerators on and off.
struct Line {
    cell: String,
    measure: String,
    on: Option<f64>,
    off: Option<f64>,
    goal: Goal,
    notes: String,
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b)
}

/// Three significant digits, at most three decimals.
pub fn num(v: f64) -> String {
    let digits = if v == 0.0 {
        0
    } else {
        (2 - v.abs().log10().floor() as i32).clamp(0, 3) as usize
    };
    format!("{v:.digits$}")
}

pub fn cell_text(v: Option<f64>) -> String {
    v.map(num).unwrap_or_else(|| "-".into())
}

fn meets(m: Option<bool>) -> String {
    match m {
        None => "-".into(),
        Some(true) => "yes".into(),
        Some(false) => "NO".into(),
    }
}

fn find<'a>(rows: &'a [Row], scenario: &str, system: &str, cell: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.system == system && r.cell == cell)
}

/// Caveats of a pair of rows named `names`: a figure measured while the backlog grew is not a
/// stable maximum, and one whose every search attempt was stable is only a lower bound (a
/// ratio with it is not the ratio of the two maxima).
fn caveats(pair: [Option<&Row>; 2], names: [&str; 2]) -> String {
    let which = |test: fn(&Row) -> bool, what: &str| {
        let who: Vec<&str> = pair
            .iter()
            .zip(names)
            .filter(|(r, _)| r.is_some_and(test))
            .map(|(_, n)| n)
            .collect();
        (!who.is_empty()).then(|| format!("{what} ({})", who.join(" and ")))
    };
    let grew = which(|r| r.stable_backlog == Some(false), "backlog grew");
    let bound = which(
        |r| r.notes.iter().any(|n| n == search::LOWER_BOUND),
        "lower bound",
    );
    [grew, bound]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// `v` per delivered message, scaled (e.g. 1e6 for µs).
fn per_msg(r: &Row, v: Option<f64>, scale: f64) -> Option<f64> {
    v.filter(|_| r.msgs > 0).map(|v| scale * v / r.msgs as f64)
}

/// A named getter of one figure of a row.
type Measure = (String, fn(&Row) -> Option<f64>);

/// The measures of an e2e cell.
fn e2e_measures(ceiling: &str) -> Vec<Measure> {
    vec![
        ("delivered msg/s".into(), |r| Some(r.msgs_per_s)),
        (format!("fraction of {ceiling}"), |r| r.ceiling_fraction),
        ("PG xacts / pushed msg".into(), |r| {
            r.extra.get("xacts_per_pushed_msg").copied()
        }),
        ("SQL stmts / delivered msg".into(), |r| {
            per_msg(r, r.usage.statements.map(|s| s as f64), 1.0)
        }),
        ("p50 ms".into(), |r| r.latency.map(|l| l.p50_ms)),
        ("p99 ms".into(), |r| r.latency.map(|l| l.p99_ms)),
        ("broker CPU us / msg".into(), |r| {
            per_msg(r, r.usage.broker_cpu_s, 1e6)
        }),
        ("PG CPU us / msg".into(), |r| {
            per_msg(r, r.usage.pg_cpu_s, 1e6)
        }),
        ("load generator CPU us / msg".into(), |r| {
            per_msg(r, r.usage.bench_cpu_s, 1e6)
        }),
    ]
}

/// The measures of the idle cell (without pg_stat_statements, transactions stand in for
/// statements, as the idle row itself does).
fn idle_measures() -> Vec<Measure> {
    vec![
        ("SQL stmts/s".into(), |r| {
            r.extra
                .get("sql_stmts_per_s")
                .or(r.extra.get("sql_xacts_per_s"))
                .copied()
        }),
        ("broker CPU % of a core".into(), |r| {
            r.extra.get("broker_cpu_pct").copied()
        }),
        ("PG CPU % of a core".into(), |r| {
            r.extra.get("pg_cpu_pct").copied()
        }),
        ("PG xacts/s".into(), |r| r.extra.get("xacts_per_s").copied()),
    ]
}

fn latency_measures() -> Vec<Measure> {
    vec![
        ("p50 ms".into(), |r| r.latency.map(|l| l.p50_ms)),
        ("p99 ms".into(), |r| r.latency.map(|l| l.p99_ms)),
        ("p999 ms".into(), |r| r.latency.map(|l| l.p999_ms)),
    ]
}

/// The lines of one compared cell; `goals` gives the targets by measure name (prefix).
fn lines(
    rows: &[Row],
    scenario: &str,
    cell: &str,
    measures: Vec<Measure>,
    goals: &[(&str, Goal)],
) -> Vec<Line> {
    let on = find(rows, scenario, ON_SYSTEM, cell);
    let off = find(rows, scenario, OFF_SYSTEM, cell);
    if on.is_none() && off.is_none() {
        return Vec::new();
    }
    let notes = caveats([on, off], ["on", "off"]);
    measures
        .into_iter()
        .enumerate()
        .map(|(i, (measure, get))| Line {
            cell: format!("{scenario} {cell}"),
            on: on.and_then(get),
            off: off.and_then(get),
            goal: goals
                .iter()
                .find(|(m, _)| measure.starts_with(m))
                .map_or(Goal::None, |g| g.1),
            measure,
            notes: if i == 0 { notes.clone() } else { String::new() },
        })
        .collect()
}

/// The targets of issue 11, by cell and measure.
const E2E_ONE_GROUP: &[(&str, Goal)] = &[
    ("delivered msg/s", Goal::RatioAtLeast(2.5)),
    ("fraction of cycle100", Goal::AtLeast(0.5)),
];
const E2E_FAN_OUT: &[(&str, Goal)] = &[("PG xacts / pushed msg", Goal::AtMost(0.1))];
const LATENCY: &[(&str, Goal)] = &[
    ("p50 ms", Goal::AtMost(3.0)),
    ("p99 ms", Goal::AtMost(15.0)),
];
const IDLE: &[(&str, Goal)] = &[
    ("SQL stmts/s", Goal::AtMost(10.0)),
    ("broker CPU %", Goal::AtMost(2.0)),
];
/// queen-rs ÷ pgmq delivered msg/s, each at its own highest stable e2e rate.
const VS_PGMQ: f64 = 3.0;

/// The comparison tables: accelerators on/off with the targets, then queen-rs against pgmq.
/// Empty when the run measured none of their cells.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let ceiling = rows
        .iter()
        .find(|r| r.scenario == "e2e")
        .and_then(|r| r.ceiling_name.clone())
        .unwrap_or_else(|| "ceiling".into());
    let mut all = Vec::new();
    let mut groups: Vec<u32> = rows
        .iter()
        .filter(|r| r.scenario == "e2e")
        .filter_map(|r| e2e_groups(&r.cell, PARTITIONS))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        let goals = if g == 1 { E2E_ONE_GROUP } else { E2E_FAN_OUT };
        let cell = e2e::label(PARTITIONS, g);
        all.extend(lines(rows, "e2e", &cell, e2e_measures(&ceiling), goals));
    }
    for r in rows.iter().filter(|r| r.system == ON_SYSTEM) {
        match r.scenario.as_str() {
            "latency" => all.extend(lines(rows, "latency", &r.cell, latency_measures(), LATENCY)),
            "idle" => all.extend(lines(rows, "idle", &r.cell, idle_measures(), IDLE)),
            _ => {}
        }
    }
    if !all.is_empty() {
        out.push_str("accelerators on (defaults) and off (");
        out.push_str(&ACCELERATORS.join("=false "));
        out.push_str("=false), with the targets of issue 11:\n");
        let body = all
            .into_iter()
            .map(|l| {
                vec![
                    l.cell,
                    l.measure,
                    cell_text(l.on),
                    cell_text(l.off),
                    cell_text(ratio(l.on, l.off)),
                    l.goal.text(),
                    meets(l.goal.met(l.on, l.off)),
                    l.notes,
                ]
            })
            .collect();
        out.push_str(&report::render(
            &[
                "cell", "measure", "on", "off", "on/off", "target", "meets", "notes",
            ],
            body,
        ));
    }
    let pgmq = vs_pgmq(rows);
    if !pgmq.is_empty() {
        out.push_str("\nqueen-rs against pgmq, each at its own highest stable e2e rate:\n");
        out.push_str(&pgmq);
    }
    out
}

/// `part-{partitions} cg-N` → N.
fn e2e_groups(cell: &str, partitions: u32) -> Option<u32> {
    cell.strip_prefix(&format!("part-{partitions} cg-"))?
        .parse()
        .ok()
}

/// One line per pgmq e2e cell: our delivered msg/s, pgmq's, the ratio against the target.
fn vs_pgmq(rows: &[Row]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.scenario == "peer-e2e")
        .map(|p| {
            let ours = find(rows, "e2e", ON_SYSTEM, &p.cell);
            let mine = ours.map(|r| r.msgs_per_s);
            let x = ratio(mine, Some(p.msgs_per_s));
            vec![
                format!("e2e {}", p.cell),
                cell_text(mine),
                cell_text(Some(p.msgs_per_s)),
                cell_text(x),
                format!(">= {VS_PGMQ}"),
                meets(x.map(|x| x >= VS_PGMQ)),
                caveats([ours, Some(p)], ["queen-rs", "pgmq"]),
            ]
        })
        .collect();
    if body.is_empty() {
        return String::new();
    }
    report::render(
        &[
            "cell",
            "queen-rs msg/s",
            "pgmq msg/s",
            "queen-rs/pgmq",
            "target",
            "meets",
            "notes",
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    fn e2e(system: &str, cell: &str, msgs_per_s: f64, xacts: f64) -> Row {
        let mut r = Row::new("e2e", cell.into(), system);
        r.msgs = (msgs_per_s * 10.0) as u64;
        r.msgs_per_s = msgs_per_s;
        r.stable_backlog = Some(true);
        r.ceiling_fraction = Some(msgs_per_s / 20_000.0);
        r.ceiling_name = Some("cycle100".into());
        r.extra.insert("xacts_per_pushed_msg".into(), xacts);
        r
    }

    #[test]
    fn off_env_switches_every_accelerator_off_over_the_given_env() {
        let base = vec![
            ("QUEEN_HOTLIST".to_string(), "true".to_string()),
            ("DB_POOL_SIZE".to_string(), "64".to_string()),
        ];
        let env = off_env(&base);
        assert!(env.contains(&("DB_POOL_SIZE".into(), "64".into())));
        for switch in ACCELERATORS {
            let values: Vec<&str> = env
                .iter()
                .filter(|(k, _)| k == switch)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(values, ["false"], "{switch}");
        }
    }

    #[test]
    fn the_table_pairs_on_with_off_and_judges_the_targets() {
        let mut latency = Row::new("latency", "1000 msg/s bp-1 part-1".into(), ON_SYSTEM);
        latency.latency = Some(Latency {
            count: 1,
            p50_ms: 2.0,
            p99_ms: 20.0,
            p999_ms: 30.0,
            max_ms: 40.0,
        });
        let mut slow = e2e(OFF_SYSTEM, "part-10 cg-1", 4000.0, 0.5);
        slow.stable_backlog = Some(false);
        let mut fan_out = e2e(ON_SYSTEM, "part-10 cg-5", 30_000.0, 0.2);
        fan_out.notes.push(search::LOWER_BOUND.into());
        let rows = vec![
            e2e(ON_SYSTEM, "part-10 cg-1", 12_000.0, 0.04),
            slow,
            fan_out,
            e2e(OFF_SYSTEM, "part-10 cg-5", 10_000.0, 1.0),
            e2e(ON_SYSTEM, "part-1 cg-1", 9_000.0, 0.04),
            latency,
        ];
        let t = table(&rows);
        let line = |cell: &str, measure: &str| {
            t.lines()
                .find(|l| l.contains(cell) && l.contains(measure))
                .unwrap_or_else(|| panic!("no {cell} {measure} in\n{t}"))
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            line("part-10 cg-1", "delivered msg/s")[2..],
            [
                "12000",
                "4000",
                "3.00",
                "on/off >= 2.5",
                "yes",
                "backlog grew (off)"
            ]
        );
        assert_eq!(line("part-10 cg-1", "fraction of cycle100")[6], "yes");
        assert_eq!(line("part-10 cg-5", "PG xacts / pushed msg")[6], "NO");
        assert_eq!(
            line("part-10 cg-5", "delivered msg/s")[7],
            "lower bound (on)"
        );
        assert_eq!(
            line("latency", "p50 ms")[2..],
            ["2.00", "-", "-", "<= 3", "yes"]
        );
        assert_eq!(line("latency", "p99 ms")[6], "NO");
        assert!(
            !t.contains("part-1 cg-1"),
            "only the 10-partition cells:\n{t}"
        );
        assert!(!t.contains("pgmq"), "no pgmq rows, no pgmq table:\n{t}");
    }

    #[test]
    fn pgmq_is_compared_best_with_best() {
        let mut p = e2e("pgmq", "part-10 cg-1", 5000.0, 1.0);
        p.scenario = "peer-e2e".into();
        let rows = vec![e2e(ON_SYSTEM, "part-10 cg-1", 16_000.0, 0.04), p];
        let t = table(&rows);
        let pg = t
            .lines()
            .find(|l| l.contains("e2e part-10 cg-1") && l.contains("5000"));
        let cells: Vec<&str> = pg.expect("a pgmq line").split('|').map(str::trim).collect();
        assert_eq!(cells[2..7], ["16000", "5000", "3.20", ">= 3", "yes"]);
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(num(12_345.6), "12346");
        assert_eq!(num(2.5), "2.50");
        assert_eq!(num(0.04), "0.040");
        assert_eq!(num(0.0), "0");
    }
}
