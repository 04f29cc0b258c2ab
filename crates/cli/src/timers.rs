//! `queen timers ACTION QUEUE`: a queue's timers (docs/wire.md §22) through the SDK. `list`
//! pages the pending ones by key; `peek` shows one with its message; `schedule` (re)schedules
//! one; `cancel` cancels one. A cancel that finds no pending timer, or one already firing,
//! exits 1.

use std::time::Duration;

use queen_client::timers::{PendingTimer, Schedule, TimerResult, TimerStatus};
use serde_json::{json, Value};

use crate::kv::shell_word;
use crate::table::{cell, printable, render};
use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  queen timers list orders\n  \
    queen timers schedule orders order:9f1:expire --data '{\"order\":\"9f1\"}' --delay-ms 1800000\n  \
    queen timers peek orders order:9f1:expire\n  queen timers cancel orders order:9f1:expire")]
pub struct TimersArgs {
    #[command(subcommand)]
    pub action: TimersAction,
    #[command(flatten)]
    pub conn: Connection,
}

/// What to do with a queue's timers.
#[derive(Debug, clap::Subcommand)]
pub enum TimersAction {
    /// List a queue's pending timers by key, one page at a time.
    List {
        queue: String,
        /// Keys after this one (the previous page's last key).
        #[arg(long)]
        after: Option<String>,
        /// Timers per page (the broker clamps it to 1..1000; 100 by default).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Show one pending timer with its message (exit 1 when there is none).
    Peek { queue: String, key: String },
    /// Schedule a message (one JSON document) for later; replaces a pending timer of the key.
    Schedule {
        queue: String,
        key: String,
        /// The message, one JSON document.
        #[arg(long)]
        data: String,
        /// Milliseconds from now (negative or 0: due at once; at most 90 days).
        #[arg(long, allow_hyphen_values = true)]
        delay_ms: i64,
        /// The partition it goes to (Default when absent).
        #[arg(long)]
        partition: Option<String>,
        /// The message's transactionId (minted by the broker when absent).
        #[arg(long)]
        txn: Option<String>,
    },
    /// Cancel a pending timer.
    Cancel {
        queue: String,
        key: String,
        /// Its transactionId, echoed back when it is already gone.
        #[arg(long)]
        txn: Option<String>,
    },
}

pub async fn run(a: TimersArgs) -> Result<()> {
    let timers = a.conn.client().timers();
    let fail = |e| a.conn.fail(e);
    match &a.action {
        TimersAction::List {
            queue,
            after,
            limit,
        } => {
            let page = timers
                .list(queue, after.as_deref(), *limit)
                .await
                .map_err(fail)?;
            if a.conn.json {
                return print_json(&to_json(&page)?);
            }
            let mut out = table(&page.rows, false);
            if let Some(next) = &page.next_after {
                out.push_str(&format!(
                    "more timers follow: queen timers list {} --after {}\n",
                    shell_word(queue),
                    shell_word(next)
                ));
            }
            print(&out)
        }
        TimersAction::Peek { queue, key } => match timers.peek(queue, key).await.map_err(fail)? {
            Some(t) => {
                if a.conn.json {
                    let mut v = to_json(&t)?;
                    v["found"] = json!(true);
                    return print_json(&v);
                }
                print(&table(std::slice::from_ref(&t), true))
            }
            None => {
                if a.conn.json {
                    print_json(&json!({"found": false, "queue": queue, "timerKey": key}))?;
                }
                Err(CliError::NotApplied(format!(
                    "{}: no pending timer (never scheduled, cancelled, or already fired)",
                    printable(key)
                )))
            }
        },
        TimersAction::Schedule {
            queue,
            key,
            data,
            delay_ms,
            partition,
            txn,
        } => {
            let payload: Value = serde_json::from_str(data)
                .map_err(|e| CliError::Usage(format!("--data is not one JSON document: {e}")))?;
            let mut s = Schedule::new(queue, key, &payload, Duration::ZERO)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            s.delay_ms = *delay_ms;
            s.partition = partition.clone();
            s.txn = txn.clone();
            let r = timers.schedule(s).await.map_err(fail)?;
            outcome(&a, &r)
        }
        TimersAction::Cancel { queue, key, txn } => {
            let r = timers
                .cancel(queue, key, txn.as_deref())
                .await
                .map_err(fail)?;
            outcome(&a, &r)
        }
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| CliError::Refused(e.to_string()))
}

/// A schedule's or cancel's line; a cancel that did nothing exits 1.
fn outcome(a: &TimersArgs, r: &TimerResult) -> Result<()> {
    if a.conn.json {
        print_json(&to_json(r)?)?;
    }
    let key = printable(&r.timer_key);
    let txn = cell(&json!(r.txn));
    match &r.status {
        TimerStatus::Scheduled | TimerStatus::Rescheduled if !a.conn.json => print(&format!(
            "{} {key} on {} at {} (txn {txn})\n",
            r.status.as_str(),
            printable(&r.queue),
            cell(&json!(r.deliver_at))
        )),
        TimerStatus::Cancelled if !a.conn.json => print(&format!("cancelled {key} (txn {txn})\n")),
        TimerStatus::Absent => Err(CliError::NotApplied(format!(
            "{key}: no pending timer (never scheduled, cancelled, or already fired; txn {txn})"
        ))),
        TimerStatus::TooLate => Err(CliError::NotApplied(format!(
            "{key}: too late, it is firing now and will be delivered"
        ))),
        _ if r.ok => Ok(()),
        other => Err(CliError::NotApplied(format!("{key}: {}", other.as_str()))),
    }
}

fn table(timers: &[PendingTimer], with_payload: bool) -> String {
    let rows: Vec<Vec<String>> = timers
        .iter()
        .map(|t| {
            let mut row = vec![
                t.timer_key.clone(),
                t.partition.clone(),
                t.deliver_at.clone(),
                t.txn.clone(),
                t.attempts.to_string(),
                if t.firing { "yes" } else { "no" }.to_string(),
            ];
            if with_payload {
                row.push(
                    t.payload
                        .as_ref()
                        .map_or_else(String::new, |p| p.get().to_string()),
                );
            }
            row
        })
        .collect();
    let mut header = vec![
        "KEY",
        "PARTITION",
        "DELIVER AT",
        "TXN",
        "ATTEMPTS",
        "FIRING",
    ];
    if with_payload {
        header.push("PAYLOAD");
    }
    render(&header, &rows)
}
