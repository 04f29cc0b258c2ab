//! `queen-bench`: starts a fresh broker on embedded PostgreSQL (or uses a running one), drives
//! it over HTTP with an open-loop load generator, measures PostgreSQL's own ceiling and the
//! pgmq peer on the same cluster, prints one table and writes a JSON results file. Exits
//! non-zero when any row failed delivery verification or a scenario could not run.

mod compare;
mod fleet;
mod instructions;
#[cfg(test)]
mod instrument_cost;
mod memwatch;
mod meter;
mod openloop;
mod payload;
mod procstat;
mod profile;
mod report;
mod scenarios;
mod sizes;
mod target;
mod targets;
mod tracker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use clap::Parser;
use queen_client::Queen;

use crate::meter::Meter;
use crate::payload::{Clock, Payloads};
use crate::profile::{Profile, ProfileName};
use crate::report::Row;
use crate::scenarios::{Ceilings, Ctx, Overrides, Scenario};
use crate::target::Target;

#[derive(Parser, Debug)]
#[command(
    name = "queen-bench",
    version,
    about = "Throughput, latency, idle cost and memory of Queen-rs, against PostgreSQL's ceiling and pgmq"
)]
struct Cli {
    /// The quick profile (whole matrix in under three minutes); same as `--profile quick`.
    #[arg(long, conflicts_with = "profile")]
    quick: bool,
    /// tiny (CI smoke), quick, or full (default).
    #[arg(long, value_enum)]
    profile: Option<ProfileName>,
    /// Comma-separated scenarios to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ceiling,push,spread,e2e,overload,drain,latency,extras,idle,peer"
    )]
    scenario: Vec<Scenario>,
    /// Use a running broker instead of starting one (needs --pg-url).
    #[arg(long, requires = "pg_url")]
    url: Option<String>,
    /// The running broker's PostgreSQL (e.g. postgresql://postgres@/postgres?host=/tmp/x/pg).
    #[arg(long, requires = "url")]
    pg_url: Option<String>,
    /// Pid of the running broker, for its CPU and RSS (optional with --url).
    #[arg(long)]
    broker_pid: Option<u32>,
    /// The `queen` binary to start (default: next to this executable).
    #[arg(long)]
    queen_bin: Option<PathBuf>,
    /// Environment for the started broker, e.g. `--broker-env DB_POOL_SIZE=64` (repeatable).
    #[arg(long, value_parser = parse_key_value)]
    broker_env: Vec<(String, String)>,
    /// After the run, start a second broker with every accelerator off and run the e2e cells on
    /// 10 partitions, the latency and the idle cells again; print on, off and on/off.
    #[arg(long, conflicts_with = "url")]
    compare_accelerators: bool,
    /// Keep the started broker's data directory.
    #[arg(long)]
    keep_data: bool,
    /// JSON results file.
    #[arg(long, default_value = "queen-bench-results.json")]
    out: PathBuf,
    /// Fixed push rate in msgs/s of the latency phase instead of 80 % of the measured capacity.
    #[arg(long)]
    push_rate: Option<f64>,
    /// Fixed e2e producer rate in msgs/s instead of 40 % of the push capacity.
    #[arg(long)]
    e2e_rate: Option<f64>,
    /// In-flight request cap of the producers (and pgmq connections).
    #[arg(long)]
    inflight: Option<usize>,
    /// Request sizes of the push cells instead of the profile's (e.g. `--push-batches 100`).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    push_batches: Vec<u32>,
    /// Partition counts of the push (and e2e) cells instead of the profile's; leaves the
    /// spread cells out.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    partitions: Vec<u32>,
    /// Push with the binary QPB1 body instead of JSON.
    #[arg(long)]
    binary_push: bool,
    /// pgmq.sql to load instead of fetching the PyPI wheel.
    #[arg(long)]
    pgmq_sql: Option<PathBuf>,
    /// pgbench binary.
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// How long the soak runs, in seconds (`--scenario soak`).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    soak_seconds: u64,
    /// completedRetentionSeconds (and dedup window) of the soak's queue.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    soak_retention: u32,
}

