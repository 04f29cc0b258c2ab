//! CI smoke test: `queen-bench --profile tiny --compare-accelerators` against brokers it starts
//! itself, every scenario, a few seconds each. No timing assertions: it must complete, produce
//! a row for every scenario (and for the compared cells, a row with the accelerators off), and
//! every verified row must have delivered every message exactly once.

use std::process::Command;

use serde_json::Value;

#[test]
fn tiny_profile_runs_every_scenario_and_verifies_delivery() {
    let out = std::env::temp_dir().join(format!("queen-bench-smoke-{}.json", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_queen-bench"))
        .args(["--profile", "tiny", "--compare-accelerators"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run queen-bench");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let text =
        std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("no results file ({e}):\n{log}"));
    let _ = std::fs::remove_file(&out);
    let doc: Value = serde_json::from_str(&text).expect("results are JSON");
    assert!(
        run.status.success(),
        "queen-bench failed ({}):\n{log}",
        run.status
    );
    println!("{log}");
    let rows = doc["rows"].as_array().expect("rows");
    for scenario in [
        "ceiling",
        "push",
        "e2e",
        "latency",
        "idle",
        "peer-push",
        "peer-e2e",
    ] {
        assert!(
            rows.iter().any(|r| r["scenario"] == scenario),
            "no {scenario} row in {text}"
        );
    }
    for scenario in ["e2e", "latency", "idle"] {
        assert!(
            rows.iter()
                .any(|r| r["scenario"] == scenario && r["system"] == "queen-rs accel-off"),
            "no {scenario} row with the accelerators off in {text}"
        );
    }
    let on = doc["meta"]["accelerators_on"]
        .as_object()
        .expect("switches");
    assert!(
        !on.is_empty() && on.values().all(|v| v == true),
        "the main broker runs with its accelerators on: {on:?}"
    );
    assert!(log.contains("on/off"), "no comparison table:\n{log}");
    let verified: Vec<&Value> = rows
        .iter()
        .filter(|r| !r["verification"].is_null())
        .collect();
    assert!(
        verified.len() >= 11,
        "push, e2e, latency and peer rows are verified, with the accelerators on and off"
    );
    for r in verified {
        let v = &r["verification"];
        assert_eq!(
            v["ok"], true,
            "{} {} failed verification: {v}",
            r["scenario"], r["cell"]
        );
        assert_eq!(v["lost"], 0);
        assert_eq!(v["duplicates"], 0);
    }
    for r in rows
        .iter()
        .filter(|r| {
            r["system"]
                .as_str()
                .is_some_and(|s| s.starts_with("queen-rs"))
        })
        .filter(|r| r["scenario"] != "idle")
    {
        assert!(
            r["msgs"].as_u64().unwrap_or(0) > 0,
            "{} {} moved no messages",
            r["scenario"],
            r["cell"]
        );
    }
}

/// The scenarios outside the default list that the tiny profile must still run: several
/// brokers on one PostgreSQL (issue 38) and the broker's instructions per message under
/// callgrind (issue 39; needs valgrind, which scripts/setup.sh installs).
#[test]
fn tiny_profile_runs_several_brokers_and_counts_instructions() {
    let out = std::env::temp_dir().join(format!(
        "queen-bench-smoke-brokers-{}.json",
        std::process::id()
    ));
    let run = Command::new(env!("CARGO_BIN_EXE_queen-bench"))
        .args(["--profile", "tiny", "--scenario", "brokers,cost"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run queen-bench");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let text =
        std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("no results file ({e}):\n{log}"));
    let _ = std::fs::remove_file(&out);
    assert!(
        run.status.success(),
        "queen-bench failed ({}):\n{log}",
        run.status
    );
    let doc: Value = serde_json::from_str(&text).expect("results are JSON");
    let rows = doc["rows"].as_array().expect("rows");
    let of = |scenario: &str| -> Vec<&Value> {
        rows.iter().filter(|r| r["scenario"] == scenario).collect()
    };
    let brokers = of("brokers");
    for k in ["1 broker ", "2 brokers ", "3 brokers "] {
        for batch in ["bp-100", "bp-1"] {
            assert!(
                brokers.iter().any(|r| r["cell"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(k) && c.ends_with(batch))),
                "no {k}{batch} row in {text}"
            );
        }
    }
    let several: Vec<&&Value> = brokers
        .iter()
        .filter(|r| !r["cell"].as_str().unwrap_or("").starts_with("1 "))
        .collect();
    for r in &several {
        assert!(r["extra"]["cross_share"].as_f64().is_some(), "{r}");
        assert!(r["extra"]["pg_cpu_us_per_msg"].as_f64().is_some(), "{r}");
    }
    // A broker's own consumers hear of its pushes first (its hot-list ring), so in a
    // cell this short one row may well deliver everything locally; across the rows with
    // several brokers, some deliveries must cross.
    assert!(
        several
            .iter()
            .any(|r| r["extra"]["cross_share"].as_f64().unwrap_or(0.0) > 0.0
                && r["extra"]["cross_p99_ms"].as_f64().is_some()),
        "no delivery crossed brokers in any cell: {several:?}"
    );
    let cost = of("cost");
    assert_eq!(
        cost.len(),
        5,
        "push bp-1, push bp-100, spread, e2e, drain: {text}"
    );
    for r in &cost {
        let per = r["extra"]["broker_instr_per_msg"].as_f64().unwrap_or(0.0);
        assert!(
            per > 1_000.0,
            "{} counted {per} instructions per message",
            r["cell"]
        );
    }
    for r in brokers.iter().chain(&cost) {
        let v = &r["verification"];
        assert_eq!(
            v["ok"], true,
            "{} {} failed verification: {v}",
            r["scenario"], r["cell"]
        );
        assert!(
            r["msgs"].as_u64().unwrap_or(0) > 0,
            "{} moved nothing",
            r["cell"]
        );
    }
}
