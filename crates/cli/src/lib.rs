//! The client commands of the `queen` binary (`push`, `consume`, `queues`, `queue`,
//! `configure`, `dlq`, `seek`, `stats`, `kv`, `locks`, `timers`, `ephemeral`, `fetch`): each talks HTTP to a running broker through the
//! `queen-client` SDK. Human tables by default, `--json` for scripts; the exit code says what
//! happened (see [`CliError`]).

mod consume;
mod dlq;
mod ephemeral;
mod error;
mod fetch;
mod inspect;
mod kv;
mod locks;
mod manage;
mod push;
mod table;
mod timers;

use std::process::ExitCode;

pub use error::{CliError, Result};

/// Where the broker is and how to print; shared by every client command. Global, so a command
/// with actions (`queen dlq QUEUE purge --json`) takes them after the action too.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The broker's base URL.
    #[arg(
        long,
        global = true,
        env = "QUEEN_URL",
        default_value = "http://127.0.0.1:6632"
    )]
    pub url: String,
    /// A JWT sent as `Authorization: Bearer` on every call, for a broker with auth on (its
    /// `role` claim decides what the commands may do).
    #[arg(long, global = true, env = "QUEEN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the broker's JSON answer (or a JSON summary) instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

impl Connection {
    fn client(&self) -> queen_client::Queen {
        let queen = queen_client::Queen::new(&self.url);
        match &self.token {
            Some(token) => queen.with_token(token),
            None => queen,
        }
    }

    /// Maps an SDK failure to the error (and exit code) it means for this broker.
    fn fail(&self, e: queen_client::Error) -> CliError {
        CliError::from_client(&self.url, e)
    }
}

/// The client subcommands; the binary adds `serve` and `completions` beside them.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Push newline-delimited JSON payloads from stdin (or --data) to a queue.
    #[command(after_help = "Examples:\n  \
        printf '{\"id\":1}\\n{\"id\":2}\\n' | queen push orders\n  \
        queen push orders --partition customer-42 --data '{\"id\":3}'\n  \
        queen push orders --json < events.ndjson")]
    Push(push::PushArgs),
    /// Long-poll a queue and print one JSON object per message per line, acking after printing.
    #[command(after_help = "Examples:\n  \
        queen consume orders --limit 10\n  \
        queen consume orders --group billing --idle-ms 2000 > out.ndjson\n  \
        queen consume orders --partition customer-42 --no-ack")]
    Consume(consume::ConsumeArgs),
    /// List queues with their partition and message counts.
    Queues(inspect::QueuesArgs),
    /// One queue: counts, options, partitions and consumer groups with their lag.
    Queue(inspect::QueueArgs),
    /// Create or reconfigure a queue: `queen configure orders leaseTime=60 retryLimit=3`.
    #[command(
        after_help = "Values are read as JSON when they parse (numbers, true/false, \
        objects), else as text.\nExample:\n  queen configure orders leaseTime=60 retryLimit=3 \
        dlqAfterMaxRetries=true"
    )]
    Configure(manage::ConfigureArgs),
    /// List a queue's dead letters, newest first; or replay, delete or purge them.
    Dlq(dlq::DlqArgs),
    /// Move a consumer group's cursors on a queue to the end or to a point in time.
    #[command(after_help = "Examples:\n  queen seek billing orders --to-end\n  \
        queen seek billing orders --timestamp 2026-12-01T00:00:00Z")]
    Seek(manage::SeekArgs),
    /// Totals over all queues and the broker's counters.
    Stats(inspect::StatsArgs),
    /// The key-value store: get, put, delete, list a prefix, incr.
    Kv(kv::KvArgs),
    /// Locks and semaphores: show the holders, acquire, renew, release.
    Locks(locks::LocksArgs),
    /// A queue's timers: list, peek, schedule, cancel.
    Timers(timers::TimersArgs),
    /// Ephemeral queues: gauges, push, pop, reset, delete.
    Ephemeral(ephemeral::EphemeralArgs),
    /// Print a partition's stored messages from an offset (no lease, no cursor moved).
    Fetch(fetch::FetchArgs),
}

/// Runs one client command to completion; errors are printed to stderr and become the exit
/// code.
pub fn run(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("queen: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(dispatch(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e.exit_code();
            if code != ExitCode::SUCCESS {
                eprintln!("{}", error_line(&e));
            }
            code
        }
    }
}

/// The stderr line of a failed command. A refusal quotes the broker, which may quote stored
/// names, so it is made printable like every table cell.
fn error_line(e: &CliError) -> String {
    format!("queen: {}", table::printable(&e.to_string()))
}

async fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Push(a) => push::run(a).await,
        Command::Consume(a) => consume::run(a).await,
        Command::Queues(a) => inspect::queues(a).await,
        Command::Queue(a) => inspect::queue(a).await,
        Command::Configure(a) => manage::configure(a).await,
        Command::Dlq(a) => dlq::run(a).await,
        Command::Seek(a) => manage::seek(a).await,
        Command::Stats(a) => inspect::stats(a).await,
        Command::Kv(a) => kv::run(a).await,
        Command::Locks(a) => locks::run(a).await,
        Command::Timers(a) => timers::run(a).await,
        Command::Ephemeral(a) => ephemeral::run(a).await,
        Command::Fetch(a) => fetch::run(a).await,
    }
}

/// Writes `text` to stdout (a closed pipe is reported as such, not as a panic).
fn print(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Pretty JSON plus a newline.
fn print_json(v: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| CliError::Refused(e.to_string()))?;
    print(&format!("{text}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_quoting_terminal_escapes_is_printed_escaped() {
        let e = CliError::Refused("queue \u{1b}]0;owned\u{7} not found".into());
        assert_eq!(
            error_line(&e),
            "queen: the broker refused: queue \\u{1b}]0;owned\\u{7} not found"
        );
    }
}