/// The broker environment: the command line's, plus, for a soak, the sidecar purge floor at the
/// soak's retention (unless given), so the sidecar is purged on the soak's horizon.
fn broker_env(cli: &Cli) -> Vec<(String, String)> {
    let mut env = cli.broker_env.clone();
    let floor = "QUEEN_SIDECAR_PURGE_FLOOR_SECONDS";
    if cli.scenario.contains(&Scenario::Soak) && !env.iter().any(|(k, _)| k == floor) {
        env.push((floor.to_string(), cli.soak_retention.to_string()));
    }
    env
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    procstat::raise_nofile_limit();
    match run(cli).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(2),
        Err(e) => {
            eprintln!("queen-bench: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Ok(false): the run finished but something failed (verification or a scenario).
async fn run(cli: Cli) -> Result<bool> {
    let name = if cli.quick {
        ProfileName::Quick
    } else {
        cli.profile.unwrap_or(ProfileName::Full)
    };
    let mut profile = Profile::get(name);
    if let Some(n) = cli.inflight {
        profile.inflight = n.max(1);
    }
    if !cli.push_batches.is_empty() {
        profile.push_batches = cli.push_batches.clone();
    }
    if !cli.partitions.is_empty() {
        profile.partitions = cli.partitions.clone();
        profile.spread_partitions = 0;
    }
    let broker_env = broker_env(&cli);
    let target = match (&cli.url, &cli.pg_url) {
        (Some(url), Some(pg)) => Target::external(url.clone(), pg, cli.broker_pid).await?,
        _ => {
            let bin = target::locate_queen(cli.queen_bin.clone())?;
            eprintln!(
                "starting {} on a fresh embedded PostgreSQL ...",
                bin.display()
            );
            Target::spawn(&bin, cli.keep_data, &broker_env).await?
        }
    };
    // Idle RSS first, before the bench sends anything.
    let watch = memwatch::Watch::start(target.broker_pid);
    let meter = Meter::new(&target).await?;
    let admin = target.connect(None).await?;
    let mut meta = run_meta(&admin, &profile, &meter, &target, &broker_env).await;
    if cli.compare_accelerators {
        meta["accelerators_on"] =
            serde_json::json!(compare::switches(&Queen::new(target.url.clone())).await?);
    }
    let run_id = format!(
        "{:x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    );
    let mut ctx = Ctx {
        queen: Queen::new(target.url.clone()),
        target,
        meter,
        admin,
        profile,
        overrides: Overrides {
            push_rate: cli.push_rate,
            e2e_rate: cli.e2e_rate,
            binary_push: cli.binary_push,
            pgmq_sql: cli.pgmq_sql.clone(),
            pgbench: cli.pgbench.clone(),
            soak: scenarios::soak::SoakOptions {
                duration: std::time::Duration::from_secs(cli.soak_seconds),
                retention_s: cli.soak_retention,
            },
            queen_bin: match &cli.url {
                Some(_) => cli.queen_bin.clone(),
                None => Some(target::locate_queen(cli.queen_bin.clone())?),
            },
            broker_env: broker_env.clone(),
            keep_data: cli.keep_data,
        },
        payloads: Payloads::new(0x5eed),
        clock: Clock::new(),
        run_id,
        queues_named: Default::default(),
        ceilings: Ceilings::default(),
        push_capacity: BTreeMap::new(),
        e2e_rates: BTreeMap::new(),
    };

    let mut scenarios = cli.scenario.clone();
    scenarios.sort();
    scenarios.dedup();
    let mut rows: Vec<Row> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let started = Instant::now();
    for &s in &scenarios {
        eprintln!("[{:>5.0}s] scenario {s:?}", started.elapsed().as_secs_f64());
        let result = match s {
            Scenario::Ceiling => scenarios::ceiling::run(&mut ctx).await,
            Scenario::Push => scenarios::push::run(&mut ctx).await,
            Scenario::Spread => scenarios::spread::run(&ctx).await,
            Scenario::E2e => scenarios::e2e::run(&mut ctx).await,
            Scenario::Overload => scenarios::overload::run(&mut ctx).await,
            Scenario::Drain => scenarios::drain::run(&mut ctx).await,
            Scenario::Latency => scenarios::e2e::run_latency(&mut ctx).await,
            Scenario::Extras => scenarios::extras::run(&mut ctx).await,
            Scenario::Idle => scenarios::idle::run(&mut ctx).await,
            Scenario::Peer => {
                let ours = rows.clone();
                scenarios::peer::run(&mut ctx, &ours).await
            }
            Scenario::Brokers => scenarios::brokers::run(&ctx).await,
            Scenario::Cost => scenarios::cost::run(&mut ctx).await,
            Scenario::Soak => scenarios::soak::run(&mut ctx).await,
        };
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => {
                eprintln!("scenario {s:?} failed: {e:#}");
                problems.push(format!("{s:?}: {e:#}"));
            }
        }
    }
    let tables = table_stats(&ctx.admin).await;
    let memory = watch.stop(&rows);
    ctx.target.shutdown();
    if cli.compare_accelerators {
        let bin = target::locate_queen(cli.queen_bin.clone())?;
        let off = compare::run_off(
            &mut ctx,
            &bin,
            cli.keep_data,
            &broker_env,
            &scenarios,
            &mut problems,
        );
        match off.await {
            Ok(off) => rows.extend(off),
            Err(e) => problems.push(format!("accelerators-off broker: {e:#}")),
        }
    }
    let total = started.elapsed().as_secs_f64();

    println!();
    println!("{}", report::table(&rows));
    let comparison = compare::table(&rows);
    if !comparison.is_empty() {
        println!("{comparison}");
    }
    let targets = scenarios
        .iter()
        .any(|s| matches!(s, Scenario::Push | Scenario::Spread))
        .then(|| targets::lines(&rows, &memory));
    if let Some(lines) = &targets {
        println!(
            "targets of issue 12 ({:?} profile; the issue's figures are for the full one; printed, not asserted):",
            ctx.profile.name
        );
        println!("{}", targets::table(lines));
    }
    println!(
        "profile {:?}, {:.0}s; payload 1 KiB random (base64 JSON), dedup on, leased pops of 100 + /ack/batch, \
         synchronous_commit=on, load generator co-located; %ceil = msg/s ÷ the pgbench ceiling named in notes (default seg100k)",
        ctx.profile.name, total
    );
    meta["seconds"] = serde_json::json!(total);
    meta["problems"] = serde_json::json!(problems);
    if cli.compare_accelerators {
        meta["accelerators_off_env"] = serde_json::json!(compare::off_env(&broker_env));
    }
    meta["tables_after"] = serde_json::json!(tables);
    meta["broker_memory"] = serde_json::json!(memory);
    if let Some(lines) = &targets {
        meta["targets_issue12"] = serde_json::json!(lines);
    }
    if !tables.is_empty() {
        let summary: Vec<String> = tables
            .iter()
            .map(|t| format!("{} {:.1} MB, {} dead", t.0, t.1 as f64 / 1048576.0, t.2))
            .collect();
        println!("tables after the run: {}", summary.join("; "));
    }
    let other: f64 = rows.iter().filter_map(|r| r.usage.other_cpu_s).sum();
    let windows: f64 = rows.iter().map(|r| r.usage.seconds).sum();
    if other > 0.05 * windows {
        println!(
            "note: other processes used {other:.0} CPU-seconds during {windows:.0} s of measured windows \
             (column 'other cpu s'): those rows competed with foreign work"
        );
    }
    report::write_json(&cli.out, &meta, &rows)?;
    println!("results: {}", cli.out.display());

    let failed: Vec<&Row> = rows.iter().filter(|r| r.failed()).collect();
    if !failed.is_empty() {
        eprintln!();
        eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        eprintln!(
            "!!! DELIVERY VERIFICATION FAILED: messages lost or duplicated beyond redelivery"
        );
        for r in &failed {
            if let Some(v) = &r.verification {
                eprintln!(
                    "!!!   {} {} ({}): expected {} per group, unique {:?}, lost {}, duplicates {}, out of order {}",
                    r.scenario,
                    r.cell,
                    r.system,
                    v.expected,
                    v.delivered_unique,
                    v.lost,
                    v.duplicates,
                    v.order_violations
                );
            }
        }
        eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    }
    for p in &problems {
        eprintln!("scenario failed: {p}");
    }
    Ok(failed.is_empty() && problems.is_empty())
}

/// (table, total bytes, dead tuples) of the broker's tables after the run (docs/performance.md §4.2).
async fn table_stats(admin: &tokio_postgres::Client) -> Vec<(String, i64, i64)> {
    let rows = admin
        .query(
            "SELECT relname::text, pg_total_relation_size(relid), n_dead_tup FROM pg_stat_user_tables \
             WHERE schemaname = 'queen' ORDER BY pg_total_relation_size(relid) DESC",
            &[],
        )
        .await
        .unwrap_or_default();
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Date, commit, command, machine and PostgreSQL settings for the results file.
async fn run_meta(
    admin: &tokio_postgres::Client,
    profile: &Profile,
    meter: &Meter,
    target: &Target,
    broker_env: &[(String, String)],
) -> serde_json::Value {
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    // The commit of the checkout this binary was built in (target/ lives inside it).
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()));
    let commit = std::process::Command::new("git")
        .arg("-C")
        .arg(exe_dir.unwrap_or_else(|| PathBuf::from(".")))
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let setting = |name: &'static str| async move {
        admin
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .map(|r| r.get::<_, String>(0))
            .unwrap_or_default()
    };
    serde_json::json!({
        "date": queen_proto::time::iso_millis(now_us),
        "commit": commit,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "profile": format!("{:?}", profile.name),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "url": target.url,
        "broker_data_dir": target.data_dir().map(|p| p.display().to_string()),
        "postgres": setting("server_version").await,
        "synchronous_commit": setting("synchronous_commit").await,
        "fsync": setting("fsync").await,
        "shared_buffers": setting("shared_buffers").await,
        "pg_stat_statements": meter.has_statements(),
        "payload": "1 KiB of random bits as 1368 base64 characters in JSON (a pooled random block XORed with a per-message key: distinct, incompressible), with seq and scheduled time",
        "inflight_cap": profile.inflight,
        "broker_env": broker_env,
    })
}
