//! Reads by offset (docs/wire.md §23): `POST /api/v1/fetch` and
//! `POST /api/v1/partitions/changed`.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::common;

/// Pushes one message per call (`txn`, payload `{"n": n}`), so each is its own segment.
async fn push_one(b: &common::TestBroker, queue: &str, partition: &str, txn: &str, n: i64) {
    let (status, body) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": queue, "partition": partition, "transactionId": txn,
                               "payload": {"n": n}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn fetch(b: &common::TestBroker, entries: Value) -> Value {
    let (status, body) = b
        .post("/api/v1/fetch", &json!({ "entries": entries }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn offsets_and_txns(entry: &Value) -> Vec<(i64, String)> {
    entry["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                r["offset"].as_i64().expect("offset"),
                r["transactionId"].as_str().expect("txn").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn fetch_reads_by_offset_without_a_cursor_or_a_lease() {
    let b = common::broker().await;
    for n in 0..3 {
        push_one(&b, "fq", "p", &format!("t{n}"), n).await;
    }
    let items: Vec<Value> = (3..5)
        .map(|n| {
            json!({"queue": "fq", "partition": "p", "transactionId": format!("t{n}"),
                         "payload": {"n": n}})
        })
        .collect();
    b.post("/api/v1/push", &json!({ "items": items })).await;

    let all = fetch(&b, json!([{"queue": "fq", "partition": "p", "offset": 0}])).await;
    let e = &all["entries"][0];
    let want: Vec<(i64, String)> = (0..5).map(|n| (n, format!("t{n}"))).collect();
    assert_eq!(offsets_and_txns(e), want, "{all}");
    assert_eq!(e["records"][4]["payload"], json!({"n": 4}));
    assert_eq!(
        (e["highWatermark"].as_i64(), e["logStartOffset"].as_i64()),
        (Some(5), Some(0))
    );
    let ts = e["records"][0]["ts"].as_str().expect("ts");
    assert_eq!(ts.len(), "2026-12-06T21:00:00.000000Z".len(), "{ts}");

    let answer = fetch(
        &b,
        json!([{"queue": "fq", "partition": "p", "offset": 3},
               {"queue": "fq", "partition": "p", "offset": 5},
               {"queue": "fq", "partition": "p", "offset": 9},
               {"queue": "fq", "partition": "nope", "offset": 0},
               {"queue": "no-such-queue", "partition": "p", "offset": 0},
               {"queue": "fq", "partition": "p", "offset": 1, "maxBytes": 1}]),
    )
    .await;
    let e = &answer["entries"];
    assert_eq!(offsets_and_txns(&e[0]), want[3..].to_vec(), "{answer}");
    assert_eq!(
        e[1]["records"],
        json!([]),
        "at the high watermark: nothing, no error"
    );
    assert!(e[1].get("error").is_none(), "{answer}");
    assert_eq!(e[2]["error"], "OFFSET_OUT_OF_RANGE", "{answer}");
    assert_eq!(e[3]["error"], "UNKNOWN_TOPIC_OR_PARTITION", "{answer}");
    assert_eq!(e[4]["error"], "UNKNOWN_TOPIC_OR_PARTITION", "{answer}");
    assert_eq!(
        offsets_and_txns(&e[5]),
        want[1..2].to_vec(),
        "one record past a tiny budget"
    );

    // Nothing was leased or consumed: a pop still gets all five.
    let popped = common::pop(&b, "fq", Some("p"), None, 10, "")
        .await
        .expect("messages");
    assert_eq!(popped.messages.len(), 5);
}

#[tokio::test]
async fn changed_lists_partitions_pages_and_what_was_written_since() {
    let b = common::broker().await;
    for p in ["c", "a", "b"] {
        push_one(&b, "cq", p, &format!("{p}-0"), 0).await;
    }
    let ask = |entry: Value| json!({ "entries": [entry] });
    let (_, all) = b
        .post("/api/v1/partitions/changed", &ask(json!({"queue": "cq"})))
        .await;
    let names: Vec<&str> = all["entries"][0]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["a", "b", "c"], "{all}");
    let a = &all["entries"][0]["partitions"][0];
    assert_eq!(
        (a["lastOffset"].as_i64(), a["logStart"].as_i64()),
        (Some(0), Some(0))
    );
    assert!(a["id"].is_string(), "{a}");
    assert_eq!(all["entries"][0]["next"], Value::Null);
    let safe = all["safeTime"].as_str().expect("safeTime").to_string();

    let (_, first) = b
        .post(
            "/api/v1/partitions/changed",
            &ask(json!({"queue": "cq", "since": "2020-01-01T00:00:00Z", "limit": 2})),
        )
        .await;
    assert_eq!(
        first["entries"][0]["partitions"].as_array().map(Vec::len),
        Some(2)
    );
    let next = first["entries"][0]["next"]
        .as_str()
        .expect("a next page")
        .to_string();
    let (_, second) = b
        .post(
            "/api/v1/partitions/changed",
            &ask(
                json!({"queue": "cq", "since": "2020-01-01T00:00:00Z", "limit": 2,
                        "after": next}),
            ),
        )
        .await;
    assert_eq!(
        second["entries"][0]["partitions"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(second["entries"][0]["next"], Value::Null, "{second}");

    push_one(&b, "cq", "b", "b-1", 1).await;
    let (_, later) = b
        .post(
            "/api/v1/partitions/changed",
            &ask(json!({"queue": "cq", "since": safe})),
        )
        .await;
    let parts = later["entries"][0]["partitions"]
        .as_array()
        .expect("partitions");
    assert!(
        parts
            .iter()
            .any(|p| p["name"] == "b" && p["lastOffset"] == 1),
        "{later}"
    );
    assert!(parts
        .iter()
        .all(|p| p["lastWriteAt"].as_str() >= Some(safe.as_str())));

    let (_, none) = b
        .post(
            "/api/v1/partitions/changed",
            &ask(json!({"queue": "no-such-queue"})),
        )
        .await;
    assert_eq!(
        none["entries"][0]["error"], "UNKNOWN_TOPIC_OR_PARTITION",
        "{none}"
    );
    assert_eq!(none["entries"][0]["partitions"], json!([]));
}

#[tokio::test]
async fn malformed_reads_are_400s() {
    let b = common::broker().await;
    for body in [
        json!({"entries": [{"queue": "q", "partition": "p", "offset": -1}]}),
        json!({"entries": [{"queue": "q", "partition": "p", "offset": 0}], "maxWaitMs": 100}),
        json!({"entries": [{"queue": "q", "offset": 0}]}),
        json!({"entries": [{"queue": "q", "partition": "p", "offset": 0, "maxBytes": 0}]}),
    ] {
        let (status, answer) = b.post("/api/v1/fetch", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
    for entry in [
        json!({"queue": "q", "since": "yesterday"}),
        json!({"queue": "q", "after": "not a cursor"}),
        json!({"queue": "", "limit": 5}),
    ] {
        let (status, answer) = b
            .post("/api/v1/partitions/changed", &json!({ "entries": [entry] }))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{entry}: {answer}");
    }
}
