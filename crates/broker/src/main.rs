//! The `queen` binary: a thin command line over the broker library (`serve`) and the client
//! commands of `queen-cli` (`push`, `consume`, `queues`, …), plus shell completions.

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use queen_broker::config::{Config, PeerWake};
use queen_broker::{allocator, logging, server};
use queen_embedded_pg::{self as embedded_pg, EmbeddedOptions};

#[derive(Parser)]
#[command(
    name = "queen",
    version,
    about = "Queen-rs: a durable message broker on PostgreSQL"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (embedded PostgreSQL unless DATABASE_URL or PG_HOST is set).
    ///
    /// Embedded PostgreSQL: with neither DATABASE_URL nor PG_HOST set, the broker creates on
    /// first run, then reuses, a private cluster in $QUEEN_DATA_DIR/pg, built with the
    /// machine's own server binaries, searched in PG_BINDIR, `pg_config --bindir`, the newest
    /// /usr/lib/postgresql/*/bin, then PATH (Debian: apt-get install postgresql-15). It listens
    /// on a Unix socket in that directory only (no TCP port to collide with) with fsync on;
    /// as root it runs as the `postgres` user. The server is supervised as a child: it dies
    /// with the broker, a stale postmaster.pid left by a crash is recovered, a server that dies
    /// while the broker runs is reaped and restarted (with backoff), and SIGINT/SIGTERM
    /// stop the broker gracefully (parked long-polls answer, in-flight requests finish), then
    /// the cluster with a fast shutdown.
    ///
    /// Every option below is also an environment variable; the resolved configuration is
    /// printed at boot with passwords masked.
    Serve(Box<Config>),
    #[command(flatten)]
    Client(queen_cli::Command),
    /// Print a shell completion script: `queen completions bash > /etc/bash_completion.d/queen`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(cfg) => match run_broker(*cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("queen: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Client(command) => queen_cli::run(command),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "queen", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
    }
}

fn run_broker(cfg: Config) -> anyhow::Result<()> {
    let fixed = allocator::fix_mmap_threshold(cfg.malloc_mmap_threshold_kb);
    let trimming = allocator::start_trimmer(Duration::from_millis(cfg.malloc_trim_ms));
    logging::init(cfg.log_format, &cfg.log_level);
    tracing::info!(fixed, trimming, "malloc mmap threshold, periodic trim");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(cfg))
}

async fn serve(mut cfg: Config) -> anyhow::Result<()> {
    tracing::info!("config: {}", cfg.describe());
    cfg.check().map_err(anyhow::Error::msg)?;
    // The embedded cluster is started from the main thread, which lives as long as the
    // process: its parent-death signal then fires only when the broker itself dies.
    let embedded = if cfg.embedded() {
        cfg.peer_wake = PeerWake::Off;
        let mut opts = EmbeddedOptions::new(cfg.pg_dir());
        opts.unsafe_no_fsync = cfg.dev_unsafe;
        Some(embedded_pg::start(opts).await?)
    } else {
        None
    };
    let pg = match &embedded {
        Some(e) => e.config("postgres"),
        None => server::external_pg_config(&cfg)?,
    };
    // From here on a server that dies is restarted; the pool reconnects on its own.
    let embedded = embedded.map(embedded_pg::EmbeddedPg::supervise);
    let running = match server::start(cfg, pg).await {
        Ok(r) => r,
        Err(e) => {
            if let Some(e) = embedded {
                e.stop().await;
            }
            return Err(e);
        }
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
