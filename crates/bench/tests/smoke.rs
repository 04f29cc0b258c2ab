//! CI smoke test: `queen-bench --profile tiny --compare-accelerators` against brokers it starts
//! itself, every scenario, a few seconds each. No timing assertions: it must complete, produce
//! a row for every scenario (and for the compared cells, a row with the accelerators off), and
//! every verified row must have delivered every message exactly once.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The `queen` binary of this build. `cargo test --workspace` builds it (the broker package has
/// integration tests); alone, build it first.
fn queen_bin() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_queen-bench"));
    let queen = bench.with_file_name("queen");
    assert!(
        queen.is_file(),
        "{} is missing: run `cargo build -p queen-broker` (or `cargo test --workspace`) first",
        queen.display()
    );
    queen
}

#[test]
fn tiny_profile_runs_every_scenario_and_verifies_delivery() {
    let out = std::env::temp_dir().join(format!("queen-bench-smoke-{}.json", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_queen-bench"))
        .args(["--profile", "tiny", "--compare-accelerators", "--queen-bin"])
        .arg(queen_bin())
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
