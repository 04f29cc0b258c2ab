//! Input generation for the HTTP fuzzer: names that probe validation (NUL, control
//! characters, whitespace, huge, non-ASCII), hostile query values (overflowing numbers,
//! unrepresentable timestamps), and bodies made by mutating a valid one per route — values
//! swapped for other types, keys dropped or added, truncation, random bytes, mismatched
//! content types and encodings, bit-flipped binary `QPB1`/`QTB1` bodies.

use queen_client::encode_segment;
use queen_proto::push_bin::{encode_push_plain, encode_txn, Batch, BatchItem};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::{json, Value};

/// Real ids from the fixture, so some requests reach deep code paths.
pub struct Fixture {
    pub queue: String,
    pub partition: String,
    pub group: String,
    pub partition_id: String,
    pub txn: String,
    pub lease: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Configure,
    Push,
    PushBinary,
    Ack,
    AckBatch,
    Extend,
    Transaction,
    TransactionBinary,
    Seek,
    Subscription,
    Traces,
}

pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub params: &'static [&'static str],
    pub body: Body,
}

const POP: &[&str] = &[
    "batch",
    "wait",
    "consumerGroup",
    "autoAck",
    "leaseSeconds",
    "subscriptionMode",
    "subscriptionFrom",
    "partitions",
    "frames",
    "autopilot",
    "conflation",
    "namespace",
    "task",
];

const fn r(
    method: &'static str,
    path: &'static str,
    params: &'static [&'static str],
    body: Body,
) -> Route {
    Route {
        method,
        path,
        params,
        body,
    }
}

/// Every route of the README's table (and docs/wire.md §2), plus one that does not exist.
pub const ROUTES: &[Route] = &[
    r("POST", "/api/v1/configure", &[], Body::Configure),
    r("DELETE", "/api/v1/resources/queues/{q}", &[], Body::None),
    r("POST", "/api/v1/push", &[], Body::Push),
    r("POST", "/api/v1/push", &[], Body::PushBinary),
    r("GET", "/api/v1/pop/queue/{q}", POP, Body::None),
    r(
        "GET",
        "/api/v1/pop/queue/{q}/partition/{p}",
        POP,
        Body::None,
    ),
    r("GET", "/api/v1/pop", POP, Body::None),
    r("POST", "/api/v1/ack", &[], Body::Ack),
    r("POST", "/api/v1/ack/batch", &[], Body::AckBatch),
    r("POST", "/api/v1/lease/{lease}/extend", &[], Body::Extend),
    r("POST", "/api/v1/transaction", &[], Body::Transaction),
    r("POST", "/api/v1/transaction", &[], Body::TransactionBinary),
    r(
        "GET",
        "/api/v1/dlq",
        &[
            "queue",
            "limit",
            "offset",
            "consumerGroup",
            "partition",
            "from",
            "to",
        ],
        Body::None,
    ),
    r("GET", "/api/v1/consumer-groups", &[], Body::None),
    r(
        "GET",
        "/api/v1/consumer-groups/lagging",
        &["minLagSeconds"],
        Body::None,
    ),
    r("GET", "/api/v1/consumer-groups/{g}", &[], Body::None),
    r(
        "DELETE",
        "/api/v1/consumer-groups/{g}",
        &["deleteMetadata"],
        Body::None,
    ),
    r(
        "POST",
        "/api/v1/consumer-groups/{g}/subscription",
        &[],
        Body::Subscription,
    ),
    r(
        "DELETE",
        "/api/v1/consumer-groups/{g}/queues/{q}",
        &["deleteMetadata"],
        Body::None,
    ),
    r(
        "POST",
        "/api/v1/consumer-groups/{g}/queues/{q}/seek",
        &[],
        Body::Seek,
    ),
    r(
        "POST",
        "/api/v1/consumer-groups/{g}/queues/{q}/partitions/{p}/seek",
        &[],
        Body::Seek,
    ),
    r("GET", "/api/v1/messages/{pid}/{txn}", &[], Body::None),
    r("GET", "/api/v1/resources/queues", &[], Body::None),
    r("GET", "/api/v1/resources/queues/{q}", &[], Body::None),
    r("GET", "/api/v1/resources/queues/{q}/depth", &[], Body::None),
    r("GET", "/api/v1/resources/overview", &[], Body::None),
    r("POST", "/api/v1/stats/refresh", &[], Body::None),
    r("POST", "/api/v1/traces", &[], Body::Traces),
    r("GET", "/status", &[], Body::None),
    r("GET", "/api/v1/{q}", &[], Body::None),
];

