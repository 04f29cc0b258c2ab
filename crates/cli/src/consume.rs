//! `queen consume`: long-polls a queue, prints each message as one JSON line, then acks what
//! it printed. Output is flushed before the ack, so a message is acknowledged only once it is
//! written; one printed but not acknowledged (a crash, a refused ack) is delivered again
//! after its lease. Ctrl-C stops between batches, or abandons a pop in flight, whose
//! messages (never printed) are delivered again after the lease.

use std::io::Write;
use std::time::{Duration, Instant};

use queen_client::{AckItem, Message, PopResponse, Queen};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::{CliError, Connection, Result};

/// The longest single long-poll; `--idle-ms` shortens the last one.
const MAX_POLL: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// The queue.
    pub queue: String,
    /// Consumer group (each group sees every message); absent: the queue's shared group.
    #[arg(long)]
    pub group: Option<String>,
    /// Consume only this partition (default: any partition of the queue).
    #[arg(long)]
    pub partition: Option<String>,
    /// Stop after printing this many messages.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Stop after this many milliseconds without a message.
    #[arg(long, value_name = "MS")]
    pub idle_ms: Option<u64>,
    /// Print without acknowledging: the messages are delivered again after their lease.
    #[arg(long)]
    pub no_ack: bool,
    /// Messages per pop.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    #[command(flatten)]
    pub conn: Connection,
}

/// One output line: what a script needs to process and address the message.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    data: &'a RawValue,
    transaction_id: &'a str,
    partition_id: &'a str,
    partition: &'a str,
    queue: &'a str,
    id: &'a str,
    created_at: Option<&'a str>,
    offset: Option<i64>,
    delivery_attempt: Option<u32>,
    consumer_group: Option<&'a str>,
}

pub async fn run(args: ConsumeArgs) -> Result<()> {
    let queen = args.conn.client();
    let mut base = queen.queue(&args.queue).wait(true);
    if let Some(g) = &args.group {
        base = base.group(g);
    }
    if let Some(p) = &args.partition {
        base = base.partition(p);
    }
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    let mut printed = 0u64;
    let mut last_message = Instant::now();
    loop {
        let want = match args.limit {
            Some(limit) if printed >= limit => return Ok(()),
            Some(limit) => (limit - printed).min(args.batch as u64) as u32,
            None => args.batch,
        };
        let Some(poll) = poll_time(args.idle_ms, last_message) else {
            return Ok(());
        };
        let request = base.clone().batch(want).timeout_ms(poll.as_millis() as u64);
        let pop = request.pop();
        let popped = tokio::select! {
            r = pop => r.map_err(|e| args.conn.fail(e))?,
            _ = &mut stop => return Ok(()),
        };
        let Some(batch) = popped else { continue };
        last_message = Instant::now();
        let shown = &batch.messages[..batch.messages.len().min(want as usize)];
        write_lines(&batch, shown)?;
        printed += shown.len() as u64;
        if !args.no_ack {
            ack(&queen, &args, shown).await?;
        }
    }
}

/// How long the next pop may wait, or `None` once `--idle-ms` has passed without a message.
fn poll_time(idle_ms: Option<u64>, last_message: Instant) -> Option<Duration> {
    let Some(ms) = idle_ms else {
        return Some(MAX_POLL);
    };
    let left = Duration::from_millis(ms).checked_sub(last_message.elapsed())?;
    (!left.is_zero()).then(|| left.min(MAX_POLL))
}

fn write_lines(batch: &PopResponse, messages: &[Message]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for m in messages {
        let line = Line {
            data: &m.data,
            transaction_id: &m.transaction_id,
            partition_id: &m.partition_id,
            partition: &m.partition,
            queue: &batch.queue,
            id: &m.id,
            created_at: m.created_at.as_deref(),
            offset: m.offset,
            delivery_attempt: m.delivery_attempt,
            consumer_group: m.consumer_group.as_deref(),
        };
        let text = serde_json::to_string(&line).map_err(|e| CliError::Refused(e.to_string()))?;
        writeln!(out, "{text}")?;
    }
    out.flush()?;
    Ok(())
}

/// Acks the printed messages under their lease; a refusal stops the command (exit 1).
async fn ack(queen: &Queen, args: &ConsumeArgs, messages: &[Message]) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let items: Vec<AckItem> = messages.iter().map(AckItem::completed).collect();
    let results = queen
        .ack_batch(&items, args.group.as_deref())
        .await
        .map_err(|e| args.conn.fail(e))?;
    let refused: Vec<String> = results
        .iter()
        .filter(|r| !r.success)
        .map(|r| r.error.clone().unwrap_or_else(|| "refused".into()))
        .collect();
    match refused.first() {
        None => Ok(()),
        Some(first) => Err(CliError::Refused(format!(
            "{} of {} acks refused ({first}); those messages will be delivered again",
            refused.len(),
            results.len()
        ))),
    }
}
