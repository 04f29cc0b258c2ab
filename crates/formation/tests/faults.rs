//! The formation's own faults against real `pg_autoctl` (needs pg_auto_failover: see
//! scripts/setup.sh): the primary's node lost for good — a standby promoted, writes taken again
//! — then replaced by a fresh node on its port, which can be promoted back, so a broker pinned
//! to that port finds a primary there again. (Switchover and `kill -9` of a postmaster are
//! exercised with a broker on top in crates/broker/tests/push/spool/failover.rs.)

use std::path::PathBuf;

use queen_formation::Formation;

#[tokio::test]
async fn a_lost_primary_is_replaced_on_its_port_and_promoted_back() {
    let dir = PathBuf::from(format!(
        "/tmp/queen-test/formation-lose-{}",
        std::process::id()
    ));
    let mut f = Formation::start(&dir, 3).await.expect("the formation");
    let ports = f.ports();
    let first = f.wait_stable().await.expect("stable");
    assert_eq!(first, 0, "the first node starts primary");

    let next = f.lose_node(first).await.expect("a standby takes over");
    assert_ne!(next, first);
    let (client, conn) = f
        .config()
        .unwrap()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("the multi-host URL reaches the new primary");
    tokio::spawn(conn);
    let port: i32 = client
        .query_one("SELECT inet_server_port()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(port as u16, ports[next]);
    client
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .await
        .expect("the new primary takes writes");

    f.replace_node(first)
        .await
        .expect("a fresh node on the lost one's port");
    assert_eq!(f.ports(), ports, "every node keeps its port");
    f.promote(first).await.expect("the fresh node promoted");
    assert_eq!(f.wait_stable().await.unwrap(), first);
    let (client, conn) = f
        .node_config(first)
        .unwrap()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("the fresh node");
    tokio::spawn(conn);
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .expect("the fresh node was cloned from the primary")
        .get(0);
    assert_eq!(n, 1);
    let states = f.states().await.unwrap();
    assert_eq!(states.len(), 3, "{states:?}");
}
