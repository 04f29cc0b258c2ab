//! The `queen` binary's client commands against a real broker (in-process, on the test
//! cluster): NDJSON push and its in-order consume, exit codes, `--json` shapes, the human
//! tables, and `--token`/`QUEEN_TOKEN` against a broker with JWT auth on. Each command runs
//! as a child process of the built binary.

use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// What a finished `queen` command left.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }

    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// Runs `queen <args>` against `url` with `stdin` fed to it.
pub(crate) async fn queen(url: &str, args: &[&str], stdin: &str) -> Run {
    queen_with(url, &[], args, stdin).await
}

/// [`queen`] with extra environment variables.
async fn queen_with(url: &str, env: &[(&str, &str)], args: &[&str], stdin: &str) -> Run {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_queen"))
        .args(args)
        .env("QUEEN_URL", url)
        .env_remove("QUEEN_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn queen");
    let mut input = child.stdin.take().expect("stdin");
    let text = stdin.to_string();
    let feed = tokio::spawn(async move {
        let _ = input.write_all(text.as_bytes()).await;
    });
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("queen finished within 120 s")
        .expect("queen output");
    feed.await.expect("stdin feeder");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_ndjson_lines_push_and_consume_in_order() {
    let b = broker().await;
    let input: String = (0..10_000).map(|i| format!("{{\"i\":{i}}}\n")).collect();
    let push = queen(&b.url, &["push", "cli-orders", "--json"], &input).await;
    assert_eq!(push.code, 0, "{}", push.stderr);
    assert_eq!(
        push.json(),
        json!({"queued": 10_000, "duplicate": 0, "buffered": 0, "failed": 0, "error": null})
    );

    let args = [
        "consume",
        "cli-orders",
        "--limit",
        "10000",
        "--batch",
        "1000",
    ];
    let consume = queen(&b.url, &args, "").await;
    assert_eq!(consume.code, 0, "{}", consume.stderr);
    let got: Vec<i64> = consume
        .lines()
        .iter()
        .map(|m| m["data"]["i"].as_i64().expect("data.i"))
        .collect();
    assert_eq!(got, (0..10_000).collect::<Vec<i64>>());
    let first = &consume.lines()[0];
    for key in [
        "transactionId",
        "partitionId",
        "partition",
        "createdAt",
        "queue",
    ] {
        assert!(!first[key].is_null(), "{key} missing in {first}");
    }

    // Everything printed was acknowledged: nothing is left to consume.
    let again = queen(&b.url, &["consume", "cli-orders", "--idle-ms", "300"], "").await;
    assert_eq!(
        (again.code, again.stdout.as_str()),
        (0, ""),
        "{}",
        again.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_push_summary_binary_body_and_no_ack_redelivery() {
    let b = broker().await;
    configure(&b, "cli-lease", json!({"leaseTime": 1})).await;
    let args = ["push", "cli-lease", "--binary", "--data", "{\"n\":1}"];
    let push = queen(&b.url, &args, "").await;
    assert_eq!(push.code, 0, "{}", push.stderr);
    assert_eq!(push.stdout, "queued 1  duplicate 0  failed 0\n");

    let peek = ["consume", "cli-lease", "--limit", "1", "--no-ack"];
    let first = queen(&b.url, &peek, "").await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    // Not acknowledged: delivered again once the 1 s lease expires.
    let take = ["consume", "cli-lease", "--limit", "1", "--idle-ms", "5000"];
    let second = queen(&b.url, &take, "").await;
    assert_eq!(second.code, 0, "{}", second.stderr);
    let (a, z) = (&first.lines()[0], &second.lines()[0]);
    assert_eq!(a["transactionId"], z["transactionId"]);
    assert_eq!(z["data"], json!({"n": 1}));
    assert_eq!(z["deliveryAttempt"], json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_queues_queue_and_stats_answer_tables_and_json() {
    let b = broker().await;
    let cfg = [
        "configure",
        "cli-cfg",
        "leaseTime=7",
        "retryLimit=2",
        "--json",
    ];
    let run = queen(&b.url, &cfg, "").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let echo = run.json();
    assert_eq!(
        (
            echo["options"]["leaseTime"].clone(),
            echo["options"]["retryLimit"].clone()
        ),
        (json!(7), json!(2))
    );
    let human = queen(&b.url, &["configure", "cli-cfg", "priority=3"], "").await;
    assert!(
        human.stdout.starts_with("configured cli-cfg "),
        "{}",
        human.stdout
    );
    b.push("cli-cfg", "p1", &[json!(1), json!(2)]).await;

    let list = queen(&b.url, &["queues", "--json"], "").await;
    let listed = list.json();
    let names: Vec<&str> = listed["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert!(names.contains(&"cli-cfg"), "{names:?}");
    let table = queen(&b.url, &["queues"], "").await;
    assert!(table.stdout.starts_with("QUEUE "), "{}", table.stdout);
    assert!(
        table.stdout.lines().any(|l| l.starts_with("cli-cfg ")),
        "{}",
        table.stdout
    );

    let one = queen(&b.url, &["queue", "cli-cfg", "--json"], "").await;
    assert_eq!(one.json()["messages"]["pending"], json!(2));
    let view = queen(&b.url, &["queue", "cli-cfg"], "").await;
    assert!(
        view.stdout
            .starts_with("queue cli-cfg  partitions 1  total 2  pending 2"),
        "{}",
        view.stdout
    );
    assert!(view.stdout.contains("leaseTime=7"), "{}", view.stdout);

    let stats = queen(&b.url, &["stats", "--json"], "").await;
    assert_eq!(stats.code, 0, "{}", stats.stderr);
    assert_eq!(stats.json()["overview"]["queues"], json!(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_lists_dead_letters_and_seek_replays_a_group() {
    let b = broker().await;
    b.push(
        "cli-dlq",
        "Default",
        &[json!({"k": "a"}), json!({"k": "b"})],
    )
    .await;
    let (_, popped) = b.get("/api/v1/pop/queue/cli-dlq?batch=1").await;
    let msg = &popped["messages"][0];
    let acks = ack_batch(&b, None, vec![ack_item(msg, "dlq")]).await;
    assert_eq!(acks[0]["success"], json!(true), "{acks:?}");

    let dlq = queen(&b.url, &["dlq", "cli-dlq", "--json"], "").await;
    assert_eq!(dlq.code, 0, "{}", dlq.stderr);
    assert_eq!(dlq.json()["total"], json!(1));
    let table = queen(&b.url, &["dlq", "cli-dlq"], "").await;
    let txn = msg["transactionId"].as_str().expect("transactionId");
    assert!(table.stdout.contains(txn), "{}", table.stdout);
    assert!(table.stdout.ends_with("1 shown of 1\n"), "{}", table.stdout);

    let drain = ["consume", "cli-dlq", "--group", "g", "--idle-ms", "500"];
    assert_eq!(queen(&b.url, &drain, "").await.lines().len(), 2);
    let seek = [
        "seek",
        "g",
        "cli-dlq",
        "--timestamp",
        "2000-01-01T00:00:00Z",
    ];
    let moved = queen(&b.url, &seek, "").await;
    assert_eq!(moved.code, 0, "{}", moved.stderr);
    assert_eq!(moved.stdout, "group g on cli-dlq: 1 partitions moved\n");
    assert_eq!(queen(&b.url, &drain, "").await.lines().len(), 2);
    let end = ["seek", "g", "cli-dlq", "--to-end", "--json"];
    assert_eq!(
        queen(&b.url, &end, "").await.json()["seekToEnd"],
        json!(true)
    );
    assert_eq!(queen(&b.url, &drain, "").await.lines().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_replays_deletes_and_purges_dead_letters() {
    let b = broker().await;
    b.push(
        "cli-ops",
        "Default",
        &[json!({"k": 0}), json!({"k": 1}), json!({"k": 2})],
    )
    .await;
    let mut txns = Vec::new();
    for _ in 0..3 {
        let (_, popped) = b.get("/api/v1/pop/queue/cli-ops?batch=1").await;
        let msg = &popped["messages"][0];
        let acks = ack_batch(&b, None, vec![ack_item(msg, "dlq")]).await;
        assert_eq!(acks[0]["dlq"], json!(true), "{acks:?}");
        txns.push(msg["transactionId"].as_str().expect("txn").to_string());
    }
    let (_, first) = b.get("/api/v1/dlq?queue=cli-ops").await;
    let pid = first["messages"][0]["partitionId"]
        .as_str()
        .expect("pid")
        .to_string();

    let replay = queen(&b.url, &["dlq", "cli-ops", "replay", &pid, &txns[0]], "").await;
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert!(
        replay.stdout.starts_with(&format!(
            "replayed {} at partition {pid} offset 3 (1 dead",
            txns[0]
        )),
        "{}",
        replay.stdout
    );
    let (_, again) = b.get("/api/v1/pop/queue/cli-ops?batch=5").await;
    assert_eq!(
        again["messages"][0]["transactionId"],
        json!(txns[0]),
        "{again}"
    );
    assert_eq!(again["messages"][0]["data"], json!({"k": 0}));

    let elsewhere = queen(&b.url, &["dlq", "cli-other", "replay", &pid, &txns[1]], "").await;
    assert_eq!(
        elsewhere.code, 2,
        "another queue's address: {}",
        elsewhere.stderr
    );
    let delete = ["dlq", "cli-ops", "delete", &pid, &txns[1], "--json"];
    let deleted = queen(&b.url, &delete, "").await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    assert_eq!(deleted.json(), json!({"success": true, "deleted": 1}));
    let twice = queen(&b.url, &delete, "").await;
    assert_eq!(twice.code, 1, "no dead letter left: {}", twice.stderr);

    let bad = queen(&b.url, &["dlq", "cli-ops", "purge", "--limit", "5"], "").await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let other_group = queen(&b.url, &["dlq", "cli-ops", "purge", "--group", "g"], "").await;
    assert_eq!(
        other_group.stdout, "purged 0 dead letters\n",
        "{}",
        other_group.stderr
    );
    let purge = queen(&b.url, &["dlq", "cli-ops", "purge"], "").await;
    assert_eq!(purge.code, 0, "{}", purge.stderr);
    assert_eq!(purge.stdout, "purged 1 dead letters\n");
    let (_, left) = b.get("/api/v1/dlq?queue=cli-ops").await;
    assert_eq!(left["total"], json!(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_say_refused_usage_or_unreachable() {
    let b = broker().await;
    let missing = queen(&b.url, &["queue", "cli-no-such-queue"], "").await;
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("Queue not found"),
        "{}",
        missing.stderr
    );

    // Lines before an invalid one are pushed; the bad line is named.
    let bad = queen(
        &b.url,
        &["push", "cli-bad", "--json"],
        "{\"a\":1}\nnot json\n{\"a\":3}\n",
    )
    .await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("line 2 is not one JSON value"),
        "{}",
        bad.stderr
    );
    assert_eq!(bad.json()["queued"], json!(1));

    let option = queen(&b.url, &["configure", "cli-bad", "leaseTime"], "").await;
    assert_eq!(option.code, 2, "{}", option.stderr);
    let usage = queen(&b.url, &["seek", "g", "cli-bad"], "").await;
    assert_eq!(usage.code, 2, "{}", usage.stderr);

    let nobody = queen("http://127.0.0.1:1", &["queues"], "").await;
    assert_eq!(nobody.code, 3, "{}", nobody.stderr);
    assert!(nobody.stderr.contains("QUEEN_URL"), "{}", nobody.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_generated_for_every_command() {
    let run = queen("http://127.0.0.1:1", &["completions", "bash"], "").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    for cmd in [
        "serve",
        "push",
        "consume",
        "queues",
        "configure",
        "dlq",
        "seek",
        "stats",
    ] {
        assert!(run.stdout.contains(cmd), "completion lacks {cmd}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_a_waiting_consume_cleanly() {
    let b = broker().await;
    configure(&b, "cli-idle", json!({})).await;
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_queen"))
        .args(["consume", "cli-idle"])
        .env("QUEEN_URL", &b.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn queen");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let pid = child.id().expect("pid").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    assert!(sent.expect("kill").success());
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("consume stopped within 10 s of SIGINT")
        .expect("output");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_sends_the_token_and_auth_refusals_name_the_fix() {
    let b = crate::auth::hs_broker(|_| {}).await;
    let admin = crate::auth::token("cli-admin", "admin");
    let reader = crate::auth::token("cli-reader", "read-only");

    let bare = queen(&b.url, &["queues"], "").await;
    assert_eq!(bare.code, 1, "{}", bare.stderr);
    for want in ["missing bearer token", "--token", "QUEEN_TOKEN"] {
        assert!(bare.stderr.contains(want), "{want}: {}", bare.stderr);
    }

    // Every client command, once with --token and once with QUEEN_TOKEN.
    let env = [("QUEEN_TOKEN", admin.as_str())];
    let as_admin = |args: &[&str]| {
        let mut v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        v.extend(["--token".to_string(), admin.clone()]);
        v
    };
    let commands: [&[&str]; 9] = [
        &["configure", "cli-auth", "leaseTime=30"],
        &[
            "push",
            "cli-auth",
            "--data",
            "{\"n\":1}",
            "--data",
            "{\"n\":2}",
        ],
        &["consume", "cli-auth", "--limit", "1"],
        &["consume", "cli-auth", "--group", "g", "--idle-ms", "300"],
        &["seek", "g", "cli-auth", "--to-end"],
        &["queues"],
        &["queue", "cli-auth"],
        &["dlq", "cli-auth"],
        &["stats"],
    ];
    for args in commands {
        let flag = as_admin(args);
        let flag: Vec<&str> = flag.iter().map(String::as_str).collect();
        let run = queen(&b.url, &flag, "").await;
        assert_eq!(run.code, 0, "{args:?} with --token: {}", run.stderr);
        let run = queen_with(&b.url, &env, args, "").await;
        assert_eq!(run.code, 0, "{args:?} with QUEEN_TOKEN: {}", run.stderr);
    }

    // The DLQ actions: a dead letter made over HTTP, replayed, then deleted, then purged.
    let popped = crate::auth::get(&b, "/api/v1/pop/queue/cli-auth?batch=1", &admin).await;
    let msg = &popped.body["messages"][0];
    let ack = json!({"acknowledgments": [ack_item(msg, "dlq")]});
    let acked = crate::auth::post(&b, "/api/v1/ack/batch", &admin, &ack).await;
    assert_eq!(acked.body[0]["dlq"], json!(true), "{}", acked.body);
    let (pid, txn) = (
        msg["partitionId"].as_str().expect("partitionId"),
        msg["transactionId"].as_str().expect("transactionId"),
    );
    let replay = ["dlq", "cli-auth", "replay", pid, txn];
    let run = queen_with(&b.url, &env, &replay, "").await;
    assert_eq!(run.code, 0, "replay: {}", run.stderr);
    let purge = ["dlq", "cli-auth", "purge", "--token", &admin];
    assert_eq!(queen(&b.url, &purge, "").await.code, 0);

    // A weaker role reads but is refused writes: 403, the role it needs, the flag to fix it.
    let reads = queen(&b.url, &["queue", "cli-auth", "--token", &reader], "").await;
    assert_eq!(reads.code, 0, "{}", reads.stderr);
    let push = ["push", "cli-auth", "--data", "{}", "--token", &reader];
    let refused = queen(&b.url, &push, "").await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    for want in ["HTTP 403", "needs the read-write role", "--token"] {
        assert!(refused.stderr.contains(want), "{want}: {}", refused.stderr);
    }
    let forged = format!("{admin}x");
    let bad = queen(&b.url, &["stats", "--token", &forged], "").await;
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert!(bad.stderr.contains("HTTP 401"), "{}", bad.stderr);
}
