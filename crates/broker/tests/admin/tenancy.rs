//! Tenant isolation (README "Tenants", docs/engine.md §2.10) against real brokers: two tenants
//! use the same queue name without meeting; every route of the route table, swept with a
//! second tenant's admin token against the first tenant's objects (queue name, partition id,
//! transaction ids, lease id, dead letter, group), neither reads nor changes them (checked in
//! the database before and after every call); pushes spooled under maintenance drain into
//! their own tenant's queue; binary pushes and framed pops keep to their tenant; and with
//! auth off everything is the default tenant, stored as before.

use queen_broker::http::auth::access::{Access, ROUTES};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::auth::{call, claims, get, hs256, hs_broker, post, Reply};
use crate::common::{self, TestBroker};

/// What every tenant-A payload carries: no answer to tenant B may contain it.
const MARKER: &str = "A-PAYLOAD-MARKER";

/// An admin token (so roles never explain a refusal) acting for `tenant` (none: the default).
fn tenant_token(sub: &str, tenant: Option<&str>) -> String {
    let mut c = claims(sub, Some("admin"));
    if let Some(t) = tenant {
        c["tenant"] = t.into();
    }
    hs256(&c)
}

async fn pop(b: &TestBroker, tok: &str, query: &str) -> Reply {
    get(
        b,
        &format!("/api/v1/pop/queue/orders?wait=false&{query}"),
        tok,
    )
    .await
}

