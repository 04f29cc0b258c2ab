//! How soon pushes are stored again once PostgreSQL is back (issue 38's target: the first
//! stored push within a second of the server taking writes). While the database stays away the
//! drain backs off between rounds; a back-off that grew long during a failover kept every push
//! `buffered` for seconds after the new primary took writes.

use std::time::{Duration, Instant};

use super::{push, statuses};
use crate::common;
use crate::common::faults::OwnCluster;

#[tokio::test]
async fn pushes_are_stored_again_within_a_second_of_the_database_returning() {
    let mut node = OwnCluster::new("resume").await;
    let b = common::broker_on(node.config(), |cfg| cfg.db_pool_size = 2).await;
    push(&b, "rs", &[("p", "before")]).await;

    // Seven seconds away, a push every half second: the drain's back-off grows all along.
    node.stop().await;
    let away = Instant::now() + Duration::from_secs(7);
    let mut i = 0;
    while Instant::now() < away {
        let answer = push(&b, "rs", &[("p", &format!("away-{i}"))]).await;
        assert_eq!(statuses(&answer), ["buffered"], "{answer}");
        i += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    node.start().await;
    let back = Instant::now();
    loop {
        let answer = push(&b, "rs", &[("p", &format!("back-{i}"))]).await;
        i += 1;
        if statuses(&answer) == ["queued"] {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(30), "{answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = back.elapsed();
    eprintln!("first push stored directly {took:?} after PostgreSQL took writes again");
    assert!(
        took <= Duration::from_millis(1500),
        "the first push stored directly came {took:?} after PostgreSQL took writes again"
    );
    b.stop().await;
    node.stop().await;
}
