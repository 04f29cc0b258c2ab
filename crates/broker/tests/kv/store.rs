//! `POST /api/v1/kv`: each operation's verdict, expiry, paging and refusals.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{common, kv, kv1};

const NS: &str = "t";

fn put(key: &str, value: Value) -> Value {
    json!({"op": "put", "ns": NS, "key": key, "value": value, "ttlSeconds": 60})
}

#[tokio::test]
async fn writes_and_reads_answer_verdicts_with_rising_versions() {
    let b = common::broker().await;
    let first = kv1(&b, put("a", json!({"n": 1}))).await;
    assert_eq!(
        (first["applied"].clone(), first["index"].clone()),
        (json!(true), json!(0))
    );
    let got = kv1(&b, json!({"op": "get", "ns": NS, "key": "a"})).await;
    assert_eq!(got["found"], true);
    assert_eq!(got["value"], json!({"n": 1}));
    assert_eq!(got["version"], first["version"]);
    let ts = got["expiresAt"].as_str().expect("expiresAt");
    assert_eq!(ts.len(), "2026-01-01T00:00:00.000Z".len(), "{ts}");
    assert!(ts.ends_with('Z'));

    let second = kv1(
        &b,
        json!({"op": "put", "ns": NS, "key": "a", "value": 2, "forever": true,
                               "expect": first["version"]}),
    )
    .await;
    assert_eq!(second["applied"], true);
    assert!(second["version"].as_i64() > first["version"].as_i64());
    assert_eq!(second["expiresAt"], Value::Null, "forever: no expiry");
    let stale = kv1(
        &b,
        json!({"op": "put", "ns": NS, "key": "a", "value": 3, "ttlSeconds": 5,
                              "expect": first["version"]}),
    )
    .await;
    assert_eq!(stale["applied"], false);
    assert_eq!(stale["reason"], "version");
    assert_eq!(
        (stale["value"].clone(), stale["version"].clone()),
        (json!(2), second["version"].clone())
    );

    let absent = kv1(
        &b,
        json!({"op": "put", "ns": NS, "key": "nope", "value": 1,
                               "ttlSeconds": 5, "expect": 42}),
    )
    .await;
    assert_eq!(
        (absent["reason"].clone(), absent["version"].clone()),
        (json!("absent"), json!(0))
    );
    let miss = kv1(&b, json!({"op": "get", "ns": NS, "key": "nope"})).await;
    assert_eq!(
        miss["found"], false,
        "an expect on an absent key creates nothing"
    );

    let exists = kv1(
        &b,
        json!({"op": "putIfAbsent", "ns": NS, "key": "a", "value": 9,
                               "ttlSeconds": 5}),
    )
    .await;
    assert_eq!(
        (
            exists["applied"].clone(),
            exists["reason"].clone(),
            exists["value"].clone()
        ),
        (json!(false), json!("exists"), json!(2))
    );

    let check = kv1(
        &b,
        json!({"op": "check", "ns": NS, "key": "a", "expect": second["version"]}),
    )
    .await;
    assert_eq!(check["applied"], true);
    let check0 = kv1(
        &b,
        json!({"op": "check", "ns": NS, "key": "a", "expect": 0}),
    )
    .await;
    assert_eq!(
        (check0["applied"].clone(), check0["reason"].clone()),
        (json!(false), json!("exists"))
    );

    let del = kv1(&b, json!({"op": "delete", "ns": NS, "key": "a"})).await;
    assert_eq!(del["applied"], true);
    let again = kv1(&b, json!({"op": "delete", "ns": NS, "key": "a"})).await;
    assert_eq!(
        (again["applied"].clone(), again["reason"].clone()),
        (json!(false), json!("absent"))
    );

    kv1(&b, put("null", Value::Null)).await;
    let null = kv1(&b, json!({"op": "get", "ns": NS, "key": "null"})).await;
    assert_eq!(
        (null["found"].clone(), null["value"].clone()),
        (json!(true), Value::Null)
    );
}

