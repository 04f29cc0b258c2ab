//! The ack registry (docs/engine.md §6.4): a full-batch completed ack of a batch this broker
//! served is one positional cover; every other case, and every way an entry dies, takes the
//! hash path and answers exactly as it would without the registry. Which path ran is read
//! from the broker's counters and, independently, from `pg_stat_statements`.

use serde_json::{json, Value};

use crate::common;
use crate::support::*;

const G: Option<&str> = Some("g");

/// Asserts every element succeeded, released the lease (or not) and is no noop.
fn assert_all_ok(answer: &[Value], lease_released: bool) {
    for r in answer {
        assert_ok(r);
        assert_eq!(r["leaseReleased"], lease_released, "{r}");
        assert_eq!(r["noop"], false, "{r}");
    }
}

#[tokio::test]
async fn a_full_batch_completed_ack_is_one_positional_cover() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "fast", "p", &txns("fast", 4)).await;
    let popped = pop(&b, "fast", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    let mut items = ack_all(&popped, "completed");
    items.reverse(); // order and repeats do not matter: the set does
    items.push(items[0].clone());
    let answer = ack_batch(&b, G, items).await;
    assert_all_ok(&answer, true);
    let c = cursor(&db, pid, "g").await;
    assert_eq!((c.committed, c.worker, c.batch_end), (2, None, None));
    let consumed: i64 = db
        .query_one(
            "SELECT total_consumed FROM queen.log_consumers WHERE partition_id = $1",
            &[&pid],
        )
        .await
        .expect("row")
        .get(0);
    assert_eq!(consumed, 3);
    let m = registry_metrics(&b).await;
    assert_eq!((m["born"].clone(), m["hits"].clone()), (json!(1), json!(1)));
    assert_eq!(
        calls(&db, "log_ack_by_hash_v1").await,
        0,
        "no hash resolution"
    );
    assert_eq!(flushes(&db).await, 1, "one fused commit");
    // The rest of the partition is still there for the next pop.
    let rest = pop(&b, "fast", Some("p"), G, 3, "")
        .await
        .expect("the rest");
    assert_eq!(rest.txns(), ["fast-3"]);
}

#[tokio::test]
async fn a_partial_ack_takes_the_hash_path_and_the_entry_dies() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "partial", "p", &txns("partial", 3)).await;
    let popped = pop(&b, "partial", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let items = ack_all(&popped, "completed");
    let first = ack_batch(&b, G, items[..2].to_vec()).await;
    assert_all_ok(&first, false);
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, 1);
    // The entry died with the partial ack: the rest resolves by hash too.
    let rest = ack_batch(&b, G, items[2..].to_vec()).await;
    assert_all_ok(&rest, true);
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.worker), (2, None));
    let m = registry_metrics(&b).await;
    assert_eq!(
        (
            m["hits"].clone(),
            m["mismatches"].clone(),
            m["misses"].clone()
        ),
        (json!(0), json!(1), json!(2))
    );
    assert_eq!(calls(&db, "log_ack_by_hash_v1").await, 2);
}

#[tokio::test]
async fn a_set_with_a_foreign_transaction_id_takes_the_hash_path() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "foreign", "p", &txns("foreign", 2)).await;
    let popped = pop(&b, "foreign", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let mut items = ack_all(&popped, "completed");
    let mut stranger = items[0].clone();
    stranger["transactionId"] = json!("never-pushed");
    items.push(stranger);
    let answer = ack_batch(&b, G, items).await;
    assert_ok(&answer[0]);
    assert_ok(&answer[1]);
    assert_refused(&answer[2], "unresolv");
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.worker), (1, None));
    assert_eq!(registry_metrics(&b).await["mismatches"], 1);
}

#[tokio::test]
async fn a_nack_in_the_batch_takes_the_hash_path() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "nack", "p", &txns("nack", 3)).await;
    let popped = pop(&b, "nack", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    let mut items = ack_all(&popped, "completed");
    items[1]["status"] = json!("failed");
    let answer = ack_batch(&b, G, items).await;
    assert!(
        answer.iter().all(|r| r["leaseReleased"] == true),
        "{answer:?}"
    );
    let c = cursor(&db, pid, "g").await;
    assert_eq!(
        (c.committed, c.worker, c.retries),
        (0, None, 1),
        "the nack is not skipped"
    );
    // A nack for the same partition in another group of the request (lease-less) fences
    // the leased group: its full set must not take the positional path past the nack.
    let again = pop(&b, "nack", Some("p"), G, 3, "")
        .await
        .expect("the redelivery");
    let mut items = ack_all(&again, "completed");
    items.push(lease_less(&again.messages[0], "retry"));
    let answer = ack_batch(&b, G, items).await;
    let c = cursor(&db, pid, "g").await;
    assert_eq!(c.committed, 0, "fenced at the nacked message: {answer:?}");
    assert_eq!(registry_metrics(&b).await["hits"], 0);
}

