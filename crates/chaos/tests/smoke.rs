//! CI smoke: `queen-chaos --small` (workload with faults, history check) and
//! `queen-chaos fuzz-http --small`, each against brokers the tool starts itself. Both must
//! run to the end (exit 0 or 1, never the tool's own failure 2) and find nothing outside the
//! list of open findings below. Each entry names the issue item or RELIABILITY.md finding it
//! waits for; delete the entry when its fix is merged, so a regression fails CI.

use std::process::Command;

/// History properties currently violated on `main` (RELIABILITY.md, "Findings").
const OPEN_HISTORY: &[&str] = &[];

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_queen-chaos"))
        .args(args)
        .output()
        .expect("run queen-chaos");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "queen-chaos {args:?} could not run ({}):\n{stdout}\n{stderr}",
        out.status
    );
    println!("{stdout}");
    (code, stdout)
}

#[test]
fn small_history_run_finds_no_new_violation() {
    let (code, report) = run(&["--small"]);
    assert!(report.contains("VIOLATIONS"), "no table:\n{report}");
    // Evidence sections are "<property> (<n>):" lines, one per violated property.
    let violated: Vec<&str> = report
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with("):"))
        .filter_map(|l| l.rsplit_once(" (").map(|(p, _)| p))
        .collect();
    assert_eq!(
        code == 1,
        !violated.is_empty(),
        "exit status and report disagree:\n{report}"
    );
    let new: Vec<&&str> = violated
        .iter()
        .filter(|p| !OPEN_HISTORY.contains(p))
        .collect();
    assert!(new.is_empty(), "new violations {new:?}:\n{report}");
}

/// Fuzz findings currently open on `main`: a 500 whose input carries one of these markers.
const OPEN_FUZZ: &[(&str, &[&str])] = &[];

#[test]
fn small_http_fuzz_finds_nothing_but_the_open_findings() {
    let (_, report) = run(&["fuzz-http", "--small"]);
    assert!(report.contains("fuzz-http:"), "no summary:\n{report}");
    // A finding is "- <route> → <what> (<n>×)" followed by its input and answer lines.
    let lines: Vec<&str> = report.lines().collect();
    for (i, l) in lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("- "))
    {
        let input = lines.get(i + 1).copied().unwrap_or_default();
        let open = l.contains("→ 500 (")
            && OPEN_FUZZ
                .iter()
                .any(|(_, markers)| markers.iter().any(|m| input.contains(m)));
        assert!(open, "new fuzz finding:\n{l}\n{input}\n\n{report}");
    }
}