pub struct Request {
    pub method: &'static str,
    /// Path and query, already percent-encoded where the generator meant it.
    pub target: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// A hostile or ordinary name (queue, partition, group, transactionId, lease).
fn name(rng: &mut StdRng, real: &str) -> String {
    match rng.gen_range(0..16) {
        0..=5 => real.to_string(),
        6 => format!("{real}\u{0}x"),
        7 => format!(" {real}"),
        8 => String::new(),
        9 => "x".repeat(rng.gen_range(200..5_000)),
        10 => "é🐝\u{202e}".to_string(),
        11 => format!("{real}\u{1}\n"),
        12 => "__QUEUE_MODE__".to_string(),
        13 => "'; DROP TABLE queen.queues; --".to_string(),
        14 => "99999999999999999999".to_string(),
        _ => "-1".to_string(),
    }
}

fn query_value(rng: &mut StdRng, fx: &Fixture) -> String {
    const VALUES: &[&str] = &[
        "",
        "-1",
        "0",
        "1",
        "20",
        "2147483648",
        "9223372036854775808",
        "abc",
        "true",
        "false",
        "NaN",
        "1e9",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "294277-01-01T00:00:00Z",
        "-infinity",
        "now",
        "new",
        "all",
        "2026-13-45T99:99:99Z",
        "1970-01-01T00:00:00+99:00",
    ];
    match rng.gen_range(0..4) {
        0 => name(rng, &fx.queue),
        _ => VALUES.choose(rng).unwrap().to_string(),
    }
}

pub fn generate(route: &Route, rng: &mut StdRng, fx: &Fixture) -> Request {
    let mut path = route.path.to_string();
    for (hole, real) in [
        ("{q}", &fx.queue),
        ("{p}", &fx.partition),
        ("{g}", &fx.group),
        ("{lease}", &fx.lease),
        ("{pid}", &fx.partition_id),
        ("{txn}", &fx.txn),
    ] {
        if path.contains(hole) {
            let n = name(rng, real);
            path = path.replace(hole, &encode_segment(&n));
        }
    }
    let mut query = Vec::new();
    for &p in route.params {
        if rng.gen_bool(0.4) {
            query.push(format!("{p}={}", encode_segment(&query_value(rng, fx))));
        }
    }
    if rng.gen_bool(0.1) {
        query.push(format!(
            "{}={}",
            encode_segment(&name(rng, "k")),
            encode_segment(&query_value(rng, fx))
        ));
    }
    if route.params.contains(&"wait") {
        // Long-polls stay short so a slow answer is a finding, not the fuzzer's own wait.
        query.retain(|q| !q.starts_with("wait="));
        query.push(format!("wait={}", rng.gen_bool(0.3)));
        query.push("timeout=100".to_string());
    }
    let target = if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    };
    let (body, mut headers) = body(route.body, rng, fx);
    if rng.gen_bool(0.05) {
        headers.push((
            "content-encoding",
            ["gzip", "zstd", "deflate", "br", "x"]
                .choose(rng)
                .unwrap()
                .to_string(),
        ));
    }
    Request {
        method: route.method,
        target,
        headers,
        body,
    }
}

