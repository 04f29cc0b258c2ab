//! `queen push`: newline-delimited JSON from stdin (or `--data`) pushed in batches. Each
//! payload gets its transactionId when it is read, so a batch that is sent again after a
//! lost answer or a 5xx is deduplicated by the broker instead of stored twice.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use queen_client::{PushItem, QueueRef};
use serde_json::json;

use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The queue (created on first push if it does not exist).
    pub queue: String,
    /// The partition (lane) the messages go to.
    #[arg(long, default_value = "Default")]
    pub partition: String,
    /// A JSON payload to push; repeatable. Without it, payloads are read from stdin, one per
    /// line (empty lines are skipped).
    #[arg(long = "data", value_name = "JSON")]
    pub data: Vec<String>,
    /// Messages per request.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// Send the binary QPB1 body instead of JSON.
    #[arg(long)]
    pub binary: bool,
    /// Attempts per batch when the broker is unreachable, answers 5xx, or fails items.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub tries: u32,
    #[command(flatten)]
    pub conn: Connection,
}

/// Outcomes counted over the whole run.
#[derive(Debug, Default)]
struct Tally {
    queued: u64,
    duplicate: u64,
    buffered: u64,
    failed: u64,
    last_error: Option<String>,
}

pub async fn run(args: PushArgs) -> Result<()> {
    let queen = args.conn.client();
    let queue = queen.queue(&args.queue).partition(&args.partition);
    let mut source = Source::new(&args.data);
    let progress = std::io::stderr().is_terminal() && !args.conn.json;
    let mut tally = Tally::default();
    let input_error = loop {
        let (batch, error) = source.next_batch(args.batch as usize);
        if !batch.is_empty() {
            push_batch(&queue, batch, &args, &mut tally).await?;
            if progress {
                show_progress(&tally);
            }
        }
        if error.is_some() || source.done {
            break error;
        }
    };
    if progress {
        eprintln!();
    }
    report(&tally, args.conn.json)?;
    if let Some(e) = input_error {
        return Err(e);
    }
    match tally.failed {
        0 => Ok(()),
        n => Err(CliError::Refused(format!(
            "{n} messages failed after {} tries: {}",
            args.tries,
            tally.last_error.unwrap_or_default()
        ))),
    }
}

/// Sends one batch, again (same transactionIds) for what did not land, up to `tries` times.
async fn push_batch(
    queue: &QueueRef,
    mut pending: Vec<PushItem>,
    args: &PushArgs,
    tally: &mut Tally,
) -> Result<()> {
    for attempt in 1..=args.tries {
        let answer = if args.binary {
            queue.push_binary(&pending, false).await
        } else {
            queue.push(&pending).await
        };
        let last = attempt == args.tries;
        match answer {
            Ok(results) => {
                let mut again = Vec::new();
                for (item, r) in pending.into_iter().zip(results) {
                    match r.status.as_str() {
                        "queued" => tally.queued += 1,
                        "duplicate" => tally.duplicate += 1,
                        "buffered" => tally.buffered += 1,
                        _ => {
                            tally.last_error = r.error.or(Some(r.status));
                            again.push(item);
                        }
                    }
                }
                if again.is_empty() {
                    return Ok(());
                }
                if last {
                    tally.failed += again.len() as u64;
                    return Ok(());
                }
                pending = again;
            }
            Err(e) if e.is_transient() && !last => tally.last_error = Some(e.to_string()),
            Err(e) => return Err(args.conn.fail(e)),
        }
        tokio::time::sleep(backoff(attempt)).await;
    }
    Ok(())
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((200u64 << attempt.min(5)).min(5_000))
}

fn show_progress(t: &Tally) {
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\rpushed {}  (queued {}, duplicate {}, failed {})",
        t.queued + t.duplicate + t.buffered,
        t.queued,
        t.duplicate,
        t.failed
    );
    let _ = err.flush();
}

fn report(t: &Tally, as_json: bool) -> Result<()> {
    if as_json {
        return print_json(&json!({
            "queued": t.queued, "duplicate": t.duplicate, "buffered": t.buffered,
            "failed": t.failed, "error": t.last_error,
        }));
    }
    let mut line = format!(
        "queued {}  duplicate {}  failed {}",
        t.queued, t.duplicate, t.failed
    );
    if t.buffered > 0 {
        line.push_str(&format!("  buffered {}", t.buffered));
    }
    print(&format!("{line}\n"))
}

/// Payloads from `--data` values or stdin lines, each given its transactionId when read.
struct Source<'a> {
    data: std::slice::Iter<'a, String>,
    from_stdin: bool,
    line_no: u64,
    done: bool,
}

impl<'a> Source<'a> {
    fn new(data: &'a [String]) -> Self {
        Self {
            data: data.iter(),
            from_stdin: data.is_empty(),
            line_no: 0,
            done: false,
        }
    }

    /// Up to `n` items; an unreadable or invalid line ends the input with its error, after
    /// the valid lines before it (which are returned and still pushed).
    fn next_batch(&mut self, n: usize) -> (Vec<PushItem>, Option<CliError>) {
        let mut items = Vec::with_capacity(n.min(1024));
        let stdin = std::io::stdin();
        let mut lines = stdin.lock();
        while items.len() < n {
            let text = match self.next_text(&mut lines) {
                Ok(Some(t)) => t,
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Err(e) => return (items, Some(e)),
            };
            let id = uuid::Uuid::now_v7().to_string();
            match PushItem::raw(text, Some(id)) {
                Ok(item) => items.push(item),
                Err(e) => {
                    let at = if self.from_stdin {
                        format!("line {}", self.line_no)
                    } else {
                        format!("--data value {}", self.line_no)
                    };
                    let e = CliError::Usage(format!("{at} is not one JSON value ({e})"));
                    return (items, Some(e));
                }
            }
        }
        (items, None)
    }

    /// The next non-empty payload text, or `None` at the end.
    fn next_text(&mut self, stdin: &mut impl BufRead) -> Result<Option<String>> {
        loop {
            self.line_no += 1;
            let text = if self.from_stdin {
                let mut line = String::new();
                let read = stdin
                    .read_line(&mut line)
                    .map_err(|e| CliError::Usage(format!("reading stdin: {e}")))?;
                if read == 0 {
                    return Ok(None);
                }
                line
            } else {
                match self.data.next() {
                    Some(d) => d.clone(),
                    None => return Ok(None),
                }
            };
            let trimmed = text.trim();
            if !trimmed.is_empty() {
                return Ok(Some(trimmed.to_string()));
            }
        }
    }
}
