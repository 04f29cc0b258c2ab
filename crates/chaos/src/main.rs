//! `queen-chaos`: proves the broker's guarantees under faults. The default command runs a
//! mixed workload against real broker processes while injecting faults, records the history
//! and checks it; `fuzz-http` sends mutated and random requests to every route. Exit status:
//! 0 nothing found, 1 violations or findings, 2 the tool itself could not run.

mod checker;
mod cluster;
mod failover;
mod faults;
mod fuzz;
mod history;
mod profile;
mod report;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::checker::Violation;
use crate::cluster::Cluster;
use crate::history::History;
use crate::profile::Profile;
use crate::workload::{Ctx, NAMED_GROUPS, QUEUE_MODE};

#[derive(Parser)]
#[command(
    name = "queen-chaos",
    version,
    about = "History checker under faults, and HTTP fuzzer, for Queen-rs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand)]
enum Cmd {
    /// The workload with faults and the history check (the default).
    Run,
    /// Mutated and random requests to every route.
    FuzzHttp {
        /// Seed of the input generator (printed; a run is reproducible from it).
        #[arg(long)]
        seed: Option<u64>,
        /// Requests per route, overriding the profile's count.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        per_route: Option<u64>,
    },
}

#[derive(Args)]
struct Common {
    /// The CI profile (the default): 6 000 messages over 50 s, a fault every 6 s.
    #[arg(long, global = true)]
    small: bool,
    /// 60 000 messages over 4 min, a fault every 20 s: deep backlogs in ~10 min.
    #[arg(long, global = true, conflicts_with = "small")]
    medium: bool,
    /// The proof profile: ≥ 1 000 000 messages, ≥ 20 faults (long; not on a shared machine).
    #[arg(long, global = true, conflicts_with_all = ["small", "medium"])]
    full: bool,
    /// The far-behind variant of the profile: hash-sidecar rows purged seconds after each
    /// push and named groups joining late, so every ack resolves behind the purge horizon.
    #[arg(long, global = true)]
    far_behind: bool,
    /// The HA variant (issue 38): the brokers on a pg_auto_failover formation (monitor,
    /// primary, two synchronous standbys; needs `pg_autoctl`, see scripts/setup.sh), three
    /// brokers (one pinned to a node), and failovers of every kind instead of the faults of
    /// the single database.
    #[arg(long, global = true, conflicts_with = "pg_url")]
    failover: bool,
    /// An external PostgreSQL for the brokers (PostgreSQL crashes are then not injected).
    #[arg(long, global = true)]
    pg_url: Option<String>,
    /// The `queen` binary (default: next to this executable).
    #[arg(long, global = true)]
    queen_bin: Option<PathBuf>,
    /// Keep the scratch directory (broker logs, embedded cluster, `history.json`).
    #[arg(long, global = true)]
    keep: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = rt.block_on(async {
        let mut profile = if cli.common.full {
            Profile::full()
        } else if cli.common.medium {
            Profile::medium()
        } else {
            Profile::small()
        };
        if cli.common.far_behind {
            profile = profile.far_behind();
        }
        if cli.common.failover {
            profile = profile.failover();
        }
        if let Some(Cmd::FuzzHttp {
            per_route: Some(n), ..
        }) = cli.cmd
        {
            profile.fuzz_per_route = n as usize;
        }
        let bin = queen_launch::locate_queen(cli.common.queen_bin.clone())?;
        let env = profile.broker_env();
        let fuzzing = matches!(cli.cmd, Some(Cmd::FuzzHttp { .. }));
        let ha = if cli.common.failover && !fuzzing {
            Some(failover::start(cli.common.keep).await?)
        } else {
            None
        };
        let (slots, pg_url) = match &ha {
            Some(ha) => (failover::SLOTS, Some(ha.url.clone())),
            None if fuzzing => (1, cli.common.pg_url.clone()),
            None => (2, cli.common.pg_url.clone()),
        };
        let cluster = Arc::new(Cluster::start(bin, pg_url, slots, env, cli.common.keep).await?);
        match &ha {
            Some(ha) => ha.start_brokers(&cluster).await?,
            None => cluster.start_broker(0).await?,
        }
        let found = match cli.cmd {
            Some(Cmd::FuzzHttp { seed, .. }) => fuzz::run(&cluster, &profile, seed).await,
            _ => history_run(cluster.clone(), profile, cli.common.keep, ha.clone()).await,
        };
        cluster.finish().await;
        drop(ha);
        found
    });
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("queen-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the workload with faults, checks the history and prints the table; returns the
/// number of violations.
async fn history_run(
    cluster: Arc<Cluster>,
    profile: Profile,
    keep: bool,
    ha: Option<Arc<failover::Ha>>,
) -> Result<usize> {
    let started = Instant::now();
    let history = Arc::new(History::new());
    let ctx = Arc::new(Ctx::new(cluster.clone(), history.clone(), profile.clone()));
    workload::setup(&ctx).await?;
    eprintln!(
        "queen-chaos: {} profile, {} messages over {:?}, a fault every {:?}",
        profile.name, profile.messages, profile.push_for, profile.fault_every
    );
    let faults = match &ha {
        Some(ha) => tokio::spawn(failover::run(ctx.clone(), ha.clone())),
        None => tokio::spawn(faults::run(ctx.clone())),
    };
    let canaries = match &ha {
        Some(ha) => failover::canary::spawn(&ctx, ha).await?,
        None => Vec::new(),
    };
    workload::run(ctx.clone()).await?;
    let fault_error = faults.await.context("fault task")?.err();
    for c in canaries {
        c.await.context("canary task")?;
    }
    let pg = cluster.connect().await?;
    let db = checker::read_db(&pg).await?;
    let log = history.take();
    let mut groups = vec![QUEUE_MODE];
    groups.extend(NAMED_GROUPS.iter().map(|(g, _)| *g));
    let mut verdict = checker::check(&log, &db, &groups, profile.retry_limit);
    if let Some(e) = fault_error {
        verdict.violations.push(Violation {
            property: "fault not recovered",
            detail: format!("{e:#}"),
        });
    }
    if keep {
        let path = cluster.dir.join("history.json");
        let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        serde_json::to_writer(file, &log).context("writing the history")?;
        eprintln!("history: {}", path.display());
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        report::render(profile.name, secs, &log.faults, &verdict)
    );
    if let Some(ha) = &ha {
        println!("{}", ha.render(&log));
    }
    if !verdict.violations.is_empty() {
        for path in cluster.log_paths() {
            let tail = queen_launch::log_tail(&path, 30);
            eprintln!("--- {} (last lines)\n{tail}", path.display());
        }
    }
    Ok(verdict.violations.len())
}