fn body(kind: Body, rng: &mut StdRng, fx: &Fixture) -> (Vec<u8>, Vec<(&'static str, String)>) {
    let json_ct = vec![("content-type", "application/json".to_string())];
    let bin_ct = vec![(
        "content-type",
        queen_proto::wire::PUSH_CONTENT_TYPE.to_string(),
    )];
    let valid = match kind {
        Body::None => return (Vec::new(), Vec::new()),
        Body::PushBinary => {
            let valid = push_binary(rng, fx);
            return (mutate_bytes(rng, valid), bin_ct);
        }
        Body::TransactionBinary => {
            let valid = txn_binary(rng, fx);
            return (mutate_bytes(rng, valid), bin_ct);
        }
        Body::Configure => {
            json!({"queue": fx.queue, "options": {"leaseTime": 30, "retryLimit": 1, "dedupWindowSeconds": 60}})
        }
        Body::Push => {
            json!({"items": [{"queue": fx.queue, "partition": fx.partition, "payload": {"a": 1}, "transactionId": "fz"}]})
        }
        Body::Ack => ack(fx),
        Body::AckBatch => json!({"acknowledgments": [ack(fx)], "consumerGroup": fx.group}),
        Body::Extend => json!({"seconds": 5}),
        Body::Transaction => json!({"operations": [
            {"type": "push", "items": [{"queue": fx.queue, "partition": fx.partition, "payload": {"t": 1}, "transactionId": "fzt"}]},
            ack(fx)], "requiredLeases": [fx.lease]}),
        Body::Seek => json!({"timestamp": "2026-01-01T00:00:00Z"}),
        Body::Subscription => json!({"subscriptionTimestamp": "2026-01-01T00:00:00Z"}),
        Body::Traces => {
            json!({"transactionId": fx.txn, "partitionId": fx.partition_id, "consumerGroup": fx.group,
            "traceNames": ["t"], "eventType": "info", "data": {"x": 1}})
        }
    };
    match rng.gen_range(0..10) {
        0 => (random_bytes(rng), json_ct),
        1 => {
            let text = valid.to_string();
            let cut = rng.gen_range(0..text.len());
            (text.as_bytes()[..cut].to_vec(), json_ct)
        }
        2 => (
            valid.to_string().into_bytes(),
            vec![("content-type", "text/plain".to_string())],
        ),
        _ => {
            let mut v = valid;
            for _ in 0..rng.gen_range(1..=3) {
                mutate_json(&mut v, rng, fx);
            }
            (v.to_string().into_bytes(), json_ct)
        }
    }
}

fn ack(fx: &Fixture) -> Value {
    json!({"type": "ack", "transactionId": fx.txn, "partitionId": fx.partition_id, "status": "completed",
        "error": null, "consumerGroup": null, "leaseId": fx.lease})
}

fn random_value(rng: &mut StdRng, fx: &Fixture) -> Value {
    match rng.gen_range(0..12) {
        0 => Value::Null,
        1 => json!(rng.gen::<bool>()),
        2 => json!(-1),
        3 => json!(1e308),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!([]),
        7 => json!({}),
        8 => json!(0.5),
        9 => (0..200).fold(json!(1), |v, _| json!([v])),
        _ => json!(name(rng, &fx.queue)),
    }
}

/// Replaces, removes or adds one value somewhere in `v`.
fn mutate_json(v: &mut Value, rng: &mut StdRng, fx: &Fixture) {
    match v {
        Value::Object(map) if !map.is_empty() && rng.gen_bool(0.8) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let k = keys.choose(rng).unwrap().clone();
            match rng.gen_range(0..4) {
                0 => {
                    map.remove(&k);
                }
                1 => {
                    map.insert(name(rng, "extra"), random_value(rng, fx));
                }
                2 => {
                    map.insert(k, random_value(rng, fx));
                }
                _ => mutate_json(map.get_mut(&k).unwrap(), rng, fx),
            }
        }
        Value::Array(items) if !items.is_empty() && rng.gen_bool(0.8) => {
            let i = rng.gen_range(0..items.len());
            if rng.gen_bool(0.2) {
                let copy = items[i].clone();
                items.extend(std::iter::repeat_n(copy, rng.gen_range(1..50)));
            } else {
                mutate_json(&mut items[i], rng, fx);
            }
        }
        other => *other = random_value(rng, fx),
    }
}

fn random_bytes(rng: &mut StdRng) -> Vec<u8> {
    (0..rng.gen_range(0..256)).map(|_| rng.gen()).collect()
}

fn mutate_bytes(rng: &mut StdRng, mut b: Vec<u8>) -> Vec<u8> {
    match rng.gen_range(0..4) {
        0 => b.truncate(rng.gen_range(0..=b.len())),
        1 => b.extend(random_bytes(rng)),
        2 => return b,
        _ => {
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
        }
    }
    b
}

fn push_binary(rng: &mut StdRng, fx: &Fixture) -> Vec<u8> {
    let (q, p, t) = (
        name(rng, &fx.queue),
        name(rng, &fx.partition),
        name(rng, "fzb"),
    );
    let batch = Batch {
        queue: &q,
        partition: &p,
        items: vec![BatchItem {
            transaction_id: Some(&t),
            payload: br#"{"b":1}"#,
        }],
    };
    encode_push_plain(&[batch], rng.gen(), rng.gen()).unwrap_or_default()
}

fn txn_binary(rng: &mut StdRng, fx: &Fixture) -> Vec<u8> {
    let head = json!({"operations": [ack(fx)], "requiredLeases": [fx.lease]}).to_string();
    let (q, t) = (name(rng, &fx.queue), name(rng, "fztb"));
    let batch = Batch {
        queue: &q,
        partition: &fx.partition,
        items: vec![BatchItem {
            transaction_id: Some(&t),
            payload: br#"{"c":1}"#,
        }],
    };
    encode_txn(head.as_bytes(), &[batch], rng.gen()).unwrap_or_default()
}
