//! The SDK's typed calls beyond queues against a real broker (a `queen` process on its own
//! embedded PostgreSQL): the key-value store (every operation, its verdicts, paging, a lost
//! required precondition, a refusal), locks (fencing tokens, renew, release, a stale guard),
//! timers (schedule, list, peek, reschedule, cancel, a fire into its queue) and reads by
//! offset (fetch, its errors, the partition listing), and the `kv` and `timers` riders of a
//! transaction.

mod common;

use common::Broker;
use std::time::Duration;

use queen_client::kv::{Expiry, KvOp, KvOutcome, KvReason, KvResult, KvVerdict};
use queen_client::locks::{Acquired, Kept, Refusal};
use queen_client::reads::{ChangedQuery, FetchEntry, FetchError};
use queen_client::timers::{Schedule, TimerOp, TimerStatus};
use queen_client::{Error, PushItem, Queen};
use serde_json::{json, Number, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_kv_locks_timers_and_reads_against_a_real_broker() {
    let broker = Broker::start("extras").await;
    let url = broker.url.clone();
    let sdk = Queen::new(&url);
    let scenarios = async {
        kv_operations_answer_typed_verdicts(&sdk).await;
        kv_pages_and_a_lost_required_precondition(&sdk).await;
        locks_fence_with_increasing_tokens(&sdk).await;
        timers_schedule_list_peek_cancel_and_fire(&sdk).await;
        reads_by_offset(&sdk).await;
        riders_share_the_fate_of_their_transaction(&sdk).await;
    };
    let outcome = tokio::time::timeout(Duration::from_secs(240), scenarios).await;
    broker.stop();
    outcome.expect("scenarios finished within 240 s");
}

fn applied(v: KvVerdict) -> queen_client::kv::KvApplied {
    match v {
        KvVerdict::Applied(a) => a,
        KvVerdict::Refused(r) => panic!("refused: {r:?}"),
    }
}

fn refused(v: KvVerdict) -> queen_client::kv::KvRefused {
    match v {
        KvVerdict::Refused(r) => r,
        KvVerdict::Applied(a) => panic!("applied: {a:?}"),
    }
}

async fn kv_operations_answer_typed_verdicts(sdk: &Queen) {
    let kv = sdk.kv();
    let ns = "sdk-kv";
    let put = applied(
        kv.put(ns, "a", json!({"n": 1}), Expiry::Forever, None)
            .await
            .unwrap(),
    );
    assert_eq!(
        (put.value.clone(), put.expires_at.clone()),
        (json!({"n": 1}), None)
    );
    let got = kv.get(ns, "a").await.unwrap().expect("found");
    assert_eq!((got.value, got.version), (json!({"n": 1}), put.version));
    assert_eq!(kv.get(ns, "nothing").await.unwrap(), None);

    // A null value is a row, not a miss.
    applied(
        kv.put(ns, "null", Value::Null, Expiry::Seconds(60), None)
            .await
            .unwrap(),
    );
    let null = kv
        .get(ns, "null")
        .await
        .unwrap()
        .expect("a row holding null");
    assert!(null.value.is_null() && null.expires_at.is_some());

    let lost = refused(
        kv.put_if_absent(ns, "a", json!(2), Expiry::Forever)
            .await
            .unwrap(),
    );
    assert_eq!(
        (lost.reason, lost.value, lost.version),
        (KvReason::Exists, json!({"n": 1}), put.version)
    );
    let stale = refused(
        kv.put(
            ns,
            "a",
            json!(3),
            Expiry::Forever,
            Some(put.version as u64 + 1000),
        )
        .await
        .unwrap(),
    );
    assert_eq!(stale.reason, KvReason::Version);
    let absent = refused(
        kv.put(ns, "b", json!(3), Expiry::Forever, Some(5))
            .await
            .unwrap(),
    );
    assert_eq!((absent.reason, absent.version), (KvReason::Absent, 0));
    let fenced = applied(
        kv.put(ns, "a", json!(4), Expiry::Forever, Some(put.version as u64))
            .await
            .unwrap(),
    );
    assert!(fenced.version > put.version, "{fenced:?} after {put:?}");
    let holds = applied(kv.check(ns, "a", fenced.version as u64).await.unwrap());
    assert_eq!((holds.value, holds.version), (json!(4), fenced.version));
    assert_eq!(
        refused(kv.check(ns, "a", 0).await.unwrap()).reason,
        KvReason::Exists
    );

    let deleted = applied(kv.delete(ns, "a", None).await.unwrap());
    assert_eq!(deleted.version, fenced.version);
    assert_eq!(
        refused(kv.delete(ns, "a", None).await.unwrap()).reason,
        KvReason::Absent
    );

    let one = applied(kv.incr(ns, "count", 3, Expiry::Seconds(300)).await.unwrap());
    assert_eq!(one.value, json!(3));
    let bounded = KvOp::Incr {
        ns: ns.into(),
        key: "count".into(),
        delta: Number::from(5),
        min: None,
        max: Some(Number::from(7)),
        expiry: Expiry::Seconds(300),
        required: false,
    };
    let KvResult::Write(verdict) = kv.apply(bounded).await.unwrap() else {
        panic!("an incr answers a verdict")
    };
    let limited = refused(verdict);
    assert_eq!((limited.reason, limited.value), (KvReason::Limit, json!(3)));
    applied(
        kv.put(ns, "text", json!("x"), Expiry::Forever, None)
            .await
            .unwrap(),
    );
    assert_eq!(
        refused(kv.incr(ns, "text", 1, Expiry::Forever).await.unwrap()).reason,
        KvReason::Type
    );

    // Hostile input is a 400 naming the broker's reason.
    match kv
        .put("NOT A NAMESPACE", "k", json!(1), Expiry::Forever, None)
        .await
    {
        Err(Error::Api {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 400);
            assert!(message.starts_with("kv_bad_request"), "{message}");
            assert!(message.contains("namespace"), "{message}");
        }
        other => panic!("a bad namespace answered {other:?}"),
    }
    match kv.put(ns, "k", json!(1), Expiry::Seconds(0), None).await {
        Err(Error::Api { message, .. }) => assert!(message.contains("ttlSeconds"), "{message}"),
        other => panic!("a zero ttl answered {other:?}"),
    }
}

async fn kv_pages_and_a_lost_required_precondition(sdk: &Queen) {
    let kv = sdk.kv();
    let ns = "sdk-pages";
    let puts: Vec<KvOp> = ["p:1", "p:2", "p:3", "q:1"]
        .iter()
        .map(|k| KvOp::put(ns, *k, json!(k), Expiry::Forever))
        .collect();
    let KvOutcome::Done(results) = kv.batch(&puts).await.unwrap() else {
        panic!("plain puts commit")
    };
    assert_eq!(results.len(), 4);

    let first = kv.get_prefix(ns, "p:", None, Some(2)).await.unwrap();
    let keys: Vec<&str> = first.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        (keys, first.truncated, first.next_after.as_deref()),
        (vec!["p:1", "p:2"], true, Some("p:2"))
    );
    let rest = kv
        .get_prefix_keys(ns, "p:", first.next_after.as_deref(), Some(2))
        .await
        .unwrap();
    let keys: Vec<&str> = rest.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        (keys, rest.truncated, rest.next_after),
        (vec!["p:3"], false, None)
    );

    let many = kv.get_many(ns, &["q:1", "zz", "p:1"]).await.unwrap();
    let keys: Vec<&str> = many.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        (keys, many.missing, many.truncated),
        (vec!["p:1", "q:1"], vec!["zz".to_string()], false)
    );

    // A required check that fails rolls back the put before it.
    let batch = [
        KvOp::put(ns, "gated", json!(1), Expiry::Forever),
        KvOp::guard(ns, "p:1", 999_999_999),
    ];
    match kv.batch(&batch).await.unwrap() {
        KvOutcome::PreconditionFailed(p) => {
            assert_eq!(
                (p.failed_index, p.reason, p.value),
                (1, KvReason::Version, json!("p:1"))
            );
        }
        other => panic!("a lost guard answered {other:?}"),
    }
    assert_eq!(kv.get(ns, "gated").await.unwrap(), None, "rolled back");
}

