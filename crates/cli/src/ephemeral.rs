//! `queen ephemeral ACTION`: ephemeral queues (docs/wire.md §25) through the SDK. `queues` and
//! `depth` show gauges; `push` sends JSON payloads (from `--data` or stdin lines) as one
//! all-or-nothing call; `pop` prints one JSON line per message and then acks what it printed
//! (unless `--no-ack`); `reset` and `delete` empty or remove a queue.

use std::io::BufRead;
use std::time::Duration;

use queen_client::ephemeral::{AckOutcome, Ephemeral, EphemeralAck, EphemeralPop, Gauges};
use serde_json::json;
use serde_json::value::RawValue;

use crate::table::{printable, render};
use crate::{print, print_json, CliError, Connection, Result};

/// One line of `pop`: the payload spliced in as the bytes it was pushed with.
#[derive(serde::Serialize)]
struct Line<'a> {
    id: &'a str,
    partition: &'a str,
    attempts: u32,
    payload: &'a RawValue,
}

/// Most messages in one push (the broker's bound).
const MAX_PUSH: usize = 10_000;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  queen ephemeral push ticks --data '{\"price\":101.5}'\n  \
    printf '1\\n2\\n' | queen ephemeral push ticks --partition eu\n  \
    queen ephemeral pop ticks --batch 10 --group ui --wait-ms 2000\n  \
    queen ephemeral queues\n  queen ephemeral depth ticks"
)]
pub struct EphemeralArgs {
    #[command(subcommand)]
    pub action: EphemeralAction,
    #[command(flatten)]
    pub conn: Connection,
}

/// What to do with ephemeral queues.
#[derive(Debug, clap::Subcommand)]
pub enum EphemeralAction {
    /// Every ephemeral queue with its gauges.
    Queues,
    /// One queue's gauges and options (exit 1 when it does not exist).
    Depth { queue: String },
    /// Push JSON payloads (`--data`, repeatable, or one per stdin line) in one call.
    Push {
        queue: String,
        /// The partition (`Default` when absent).
        #[arg(long)]
        partition: Option<String>,
        /// A JSON payload; repeatable. Without it, payloads are read from stdin, one per line.
        #[arg(long = "data", value_name = "JSON")]
        data: Vec<String>,
    },
    /// Pop and print one JSON line per message, then ack them.
    Pop {
        queue: String,
        /// Messages to pop.
        #[arg(long, default_value_t = 1)]
        batch: u32,
        /// The consumer group (absent: queue mode).
        #[arg(long)]
        group: Option<String>,
        /// Only this partition.
        #[arg(long)]
        partition: Option<String>,
        /// Wait this long for a message (at most 300 000).
        #[arg(long, value_name = "MS")]
        wait_ms: Option<u64>,
        /// Print without acknowledging: delivered again after their lease.
        #[arg(long)]
        no_ack: bool,
    },
    /// Drop every message of a queue (its declaration stays).
    Reset { queue: String },
    /// Remove a queue and its declaration.
    Delete { queue: String },
}