#[tokio::test]
async fn a_lease_less_ack_takes_the_hash_path_and_makes_the_entry_doubtful() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "leaseless", "p", &txns("leaseless", 3)).await;
    let popped = pop(&b, "leaseless", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    // A lease-less ack of the first message moves the cursor under the lease's feet.
    let first = ack_batch(&b, G, vec![lease_less(&popped.messages[0], "completed")]).await;
    assert_ok(&first[0]);
    assert_eq!(cursor(&db, pid, "g").await.committed, 0);
    // The full set under the lease: the hash path, which reports the first item a noop.
    let answer = ack_batch(&b, G, ack_all(&popped, "completed")).await;
    answer.iter().for_each(assert_ok);
    let noops: Vec<&Value> = answer.iter().map(|r| &r["noop"]).collect();
    assert_eq!(noops, [&json!(true), &json!(false), &json!(false)]);
    assert_eq!(cursor(&db, pid, "g").await.committed, 2);
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["forgotten"].clone(), m["hits"].clone()),
        (json!(1), json!(0))
    );
}

#[tokio::test]
async fn another_lease_misses_and_keeps_the_entry_for_its_holder() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "wronglease", "p", &txns("wronglease", 2)).await;
    let popped = pop(&b, "wronglease", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let mut forged = ack_all(&popped, "completed");
    for item in &mut forged {
        item["leaseId"] = json!("forged-lease");
    }
    let answer = ack_batch(&b, G, forged).await;
    answer
        .iter()
        .for_each(|r| assert_refused(r, "invalid or expired lease"));
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, -1);
    // The holder's entry survived the forged ack: its ack is a hit.
    let answer = ack_batch(&b, G, ack_all(&popped, "completed")).await;
    assert_all_ok(&answer, true);
    assert_eq!(registry_metrics(&b).await["hits"], 1);
    assert_eq!(
        calls(&db, "log_ack_by_hash_v1").await,
        1,
        "only the forged one"
    );
}

#[tokio::test]
async fn an_expired_lease_is_refused_by_postgresql_then_by_the_hash_path() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "expired", "p", &txns("expired", 2)).await;
    let popped = pop(&b, "expired", Some("p"), G, 2, "&leaseSeconds=1")
        .await
        .expect("two messages");
    // Past the lease, within the entry's margin: the registry still vouches, PostgreSQL
    // does not.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let answer = ack_batch(&b, G, ack_all(&popped, "completed")).await;
    answer
        .iter()
        .for_each(|r| assert_refused(r, "invalid or expired lease"));
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, -1);
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["hits"].clone(), m["refusals"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(calls(&db, "log_ack_by_hash_v1").await, 1);
}

#[tokio::test]
async fn an_entry_past_its_ttl_leaves_the_ack_to_the_hash_path() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "ttl", "p", &txns("ttl", 2)).await;
    let popped = pop(&b, "ttl", Some("p"), G, 2, "&leaseSeconds=1")
        .await
        .expect("two messages");
    let pid = popped.partition_id();
    // The lease is renewed behind this broker's back (as through another broker): the
    // entry still dies at the lease it saw plus 10 s.
    db.execute(
        "UPDATE queen.log_consumers SET lease_expires_at = clock_timestamp() + interval '1 hour'
         WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .expect("renew in SQL");
    tokio::time::sleep(std::time::Duration::from_millis(11_500)).await;
    let answer = ack_batch(&b, G, ack_all(&popped, "completed")).await;
    assert_all_ok(&answer, true);
    assert_eq!(cursor(&db, pid, "g").await.committed, 1);
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["hits"].clone(), m["expirations"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(calls(&db, "log_ack_by_hash_v1").await, 1);
}

#[tokio::test]
async fn a_renewed_lease_keeps_its_entry_alive() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "renewed", "p", &txns("renewed", 2)).await;
    let popped = pop(&b, "renewed", Some("p"), G, 2, "&leaseSeconds=1")
        .await
        .expect("two messages");
    let path = format!("/api/v1/lease/{}/extend", popped.lease_id);
    let (_, renewal) = b.post(&path, &json!({ "seconds": 30 })).await;
    assert_eq!(renewal["renewed"], 1, "{renewal}");
    // Past the first lease and its margin: only the renewal keeps the entry.
    tokio::time::sleep(std::time::Duration::from_millis(11_500)).await;
    let answer = ack_batch(&b, G, ack_all(&popped, "completed")).await;
    assert_all_ok(&answer, true);
    assert_eq!(cursor(&db, popped.partition_id(), "g").await.committed, 1);
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["hits"].clone(), m["extensions"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(calls(&db, "log_ack_by_hash_v1").await, 0);
}

