//! The mixed workload: queues configured with a small lease and retry budget (one with the
//! dedup window, one without), three groups per queue (queue mode, a named group subscribed
//! to `all`, one to `new` registered before the first push), producers retrying under stable
//! transactionIds, consumers choosing a behaviour per batch, and key-value workers racing
//! compare-and-set writes over the push phase. Every answer goes to the
//! [`History`]; nothing here judges it.

mod consumer;
pub mod kv;
mod producer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use queen_client::Queen;
use serde_json::json;

use crate::cluster::Cluster;
use crate::history::History;
use crate::profile::{Profile, FAR_BEHIND_DEDUP_SECS};

/// `dedupWindowSeconds` default (retries answer `duplicate`) and 0 (retries store copies).
pub const QUEUES: [&str; 2] = ["chaos-dedup", "chaos-nodedup"];
pub const PARTITIONS: usize = 4;
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";
/// Named groups and their first-contact subscription mode.
pub const NAMED_GROUPS: [(&str, &str); 2] = [("g-all", "all"), ("g-new", "new")];
/// Consumers leave after at least this many consecutive empty long-polls once the run is
/// draining, and never before a lease could have expired: a partition whose batch was acked
/// lease-less stays leased, so invisible, until then (the first full run's consumers left
/// 8 000 messages behind such leases).
const IDLE_ROUNDS: u32 = 4;

/// What every worker shares.
pub struct Ctx {
    pub cluster: Arc<Cluster>,
    pub history: Arc<History>,
    pub profile: Profile,
    pub http: reqwest::Client,
    pub producers_done: AtomicBool,
    pub faults_done: AtomicBool,
    /// When the fault schedule ended ([`Ctx::end_faults`]).
    faults_ended: OnceLock<Instant>,
    pub deadline: Instant,
}

impl Ctx {
    pub fn new(cluster: Arc<Cluster>, history: Arc<History>, profile: Profile) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .expect("HTTP client");
        // Late groups start with a backlog that much older: their drain gets that much longer.
        let deadline = Instant::now() + profile.push_for + profile.drain_for + profile.late_groups;
        Self {
            cluster,
            history,
            profile,
            http,
            producers_done: AtomicBool::new(false),
            faults_done: AtomicBool::new(false),
            faults_ended: OnceLock::new(),
            deadline,
        }
    }

    /// A client on one running broker, chosen per request.
    pub fn queen(&self) -> Queen {
        Queen::with_client(self.cluster.pick_url(), self.http.clone())
    }

    /// The fault schedule is over (the fault task calls this once, last).
    pub fn end_faults(&self) {
        let _ = self.faults_ended.set(Instant::now());
        self.faults_done.store(true, Ordering::Relaxed);
    }

    /// Out of time: past the deadline, and `drain_for` past the end of the faults. A fault that
    /// outlasts the push phase (a failover takes tens of seconds, and what it spooled is stored
    /// only after it) must not eat the drain.
    fn out_of_time(&self) -> bool {
        let now = Instant::now();
        now > self.deadline
            && self
                .faults_ended
                .get()
                .is_some_and(|&t| now > t + self.profile.drain_for)
    }

    pub fn draining(&self) -> bool {
        self.producers_done.load(Ordering::Relaxed) && self.faults_done.load(Ordering::Relaxed)
    }

    pub fn now(&self) -> u64 {
        self.history.now()
    }
}

/// HTTP status of an SDK result, 0 when there was no HTTP answer.
pub fn status_of<T>(res: &queen_client::Result<T>, ok: u16) -> u16 {
    match res {
        Ok(_) => ok,
        Err(queen_client::Error::Api { status, .. }) => status.as_u16(),
        Err(queen_client::Error::Decode(_)) => ok,
        Err(_) => 0,
    }
}

pub fn error_text<T>(res: &queen_client::Result<T>) -> String {
    res.as_ref()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// Recreates the queues (an external database may hold an earlier run's) and registers the
/// named groups before anything is pushed.
pub async fn setup(ctx: &Ctx) -> Result<()> {
    let queen = ctx.queen();
    for (i, q) in QUEUES.iter().enumerate() {
        // 404 when absent; anything else surfaces at `configure`.
        let _ = queen.queue(*q).delete().await;
        let mut options = json!({
            "leaseTime": ctx.profile.lease_secs,
            "retryLimit": ctx.profile.retry_limit,
            "deadLetterQueue": true,
            "dlqAfterMaxRetries": true,
        });
        if i == 1 {
            options["dedupWindowSeconds"] = json!(0);
        } else if ctx.profile.far_behind {
            options["dedupWindowSeconds"] = json!(FAR_BEHIND_DEDUP_SECS);
        }
        queen
            .queue(*q)
            .configure(options)
            .await
            .with_context(|| format!("configuring {q}"))?;
        for (group, mode) in NAMED_GROUPS {
            queen
                .queue(*q)
                .group(group)
                .subscription_mode(mode)
                .wait(false)
                .pop()
                .await
                .with_context(|| format!("registering {group} on {q}"))?;
        }
    }
    Ok(())
}

/// Runs producers and consumers to the end of the drain; `faults` runs beside them and
/// must set `faults_done` when its schedule is over.
pub async fn run(ctx: Arc<Ctx>) -> Result<()> {
    let mut consumers = Vec::new();
    let mut id = 0;
    for q in QUEUES {
        let groups = std::iter::once(None).chain(NAMED_GROUPS.iter().map(|(g, _)| Some(*g)));
        for group in groups {
            for _ in 0..ctx.profile.consumers_per_group {
                id += 1;
                consumers.push(tokio::spawn(consumer::run(ctx.clone(), q, group, id)));
            }
        }
    }
    let mut producers = Vec::new();
    for p in 0..ctx.profile.producers {
        producers.push(tokio::spawn(producer::run(ctx.clone(), p)));
    }
    let keys = Arc::new(kv::keys());
    let kv_workers: Vec<_> = (0..kv::WORKERS)
        .map(|w| tokio::spawn(kv::run(ctx.clone(), keys.clone(), w)))
        .collect();
    for p in producers {
        p.await.context("producer task")?;
    }
    for w in kv_workers {
        w.await.context("kv task")?;
    }
    ctx.producers_done.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await.context("consumer task")?;
    }
    Ok(())
}

/// True when a consumer should leave: drained (idle for a while) or out of time.
fn consumer_done(ctx: &Ctx, idle: u32) -> bool {
    // Each empty long-poll waits about a second (consumer::POLL_MS).
    let rounds = IDLE_ROUNDS.max(2 * ctx.profile.lease_secs as u32 + 2);
    (ctx.draining() && idle >= rounds) || ctx.out_of_time()
}
