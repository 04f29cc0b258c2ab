//! Many actors racing on one key and one lock: increments are never lost or past their bound,
//! fenced writes apply once per version, `putIfAbsent` has one winner, and a lock has one
//! holder at a time with tokens that rise for every later holder.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::Mutex;

use crate::{common, kv1, lock1};

const ACTORS: usize = 16;

#[tokio::test]
async fn incr_and_fenced_puts_serialise_per_key() {
    let b = Arc::new(common::broker().await);
    let mut tasks = Vec::new();
    for _ in 0..ACTORS {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                let r = kv1(
                    &b,
                    json!({"op": "incr", "ns": "c", "key": "n", "delta": 1,
                                       "max": 100, "forever": true}),
                )
                .await;
                admitted += usize::from(r["applied"] == true);
            }
            let mut wins = 0;
            for _ in 0..5 {
                let cur = kv1(&b, json!({"op": "get", "ns": "c", "key": "cas"})).await;
                let expect = cur["version"].as_i64().unwrap_or(0);
                let next = cur["value"].as_i64().unwrap_or(0) + 1;
                let r = kv1(
                    &b,
                    json!({"op": "put", "ns": "c", "key": "cas", "value": next,
                                       "forever": true, "expect": expect}),
                )
                .await;
                wins += usize::from(r["applied"] == true);
            }
            (admitted, wins)
        }));
    }
    let (mut admitted, mut wins) = (0, 0);
    for t in tasks {
        let (a, w) = t.await.expect("actor");
        admitted += a;
        wins += w;
    }
    assert_eq!(admitted, 100, "exactly max increments admitted");
    let n = kv1(&b, json!({"op": "get", "ns": "c", "key": "n"})).await;
    assert_eq!(n["value"], 100);
    let cas = kv1(&b, json!({"op": "get", "ns": "c", "key": "cas"})).await;
    assert_eq!(
        cas["value"],
        json!(wins),
        "every applied fenced write counted once"
    );

    let racers: Vec<_> = (0..ACTORS)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move {
                kv1(
                    &b,
                    json!({"op": "putIfAbsent", "ns": "c", "key": "one", "value": i,
                               "ttlSeconds": 60}),
                )
                .await
            })
        })
        .collect();
    let mut winners = 0;
    for r in racers {
        winners += usize::from(r.await.expect("racer")["applied"] == true);
    }
    assert_eq!(winners, 1);
}

#[tokio::test]
async fn a_lock_raced_by_many_actors_has_one_holder_and_rising_tokens() {
    let b = Arc::new(common::broker().await);
    // (token, holder) of each grant in the order holders entered; `inside` proves exclusion.
    let grants = Arc::new(Mutex::new(Vec::<i64>::new()));
    let inside = Arc::new(Mutex::new(HashSet::<usize>::new()));
    let mut tasks = Vec::new();
    for actor in 0..ACTORS {
        let (b, grants, inside) = (b.clone(), grants.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("actor-{actor}");
            let mut held = 0;
            while held < 3 {
                let r = lock1(
                    &b,
                    json!({"op": "acquire", "name": "hot", "owner": owner, "ttlSeconds": 30}),
                )
                .await;
                if r["acquired"] != true {
                    tokio::task::yield_now().await;
                    continue;
                }
                {
                    let mut inside = inside.lock().await;
                    assert!(inside.is_empty(), "two holders: {inside:?} and {actor}");
                    inside.insert(actor);
                    grants
                        .lock()
                        .await
                        .push(r["token"].as_i64().expect("token"));
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                inside.lock().await.remove(&actor);
                let rel = lock1(
                    &b,
                    json!({"op": "release", "name": "hot", "token": r["token"]}),
                )
                .await;
                assert_eq!(rel["released"], true, "{rel}");
                held += 1;
            }
        }));
    }
    for t in tasks {
        t.await.expect("actor");
    }
    let grants = grants.lock().await;
    assert_eq!(grants.len(), ACTORS * 3);
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens rise: {grants:?}"
    );
}
