//! Registration: one id per (tenant, name), a conflicting config hash refused with 409 unless
//! `reset`, which wipes the query's state; malformed bodies and unknown queries refused.

use reqwest::StatusCode;
use serde_json::json;

use crate::{common, register, state};

#[tokio::test]
async fn a_query_keeps_its_id_and_its_hash_unless_reset() {
    let b = common::broker().await;
    let body = |hash: &str, reset: bool| json!({"name": "gate", "source_queue": "src", "config_hash": hash, "reset": reset});
    let (status, first) = b.post("/streams/v1/queries", &body("h1", false)).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        (first["success"].clone(), first["fresh"].clone()),
        (json!(true), json!(true))
    );
    let id = first["query_id"].as_str().expect("id").to_string();

    let (status, again) = b.post("/streams/v1/queries", &body("h1", false)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (again["query_id"].as_str(), again["fresh"].clone()),
        (Some(id.as_str()), json!(false))
    );

    // Some state, then a run with another configuration.
    let flush = json!({"query_id": id, "partition_id": "1", "state_ops": [
        {"type": "upsert", "key": "k", "value": 1}], "push_items": [], "ack": null});
    assert_eq!(crate::cycle(&b, &flush).await["success"], true);
    let (status, refused) = b.post("/streams/v1/queries", &body("h2", false)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .expect("error")
            .contains("config_hash"),
        "{refused}"
    );
    assert_eq!(
        state(&b, &id, "1").await,
        json!({"k": 1}),
        "a refused run changes nothing"
    );

    let (status, reset) = b.post("/streams/v1/queries", &body("h2", true)).await;
    assert_eq!(status, StatusCode::OK, "{reset}");
    assert_eq!(
        (reset["query_id"].as_str(), reset["reset"].clone()),
        (Some(id.as_str()), json!(true))
    );
    assert_eq!(
        state(&b, &id, "1").await,
        json!({}),
        "reset wipes the state"
    );
    let (status, _) = b.post("/streams/v1/queries", &body("h2", false)).await;
    assert_eq!(status, StatusCode::OK, "the new hash is the query's now");
}

#[tokio::test]
async fn state_reads_filter_by_keys_prefix_and_ripeness() {
    let b = common::broker().await;
    let q = register(&b, "windows", "h").await;
    let ops = json!([
        {"type": "upsert", "key": "tumb\u{1f}a", "value": {"windowEnd": 1000, "acc": 1}},
        {"type": "upsert", "key": "tumb\u{1f}b", "value": {"windowEnd": 3000, "acc": 2}},
        {"type": "upsert", "key": "tumb%c", "value": {"windowEnd": 10}},
        {"type": "upsert", "key": "other", "value": "x"},
    ]);
    let flush = json!({"query_id": q, "partition_id": 9, "state_ops": ops, "ack": null});
    assert_eq!(crate::cycle(&b, &flush).await["success"], true);
    let read = |extra: serde_json::Value| {
        let mut body = json!({"query_id": q, "partition_id": "9"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    let keys = |body: &serde_json::Value| -> Vec<String> {
        body["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["key"].as_str().expect("key").to_string())
            .collect()
    };
    let (_, all) = b.post("/streams/v1/state/get", &read(json!({}))).await;
    assert_eq!(
        keys(&all),
        ["other", "tumb\u{1f}a", "tumb\u{1f}b", "tumb%c"],
        "byte order"
    );
    let (_, named) = b
        .post(
            "/streams/v1/state/get",
            &read(json!({"keys": ["other", "nope"]})),
        )
        .await;
    assert_eq!(keys(&named), ["other"]);
    let (_, prefixed) = b
        .post(
            "/streams/v1/state/get",
            &read(json!({"key_prefix": "tumb\u{1f}"})),
        )
        .await;
    assert_eq!(
        keys(&prefixed),
        ["tumb\u{1f}a", "tumb\u{1f}b"],
        "a literal prefix, not LIKE"
    );
    let (_, ripe) = b
        .post(
            "/streams/v1/state/get",
            &read(json!({"key_prefix": "tumb\u{1f}", "ripe_at_or_before": 2000})),
        )
        .await;
    assert_eq!(keys(&ripe), ["tumb\u{1f}a"]);
    let (_, other_partition) = b
        .post(
            "/streams/v1/state/get",
            &json!({"query_id": q, "partition_id": "10"}),
        )
        .await;
    assert_eq!(keys(&other_partition), Vec::<String>::new());
}

#[tokio::test]
async fn malformed_bodies_and_unknown_queries_are_refused() {
    let b = common::broker().await;
    for (path, body, want) in [
        (
            "/streams/v1/queries",
            json!({"source_queue": "s", "config_hash": "h"}),
            "name is required",
        ),
        (
            "/streams/v1/queries",
            json!({"name": "n", "source_queue": "s", "config_hash": 5}),
            "config_hash must be a string",
        ),
        (
            "/streams/v1/state/get",
            json!({"query_id": "x", "partition_id": "1"}),
            "query_id",
        ),
        (
            "/streams/v1/cycle",
            json!({"query_id": uuid::Uuid::nil().to_string(), "partition_id": "1",
                                     "state_ops": [{"type": "put", "key": "k"}]}),
            "unknown type",
        ),
    ] {
        let (status, answer) = b.post(path, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {answer}");
        assert!(
            answer["error"].as_str().expect("error").contains(want),
            "{answer}"
        );
    }
    let unknown = uuid::Uuid::new_v4().to_string();
    let (status, answer) = b
        .post(
            "/streams/v1/state/get",
            &json!({"query_id": unknown, "partition_id": "1"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    let (status, answer) = b
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": unknown, "partition_id": "1", "ack": null}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
}