pub async fn run(a: EphemeralArgs) -> Result<()> {
    let client = a.conn.client();
    let fail = |e| a.conn.fail(e);
    match &a.action {
        EphemeralAction::Queues => {
            let (queues, truncated) = client.ephemeral_queues().await.map_err(fail)?;
            if a.conn.json {
                return print_json(&json!({"queues": queues, "truncated": truncated}));
            }
            let mut out = gauge_table(&queues);
            if truncated {
                out.push_str("more queues exist: the broker lists the first 1000\n");
            }
            print(&out)
        }
        EphemeralAction::Depth { queue } => {
            match client.ephemeral(queue).gauges().await.map_err(fail)? {
                Some(g) => {
                    if a.conn.json {
                        return print_json(&json!(g));
                    }
                    let options = serde_json::to_string(&g.options).unwrap_or_default();
                    print(&format!(
                        "{}options {}\n",
                        gauge_table(std::slice::from_ref(&g)),
                        printable(&options)
                    ))
                }
                None => Err(CliError::NotApplied(format!(
                    "{}: no such ephemeral queue",
                    printable(queue)
                ))),
            }
        }
        EphemeralAction::Push {
            queue,
            partition,
            data,
        } => {
            let payloads = payloads(data)?;
            let pushed = client
                .ephemeral(queue)
                .push(partition.as_deref(), &payloads)
                .await
                .map_err(fail)?;
            if a.conn.json {
                return print_json(&json!({"pushed": pushed.pushed, "dropped": pushed.dropped}));
            }
            print(&format!(
                "pushed {}  dropped {}\n",
                pushed.pushed, pushed.dropped
            ))
        }
        EphemeralAction::Pop {
            queue,
            batch,
            group,
            partition,
            wait_ms,
            no_ack,
        } => {
            let pop = EphemeralPop {
                partition: partition.clone(),
                batch: Some(*batch),
                wait: wait_ms.map(Duration::from_millis),
                group: group.clone(),
                auto_ack: false,
            };
            let q = client.ephemeral(queue);
            let messages = q.pop(&pop).await.map_err(fail)?;
            let mut out = String::new();
            for m in &messages {
                let line = Line {
                    id: &m.id,
                    partition: &m.partition,
                    attempts: m.attempts,
                    payload: &m.payload,
                };
                let text =
                    serde_json::to_string(&line).map_err(|e| CliError::Refused(e.to_string()))?;
                out.push_str(&text);
                out.push('\n');
            }
            print(&out)?;
            if *no_ack || messages.is_empty() {
                return Ok(());
            }
            ack_printed(&a, &q, group.as_deref(), &messages).await
        }
        EphemeralAction::Reset { queue } => {
            let dropped = client.ephemeral(queue).reset().await.map_err(fail)?;
            if a.conn.json {
                return print_json(&json!({"dropped": dropped}));
            }
            print(&format!(
                "reset {}: {dropped} messages dropped\n",
                printable(queue)
            ))
        }
        EphemeralAction::Delete { queue } => {
            if client.ephemeral(queue).delete().await.map_err(fail)? {
                if a.conn.json {
                    return print_json(&json!({"deleted": true}));
                }
                return print(&format!("deleted {}\n", printable(queue)));
            }
            Err(CliError::NotApplied(format!(
                "{}: no such ephemeral queue",
                printable(queue)
            )))
        }
    }
}

/// Acks what was printed; an ack that did not retire its message (its lease ended, its ring
/// is gone) is reported, and the command exits 1.
async fn ack_printed(
    a: &EphemeralArgs,
    q: &Ephemeral,
    group: Option<&str>,
    messages: &[queen_client::ephemeral::EphemeralMessage],
) -> Result<()> {
    let acks: Vec<EphemeralAck> = messages
        .iter()
        .map(|m| EphemeralAck::completed(&m.id))
        .collect();
    let outcomes = q.ack(group, &acks).await.map_err(|e| a.conn.fail(e))?;
    let missed: Vec<String> = messages
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| **o != AckOutcome::Acked)
        .map(|(m, o)| format!("{} ({})", m.id, o.as_str()))
        .collect();
    if missed.is_empty() {
        return Ok(());
    }
    Err(CliError::NotApplied(format!(
        "acks not applied: {}",
        missed.join(", ")
    )))
}

/// The payloads of `--data`, or of stdin's non-empty lines; each must be one JSON document.
fn payloads(data: &[String]) -> Result<Vec<Box<RawValue>>> {
    let lines: Vec<String> = if data.is_empty() {
        std::io::stdin()
            .lock()
            .lines()
            .collect::<std::io::Result<Vec<_>>>()?
            .into_iter()
            .filter(|l| !l.trim().is_empty())
            .collect()
    } else {
        data.to_vec()
    };
    if lines.is_empty() || lines.len() > MAX_PUSH {
        return Err(CliError::Usage(format!(
            "an ephemeral push takes 1 to {MAX_PUSH} payloads, got {}",
            lines.len()
        )));
    }
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            RawValue::from_string(l).map_err(|e| {
                CliError::Usage(format!("payload {} is not one JSON document: {e}", i + 1))
            })
        })
        .collect()
}

fn gauge_table(queues: &[Gauges]) -> String {
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|g| {
            vec![
                g.queue.clone(),
                if g.declared { "yes" } else { "no" }.to_string(),
                g.length.to_string(),
                g.bytes.to_string(),
                g.pushed.to_string(),
                g.partitions.to_string(),
                g.groups.to_string(),
                format!("{}/{}/{}", g.dropped.bounds, g.dropped.ttl, g.dropped.retry),
            ]
        })
        .collect();
    let header = [
        "QUEUE",
        "DECLARED",
        "LENGTH",
        "BYTES",
        "PUSHED",
        "PARTITIONS",
        "GROUPS",
        "DROPPED BOUNDS/TTL/RETRY",
    ];
    render(&header, &rows)
}
