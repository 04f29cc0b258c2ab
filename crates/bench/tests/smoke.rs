//! CI smoke test: `queen-bench --profile tiny` against a broker it starts itself, every
//! scenario, a few seconds each. No timing assertions: it must complete, produce a row for
//! every scenario, and every verified row must have delivered every message exactly once.

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
        .args(["--profile", "tiny", "--queen-bin"])
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
    let verified: Vec<&Value> = rows
        .iter()
        .filter(|r| !r["verification"].is_null())
        .collect();
    assert!(
        verified.len() >= 8,
        "push, e2e, latency and peer rows are verified"
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
        .filter(|r| r["system"] == "queen-rs" && r["scenario"] != "idle")
    {
        assert!(
            r["msgs"].as_u64().unwrap_or(0) > 0,
            "{} {} moved no messages",
            r["scenario"],
            r["cell"]
        );
    }
}