#[tokio::test]
async fn incr_refuses_past_its_bounds_and_keeps_its_first_expiry() {
    let b = common::broker().await;
    let incr = |delta: i64, ttl: u64| {
        json!({"op": "incr", "ns": NS, "key": "c", "delta": delta, "max": 3, "min": -1,
               "ttlSeconds": ttl})
    };
    let first = kv1(&b, incr(10, 60)).await;
    assert_eq!(
        (first["applied"].clone(), first["reason"].clone()),
        (json!(false), json!("limit"))
    );
    assert_eq!(
        kv1(&b, json!({"op": "get", "ns": NS, "key": "c"})).await["found"],
        false
    );
    for n in 1..=3 {
        let r = kv1(&b, incr(1, 60)).await;
        assert_eq!(
            (r["applied"].clone(), r["value"].clone()),
            (json!(true), json!(n))
        );
    }
    let refused = kv1(&b, incr(1, 3600)).await;
    assert_eq!(
        (refused["reason"].clone(), refused["value"].clone()),
        (json!("limit"), json!(3))
    );
    let below = kv1(&b, incr(-5, 3600)).await;
    assert_eq!(below["reason"], "limit");
    let before = kv1(&b, json!({"op": "get", "ns": NS, "key": "c"})).await;
    kv1(&b, incr(-1, 3600)).await;
    let after = kv1(&b, json!({"op": "get", "ns": NS, "key": "c"})).await;
    assert_eq!(
        after["expiresAt"], before["expiresAt"],
        "the TTL is create-only"
    );
    assert_eq!(after["value"], 2);

    kv1(&b, put("obj", json!({"count": 0}))).await;
    let typed = kv1(
        &b,
        json!({"op": "incr", "ns": NS, "key": "obj", "delta": 1, "forever": true}),
    )
    .await;
    assert_eq!(
        (typed["applied"].clone(), typed["reason"].clone()),
        (json!(false), json!("type"))
    );
}

