//! The operator's view of a failover (docs/engine.md §12.5, docs/wire.md §15): a broker given
//! two servers and `target_session_attrs=read-write` (the multi-host URL of an HA formation)
//! writes to the first; when that one turns read-only and its sessions end, new connections
//! reach the second, the broker logs the switch (warn) and `/health` names the new server,
//! the number of switches and when the last one happened.

use std::time::{Duration, Instant};

use queen_broker::config::LogFormat;
use queen_broker::logging;
use serde_json::Value;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tracing_subscriber::EnvFilter;

use crate::common;
use crate::common::faults::OwnCluster;
use crate::logs::Captured;

/// The `server` object of `/health`.
async fn server_of(b: &common::TestBroker) -> Value {
    let (_, health) = b.get("/health").await;
    health["server"].clone()
}

/// `cfg` with `other`'s (only) host and port added after its own.
fn with_second_host(
    cfg: &tokio_postgres::Config,
    other: &tokio_postgres::Config,
) -> tokio_postgres::Config {
    let mut both = cfg.clone();
    match &other.get_hosts()[0] {
        Host::Unix(dir) => both.host_path(dir),
        Host::Tcp(host) => both.host(host),
    };
    both.port(other.get_ports()[0]);
    both.target_session_attrs(TargetSessionAttrs::ReadWrite);
    both
}

#[tokio::test]
async fn health_names_the_server_written_to_and_a_switch_is_logged() {
    let out = Captured::default();
    let subscriber = logging::subscriber(
        LogFormat::Text,
        EnvFilter::new("queen_broker=info"),
        false,
        out.clone(),
    );
    // The test's runtime runs on this thread alone, and so does the broker it starts.
    let _logs = tracing::subscriber::set_default(subscriber);

    let first = common::fresh_database().await;
    let name = first.get_dbname().unwrap().to_string();
    let mut second_cluster = OwnCluster::new("switch").await;
    let second_admin = common::connect(&second_cluster.config()).await;
    second_admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap();
    let mut second = second_cluster.config();
    second.dbname(&name);
    let b = common::broker_on(with_second_host(&first, &second), |cfg| {
        cfg.db_pool_size = 4;
    })
    .await;

    let before = server_of(&b).await;
    assert_eq!(before["port"], first.get_ports()[0], "{before}");
    assert_eq!(before["switches"], 0, "{before}");
    assert_eq!(before["inRecovery"], false, "{before}");
    assert_eq!(before["writable"], true, "{before}");
    assert!(before["lastSwitchAt"].is_null(), "{before}");
    assert!(before["address"].is_null(), "over a Unix socket: {before}");
    assert!(before["since"].is_string(), "{before}");
    assert!(before["systemIdentifier"].is_string(), "{before}");

    // The first server stops taking writes; its sessions end (as a demoted primary's do).
    let mut admin_cfg = first.clone();
    admin_cfg.dbname("postgres");
    let admin = common::connect(&admin_cfg).await;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{name}\" SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&name],
        )
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        let server = server_of(&b).await;
        if server["systemIdentifier"] != before["systemIdentifier"] {
            break server;
        }
        assert!(Instant::now() < deadline, "never switched: {server}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(after["port"], second.get_ports()[0], "{after}");
    assert_eq!(after["switches"], 1, "{after}");
    assert!(after["lastSwitchAt"].is_string(), "{after}");
    assert_ne!(
        after["systemIdentifier"], before["systemIdentifier"],
        "{after}"
    );
    let logged = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("now reach another PostgreSQL server"))
        .unwrap_or_else(|| panic!("no switch logged: {logged}"));
    assert!(line.contains("WARN"), "{line}");
    let to = after["systemIdentifier"]
        .as_str()
        .expect("a system identifier");
    assert!(line.contains(to), "{line}");
    b.stop().await;
    second_cluster.stop().await;
}

/// The identity statement every new connection runs needs no privilege: a broker connecting
/// as a plain role (no superuser, no `pg_monitor`) still learns which server it reached.
#[tokio::test]
async fn the_identity_statement_runs_as_a_plain_role() {
    let pg = common::fresh_database().await;
    let admin = common::connect(&pg).await;
    let role = format!("plain_{}", pg.get_dbname().unwrap());
    admin
        .batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN"))
        .await
        .unwrap();
    let mut plain = pg.clone();
    plain.user(&role);
    let db = common::connect(&plain).await;
    let sql = include_str!("../../sql/statements/server_identity.sql");
    let row = db
        .query_one(sql, &[])
        .await
        .expect("the identity statement");
    let system: String = row.get("system_identifier");
    assert!(system.parse::<u64>().is_ok(), "{system}");
    let port: String = row.get("port");
    assert_eq!(port, pg.get_ports()[0].to_string());
    assert!(!row.get::<_, bool>("in_recovery"));
    let address: Option<String> = row.get("address");
    assert_eq!(address, None, "over a Unix socket");
}