async fn locks_fence_with_increasing_tokens(sdk: &Queen) {
    let locks = sdk.locks();
    let Acquired::Granted(first) = locks
        .acquire("sdk-lock", 30, Some("alice"), None)
        .await
        .unwrap()
    else {
        panic!("a free lock is granted")
    };
    assert_eq!(
        (first.slot, first.owner.as_str(), first.already),
        (0, "alice", false)
    );
    match locks
        .acquire("sdk-lock", 30, Some("bob"), None)
        .await
        .unwrap()
    {
        Acquired::Refused { reason, holders } => {
            assert_eq!(reason, Refusal::Held);
            assert_eq!(
                (holders[0].owner.clone(), holders[0].token),
                (json!("alice"), first.token)
            );
        }
        other => panic!("a held lock answered {other:?}"),
    }
    let Acquired::Granted(again) = locks
        .acquire("sdk-lock", 30, Some("alice"), None)
        .await
        .unwrap()
    else {
        panic!("the owner gets its permit back")
    };
    assert_eq!((again.token, again.already), (first.token, true));

    let Kept::Done(renewed) = locks.renew(&first, 30).await.unwrap() else {
        panic!("the holder renews")
    };
    assert!(renewed.token > first.token);
    assert_eq!(
        locks.holders("sdk-lock").await.unwrap()[0].token,
        renewed.token
    );

    // The old token's guard no longer holds; the new one's does.
    let kv = sdk.kv();
    let stale = kv
        .batch(&[
            first.guard(),
            KvOp::put("sdk-fenced", "x", json!(1), Expiry::Forever),
        ])
        .await;
    assert!(matches!(stale.unwrap(), KvOutcome::PreconditionFailed(p) if p.failed_index == 0));
    let fresh = kv
        .batch(&[
            renewed.guard(),
            KvOp::put("sdk-fenced", "x", json!(2), Expiry::Forever),
        ])
        .await;
    assert!(matches!(fresh.unwrap(), KvOutcome::Done(_)));

    let Kept::Lost(holders) = locks.release(&first).await.unwrap() else {
        panic!("a stale token cannot release")
    };
    assert_eq!(holders.len(), 1);
    assert_eq!(locks.release(&renewed).await.unwrap(), Kept::Done(()));
    assert!(locks.holders("sdk-lock").await.unwrap().is_empty());
    let Acquired::Granted(next) = locks
        .acquire("sdk-lock", 30, Some("bob"), None)
        .await
        .unwrap()
    else {
        panic!("a released lock is granted")
    };
    assert!(
        next.token > renewed.token,
        "a later holder's token is greater"
    );

    match locks.acquire("bad#name", 30, None, None).await {
        Err(Error::Api {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 400);
            assert!(message.starts_with("locks_bad_request"), "{message}");
        }
        other => panic!("a name with # answered {other:?}"),
    }
}

