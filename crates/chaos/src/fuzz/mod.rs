//! `queen-chaos fuzz-http`: sends mutated and random requests to every route of one broker,
//! one at a time, and reports each request that got a 5xx, no answer (reset, timeout, the
//! broker died), or a 4xx that nevertheless changed a table's row count. At the end the
//! broker log is searched for panics. Findings are grouped by (route, answer) with the
//! first input that produced them.

mod inputs;
mod memory;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use queen_client::{PushItem, Queen};
use rand::rngs::StdRng;
use rand::SeedableRng;
use reqwest::Method;

use crate::cluster::Cluster;
use crate::profile::Profile;
use inputs::{Fixture, Request, ROUTES};

/// Row counts of every table a refused request must leave alone.
const COUNTS: &str = "SELECT ARRAY[(SELECT count(*) FROM queen.queues), \
    (SELECT count(*) FROM queen.log_partitions), (SELECT count(*) FROM queen.log_segments), \
    (SELECT count(*) FROM queen.log_txns), (SELECT count(*) FROM queen.log_consumers), \
    (SELECT count(*) FROM queen.consumer_groups_metadata), (SELECT count(*) FROM queen.log_dlq), \
    (SELECT count(*) FROM queen.message_traces)]";
const TABLES: [&str; 8] = [
    "queues",
    "log_partitions",
    "log_segments",
    "log_txns",
    "log_consumers",
    "consumer_groups_metadata",
    "log_dlq",
    "message_traces",
];
/// Preview length of inputs and answers in the report.
const PREVIEW: usize = 160;

struct Finding {
    count: usize,
    input: String,
    answer: String,
}

pub async fn run(cluster: &Cluster, profile: &Profile, seed: Option<u64>) -> Result<usize> {
    let seed = seed.unwrap_or_else(rand::random);
    eprintln!(
        "queen-chaos fuzz-http: seed {seed}, {} inputs per route",
        profile.fuzz_per_route
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let pg = cluster.connect().await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()?;
    let mut findings: BTreeMap<(String, String), Finding> = BTreeMap::new();
    let mut sent = 0usize;
    let mut mem = memory::Trace {
        before: cluster.broker_pid(0).and_then(memory::sample),
        ..Default::default()
    };
    for (i, route) in ROUTES.iter().enumerate() {
        let queen = Queen::with_client(cluster.url(0), http.clone());
        let fx = fixture(&queen, &format!("fuzz-g{i}")).await?;
        for _ in 0..profile.fuzz_per_route {
            let req = inputs::generate(route, &mut rng, &fx);
            let before: Vec<i64> = pg.query_one(COUNTS, &[]).await?.get(0);
            let answer = send(&http, &cluster.url(0), &req).await;
            let after: Vec<i64> = pg.query_one(COUNTS, &[]).await?.get(0);
            sent += 1;
            let label = format!("{} {}", route.method, route.path);
            let problem = match &answer {
                Err(e) => Some((format!("no answer: {e}"), String::new())),
                Ok((status, body)) if *status >= 500 => Some((status.to_string(), body.clone())),
                Ok((status, body)) if (400..500).contains(status) && before != after => {
                    let changed: Vec<String> = TABLES
                        .iter()
                        .zip(before.iter().zip(&after))
                        .filter(|(_, (b, a))| b != a)
                        .map(|(t, (b, a))| format!("{t} {b}→{a}"))
                        .collect();
                    Some((
                        format!("{status} but changed {}", changed.join(", ")),
                        body.clone(),
                    ))
                }
                _ => None,
            };
            if let Some((what, body)) = problem {
                let f = findings.entry((label, what)).or_insert_with(|| Finding {
                    count: 0,
                    input: describe(&req),
                    answer: preview(body.as_bytes()),
                });
                f.count += 1;
                if answer.is_err() && !cluster.live_urls().is_empty() {
                    mem.restarts += restart_if_dead(cluster).await? as usize;
                }
            }
        }
        mem.after_route
            .push(cluster.broker_pid(0).and_then(memory::sample));
    }
    for path in cluster.log_paths() {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        for line in log.lines().filter(|l| l.contains("panicked")) {
            let f = findings
                .entry(("broker log".into(), "panic".into()))
                .or_insert_with(|| Finding {
                    count: 0,
                    input: String::new(),
                    answer: preview(line.as_bytes()),
                });
            f.count += 1;
        }
    }
    println!(
        "fuzz-http: {sent} requests over {} routes, seed {seed}",
        ROUTES.len()
    );
    println!("{}", mem.render());
    println!("findings: {}", findings.len());
    for ((route, what), f) in &findings {
        println!(
            "- {route} → {what} ({}×)\n    input:  {}\n    answer: {}",
            f.count, f.input, f.answer
        );
    }
    Ok(findings.len())
}

async fn send(http: &reqwest::Client, base: &str, req: &Request) -> Result<(u16, String)> {
    let method = Method::from_bytes(req.method.as_bytes())?;
    let mut b = http.request(method, format!("{base}{}", req.target));
    for (k, v) in &req.headers {
        b = b.header(*k, v);
    }
    let resp = b.body(req.body.clone()).send().await?;
    let status = resp.status().as_u16();
    let body = resp.bytes().await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A broker that stopped answering is restarted so the remaining routes still get fuzzed;
/// `true` when it was.
async fn restart_if_dead(cluster: &Cluster) -> Result<bool> {
    let healthy = Queen::new(cluster.url(0)).healthy().await.unwrap_or(false);
    if !healthy {
        cluster.kill9_broker(0);
        cluster.start_broker(0).await?;
    }
    Ok(!healthy)
}

/// A queue with messages and `group` (fresh per route: the previous route's fixture still
/// holds its lease) holding a live lease: real ids for the inputs.
async fn fixture(queen: &Queen, group: &str) -> Result<Fixture> {
    let (queue, partition) = ("fuzz-q", "fuzz-p");
    let items: Vec<PushItem> = (0..5)
        .map(|i| PushItem::raw(format!(r#"{{"i":{i}}}"#), None).expect("JSON"))
        .collect();
    queen
        .queue(queue)
        .partition(partition)
        .push(&items)
        .await
        .context("fixture push")?;
    let popped = queen
        .queue(queue)
        .partition(partition)
        .group(group)
        .batch(1)
        .lease_seconds(3_600)
        .pop()
        .await
        .context("fixture pop")?;
    let m = popped
        .and_then(|p| p.messages.into_iter().next())
        .context("the fixture pop claimed nothing")?;
    Ok(Fixture {
        queue: queue.into(),
        partition: partition.into(),
        group: group.into(),
        partition_id: m.partition_id,
        txn: m.transaction_id,
        lease: m.lease_id,
    })
}

fn describe(req: &Request) -> String {
    let headers: Vec<String> = req
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    format!(
        "{} {} [{}] {}",
        req.method,
        req.target,
        headers.join("; "),
        preview(&req.body)
    )
}

/// Printable preview: text escaped (so NULs and control characters show), long input cut.
fn preview(bytes: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(bytes).escape_debug().collect();
    if text.chars().count() > PREVIEW {
        format!(
            "{}… ({} bytes)",
            text.chars().take(PREVIEW).collect::<String>(),
            bytes.len()
        )
    } else {
        text
    }
}
