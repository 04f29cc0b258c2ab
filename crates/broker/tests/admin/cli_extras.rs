//! The `queen kv`, `queen locks` and `queen timers` commands against a real broker (in-process,
//! on the test cluster), each run as a child process of the built binary: their tables and
//! one-line verdicts, `--json`, exit codes (1 for a verdict that did not apply, 2 for a wrong
//! command line), paging hints, and stored strings printed without their terminal escapes.

use serde_json::json;

use crate::cli::queen;
use crate::common::*;

const HOSTILE: &str = "boom\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_put_get_list_incr_delete_with_verdicts_and_exit_codes() {
    let b = broker().await;
    let url = b.url.as_str();
    let put = queen(
        url,
        &["kv", "put", "cli-kv", "p:1", "{\"n\":1}", "--forever"],
        "",
    )
    .await;
    assert_eq!(put.code, 0, "{}", put.stderr);
    assert!(
        put.stdout.starts_with("p:1 = {\"n\":1}  version "),
        "{}",
        put.stdout
    );
    assert!(put.stdout.ends_with("expires never\n"), "{}", put.stdout);

    let get = queen(url, &["kv", "get", "cli-kv", "p:1", "--json"], "").await;
    assert_eq!(get.code, 0, "{}", get.stderr);
    let row = get.json();
    assert_eq!(
        (row["found"].clone(), row["value"].clone()),
        (json!(true), json!({"n": 1}))
    );
    let version = row["version"].as_i64().expect("version");

    // Verdicts that did not apply exit 1 and say why.
    let args = [
        "kv",
        "put",
        "cli-kv",
        "p:1",
        "2",
        "--forever",
        "--if-absent",
    ];
    let taken = queen(url, &args, "").await;
    assert_eq!(taken.code, 1, "{}", taken.stdout);
    assert!(
        taken
            .stderr
            .contains("putIfAbsent of p:1 not applied: exists"),
        "{}",
        taken.stderr
    );
    let stale = format!("{}", version + 1000);
    let args = [
        "kv", "put", "cli-kv", "p:1", "3", "--ttl", "60", "--expect", &stale,
    ];
    let lost = queen(url, &args, "").await;
    assert_eq!(lost.code, 1);
    assert!(
        lost.stderr.contains("not applied: version"),
        "{}",
        lost.stderr
    );

    for key in ["p:2", "p:3"] {
        let run = queen(
            url,
            &["kv", "put", "cli-kv", key, "text value", "--ttl", "600"],
            "",
        )
        .await;
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let page = queen(url, &["kv", "list", "cli-kv", "p:", "--limit", "2"], "").await;
    assert_eq!(page.code, 0, "{}", page.stderr);
    let lines: Vec<&str> = page.stdout.lines().collect();
    assert!(lines[0].starts_with("KEY "), "{}", page.stdout);
    assert!(
        lines[1].starts_with("p:1 ") && lines[2].starts_with("p:2 "),
        "{}",
        page.stdout
    );
    assert!(lines[2].ends_with("\"text value\""), "{}", page.stdout);
    assert_eq!(
        lines[3],
        "more keys follow: queen kv list cli-kv p: --after p:2"
    );
    let args = [
        "kv",
        "list",
        "cli-kv",
        "p:",
        "--after",
        "p:2",
        "--keys-only",
    ];
    let rest = queen(url, &args, "").await;
    assert_eq!(rest.stdout.lines().count(), 2, "{}", rest.stdout);
    assert!(
        rest.stdout.lines().nth(1).unwrap_or("").starts_with("p:3 "),
        "{}",
        rest.stdout
    );

    let incr = [
        "kv", "incr", "cli-kv", "hits", "--by", "5", "--max", "7", "--ttl", "60",
    ];
    let first = queen(url, &incr, "").await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(
        first.stdout.starts_with("hits = 5  version "),
        "{}",
        first.stdout
    );
    let refused = queen(url, &incr, "").await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("incr of hits not applied: limit"),
        "{}",
        refused.stderr
    );
    let down = ["kv", "incr", "cli-kv", "hits", "--by", "-2.5", "--forever"];
    assert!(queen(url, &down, "")
        .await
        .stdout
        .starts_with("hits = 2.5 "));

    let del = queen(url, &["kv", "delete", "cli-kv", "p:1"], "").await;
    assert_eq!(
        (del.code, del.stdout.starts_with("deleted p:1 ")),
        (0, true),
        "{}",
        del.stderr
    );
    let miss = queen(url, &["kv", "get", "cli-kv", "p:1"], "").await;
    assert_eq!((miss.code, miss.stdout.as_str()), (1, ""));
    assert!(miss.stderr.contains("p:1: no such key"), "{}", miss.stderr);

    // Refusals and a wrong command line.
    let bad = queen(url, &["kv", "get", "NOT A NAMESPACE", "k"], "").await;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("kv_bad_request"), "{}", bad.stderr);
    assert!(bad.stderr.contains("namespace"), "{}", bad.stderr);
    let no_expiry = queen(url, &["kv", "put", "cli-kv", "k", "1"], "").await;
    assert_eq!(no_expiry.code, 2, "{}", no_expiry.stderr);
    let both = queen(
        url,
        &["kv", "put", "cli-kv", "k", "1", "--ttl", "5", "--forever"],
        "",
    )
    .await;
    assert_eq!(both.code, 2, "{}", both.stderr);
    let nan = queen(
        url,
        &["kv", "incr", "cli-kv", "k", "--by", "lots", "--forever"],
        "",
    )
    .await;
    assert_eq!(nan.code, 2, "{}", nan.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_strings_are_printed_without_their_terminal_escapes() {
    let b = broker().await;
    let url = b.url.as_str();
    let put = queen(
        url,
        &["kv", "put", "cli-esc", HOSTILE, HOSTILE, "--forever"],
        "",
    )
    .await;
    assert_eq!(put.code, 0, "{}", put.stderr);
    for run in [
        put,
        queen(url, &["kv", "get", "cli-esc", HOSTILE], "").await,
        queen(url, &["kv", "list", "cli-esc", "boom"], "").await,
        queen(
            url,
            &[
                "kv",
                "list",
                "cli-esc",
                "boom",
                "--limit",
                "1",
                "--keys-only",
            ],
            "",
        )
        .await,
    ] {
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(run.stdout.contains("boom\\u{1b}]0;owned"), "{}", run.stdout);
        assert!(
            !run.stdout.contains('\u{1b}') && !run.stdout.contains('\u{9b}'),
            "{:?}",
            run.stdout
        );
    }
    let args = [
        "timers",
        "schedule",
        "cli-esc",
        HOSTILE,
        "--data",
        "1",
        "--delay-ms",
        "600000",
    ];
    let sched = queen(url, &args, "").await;
    assert_eq!(
        sched.code, 1,
        "a control character in a timer key is refused"
    );
    assert!(
        sched.stderr.contains("timers_bad_request"),
        "{}",
        sched.stderr
    );
    let args = [
        "timers",
        "schedule",
        "cli-esc",
        "k",
        "--data",
        &format!("\"{}\"", "\\u001b[2J"),
        "--delay-ms",
        "600000",
    ];
    assert_eq!(queen(url, &args, "").await.code, 0);
    let peek = queen(url, &["timers", "peek", "cli-esc", "k"], "").await;
    assert!(
        peek.stdout.contains("\\u001b[2J"),
        "JSON text keeps its escape: {}",
        peek.stdout
    );
    assert!(!peek.stdout.contains('\u{1b}'), "{:?}", peek.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_acquire_show_renew_release_with_fencing_tokens() {
    let b = broker().await;
    let url = b.url.as_str();
    let args = [
        "locks", "acquire", "cli-lock", "--ttl", "30", "--owner", "ops", "--json",
    ];
    let got = queen(url, &args, "").await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    let token = got.json()["token"].as_i64().expect("token");
    let args = [
        "locks", "acquire", "cli-lock", "--ttl", "30", "--owner", "other",
    ];
    let held = queen(url, &args, "").await;
    assert_eq!(held.code, 1);
    assert!(held.stderr.contains("cli-lock: held"), "{}", held.stderr);
    assert!(
        held.stdout
            .lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("0     ops "),
        "{}",
        held.stdout
    );

    let show = queen(url, &["locks", "show", "cli-lock"], "").await;
    assert!(
        show.stdout.starts_with("SLOT  OWNER  TOKEN"),
        "{}",
        show.stdout
    );
    let old = token.to_string();
    let renew = queen(
        url,
        &["locks", "renew", "cli-lock", &old, "--ttl", "30", "--json"],
        "",
    )
    .await;
    assert_eq!(renew.code, 0, "{}", renew.stderr);
    let renewed = renew.json()["token"].as_i64().expect("new token");
    assert!(renewed > token, "{renewed} after {token}");

    let stale = queen(url, &["locks", "release", "cli-lock", &old], "").await;
    assert_eq!(stale.code, 1);
    assert!(stale.stderr.contains("cli-lock: lost"), "{}", stale.stderr);
    let new = renewed.to_string();
    let release = queen(url, &["locks", "release", "cli-lock", &new], "").await;
    assert_eq!(
        (release.code, release.stdout.as_str()),
        (0, "released cli-lock slot 0\n")
    );
    let free = queen(url, &["locks", "show", "cli-lock"], "").await;
    assert_eq!(free.stdout, "cli-lock is free\n");
    let next = queen(url, &["locks", "acquire", "cli-lock", "--ttl", "5"], "").await;
    let later: i64 = next
        .stdout
        .split_whitespace()
        .nth(5)
        .and_then(|t| t.parse().ok())
        .expect(&next.stdout);
    assert!(
        later > renewed,
        "a later holder's token is greater: {}",
        next.stdout
    );
    let bad = queen(url, &["locks", "acquire", "a#b", "--ttl", "5"], "").await;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("locks_bad_request"), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_schedule_list_peek_cancel_and_one_fires() {
    let b = broker().await;
    let url = b.url.as_str();
    for key in ["t/1", "t/2", "t/3"] {
        let args = [
            "timers",
            "schedule",
            "cli-timers",
            key,
            "--data",
            "{\"k\":1}",
            "--delay-ms",
            "3600000",
        ];
        let run = queen(url, &args, "").await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout
                .starts_with(&format!("scheduled {key} on cli-timers at ")),
            "{}",
            run.stdout
        );
    }
    let page = queen(url, &["timers", "list", "cli-timers", "--limit", "2"], "").await;
    let lines: Vec<&str> = page.stdout.lines().collect();
    assert!(
        lines[0].starts_with("KEY  PARTITION  DELIVER AT"),
        "{}",
        page.stdout
    );
    assert!(
        lines[1].starts_with("t/1  Default ") && lines[2].starts_with("t/2 "),
        "{}",
        page.stdout
    );
    assert_eq!(
        lines[3],
        "more timers follow: queen timers list cli-timers --after t/2"
    );
    let rest = queen(
        url,
        &["timers", "list", "cli-timers", "--after", "t/2", "--json"],
        "",
    )
    .await;
    let rows = rest.json()["rows"].clone();
    assert_eq!(
        (rows[0]["timerKey"].clone(), rows.as_array().map(Vec::len)),
        (json!("t/3"), Some(1))
    );

    let peek = queen(url, &["timers", "peek", "cli-timers", "t/1", "--json"], "").await;
    assert_eq!(peek.json()["payload"], json!({"k": 1}));
    let again = [
        "timers",
        "schedule",
        "cli-timers",
        "t/1",
        "--data",
        "2",
        "--delay-ms",
        "3600000",
    ];
    assert!(queen(url, &again, "")
        .await
        .stdout
        .starts_with("rescheduled t/1 "));
    let cancel = queen(url, &["timers", "cancel", "cli-timers", "t/1"], "").await;
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    assert!(
        cancel.stdout.starts_with("cancelled t/1 "),
        "{}",
        cancel.stdout
    );
    let gone = queen(
        url,
        &["timers", "cancel", "cli-timers", "t/1", "--txn", "x-1"],
        "",
    )
    .await;
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr.contains("t/1: no pending timer") && gone.stderr.contains("txn x-1"),
        "{}",
        gone.stderr
    );
    let none = queen(url, &["timers", "peek", "cli-timers", "t/1"], "").await;
    assert_eq!(none.code, 1);

    let due = [
        "timers",
        "schedule",
        "cli-fire",
        "now",
        "--data",
        "{\"due\":true}",
        "--delay-ms",
        "-5",
        "--txn",
        "cli-fired",
    ];
    assert_eq!(queen(url, &due, "").await.code, 0);
    let consume = queen(
        url,
        &["consume", "cli-fire", "--limit", "1", "--idle-ms", "30000"],
        "",
    )
    .await;
    assert_eq!(consume.code, 0, "{}", consume.stderr);
    let m: serde_json::Value = serde_json::from_str(consume.stdout.trim()).expect(&consume.stdout);
    assert_eq!(
        (m["transactionId"].clone(), m["data"].clone()),
        (json!("cli-fired"), json!({"due": true}))
    );

    let not_json = [
        "timers",
        "schedule",
        "cli-timers",
        "k",
        "--data",
        "{nope",
        "--delay-ms",
        "1",
    ];
    let usage = queen(url, &not_json, "").await;
    assert_eq!(usage.code, 2);
    assert!(
        usage.stderr.contains("--data is not one JSON document"),
        "{}",
        usage.stderr
    );
}