#[tokio::test]
async fn least_recently_stored_entries_go_beyond_a_tiny_budget() {
    // 1 MiB holds three entries of 10 000 hashes (about 272 KiB each), not four.
    const BATCH: usize = 10_000;
    let b = common::broker_with(|cfg| cfg.ack_registry_mb = 1).await;
    let db = b.sql().await;
    let mut popped = Vec::new();
    for p in 0..4 {
        let partition = format!("p{p}");
        for chunk in txns(&partition, BATCH).chunks(2_000) {
            push_txns(&b, "lru", &partition, chunk).await;
        }
        let batch = pop(&b, "lru", Some(&partition), G, BATCH, "")
            .await
            .expect("a full batch");
        assert_eq!(batch.messages.len(), BATCH);
        popped.push(batch);
    }
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["entries"].clone(), m["evictions"].clone()),
        (json!(3), json!(1))
    );
    assert!(m["bytes"].as_u64() <= m["budgetBytes"].as_u64(), "{m}");
    // The evicted (oldest) batch resolves by hash, the newest by its cover; both land.
    for batch in [&popped[0], &popped[3]] {
        let answer = ack_batch(&b, G, ack_all(batch, "completed")).await;
        assert_all_ok(&answer, true);
        let c = cursor(&db, batch.partition_id(), "g").await;
        assert_eq!((c.committed, c.worker), (BATCH as i64 - 1, None));
    }
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["hits"].clone(), m["misses"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(calls(&db, "log_ack_by_hash_v1").await, 1);
}

#[tokio::test]
async fn a_stale_entry_after_another_broker_re_leased_is_refused() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "released", "p", &txns("released", 2)).await;
    let first = pop(&b, "released", Some("p"), G, 2, "&leaseSeconds=1")
        .await
        .expect("two messages");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // The lease expired; another broker re-leases the batch.
    let other = b.sibling(|_| {}).await;
    let second = pop(&other, "released", Some("p"), G, 2, "")
        .await
        .expect("the redelivery");
    assert_ne!(first.lease_id, second.lease_id);
    // The first consumer's full ack on the first broker: its entry is still there, and
    // PostgreSQL refuses the cover; the hash path refuses too, the new lease is untouched.
    let answer = ack_batch(&b, G, ack_all(&first, "completed")).await;
    answer
        .iter()
        .for_each(|r| assert_refused(r, "invalid or expired lease"));
    let c = cursor(&db, first.partition_id(), "g").await;
    assert_eq!(
        (c.committed, c.worker.as_deref()),
        (-1, Some(second.lease_id.as_str()))
    );
    assert_eq!(registry_metrics(&b).await["refusals"], 1);
    // The new holder acks on the first broker, which never served it: the hash path.
    let answer = ack_batch(&b, G, ack_all(&second, "completed")).await;
    assert_all_ok(&answer, true);
    assert_eq!(cursor(&db, first.partition_id(), "g").await.committed, 1);
    assert_eq!(registry_metrics(&other).await["hits"], 0);
}

