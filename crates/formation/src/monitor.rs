//! What the monitor knows: each node's reported and assigned state, read from
//! `pgautofailover.node`, and the waits built on it (a stable formation: one primary, every
//! other node a secondary, every node where the monitor wants it). Also the monitor's own
//! settings: failure detection in seconds rather than the default half-minute, so a test can
//! afford an unplanned failover.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// One node as the monitor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub port: u16,
    pub reported: String,
    pub assigned: String,
}

/// Monitor settings (milliseconds) for fast failure detection; the defaults take 20–30 s.
/// Fencing stays at its default: `primary_demote_timeout` is how long the monitor waits for
/// the old primary's keeper to stop PostgreSQL before a standby takes writes anyway. At 5 s an
/// overloaded keeper missed it while the PostgreSQL it had restarted after `kill -9` still
/// answered as a primary: reads there were stale (tests/fencing.rs; pg_auto_failover wants it
/// above the keepers' `network_partition_timeout`, 20 s).
const FAST_DETECTION: [(&str, u32); 7] = [
    ("health_check_period", 1_000),
    ("health_check_timeout", 1_000),
    ("health_check_max_retries", 1),
    ("health_check_retry_delay", 500),
    ("node_considered_unhealthy_timeout", 3_000),
    ("primary_demote_timeout", 30_000),
    ("startup_grace_period", 2_000),
];

pub(crate) fn config(port: u16) -> tokio_postgres::Config {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname("pg_auto_failover")
        .connect_timeout(Duration::from_secs(2));
    cfg
}

pub(crate) async fn connect(port: u16) -> Result<tokio_postgres::Client> {
    let (client, conn) = config(port)
        .connect(tokio_postgres::NoTls)
        .await
        .context("connecting to the pg_auto_failover monitor")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Waits until the monitor answers with its extension installed.
pub(crate) async fn wait_up(port: u16, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let err = match connect(port).await {
            Ok(c) => match c
                .query_one("SELECT count(*) FROM pgautofailover.formation", &[])
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) => anyhow::Error::from(e),
            },
            Err(e) => e,
        };
        if Instant::now() > deadline {
            return Err(err.context(format!("the monitor did not come up within {timeout:?}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Applies [`FAST_DETECTION`] (the extension's settings are reloadable).
pub(crate) async fn tune(port: u16) -> Result<()> {
    let c = connect(port).await?;
    for (name, value) in FAST_DETECTION {
        c.batch_execute(&format!("ALTER SYSTEM SET pgautofailover.{name} = {value}"))
            .await
            .with_context(|| format!("setting pgautofailover.{name}"))?;
    }
    c.batch_execute("SELECT pg_reload_conf()").await?;
    Ok(())
}

/// `number_sync_standbys` of the default formation.
pub(crate) async fn set_number_sync_standbys(port: u16, n: i32) -> Result<()> {
    let c = connect(port).await?;
    c.query_one(
        "SELECT pgautofailover.set_formation_number_sync_standbys('default', $1)",
        &[&n],
    )
    .await
    .context("setting number_sync_standbys")?;
    let got: i32 = c
        .query_one(
            "SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default'",
            &[],
        )
        .await?
        .get(0);
    if got != n {
        bail!("number_sync_standbys is {got}, not {n}");
    }
    Ok(())
}

/// Every node of the default formation, by port.
pub async fn states(port: u16) -> Result<Vec<NodeState>> {
    let c = connect(port).await?;
    let rows = c
        .query(
            "SELECT nodename, nodeport, reportedstate::text, goalstate::text \
             FROM pgautofailover.node WHERE formationid = 'default' ORDER BY nodeport",
            &[],
        )
        .await
        .context("reading pgautofailover.node")?;
    Ok(rows
        .iter()
        .map(|r| NodeState {
            name: r.get(0),
            port: r.get::<_, i32>(1) as u16,
            reported: r.get(2),
            assigned: r.get(3),
        })
        .collect())
}

/// Waits until `want` holds for the node states; returns the last states read.
pub(crate) async fn wait_for(
    port: u16,
    timeout: Duration,
    what: &str,
    want: impl Fn(&[NodeState]) -> bool,
) -> Result<Vec<NodeState>> {
    let deadline = Instant::now() + timeout;
    let mut last = Vec::new();
    loop {
        if let Ok(s) = states(port).await {
            if want(&s) {
                return Ok(s);
            }
            last = s;
        }
        if Instant::now() > deadline {
            bail!("the formation did not reach {what} within {timeout:?}: {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `n` nodes: one primary, the others secondaries, each where the monitor assigned it.
pub(crate) fn stable(n: usize) -> impl Fn(&[NodeState]) -> bool {
    move |s: &[NodeState]| {
        s.len() == n
            && s.iter().all(|x| x.reported == x.assigned)
            && s.iter().filter(|x| x.reported == "primary").count() == 1
            && s.iter().filter(|x| x.reported == "secondary").count() == n - 1
    }
}

/// The monitor's event log (state changes with its reasons), oldest first: what to show when
/// a formation did not do what a test expected.
pub async fn events(port: u16) -> Result<Vec<String>> {
    let c = connect(port).await?;
    let rows = c
        .query(
            "SELECT to_char(eventtime, 'HH24:MI:SS.MS'), nodename, reportedstate::text, \
                    goalstate::text, description \
             FROM pgautofailover.event ORDER BY eventid",
            &[],
        )
        .await
        .context("reading pgautofailover.event")?;
    Ok(rows
        .iter()
        .map(|r| {
            format!(
                "{} {} {} -> {}: {}",
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, String>(2),
                r.get::<_, String>(3),
                r.get::<_, String>(4)
            )
        })
        .collect())
}