async fn timers_schedule_list_peek_cancel_and_fire(sdk: &Queen) {
    let timers = sdk.timers();
    let hour = Duration::from_secs(3600);
    let slash = Schedule::new("sdk-timers", "order/1/expire", &json!({"o": 1}), hour).unwrap();
    let plain = Schedule::new("sdk-timers", "order-2", &json!({"o": 2}), hour).unwrap();
    let results = timers
        .apply(&[TimerOp::Schedule(slash), TimerOp::Schedule(plain)])
        .await
        .unwrap();
    assert!(
        results
            .iter()
            .all(|r| r.ok && r.status == TimerStatus::Scheduled),
        "{results:?}"
    );

    let page = timers.list("sdk-timers", None, Some(1)).await.unwrap();
    assert_eq!((page.rows.len(), page.truncated), (1, true));
    assert_eq!(
        page.rows[0].timer_key, "order-2",
        "byte order: '-' sorts before '/'"
    );
    let rest = timers
        .list("sdk-timers", page.next_after.as_deref(), None)
        .await
        .unwrap();
    assert_eq!(
        rest.rows
            .iter()
            .map(|t| t.timer_key.as_str())
            .collect::<Vec<_>>(),
        ["order/1/expire"]
    );

    let peeked = timers
        .peek("sdk-timers", "order/1/expire")
        .await
        .unwrap()
        .expect("pending");
    assert_eq!(
        peeked.payload.expect("peek carries the payload").get(),
        r#"{"o":1}"#
    );
    assert_eq!(peeked.deliver_at, results[0].deliver_at.clone().unwrap());

    let again = Schedule::new("sdk-timers", "order-2", &json!({"o": 3}), hour).unwrap();
    assert_eq!(
        timers.schedule(again).await.unwrap().status,
        TimerStatus::Rescheduled
    );
    let cancel = timers
        .cancel("sdk-timers", "order/1/expire", None)
        .await
        .unwrap();
    assert_eq!((cancel.ok, cancel.status), (true, TimerStatus::Cancelled));
    let gone = timers
        .cancel("sdk-timers", "order/1/expire", Some("t-1"))
        .await
        .unwrap();
    assert_eq!(
        (gone.ok, gone.status, gone.txn.as_deref()),
        (false, TimerStatus::Absent, Some("t-1"))
    );
    assert!(timers
        .peek("sdk-timers", "order/1/expire")
        .await
        .unwrap()
        .is_none());

    // A due timer becomes its message, under the txn it was given.
    let mut due =
        Schedule::new("sdk-fired", "now", &json!({"fired": true}), Duration::ZERO).unwrap();
    due.txn = Some("sdk-timer-txn".into());
    due.partition = Some("p7".into());
    timers.schedule(due).await.unwrap();
    let popped = sdk
        .queue("sdk-fired")
        .batch(1)
        .wait(true)
        .timeout_ms(30_000)
        .pop()
        .await
        .unwrap()
        .expect("the fired timer's message");
    let m = &popped.messages[0];
    assert_eq!(
        (
            m.transaction_id.as_str(),
            m.partition.as_str(),
            m.data.get()
        ),
        ("sdk-timer-txn", "p7", r#"{"fired":true}"#)
    );
    assert!(timers.peek("sdk-fired", "now").await.unwrap().is_none());

    match timers.cancel("sdk-timers", "bell\u{7}", None).await {
        Err(Error::Api {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 400);
            assert!(message.starts_with("timers_bad_request"), "{message}");
            assert!(message.contains("control character"), "{message}");
        }
        other => panic!("a key with a control character answered {other:?}"),
    }
}

async fn reads_by_offset(sdk: &Queen) {
    let items: Vec<PushItem> = (0..3)
        .map(|i| PushItem::json(&json!({ "i": i }), Some(format!("r-{i}"))).unwrap())
        .collect();
    sdk.queue("sdk-reads")
        .partition("p")
        .push(&items)
        .await
        .unwrap();
    let entries = [
        FetchEntry::new("sdk-reads", "p", 1),
        FetchEntry::new("sdk-reads", "p", 9),
        FetchEntry::new("sdk-no-such-queue", "p", 0),
    ];
    let got = sdk.fetch(&entries, None).await.unwrap();
    let offsets: Vec<(i64, &str)> = got[0]
        .records
        .iter()
        .map(|r| (r.offset, r.transaction_id.as_str()))
        .collect();
    assert_eq!(offsets, [(1, "r-1"), (2, "r-2")]);
    assert_eq!(got[0].records[0].payload.get(), r#"{"i":1}"#);
    assert_eq!(
        (
            got[0].high_watermark,
            got[0].log_start_offset,
            got[0].error.clone()
        ),
        (3, 0, None)
    );
    assert_eq!(got[1].error, Some(FetchError::OffsetOutOfRange));
    assert_eq!(got[2].error, Some(FetchError::UnknownTopicOrPartition));

    // Reading moved no cursor: a pop still gets the first message.
    let popped = sdk
        .queue("sdk-reads")
        .batch(1)
        .pop()
        .await
        .unwrap()
        .expect("message");
    assert_eq!(popped.messages[0].transaction_id, "r-0");

    let query = ChangedQuery {
        queue: "sdk-reads".into(),
        ..Default::default()
    };
    let changed = sdk.partitions_changed(&[query]).await.unwrap();
    let p = &changed.entries[0].partitions[0];
    assert_eq!((p.name.as_str(), p.last_offset, p.log_start), ("p", 2, 0));
    assert!(!changed.safe_time.is_empty());

    let bad = FetchEntry::new("sdk-reads", "p", -1);
    match sdk.fetch(&[bad], None).await {
        Err(Error::Api {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 400);
            assert!(message.contains("offset"), "{message}");
        }
        other => panic!("a negative offset answered {other:?}"),
    }
}

async fn riders_share_the_fate_of_their_transaction(sdk: &Queen) {
    let gate = || KvOp::PutIfAbsent {
        ns: "sdk-tx".into(),
        key: "order-1:shipped".into(),
        value: json!(true),
        expiry: Expiry::Seconds(600),
        required: true,
    };
    let item = || PushItem::json(&json!({"ship": 1}), None).unwrap();
    let timer = Schedule::new(
        "sdk-tx-timers",
        "reminder",
        &json!({"r": 1}),
        Duration::from_secs(3600),
    )
    .unwrap();
    let first = sdk
        .transaction()
        .push("sdk-tx-out", "Default", vec![item()])
        .kv(gate())
        .timer(TimerOp::Schedule(timer))
        .commit()
        .await
        .expect("the first bundle commits");
    let kinds: Vec<&str> = first
        .results
        .iter()
        .filter_map(|r| r["type"].as_str())
        .collect();
    assert_eq!(kinds, ["push", "kv", "timer"], "{:?}", first.results);
    assert!(sdk
        .timers()
        .peek("sdk-tx-timers", "reminder")
        .await
        .unwrap()
        .is_some());

    // The same gate again: the whole bundle rolls back, its push and its timer cancel with it.
    let cancel = TimerOp::Cancel {
        queue: "sdk-tx-timers".into(),
        timer_key: "reminder".into(),
        txn: None,
    };
    let again = sdk
        .transaction()
        .push("sdk-tx-out", "Default", vec![item()])
        .kv(gate())
        .timer(cancel)
        .commit()
        .await;
    match again {
        Err(Error::Precondition(p)) => {
            assert_eq!(
                (p.failed_index, p.reason, p.value),
                (1, KvReason::Exists, json!(true))
            );
        }
        other => panic!("a lost gate answered {other:?}"),
    }
    assert!(
        sdk.timers()
            .peek("sdk-tx-timers", "reminder")
            .await
            .unwrap()
            .is_some(),
        "cancel rolled back"
    );
    let popped = sdk
        .queue("sdk-tx-out")
        .batch(10)
        .pop()
        .await
        .unwrap()
        .expect("one message");
    assert_eq!(popped.messages.len(), 1, "the second push rolled back");

    let listing = KvOp::GetPrefix {
        ns: "sdk-tx".into(),
        prefix: "o".into(),
        after: None,
        limit: None,
        keys_only: false,
    };
    let refused = sdk.transaction().kv(listing).commit().await;
    assert!(matches!(refused, Err(Error::Encode(m)) if m.contains("getPrefix")));
}