#[tokio::test]
async fn expired_rows_are_absent_at_once_and_swept_by_retention() {
    let b = common::broker_with(|c| c.retention_interval_ms = 200).await;
    let db = b.sql().await;
    kv1(
        &b,
        json!({"op": "put", "ns": NS, "key": "short", "value": {"x": 1}, "ttlSeconds": 1}),
    )
    .await;
    kv1(&b, put("long", json!(1))).await;
    // Held back from the sweep, so the row is there while it is already absent.
    db.execute(
        "UPDATE queen.kv SET expires_at = now() - interval '1 s' WHERE key = 'short'",
        &[],
    )
    .await
    .expect("expire");
    let got = kv1(&b, json!({"op": "get", "ns": NS, "key": "short"})).await;
    assert_eq!(got["found"], false);
    let incr = kv1(
        &b,
        json!({"op": "incr", "ns": NS, "key": "short", "delta": 1, "ttlSeconds": 1}),
    )
    .await;
    assert_eq!(
        (incr["applied"].clone(), incr["value"].clone()),
        (json!(true), json!(1)),
        "an expired non-numeric row counts as 0"
    );
    db.execute(
        "UPDATE queen.kv SET expires_at = now() - interval '1 s' WHERE key = 'short'",
        &[],
    )
    .await
    .expect("expire");
    let again = kv1(
        &b,
        json!({"op": "putIfAbsent", "ns": NS, "key": "short", "value": 2, "ttlSeconds": 1}),
    )
    .await;
    assert_eq!(again["applied"], true, "an expired key is free");
    db.execute(
        "UPDATE queen.kv SET expires_at = now() - interval '1 s' WHERE key = 'short'",
        &[],
    )
    .await
    .expect("expire");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let keys: Vec<String> = db
            .query("SELECT key FROM queen.kv ORDER BY key", &[])
            .await
            .expect("rows")
            .iter()
            .map(|r| r.get(0))
            .collect();
        if keys == ["long"] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not swept: {keys:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn get_many_and_get_prefix_page_in_byte_order_with_a_literal_prefix() {
    let b = common::broker().await;
    let keys = ["w:b", "w:a", "w:\u{e9}", "w:Z", "w%_:x", "wx", "w:c"];
    let ops: Vec<Value> = keys.iter().map(|k| put(k, json!(k))).collect();
    kv(&b, json!(ops)).await;
    let many = kv1(
        &b,
        json!({"op": "getMany", "ns": NS, "keys": ["w:b", "zz", "w:a", "yy"]}),
    )
    .await;
    let rows: Vec<&str> = many["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["w:a", "w:b"]);
    assert_eq!(many["missing"], json!(["zz", "yy"]));

    let mut walked = Vec::new();
    let mut after = Value::Null;
    loop {
        let page = kv1(
            &b,
            json!({"op": "getPrefix", "ns": NS, "prefix": "w:", "limit": 2, "after": after}),
        )
        .await;
        for r in page["rows"].as_array().unwrap() {
            walked.push(r["key"].as_str().unwrap().to_string());
        }
        if page["truncated"] != true {
            assert_eq!(page["nextAfter"], Value::Null);
            break;
        }
        assert_eq!(
            page["nextAfter"].as_str(),
            walked.last().map(String::as_str)
        );
        after = page["nextAfter"].clone();
    }
    assert_eq!(
        walked,
        ["w:Z", "w:a", "w:b", "w:c", "w:\u{e9}"],
        "byte order"
    );
    let literal = kv1(
        &b,
        json!({"op": "getPrefix", "ns": NS, "prefix": "w%_", "keysOnly": true}),
    )
    .await;
    assert_eq!(
        literal["rows"],
        json!([{"key": "w%_:x", "version": literal["rows"][0]["version"], "expiresAt": literal["rows"][0]["expiresAt"]}])
    );
    assert!(literal["rows"][0].get("value").is_none(), "keysOnly");
}

#[tokio::test]
async fn a_lost_required_precondition_rolls_the_call_back() {
    let b = common::broker().await;
    kv1(&b, put("gate", json!(1))).await;
    let (status, body) = b
        .post("/api/v1/kv", &json!({"operations": [
            put("written", json!(1)),
            {"op": "putIfAbsent", "ns": NS, "key": "gate", "value": 2, "ttlSeconds": 5, "required": true},
        ]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (
            body["reason"].clone(),
            body["failedIndex"].clone(),
            body["kvReason"].clone()
        ),
        (json!("kv_precondition"), json!(1), json!("exists"))
    );
    assert_eq!(
        kv1(&b, json!({"op": "get", "ns": NS, "key": "written"})).await["found"],
        false
    );
}

#[tokio::test]
async fn malformed_calls_are_named_400s() {
    let b = common::broker().await;
    for (body, reason) in [
        (
            json!({"operations": [{"op": "put", "ns": "NOT A NAMESPACE", "key": "k", "value": 1, "ttlSeconds": 1}]}),
            "kv_bad_request",
        ),
        (
            json!({"operations": [{"op": "put", "ns": "a", "key": "k", "value": 1}]}),
            "kv_expiry_not_specified",
        ),
        (
            json!({"operations": [{"op": "getPrefix", "ns": "a", "prefix": ""}]}),
            "kv_prefix_required",
        ),
        (json!({"operations": "x"}), "kv_bad_request"),
        (json!(7), "kv_bad_request"),
    ] {
        let (status, answer) = b.post("/api/v1/kv", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            (
                answer["error"].clone(),
                answer["code"].clone(),
                answer["reason"].clone()
            ),
            (
                json!("kv_bad_request"),
                json!("kv_bad_request"),
                json!(reason)
            ),
            "{body}"
        );
        assert!(answer["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    let (status, answer) = b
        .post(
            "/api/v1/locks",
            &json!({"operations": [{"op": "acquire", "name": "a#b", "ttlSeconds": 1}]}),
        )
        .await;
    assert_eq!(
        (status, answer["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("locks_bad_request"))
    );
}

#[tokio::test]
async fn reads_stop_at_the_call_s_byte_budget_and_say_so() {
    let b = common::broker().await;
    // 100 values of 60 KiB: about 6 MiB, past the 4 MiB a call's reads may answer.
    let big = "x".repeat(60 * 1024);
    for chunk in (0..100).collect::<Vec<_>>().chunks(20) {
        let ops: Vec<Value> = chunk
            .iter()
            .map(|i| put(&format!("big:{i:03}"), json!(big)))
            .collect();
        kv(&b, json!(ops)).await;
    }
    let keys: Vec<String> = (0..100)
        .map(|i| format!("big:{i:03}"))
        .chain(["big:none".into()])
        .collect();
    let many = kv1(&b, json!({"op": "getMany", "ns": NS, "keys": keys})).await;
    let rows = many["rows"].as_array().expect("rows").len();
    assert!((60..100).contains(&rows), "{rows} rows");
    assert_eq!(many["truncated"], true);
    assert_eq!(
        many["missing"],
        json!(["big:none"]),
        "left-out keys are not missing"
    );

    let mut walked = 0;
    let mut after = Value::Null;
    loop {
        let page = kv1(
            &b,
            json!({"op": "getPrefix", "ns": NS, "prefix": "big:", "limit": 1000, "after": after}),
        )
        .await;
        let n = page["rows"].as_array().expect("rows").len();
        assert!(n < 100 || walked > 0, "one page held everything: {n}");
        walked += n;
        if page["truncated"] != true {
            break;
        }
        after = page["nextAfter"].clone();
    }
    assert_eq!(walked, 100, "the pages walk every key");
    // The budget is the call's: a second read in the same call answers its first row only.
    let two = kv(
        &b,
        json!([{"op": "getPrefix", "ns": NS, "prefix": "big:", "limit": 1000},
                           {"op": "getPrefix", "ns": NS, "prefix": "big:", "limit": 1000}]),
    )
    .await;
    assert_eq!(
        two[1]["rows"].as_array().map(Vec::len),
        Some(1),
        "{}",
        two[1]["truncated"]
    );
}
