//! `POST /api/v1/locks`: one holder, the same permit for its owner, tokens that rise for
//! every later holder, renew and release by token, semaphores, and the permit as a KV row.

use serde_json::json;

use crate::{common, kv1, lock1};

fn acquire(name: &str, owner: &str, ttl: u64) -> serde_json::Value {
    json!({"op": "acquire", "name": name, "owner": owner, "ttlSeconds": ttl})
}

#[tokio::test]
async fn a_lock_has_one_holder_and_later_holders_get_higher_tokens() {
    let b = common::broker().await;
    let a = lock1(&b, acquire("job", "a", 30)).await;
    assert_eq!(
        (a["acquired"].clone(), a["slot"].clone(), a["index"].clone()),
        (json!(true), json!(0), json!(0))
    );
    let token = a["token"].as_i64().expect("token");
    assert_eq!(
        a["guard"],
        json!({"op": "check", "ns": "queen-locks", "key": "job#0",
                                  "expect": token, "required": true})
    );
    let row = kv1(
        &b,
        json!({"op": "get", "ns": "queen-locks", "key": "job#0"}),
    )
    .await;
    assert_eq!(
        (row["version"].as_i64(), row["value"]["owner"].clone()),
        (Some(token), json!("a"))
    );

    let refused = lock1(&b, acquire("job", "b", 30)).await;
    assert_eq!(
        (refused["acquired"].clone(), refused["reason"].clone()),
        (json!(false), json!("held"))
    );
    assert_eq!(refused["holders"][0]["owner"], "a");
    let same = lock1(&b, acquire("job", "a", 30)).await;
    assert_eq!(
        (same["already"].clone(), same["token"].as_i64()),
        (json!(true), Some(token))
    );

    let renewed = lock1(
        &b,
        json!({"op": "renew", "name": "job", "token": token, "ttlSeconds": 30}),
    )
    .await;
    assert_eq!(renewed["renewed"], true);
    let t2 = renewed["token"].as_i64().expect("token");
    assert!(t2 > token);
    let resent = lock1(
        &b,
        json!({"op": "renew", "name": "job", "token": token, "ttlSeconds": 30, "owner": "a"}),
    )
    .await;
    assert!(
        resent["token"].as_i64() > Some(t2),
        "the owner's resent renew: {resent}"
    );
    let t3 = resent["token"].as_i64().expect("token");
    let stranger = lock1(
        &b,
        json!({"op": "renew", "name": "job", "token": token, "ttlSeconds": 30, "owner": "x"}),
    )
    .await;
    assert_eq!(
        (stranger["renewed"].clone(), stranger["reason"].clone()),
        (json!(false), json!("lost"))
    );
    let held = lock1(&b, json!({"op": "get", "name": "job"})).await;
    assert_eq!(
        (held["held"].clone(), held["holders"][0]["token"].as_i64()),
        (json!(true), Some(t3))
    );
    assert!(held["holders"][0]["since"].is_string());

    let stale = lock1(&b, json!({"op": "release", "name": "job", "token": token})).await;
    assert_eq!(
        (stale["released"].clone(), stale["reason"].clone()),
        (json!(false), json!("lost"))
    );
    assert_eq!(
        lock1(&b, json!({"op": "release", "name": "job", "token": t3})).await["released"],
        true
    );
    let next = lock1(&b, acquire("job", "b", 1)).await;
    assert!(next["token"].as_i64() > Some(t3), "after a release: {next}");

    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    let after_expiry = lock1(&b, acquire("job", "c", 30)).await;
    assert_eq!(after_expiry["acquired"], true, "an expired permit is free");
    assert!(after_expiry["token"].as_i64() > next["token"].as_i64());
}

#[tokio::test]
async fn a_semaphore_fills_its_slots_and_refuses_past_its_limit() {
    let b = common::broker().await;
    let sem = |owner: &str| json!({"op": "acquire", "name": "crowd", "owner": owner, "ttlSeconds": 30, "limit": 3});
    let mut slots = Vec::new();
    for owner in ["a", "b", "c"] {
        let r = lock1(&b, sem(owner)).await;
        assert_eq!(r["acquired"], true, "{r}");
        slots.push(r["slot"].as_u64().expect("slot"));
    }
    assert_eq!(slots, [0, 1, 2]);
    let extra = lock1(&b, sem("d")).await;
    assert_eq!(
        (extra["acquired"].clone(), extra["reason"].clone()),
        (json!(false), json!("held"))
    );
    assert_eq!(extra["holders"].as_array().map(Vec::len), Some(3));
    let b_token = lock1(&b, sem("b")).await["token"].clone();
    lock1(
        &b,
        json!({"op": "release", "name": "crowd", "token": b_token, "slot": 1}),
    )
    .await;
    let freed = lock1(&b, sem("d")).await;
    assert_eq!(
        (freed["acquired"].clone(), freed["slot"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(freed["guard"]["key"], "crowd#1");
}