fn payloads(r: &Reply) -> Vec<Value> {
    r.body["messages"]
        .as_array()
        .map(|m| m.iter().map(|m| m["data"].clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn two_tenants_share_a_queue_name_without_meeting() {
    let b = hs_broker(|_| {}).await;
    let (acme, bolt) = (
        tenant_token("a", Some("acme")),
        tenant_token("b", Some("bolt")),
    );
    let default = tenant_token("ops", None);
    for (tok, label) in [(&acme, "acme"), (&bolt, "bolt")] {
        let r = post(
            &b,
            "/api/v1/configure",
            tok,
            &json!({"queue": "orders", "namespace": "ns", "task": "work"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(
            r.body["queue"], "orders",
            "{label}: names read back as sent"
        );
        assert_eq!(r.body["namespace"], "ns");
    }
    let items = |who: &str, n: usize| -> Value {
        let items: Vec<Value> = (0..n)
            .map(|i| {
                json!({"queue": "orders", "transactionId": format!("t-{i}"),
                            "payload": {"who": who, "i": i}})
            })
            .collect();
        json!({ "items": items })
    };
    let r = post(&b, "/api/v1/push", &acme, &items("acme", 3)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = post(&b, "/api/v1/push", &bolt, &items("bolt", 1)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        common::statuses(&r.body),
        ["queued"],
        "the same transactionId in the other tenant's queue is no duplicate"
    );
    assert_eq!(r.body[0]["queueName"], "orders");
    let bundle = json!({"operations": [{"type": "push", "queue": "orders", "transactionId": "t-0",
                                        "payload": {"who": "bolt", "i": 9}}]});
    let r = post(&b, "/api/v1/transaction", &bolt, &bundle).await;
    assert_eq!(
        r.body["success"], false,
        "a duplicate in bolt's own queue: {}",
        r.body
    );
    assert!(
        r.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("queue orders")),
        "the rollback names the queue as sent: {}",
        r.body
    );

    for (tok, who, n) in [(&acme, "acme", 3), (&bolt, "bolt", 1)] {
        let depth = get(&b, "/api/v1/resources/queues/orders/depth", tok).await;
        assert_eq!(depth.body["pending"], n, "{who}: {}", depth.body);
        let listed = get(&b, "/api/v1/resources/queues", tok).await;
        let queues = listed.body["queues"].as_array().expect("queues").clone();
        assert_eq!(queues.len(), 1, "{who}: {}", listed.body);
        assert_eq!(queues[0]["name"], "orders");
        assert_eq!(queues[0]["messages"]["total"], n);
        let overview = get(&b, "/api/v1/resources/overview", tok).await;
        assert_eq!(overview.body["queues"], 1, "{}", overview.body);
        assert_eq!(overview.body["messages"]["total"], n, "{}", overview.body);
    }
    let listed = get(&b, "/api/v1/resources/queues", &default).await;
    assert_eq!(
        listed.body["queues"],
        json!([]),
        "the default tenant has no queue"
    );

    let r = pop(&b, &bolt, "batch=10").await;
    assert_eq!(payloads(&r), [json!({"who": "bolt", "i": 0})], "{}", r.body);
    assert_eq!(r.body["queue"], "orders");
    let r = get(&b, "/api/v1/pop?namespace=ns&wait=false&batch=10", &acme).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let got = payloads(&r);
    assert_eq!(got.len(), 3, "{}", r.body);
    assert!(got.iter().all(|p| p["who"] == "acme"), "{}", r.body);
    assert_eq!(
        r.body["messages"][0]["queue"], "orders",
        "discovery names the queue"
    );
    let r = get(&b, "/api/v1/pop?task=work&wait=false", &bolt).await;
    assert_eq!(
        r.status,
        StatusCode::NO_CONTENT,
        "bolt's only message is leased"
    );
    let r = get(&b, "/api/v1/pop?namespace=ns&wait=false", &default).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);

    let db = b.sql().await;
    let rows = db
        .query(
            "SELECT tenant_id, name FROM queen.queues ORDER BY tenant_id",
            &[],
        )
        .await
        .expect("queues");
    let rows: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        rows,
        [
            ("acme".into(), "acme\u{1}orders".into()),
            ("bolt".into(), "bolt\u{1}orders".into())
        ]
    );
}

/// Tenant A's objects the sweep aims at.
struct Victim {
    pid: String,
    lease: String,
    dead_txn: String,
    live_txn: String,
    /// A stream query of A's, with state in partition `pid`.
    query: String,
    /// A message of A's ephemeral queue `orders`, leased in queue mode.
    eph_id: String,
}

/// Tenant A: queue `orders` (namespace `ns`), four messages in partition `p1`, one of them
/// dead-lettered by group `g`, two leased in queue mode under a live lease, a trace.
async fn victim(b: &TestBroker, tok: &str) -> Victim {
    let r = post(
        b,
        "/api/v1/configure",
        tok,
        &json!({"queue": "orders", "namespace": "ns", "task": "work", "leaseTime": 600}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let items: Vec<Value> = (1..=4)
        .map(|i| {
            json!({"queue": "orders", "partition": "p1", "transactionId": format!("a-{i}"),
                        "payload": {"secret": MARKER, "i": i}})
        })
        .collect();
    let r = post(b, "/api/v1/push", tok, &json!({ "items": items })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    let by_g = pop(b, tok, "batch=1&consumerGroup=g").await;
    assert_eq!(by_g.status, StatusCode::OK, "{}", by_g.body);
    let first = by_g.body["messages"][0].clone();
    let ack = json!({"acknowledgments": [common::ack_item(&first, "dlq")], "consumerGroup": "g"});
    let r = post(b, "/api/v1/ack/batch", tok, &ack).await;
    assert_eq!(r.body[0]["success"], true, "{}", r.body);

    let leased = pop(b, tok, "batch=2").await;
    assert_eq!(leased.status, StatusCode::OK, "{}", leased.body);
    let second = leased.body["messages"][1].clone();
    let trace = json!({"transactionId": "a-2", "partitionId": second["partitionId"], "data": {}});
    let r = post(b, "/api/v1/traces", tok, &trace).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let kv = json!({"operations": [{"op": "put", "ns": "ns", "key": "k", "forever": true,
                                    "value": {"secret": MARKER}}]});
    let r = post(b, "/api/v1/kv", tok, &kv).await;
    assert_eq!(r.body["results"][0]["applied"], true, "{}", r.body);
    let lock = json!({"operations": [{"op": "acquire", "name": "L", "ttlSeconds": 600}]});
    let r = post(b, "/api/v1/locks", tok, &lock).await;
    assert_eq!(r.body["results"][0]["acquired"], true, "{}", r.body);
    let reg = json!({"name": "sq", "source_queue": "orders", "config_hash": "h"});
    let r = post(b, "/streams/v1/queries", tok, &reg).await;
    let query = r.body["query_id"].as_str().expect("query id").to_string();
    let flush = json!({"query_id": query, "partition_id": second["partitionId"], "ack": null,
                       "state_ops": [{"type": "upsert", "key": "k", "value": {"secret": MARKER}}]});
    let r = post(b, "/streams/v1/cycle", tok, &flush).await;
    assert_eq!(r.body["success"], true, "{}", r.body);
    let eph = json!({"queue": "orders", "messages": [{"payload": {"secret": MARKER}},
                                                     {"payload": {"secret": MARKER}}]});
    let r = post(b, "/api/v1/ephemeral/push", tok, &eph).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = post(
        b,
        "/api/v1/ephemeral/configure",
        tok,
        &json!({"queue": "orders"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = get(b, "/api/v1/ephemeral/pop?queue=orders", tok).await;
    let eph_id = r.body["messages"][0]["id"]
        .as_str()
        .expect("eph id")
        .to_string();
    Victim {
        eph_id,
        query,
        pid: second["partitionId"].as_str().expect("pid").to_string(),
        lease: leased.body["leaseId"].as_str().expect("lease").to_string(),
        dead_txn: first["transactionId"].as_str().expect("txn").to_string(),
        live_txn: second["transactionId"].as_str().expect("txn").to_string(),
    }
}

/// Everything tenant `acme` owns, and the broker-wide flags, as one digest.
async fn state_of_acme(db: &Client) -> String {
    const SQL: &str = "
        WITH q AS (SELECT * FROM queen.queues WHERE tenant_id = 'acme'),
             p AS (SELECT lp.* FROM queen.log_partitions lp WHERE lp.queue_id IN (SELECT id FROM q))
        SELECT concat_ws(' | ',
          (SELECT string_agg(concat_ws(',', id, name, namespace, task, lease_time, retry_limit,
                                       max_queue_size, encryption_enabled), ';' ORDER BY id) FROM q),
          (SELECT string_agg(concat_ws(',', id, name, last_offset, log_start, txns_start), ';'
                             ORDER BY id) FROM p),
          (SELECT count(*) FROM queen.log_segments WHERE partition_id IN (SELECT id FROM p)),
          (SELECT count(*) FROM queen.log_txns WHERE partition_id IN (SELECT id FROM p)),
          (SELECT string_agg(concat_ws(',', partition_id, consumer_group, committed, batch_end,
                                       worker_id, lease_expires_at, batch_retry_count,
                                       attempt_count), ';' ORDER BY partition_id, consumer_group)
             FROM queen.log_consumers WHERE partition_id IN (SELECT id FROM p)),
          (SELECT string_agg(concat_ws(',', consumer_group, queue_id, namespace, task,
                                       subscription_mode, subscription_timestamp), ';' ORDER BY id)
             FROM queen.consumer_groups_metadata
            WHERE queue_id IN (SELECT id FROM q) OR queen.tenant_of(namespace) = 'acme'
               OR queen.tenant_of(task) = 'acme'),
          (SELECT string_agg(concat_ws(',', queue_id, consumer_group, last_empty_scan_at), ';'
                             ORDER BY queue_id, consumer_group)
             FROM queen.consumer_watermarks WHERE queue_id IN (SELECT id FROM q)),
          (SELECT string_agg(concat_ws(',', id, partition_id, transaction_id, consumer_group,
                                       retry_count), ';' ORDER BY id)
             FROM queen.log_dlq WHERE partition_id IN (SELECT id FROM p)),
          (SELECT count(*) FROM queen.message_traces WHERE partition_id IN (SELECT id FROM p)),
          (SELECT string_agg(concat_ws(',', namespace, key, value, version, expires_at), ';'
                             ORDER BY namespace, key) FROM queen.kv WHERE tenant_id = 'acme'),
          (SELECT string_agg(concat_ws(',', q.id, q.name, q.config_hash, s.partition_id, s.key,
                                       s.value), ';' ORDER BY q.id, s.partition_id, s.key)
             FROM queen.stream_queries q LEFT JOIN queen.stream_state s ON s.query_id = q.id
            WHERE q.tenant_id = 'acme'),
          (SELECT string_agg(concat_ws(',', queue, options), ';' ORDER BY queue)
             FROM queen.eph_queues WHERE tenant_id = 'acme'),
          (SELECT string_agg(concat_ws(',', queue, length, bytes), ';' ORDER BY queue)
             FROM queen.eph_live WHERE tenant_id = 'acme'),
          (SELECT string_agg(concat_ws(',', partition, seq, payload), ';' ORDER BY partition, seq)
             FROM queen.eph_messages WHERE tenant_id = 'acme'),
          (SELECT string_agg(concat_ws(',', partition, grp, next_seq), ';' ORDER BY partition, grp)
             FROM queen.eph_cursors WHERE tenant_id = 'acme'),
          (SELECT string_agg(concat_ws(',', partition, grp, seq, attempts, lease_until), ';'
                             ORDER BY partition, grp, seq)
             FROM queen.eph_leases WHERE tenant_id = 'acme'),
          (SELECT string_agg(key || '=' || value::text, ';' ORDER BY key) FROM queen.system_state))";
    db.query_one(SQL, &[]).await.expect("digest").get(0)
}

/// The concrete call of a route template aimed at `v`: path, query and body.
fn aimed(route_path: &str, method: &Method, v: &Victim) -> (String, Value) {
    let path = route_path
        .replace("{queue}", "orders")
        .replace("{partition}", "p1")
        .replace("{group}", "g")
        .replace("{partition_id}", &v.pid)
        .replace("{transaction_id}", &v.dead_txn)
        .replace("{lease_id}", &v.lease);
    let ack = json!({"transactionId": v.live_txn, "partitionId": v.pid, "leaseId": v.lease,
                     "status": "completed"});
    let (query, body) = match (method.as_str(), route_path) {
        ("POST", "/api/v1/push") => (
            "",
            json!({"items": [{"queue": "orders", "partition": "p1",
                              "transactionId": v.live_txn, "payload": {"from": "bolt"}}]}),
        ),
        ("GET", "/api/v1/pop") => ("?namespace=ns&wait=false&batch=10", json!(null)),
        ("GET", p) if p.starts_with("/api/v1/pop/") => ("?wait=false&batch=10", json!(null)),
        ("POST", "/api/v1/ack") => ("", ack.clone()),
        ("POST", "/api/v1/ack/batch") => (
            "",
            json!({"acknowledgments": [ack.clone(),
                    {"transactionId": v.dead_txn, "partitionId": v.pid, "status": "failed"}],
                   "consumerGroup": null}),
        ),
        ("POST", "/api/v1/lease/{lease_id}/extend") => ("", json!({"seconds": 86400})),
        ("POST", "/api/v1/transaction") => (
            "",
            json!({"operations": [{"type": "ack", "transactionId": v.live_txn,
                                   "partitionId": v.pid, "leaseId": v.lease,
                                   "status": "completed"}]}),
        ),
        ("POST", "/api/v1/traces") => (
            "",
            json!({"transactionId": v.live_txn, "partitionId": v.pid, "data": {}}),
        ),
        ("POST", "/api/v1/configure") => (
            "",
            json!({"queue": "orders", "options": {"leaseTime": 5, "retryLimit": 9}}),
        ),
        (_, "/api/v1/dlq") => ("?queue=orders", json!(null)),
        ("POST", "/api/v1/kv") => (
            "",
            json!({"operations": [{"op": "get", "ns": "ns", "key": "k"},
                                  {"op": "delete", "ns": "ns", "key": "k"},
                                  {"op": "getPrefix", "ns": "ns", "prefix": "k"}]}),
        ),
        ("POST", "/api/v1/locks") => ("", json!({"operations": [{"op": "get", "name": "L"}]})),
        ("POST", "/streams/v1/queries") => (
            "",
            json!({"name": "sq", "source_queue": "orders", "config_hash": "x", "reset": true}),
        ),
        ("POST", "/streams/v1/state/get") => {
            ("", json!({"query_id": v.query, "partition_id": v.pid}))
        }
        ("POST", "/streams/v1/cycle") => (
            "",
            json!({"query_id": v.query, "partition_id": v.pid, "consumer_group": null,
                   "state_ops": [{"type": "delete", "key": "k"}], "push_items": [],
                   "ack": {"transactionId": v.live_txn, "leaseId": v.lease}}),
        ),
        ("POST", p) if p.starts_with("/api/v1/system/maintenance") => {
            ("", json!({"enabled": true}))
        }
        ("POST", "/api/v1/consumer-groups/{group}/subscription") => {
            ("", json!({"subscriptionTimestamp": "2020-01-01T00:00:00Z"}))
        }
        ("POST", p) if p.ends_with("/seek") => ("", json!({"toEnd": true})),
        ("DELETE", p) if p.starts_with("/api/v1/consumer-groups/") => {
            ("?deleteMetadata=true", json!(null))
        }
        (_, "/api/v1/consumer-groups/lagging") => ("?minLagSeconds=0", json!(null)),
        ("POST", "/api/v1/ephemeral/push") => (
            "",
            json!({"queue": "orders", "messages": [{"payload": {"from": "bolt"}}]}),
        ),
        ("GET", "/api/v1/ephemeral/pop") => ("?queue=orders&batch=10", json!(null)),
        ("POST", "/api/v1/ephemeral/ack") => {
            ("", json!({"queue": "orders", "acks": [{"id": v.eph_id}]}))
        }
        ("POST", "/api/v1/ephemeral/configure") => {
            ("", json!({"queue": "orders", "options": {"maxLength": 1}}))
        }
        ("POST", "/api/v1/ephemeral/reset") => ("", json!({"queue": "orders"})),
        _ => ("", json!(null)),
    };
    (format!("{path}{query}"), body)
}

/// What tenant B must never read: A's payloads, A's partition as an id in an answer, A's
/// namespace and task qualified or not.
fn leaks(r: &Reply, v: &Victim) -> Option<String> {
    let text = String::from_utf8_lossy(&r.raw);
    let pid = format!("\"partitionId\":\"{}\"", v.pid);
    let found = [MARKER, pid.as_str(), "acme"]
        .into_iter()
        .find(|needle| text.contains(needle));
    found.map(|needle| format!("{needle} in {text}"))
}

#[tokio::test]
async fn every_route_with_another_tenants_token_neither_reads_nor_writes() {
    let b = hs_broker(|_| {}).await;
    let acme = tenant_token("a", Some("acme"));
    let bolt = tenant_token("b", Some("bolt"));
    let v = victim(&b, &acme).await;
    let db = b.sql().await;
    let before = state_of_acme(&db).await;
    assert!(
        before.contains(&v.dead_txn),
        "the dead letter is there: {before}"
    );

    let mut swept = 0;
    for route in ROUTES.iter().filter(|r| r.access != Access::Public) {
        let method = Method::from_bytes(route.method.as_bytes()).expect("method");
        let (path, body) = aimed(route.path, &method, &v);
        let with_body = (!body.is_null()).then_some(&body);
        let r = call(&b, method.clone(), &path, Some(&bolt), with_body).await;
        let what = format!("{method} {path} -> {}", r.status);
        assert!(r.status.as_u16() < 500, "{what}: {}", r.body);
        if let Some(leak) = leaks(&r, &v) {
            panic!("{what} leaks tenant acme's data: {leak}");
        }
        if route.path.starts_with("/api/v1/system/maintenance") && method == Method::POST {
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{what}: broker-wide");
        } else {
            assert_ne!(r.status, StatusCode::FORBIDDEN, "{what}: {}", r.body);
        }
        assert_eq!(
            state_of_acme(&db).await,
            before,
            "{what} changed tenant acme's state: {}",
            r.body
        );
        expect_unknown(route.path, &method, &r);
        swept += 1;
    }
    assert!(swept > 30, "swept only {swept} routes");

    // Tenant A is untouched and still in charge of its objects.
    let ack = json!({"acknowledgments": [{"transactionId": v.live_txn, "partitionId": v.pid,
                                          "leaseId": v.lease, "status": "completed"}]});
    let r = post(&b, "/api/v1/ack/batch", &acme, &ack).await;
    assert_eq!(r.body[0]["success"], true, "{}", r.body);
    let r = get(&b, "/api/v1/dlq?queue=orders", &acme).await;
    assert_eq!(r.body["total"], 1, "{}", r.body);
    let detail = format!("/api/v1/messages/{}/{}", v.pid, v.dead_txn);
    let r = get(&b, &detail, &acme).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["queue"], "orders", "{}", r.body);
}

/// The answers that prove B met nothing of A's where the route is addressed by A's ids.
fn expect_unknown(template: &str, method: &Method, r: &Reply) {
    let what = format!("{method} {template}");
    match (method.as_str(), template) {
        ("GET" | "DELETE", "/api/v1/messages/{partition_id}/{transaction_id}")
        | ("POST", "/api/v1/messages/{partition_id}/{transaction_id}/retry")
        | ("POST", "/api/v1/traces") => {
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{what}: {}", r.body)
        }
        ("POST", "/api/v1/lease/{lease_id}/extend") => {
            assert_eq!(r.body["renewed"], 0, "{what}: {}", r.body)
        }
        ("POST", "/api/v1/ack") | ("POST", "/api/v1/ack/batch") => {
            assert_eq!(r.body[0]["success"], false, "{what}: {}", r.body);
            assert!(
                r.body[0]["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("not found")),
                "{what}: the answer of a missing consumer, not of a bad lease: {}",
                r.body
            );
        }
        ("POST", "/api/v1/transaction") => {
            assert_eq!(r.body["success"], false, "{what}: {}", r.body)
        }
        ("POST", "/api/v1/kv") => {
            let results = &r.body["results"];
            assert_eq!(results[0]["found"], false, "{what}: {}", r.body);
            assert_eq!(results[1]["reason"], "absent", "{what}: {}", r.body);
            assert_eq!(results[2]["rows"], json!([]), "{what}: {}", r.body);
        }
        ("POST", "/api/v1/locks") => {
            assert_eq!(r.body["results"][0]["held"], false, "{what}: {}", r.body)
        }
        ("POST", "/streams/v1/state/get") | ("POST", "/streams/v1/cycle") => {
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{what}: {}", r.body)
        }
        ("POST", "/streams/v1/queries") => {
            assert_eq!(r.body["fresh"], true, "{what}: B's own query: {}", r.body)
        }
        ("POST", "/api/v1/push") => {
            assert_eq!(common::statuses(&r.body), ["queued"], "{what}: {}", r.body)
        }
        ("GET", "/api/v1/dlq") => assert_eq!(r.body["total"], 0, "{what}: {}", r.body),
        ("GET", "/api/v1/consumer-groups/{group}") => {
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{what}: {}", r.body)
        }
        ("POST", "/api/v1/ephemeral/ack") => {
            assert_eq!(
                r.body["results"][0]["outcome"], "stale",
                "{what}: {}",
                r.body
            )
        }
        ("GET", "/api/v1/ephemeral/pop") => assert_eq!(
            r.body["messages"].as_array().map(Vec::len),
            Some(1),
            "{what}: only B's own message: {}",
            r.body
        ),
        ("POST", "/api/v1/ephemeral/reset") => {
            assert_eq!(r.body["dropped"], 1, "{what}: B's own message: {}", r.body)
        }
        _ => {}
    }
}

#[tokio::test]
async fn with_auth_off_everything_is_the_default_tenant() {
    let b = common::broker().await;
    let r = b.push("plain", "p", &[json!({"n": 1})]).await;
    assert_eq!(common::statuses(&r), ["queued"]);
    let (status, popped) = b.get("/api/v1/pop?task=t&wait=false").await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "no queue has task t: {popped}"
    );
    let (status, popped) = b.get("/api/v1/pop/queue/plain?wait=false").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(popped["queue"], "plain");
    assert_eq!(popped["messages"][0]["data"], json!({"n": 1}));
    let (status, listed) = b.get("/api/v1/resources/queues").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["queues"][0]["name"], "plain");
    let db = b.sql().await;
    let row = db
        .query_one("SELECT tenant_id, name FROM queen.queues", &[])
        .await
        .expect("one queue");
    assert_eq!(row.get::<_, String>(0), "", "the default tenant");
    assert_eq!(row.get::<_, String>(1), "plain", "stored as sent");
    // A token's tenant claim means nothing when auth is off: there is no token to read.
    let (status, _) = b
        .post("/api/v1/system/maintenance", &json!({"enabled": false}))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the default tenant may set maintenance"
    );
}

#[tokio::test]
async fn a_token_with_an_unusable_tenant_is_refused() {
    let b = hs_broker(|_| {}).await;
    let mut c = claims("x", Some("admin"));
    c["tenant"] = "a\u{1}b".into();
    let r = get(&b, "/api/v1/resources/queues", &hs256(&c)).await;
    r.assert_401("tenant");
    c["tenant"] = json!(7);
    let r = get(&b, "/api/v1/resources/queues", &hs256(&c)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
}

#[tokio::test]
async fn spooled_pushes_drain_into_their_own_tenants_queue() {
    let b = hs_broker(|_| {}).await;
    let (acme, bolt) = (
        tenant_token("a", Some("acme")),
        tenant_token("b", Some("bolt")),
    );
    let ops = tenant_token("ops", None);
    let on = json!({"enabled": true});
    let r = post(&b, "/api/v1/system/maintenance", &ops, &on).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    for (tok, who) in [(&acme, "acme"), (&bolt, "bolt")] {
        let push = json!({"items": [{"queue": "orders", "transactionId": "same",
                                     "payload": {"who": who}}]});
        let r = post(&b, "/api/v1/push", tok, &push).await;
        assert_eq!(common::statuses(&r.body), ["buffered"], "{}", r.body);
        assert_eq!(r.body[0]["queueName"], "orders");
    }
    let off = json!({"enabled": false});
    let r = post(&b, "/api/v1/system/maintenance", &ops, &off).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    for (tok, who) in [(&acme, "acme"), (&bolt, "bolt")] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let got = loop {
            let r = pop(&b, tok, "batch=10").await;
            if r.status == StatusCode::OK || std::time::Instant::now() > deadline {
                break payloads(&r);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert_eq!(
            got,
            [json!({ "who": who })],
            "{who} gets its own message back"
        );
    }
}

#[tokio::test]
async fn binary_pushes_and_framed_pops_stay_in_their_tenant() {
    use queen_proto::pop_framed::decode;
    use queen_proto::push_bin::{encode_push_plain, encode_push_precompressed};

    use crate::common::wire::{batch, item, PUSH_CONTENT_TYPE};

    let b = hs_broker(|_| {}).await;
    let (acme, bolt) = (
        tenant_token("a", Some("acme")),
        tenant_token("b", Some("bolt")),
    );
    for (tok, who) in [(&acme, "acme"), (&bolt, "bolt")] {
        let payload = format!("{{\"who\":\"{who}\"}}");
        let plain = encode_push_plain(
            &[batch(
                "orders",
                "p",
                vec![item(Some("plain"), payload.as_bytes())],
            )],
            false,
            false,
        )
        .expect("encode");
        let pre = encode_push_precompressed(
            &[batch(
                "orders",
                "p",
                vec![item(Some("pre"), payload.as_bytes())],
            )],
            false,
        )
        .expect("encode");
        for body in [plain, pre] {
            let req = b
                .http
                .post(b.at("/api/v1/push"))
                .bearer_auth(tok)
                .header("content-type", PUSH_CONTENT_TYPE)
                .body(body);
            let r = crate::auth::send(req).await;
            assert_eq!(r.status, StatusCode::CREATED, "{who}: {}", r.body);
            assert_eq!(common::statuses(&r.body), ["queued"], "{who}: {}", r.body);
            assert_eq!(r.body[0]["queueName"], "orders");
        }
    }
    for (tok, who) in [(&acme, "acme"), (&bolt, "bolt")] {
        let r = pop(&b, tok, "batch=10&frames=true").await;
        assert_eq!(r.status, StatusCode::OK, "{who}");
        let framed = decode(&r.raw).expect("QPF1");
        assert_eq!(framed.queue, "orders");
        let got: Vec<(String, Value)> = framed
            .messages
            .iter()
            .map(|m| (m.transaction_id.clone(), m.data.clone()))
            .collect();
        let mine = json!({ "who": who });
        assert_eq!(
            got,
            [
                ("plain".to_string(), mine.clone()),
                ("pre".to_string(), mine)
            ],
            "{who} pops its own two messages"
        );
    }
}

/// The ack registry's fast path (a full-batch completed ack of the lease a pop of this broker
/// delivered) is per tenant too: another tenant's ack naming the same partition, lease and
/// transactionIds must not become a positional cover, and takes the hash path, which refuses
/// it. The owner's own ack then commits as a cover (a registry hit).
#[tokio::test]
async fn another_tenants_ack_of_a_delivered_batch_never_uses_the_registry() {
    let b = hs_broker(|cfg| cfg.ack_registry = true).await;
    let (acme, bolt) = (
        tenant_token("a", Some("acme")),
        tenant_token("b", Some("bolt")),
    );
    let items: Vec<Value> = (0..3)
        .map(|i| {
            json!({"queue": "orders", "partition": "p1", "transactionId": format!("r-{i}"),
                        "payload": {"n": i}})
        })
        .collect();
    let r = post(&b, "/api/v1/push", &acme, &json!({ "items": items })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let leased = pop(&b, &acme, "batch=10").await;
    assert_eq!(leased.status, StatusCode::OK, "{}", leased.body);
    let lease = leased.body["leaseId"]
        .as_str()
        .expect("a lease")
        .to_string();
    let all: Vec<Value> = leased.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                        "leaseId": lease, "status": "completed"})
        })
        .collect();
    assert_eq!(all.len(), 3, "the whole batch was delivered");
    let before = registry_hits(&b).await;
    let body = json!({ "acknowledgments": all });

    let r = post(&b, "/api/v1/ack/batch", &bolt, &body).await;
    assert!(
        r.body
            .as_array()
            .expect("outcomes")
            .iter()
            .all(|o| o["success"] == false),
        "another tenant's ack must be refused: {}",
        r.body
    );
    assert_eq!(
        registry_hits(&b).await,
        before,
        "no cover for another tenant"
    );

    let r = post(&b, "/api/v1/ack/batch", &acme, &body).await;
    assert!(
        r.body
            .as_array()
            .expect("outcomes")
            .iter()
            .all(|o| o["success"] == true),
        "{}",
        r.body
    );
    assert_eq!(
        registry_hits(&b).await,
        before + 1,
        "the owner's ack is the registry's hit"
    );
}

async fn registry_hits(b: &TestBroker) -> u64 {
    let (_, metrics) = b.get("/metrics").await;
    metrics["ackRegistry"]["hits"]
        .as_u64()
        .expect("registry hits")
}
