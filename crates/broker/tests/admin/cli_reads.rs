//! The `queen ephemeral` and `queen fetch` commands against a real broker (in-process, on the
//! test cluster), each run as a child process of the built binary: ephemeral pushes and pops
//! (payloads byte for byte, acked after printing or leased with `--no-ack`), gauges, reset and
//! delete; records read by offset without consuming them, and the fetch errors' exit code.

use serde_json::json;

use crate::cli::queen;
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_push_pop_ack_gauges_reset_and_delete() {
    let b = broker().await;
    let url = b.url.as_str();
    let push = queen(
        url,
        &["ephemeral", "push", "cli-eph"],
        "{\"z\":1,\"a\":1.50}\n\nnull\n",
    )
    .await;
    assert_eq!(
        (push.code, push.stdout.as_str()),
        (0, "pushed 2  dropped 0\n"),
        "{}",
        push.stderr
    );

    let depth = queen(url, &["ephemeral", "depth", "cli-eph"], "").await;
    let row: Vec<&str> = depth
        .stdout
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(row[..3], ["cli-eph", "no", "2"], "{}", depth.stdout);
    assert!(depth.stdout.contains("options {"), "{}", depth.stdout);

    let pop = queen(
        url,
        &[
            "ephemeral",
            "pop",
            "cli-eph",
            "--batch",
            "5",
            "--group",
            "g",
        ],
        "",
    )
    .await;
    assert_eq!(pop.code, 0, "{}", pop.stderr);
    let lines: Vec<&str> = pop.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", pop.stdout);
    assert!(
        lines[0].ends_with(r#""attempts":1,"payload":{"z":1,"a":1.50}}"#),
        "byte for byte: {}",
        lines[0]
    );
    let again = queen(
        url,
        &[
            "ephemeral",
            "pop",
            "cli-eph",
            "--group",
            "g",
            "--wait-ms",
            "200",
        ],
        "",
    )
    .await;
    assert_eq!(
        (again.code, again.stdout.as_str()),
        (0, ""),
        "printed messages were acked"
    );

    let third = queen(url, &["ephemeral", "push", "cli-eph", "--data", "3"], "").await;
    assert_eq!(third.code, 0, "{}", third.stderr);
    let held = queen(
        url,
        &["ephemeral", "pop", "cli-eph", "--group", "g", "--no-ack"],
        "",
    )
    .await;
    assert!(held.stdout.ends_with("\"payload\":3}\n"), "{}", held.stdout);
    let leased = queen(url, &["ephemeral", "pop", "cli-eph", "--group", "g"], "").await;
    assert_eq!(
        leased.stdout, "",
        "not acked: still leased, not delivered again yet"
    );
    let list = queen(url, &["ephemeral", "queues", "--json"], "").await;
    let queues = list.json()["queues"].clone();
    assert_eq!(
        (queues[0]["queue"].clone(), queues[0]["groups"].clone()),
        (json!("cli-eph"), json!(1))
    );

    let bad = queen(
        url,
        &["ephemeral", "push", "cli-eph", "--data", "{nope"],
        "",
    )
    .await;
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("payload 1 is not one JSON document"),
        "{}",
        bad.stderr
    );
    let reset = queen(url, &["ephemeral", "reset", "cli-eph"], "").await;
    assert!(
        reset.stdout.starts_with("reset cli-eph: "),
        "{} {}",
        reset.stdout,
        reset.stderr
    );
    let delete = queen(url, &["ephemeral", "delete", "cli-eph"], "").await;
    assert_eq!(
        (delete.code, delete.stdout.as_str()),
        (0, "deleted cli-eph\n"),
        "{}",
        delete.stderr
    );
    let gone = queen(url, &["ephemeral", "depth", "cli-eph"], "").await;
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr.contains("cli-eph: no such ephemeral queue"),
        "{}",
        gone.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_prints_records_from_an_offset_without_consuming() {
    let b = broker().await;
    let url = b.url.as_str();
    b.push(
        "cli-fetch",
        "p",
        &[json!({"i": 0}), json!({"i": 1}), json!({"i": 2})],
    )
    .await;
    let run = queen(url, &["fetch", "cli-fetch", "p", "--offset", "1"], "").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect(l))
        .collect();
    let got: Vec<(i64, serde_json::Value)> = lines
        .iter()
        .map(|l| (l["offset"].as_i64().unwrap_or(-1), l["payload"].clone()))
        .collect();
    assert_eq!(got, [(1, json!({"i": 1})), (2, json!({"i": 2}))]);
    assert_eq!(run.stderr, "2 records; next offset 3, oldest kept 0\n");

    let json = queen(url, &["fetch", "cli-fetch", "p", "--json"], "")
        .await
        .json();
    assert_eq!(
        (
            json["records"].as_array().map(Vec::len),
            json["highWatermark"].clone()
        ),
        (Some(3), json!(3))
    );
    let far = queen(url, &["fetch", "cli-fetch", "p", "--offset", "9"], "").await;
    assert_eq!(far.code, 1);
    assert!(
        far.stderr
            .contains("offset 9 is out of range: the partition holds 0 to 2"),
        "{}",
        far.stderr
    );
    let none = queen(url, &["fetch", "cli-fetch", "nope"], "").await;
    assert_eq!(none.code, 1);
    assert!(
        none.stderr.contains("no partition nope in queue cli-fetch"),
        "{}",
        none.stderr
    );

    // Nothing was consumed: a pop still gets the first message.
    let consume = queen(url, &["consume", "cli-fetch", "--limit", "1"], "").await;
    assert!(consume.stdout.contains("\"i\":0"), "{}", consume.stdout);
}
