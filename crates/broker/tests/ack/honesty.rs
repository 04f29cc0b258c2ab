//! The ack holes of issue 9 ("Honesty under every input"): a lease-less ack of a transactionId
//! stored twice commits only its lowest copy above the cursor (item 1); within one request a
//! (partition, group)'s cursor never passes a position the request nacked, even across ack
//! groups (item 3), and a lease-less group never ends the lease a leased group of the same
//! request presents; and a request whose later group fails after earlier ones committed
//! answers per item instead of hiding the committed work behind a 500 (item 8).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

#[tokio::test]
async fn a_lease_less_ack_of_a_repeated_transaction_id_commits_only_its_lowest_copy() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "repeat", json!({ "dedupWindowSeconds": 0 })).await;
    let first_push: Vec<String> = ["dup", "a", "b"].map(String::from).to_vec();
    push_txns(&b, "repeat", "p", &first_push).await;
    push_txns(&b, "repeat", "p", &["dup".to_string()]).await;
    let first = pop(&b, "repeat", Some("p"), G, 1, "")
        .await
        .expect("the first copy");
    assert_eq!(first.txns(), ["dup"]);
    let pid = first.partition_id();

    // Offsets 1 and 2 were never delivered: the ack means offset 0, not the copy at 3.
    let r = ack_one(&b, G, lease_less(&first.messages[0], "completed")).await;
    assert_ok(&r);
    assert_eq!(cursor(&db, pid, "g").await.committed, 0);
    let rest = pop(&b, "repeat", Some("p"), G, 3, "")
        .await
        .expect("the undelivered messages");
    assert_eq!(rest.txns(), ["a", "b", "dup"]);

    // A lease-less nack of the id resolves the same way: its lowest copy above the cursor.
    let r = ack_one(&b, G, lease_less(&rest.messages[0], "completed")).await;
    assert_ok(&r);
    let r = ack_one(&b, G, lease_less(&rest.messages[2], "failed")).await;
    assert_ok(&r);
    assert_eq!(cursor(&db, pid, "g").await.committed, 1);
}

#[tokio::test]
async fn a_nack_is_never_passed_by_another_ack_group_of_the_same_request() {
    let b = common::broker().await;
    let db = b.sql().await;
    for leased_first in [true, false] {
        let q = if leased_first { "fence-a" } else { "fence-b" };
        push_txns(&b, q, "p", &txns(q, 4)).await;
        let popped = pop(&b, q, Some("p"), G, 4, "").await.expect("four");
        let pid = popped.partition_id();
        // Two groups of one (partition, group): the lease's (ack 0, nack 1) and a lease-less
        // ack of 3, in either order.
        let leased = vec![
            ack_item(&popped.messages[0], "completed"),
            ack_item(&popped.messages[1], "failed"),
        ];
        let unleased = vec![lease_less(&popped.messages[3], "completed")];
        let items = if leased_first {
            [leased, unleased].concat()
        } else {
            [unleased, leased].concat()
        };
        ack_batch(&b, G, items).await.iter().for_each(assert_ok);
        let c = cursor(&db, pid, "g").await;
        assert_eq!((c.committed, c.worker, c.retries), (0, None, 1), "{q}");
        let again = pop(&b, q, Some("p"), G, 4, "").await.expect("redelivery");
        assert_eq!(
            again.txns()[0],
            format!("{q}-1"),
            "the nacked message comes back"
        );
    }
}

/// `POST /api/v1/transaction` of `ops`, asserting it committed.
async fn commit_bundle(b: &common::TestBroker, ops: Vec<Value>) {
    let (status, answer) = b
        .post("/api/v1/transaction", &json!({ "operations": ops }))
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["success"], true, "{answer}");
}

/// A lease-less `ack` operation of a bundle.
fn lease_less_op(msg: &Value, status: &str) -> Value {
    let mut op = lease_less(msg, status);
    op["type"] = json!("ack");
    op["consumerGroup"] = json!("g");
    op
}