#[tokio::test]
async fn a_cursor_moved_by_another_broker_refuses_the_cover_and_answers_noops() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "moved", "p", &txns("moved", 3)).await;
    let popped = pop(&b, "moved", Some("p"), G, 3, "")
        .await
        .expect("three messages");
    let pid = popped.partition_id();
    // Another broker takes a lease-less ack of the first message: this broker's entry
    // does not know.
    let other = b.sibling(|_| {}).await;
    let first = ack_batch(
        &other,
        G,
        vec![lease_less(&popped.messages[0], "completed")],
    )
    .await;
    assert_ok(&first[0]);
    let answer = ack_batch(&b, G, ack_all(&popped, "completed")).await;
    answer.iter().for_each(assert_ok);
    let noops: Vec<&Value> = answer.iter().map(|r| &r["noop"]).collect();
    assert_eq!(
        noops,
        [&json!(true), &json!(false), &json!(false)],
        "the hash path's answer"
    );
    assert_eq!(cursor(&db, pid, "g").await.committed, 2);
    let m = registry_metrics(&b).await;
    assert_eq!(
        (m["hits"].clone(), m["refusals"].clone()),
        (json!(1), json!(1))
    );
}

#[tokio::test]
async fn every_pop_shape_feeds_the_registry() {
    let b = common::broker().await;
    for p in ["a", "b", "c", "d"] {
        push_txns(&b, "shapes.q", p, &txns(&format!("shapes-{p}"), 2)).await;
    }
    let routes = [
        "/api/v1/pop/queue/shapes.q/partition/a?batch=2&wait=false&consumerGroup=g",
        "/api/v1/pop/queue/shapes.q?batch=2&wait=false&consumerGroup=g",
        "/api/v1/pop?namespace=shapes&batch=2&wait=false&consumerGroup=g",
    ];
    let mut hits = 0;
    for route in routes {
        let (status, body) = b.get(route).await;
        assert_eq!(status.as_u16(), 200, "{route}: {body}");
        let messages = body["messages"].as_array().expect("messages").clone();
        let items: Vec<Value> = messages.iter().map(|m| ack_item(m, "completed")).collect();
        assert_all_ok(&ack_batch(&b, G, items).await, true);
        hits += 1;
        assert_eq!(registry_metrics(&b).await["hits"], hits, "{route}");
    }
    // The framed answer (QPF1) feeds it too.
    let framed = b
        .http
        .get(b.at("/api/v1/pop/queue/shapes.q?batch=2&wait=false&consumerGroup=g&frames=true"))
        .send()
        .await
        .expect("framed pop");
    let body = framed.bytes().await.expect("body");
    let decoded = queen_proto::pop_framed::decode(&body).expect("a QPF1 answer");
    assert_eq!(decoded.messages.len(), 2);
    let items: Vec<Value> = decoded
        .messages
        .iter()
        .map(|m| {
            json!({ "transactionId": m.transaction_id, "partitionId": m.partition_id,
                    "leaseId": m.lease_id, "status": "completed" })
        })
        .collect();
    assert_all_ok(&ack_batch(&b, G, items).await, true);
    assert_eq!(registry_metrics(&b).await["hits"], hits + 1);
}

#[tokio::test]
async fn the_transaction_wire_acks_a_proven_batch_positionally() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "txpos", "p", &txns("txpos", 2)).await;
    let popped = pop(&b, "txpos", Some("p"), G, 2, "")
        .await
        .expect("two messages");
    let mut ops: Vec<Value> = popped
        .messages
        .iter()
        .map(|m| ack_op(m, "completed", G))
        .collect();
    ops.push(json!({ "type": "push", "items": [{ "queue": "txpos-out", "payload": { "n": 1 } }] }));
    let (status, answer) = b
        .post("/api/v1/transaction", &json!({ "operations": ops }))
        .await;
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert_eq!(answer["success"], true, "{answer}");
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.worker), (1, None));
    assert_eq!(registry_metrics(&b).await["hits"], 1);

    // A cover PostgreSQL refuses (the lease expired) rolls the bundle back, which then
    // runs again by hash and is refused the same way: nothing is written.
    push_txns(&b, "txpos", "p", &txns("txpos-late", 1)).await;
    let late = pop(&b, "txpos", Some("p"), G, 1, "&leaseSeconds=1")
        .await
        .expect("one message");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let ops = vec![
        ack_op(&late.messages[0], "completed", G),
        json!({ "type": "push", "items": [{ "queue": "txpos-out", "payload": { "n": 2 } }] }),
    ];
    let (_, answer) = b
        .post("/api/v1/transaction", &json!({ "operations": ops }))
        .await;
    assert_eq!(answer["success"], false, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rolled back"),
        "{answer}"
    );
    assert_eq!(
        common::count(&db, "queen.log_segments").await,
        3,
        "two pushes of txpos, one of txpos-out"
    );
    assert_eq!(registry_metrics(&b).await["refusals"], 1);
}