#[tokio::test]
async fn a_lease_less_group_never_ends_the_lease_a_leased_group_of_the_request_presents() {
    let b = common::broker().await;
    let db = b.sql().await;
    for bundle in [false, true] {
        let q = if bundle { "order-tx" } else { "order" };
        push_txns(&b, q, "p", &txns(q, 4)).await;
        let popped = pop(&b, q, Some("p"), G, 4, "").await.expect("four");
        // The lease-less ack reaches batch_end and ends the lease; run first, it would make
        // PostgreSQL refuse the leased ack that follows it in the request.
        if bundle {
            let ops = vec![
                lease_less_op(&popped.messages[3], "completed"),
                ack_op(&popped.messages[0], "completed", G),
            ];
            commit_bundle(&b, ops).await;
        } else {
            let items = vec![
                lease_less(&popped.messages[3], "completed"),
                ack_item(&popped.messages[0], "completed"),
            ];
            ack_batch(&b, G, items).await.iter().for_each(assert_ok);
        }
        let c = cursor(&db, popped.partition_id(), "g").await;
        assert_eq!((c.committed, c.worker), (3, None), "{q}");
    }
}

#[tokio::test]
async fn a_bundle_never_passes_a_nack_of_its_other_ack_group() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "txfence", "p", &txns("txfence", 4)).await;
    let popped = pop(&b, "txfence", Some("p"), G, 4, "").await.expect("four");
    let ops = vec![
        ack_op(&popped.messages[0], "completed", G),
        ack_op(&popped.messages[1], "failed", G),
        lease_less_op(&popped.messages[3], "completed"),
    ];
    commit_bundle(&b, ops).await;
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.worker, c.retries), (0, None, 1));
}

/// Makes every update of the cursor row of `pid` fail inside PostgreSQL.
async fn refuse_cursor_updates(db: &tokio_postgres::Client, pid: i64) {
    db.batch_execute(&format!(
        "CREATE FUNCTION public.refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'cursor update refused by the test'; END $$;
         CREATE TRIGGER refuse_update BEFORE UPDATE ON queen.log_consumers FOR EACH ROW
         WHEN (OLD.partition_id = {pid}) EXECUTE FUNCTION public.refuse_update();"
    ))
    .await
    .expect("install the refusing trigger");
}

#[tokio::test]
async fn a_failed_group_does_not_hide_the_groups_that_committed() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "split", "a", &txns("split-a", 2)).await;
    push_txns(&b, "split", "b", &txns("split-b", 2)).await;
    let on_a = pop(&b, "split", Some("a"), G, 2, "").await.expect("a");
    let on_b = pop(&b, "split", Some("b"), G, 2, "").await.expect("b");
    let (pid_a, pid_b) = (on_a.partition_id(), on_b.partition_id());
    refuse_cursor_updates(&db, pid_b).await;

    let items: Vec<Value> = [&on_a.messages[0], &on_b.messages[0]]
        .into_iter()
        .chain([&on_a.messages[1], &on_b.messages[1]])
        .map(|m| ack_item(m, "completed"))
        .collect();
    let answer = ack_batch(&b, G, items.clone()).await;
    for committed in [&answer[0], &answer[2]] {
        assert_ok(committed);
        assert_eq!(committed["leaseReleased"], true);
    }
    for failed in [&answer[1], &answer[3]] {
        assert_refused(failed, "not applied");
        assert_refused(failed, "cursor update refused by the test");
    }
    assert_eq!(cursor(&db, pid_a, "g").await.committed, 1);
    let c = cursor(&db, pid_b, "g").await;
    assert_eq!((c.committed, c.worker), (-1, Some(on_b.lease_id.clone())));

    // When no group got anywhere, nothing happened: the request fails as a whole.
    let (status, body) = b
        .post(
            "/api/v1/ack/batch",
            &json!({ "acknowledgments": [items[1].clone()], "consumerGroup": "g" }),
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");

    // The client's retry of what failed finds its lease intact and commits.
    db.batch_execute("DROP TRIGGER refuse_update ON queen.log_consumers")
        .await
        .expect("drop the trigger");
    let retry = ack_batch(&b, G, vec![items[1].clone(), items[3].clone()]).await;
    retry.iter().for_each(assert_ok);
    assert_eq!(cursor(&db, pid_b, "g").await.committed, 1);
}
