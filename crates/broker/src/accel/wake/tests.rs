//! Unit tests of the wake gates: peer payloads, hint mailboxes and gate lifetimes.

use super::*;

fn batch(entries: &[(&str, &[&str])]) -> PeerBatch {
    PeerBatch {
        queues: entries
            .iter()
            .map(|(q, ps)| (q.to_string(), ps.iter().map(|p| p.to_string()).collect()))
            .collect(),
        released: BTreeSet::new(),
        everything: false,
    }
}

/// Every (queue, partition) line of the payloads, checking sender and size.
fn received(me: Uuid, sent: &[String]) -> Vec<(String, Option<String>)> {
    let mut seen = Vec::new();
    for p in sent {
        assert!(p.len() < 8000);
        match parse_payload(p) {
            Some((sender, PeerWake::Queues(lines))) => {
                assert_eq!(sender, me);
                seen.extend(lines.into_iter().map(|l| {
                    assert_eq!(l.released, None);
                    (l.queue.to_string(), l.partition.map(str::to_string))
                }));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    seen.sort();
    seen
}

#[test]
fn payloads_round_trip_and_split() {
    let me = Uuid::now_v7();
    let names: Vec<String> = (0..2000).map(|i| format!("queue-{i}")).collect();
    let queues: Vec<(&str, &[&str])> = names.iter().map(|q| (q.as_str(), &[][..])).collect();
    let sent = payloads(me, &batch(&queues));
    assert!(sent.len() > 1, "2000 names need several payloads");
    let mut expected: Vec<(String, Option<String>)> =
        names.iter().map(|q| (q.clone(), None)).collect();
    expected.sort();
    assert_eq!(received(me, &sent), expected);
}

#[test]
fn hinted_partitions_travel_as_pairs() {
    let me = Uuid::now_v7();
    let long = "p".repeat(7950);
    let sent = payloads(
        me,
        &batch(&[("orders", &["eu", "us"]), ("audit", &[]), ("big", &[&long])]),
    );
    let pair = |q: &str, p: Option<&str>| (q.to_string(), p.map(str::to_string));
    let mut expected = vec![
        pair("orders", Some("eu")),
        pair("orders", Some("us")),
        pair("audit", None),
        // Too long to fit with its queue: the queue is still woken, without the hint.
        pair("big", None),
    ];
    expected.sort();
    assert_eq!(received(me, &sent), expected);
}

#[test]
fn oversized_names_wake_everything() {
    let me = Uuid::now_v7();
    let sent = payloads(me, &batch(&[(&"x".repeat(9000), &["p"])]));
    assert_eq!(sent.len(), 1);
    assert_eq!(parse_payload(&sent[0]), Some((me, PeerWake::All)));
    assert_eq!(parse_payload("garbage"), None);
    assert_eq!(
        parse_payload(&format!("{me}\nrepair\nq")),
        Some((me, PeerWake::All))
    );
}

#[test]
fn the_mailbox_keeps_the_newest_distinct_hints() {
    let gate = Gate::default();
    for i in 0..100 {
        gate.hint(&format!("p{i}"));
    }
    gate.hint("p99");
    let kept = gate.take_hints();
    let expected: Vec<String> = (36..100).map(|i| format!("p{i}")).collect();
    assert_eq!(kept, expected, "64 newest, oldest first, no duplicate");
    assert!(gate.take_hints().is_empty(), "taking drains the mailbox");
}

#[tokio::test]
async fn pushes_hint_only_gates_that_exist() {
    let gates = WakeGates::new(Uuid::now_v7(), false);
    let gate = gates.gate("q");
    gates.wake_partitions([("q", "a"), ("q", "b"), ("q", "a"), ("other", "c")]);
    assert_eq!(gate.take_hints(), vec!["a".to_string(), "b".to_string()]);
    assert!(!lock(&gates.shared.gates).contains_key("other"));
    assert!(gates.any_gate().take_hints().is_empty());
}

#[tokio::test]
async fn a_wake_opens_the_gate_and_the_discovery_gate() {
    let gates = WakeGates::new(Uuid::now_v7(), false);
    let gate = gates.gate("q");
    let any = gates.any_gate();
    let (queue_woken, any_woken) = (gate.notified(), any.notified());
    tokio::pin!(queue_woken, any_woken);
    queue_woken.as_mut().enable();
    any_woken.as_mut().enable();
    gates.wake_queue("q");
    tokio::time::timeout(Duration::from_secs(5), queue_woken)
        .await
        .expect("queue gate opened");
    tokio::time::timeout(Duration::from_secs(5), any_woken)
        .await
        .expect("discovery gate opened");
}

#[tokio::test]
async fn a_gate_lives_exactly_as_long_as_its_waiters() {
    let gates = WakeGates::new(Uuid::now_v7(), false);
    let (first, second) = (gates.gate("q"), gates.gate("q"));
    let any = gates.any_gate();
    assert_eq!(gates.gate_count(), 1, "one gate per queue");
    gates.wake_partitions([("q", "p")]);
    drop(first);
    assert_eq!(gates.gate_count(), 1, "a waiter is left");
    assert_eq!(second.take_hints(), vec!["p".to_string()]);
    drop(second);
    assert_eq!(gates.gate_count(), 0, "the last waiter frees the gate");
    drop(any);
    let again = gates.gate("q");
    assert_eq!(gates.gate_count(), 1, "a new waiter makes a new gate");
    drop(again);
    assert_eq!(gates.gate_count(), 0);
}

/// Lets the ticker task run without moving the (paused) clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_commit_wakes_one_parked_waiter_at_once_and_the_rest_on_the_tick() {
    use futures::FutureExt;
    let gates = WakeGates::new(Uuid::now_v7(), false);
    let gate = gates.gate("q");
    // A first wake: the ticker opens it and then waits out its tick.
    gates.wake_queue("q");
    settle().await;
    let (first, second) = (gate.notified(), gate.notified());
    tokio::pin!(first, second);
    first.as_mut().enable();
    let parked_first = gate.parked();
    second.as_mut().enable();
    let parked_second = gate.parked();
    let start = tokio::time::Instant::now();
    gates.wake_queue("q");
    gates.wake_queue("q");
    assert!(
        first.as_mut().now_or_never().is_some(),
        "one waiter at once"
    );
    assert!(
        second.as_mut().now_or_never().is_none(),
        "one kick per armed wait, whatever the commits"
    );
    tokio::time::timeout(Duration::from_secs(1), second.as_mut())
        .await
        .expect("the tick opens the gate for the rest");
    assert!(start.elapsed() <= TICK, "within one tick");
    drop((parked_first, parked_second));

    // Nobody parked: a commit leaves no stored wake behind for the next waiter.
    settle().await;
    gates.wake_queue("q");
    settle().await;
    let late = gate.notified();
    tokio::pin!(late);
    late.as_mut().enable();
    assert!(late.as_mut().now_or_never().is_none(), "no stale permit");
}

#[tokio::test]
async fn wakes_of_unpolled_queues_allocate_no_gate() {
    let gates = WakeGates::new(Uuid::now_v7(), false);
    gates.wake_queue("nobody-waits-here");
    tokio::time::sleep(TICK * 4).await;
    assert!(lock(&gates.shared.gates).is_empty());
}

#[test]
fn released_leases_travel_with_their_group_and_whether_data_was_left() {
    let me = Uuid::now_v7();
    let mut b = batch(&[("orders", &["eu"])]);
    b.released
        .insert(("orders".into(), "us".into(), "billing".into(), true));
    b.released
        .insert(("orders".into(), "za".into(), "billing".into(), false));
    let sent = payloads(me, &b);
    assert_eq!(sent.len(), 1);
    let Some((sender, PeerWake::Queues(mut lines))) = parse_payload(&sent[0]) else {
        panic!("unexpected {:?}", parse_payload(&sent[0]));
    };
    assert_eq!(sender, me);
    lines.sort_by_key(|l| l.partition);
    let line = |partition, released| Line {
        queue: "orders",
        partition: Some(partition),
        released,
    };
    let release = |pending| {
        Some(Release {
            group: "billing",
            pending,
        })
    };
    assert_eq!(
        lines,
        vec![
            line("eu", None),
            line("us", release(true)),
            line("za", release(false))
        ]
    );
    let odd = format!("{me}\nwake\norders\x1fus\x1fbilling\x1fsomething-new");
    let Some((_, PeerWake::Queues(lines))) = parse_payload(&odd) else {
        panic!("unparsed");
    };
    assert_eq!(
        lines,
        vec![line("us", release(true))],
        "unknown marker: wake"
    );
}

#[test]
fn a_peer_payload_asks_for_what_it_names_and_our_own_are_ignored() {
    let me = Uuid::now_v7();
    let gates = WakeGates::new(me, true);
    let port = gates.peer_port().expect("peer wake is on");
    assert!(gates.peer_port().is_none(), "the port is taken once");
    let other = Uuid::now_v7();
    let theirs = format!("{other}\nwake\norders\x1fus");
    let Some(PeerWake::Queues(lines)) = port.heard(&theirs) else {
        panic!("a peer's wake names its lines");
    };
    assert_eq!((lines[0].queue, lines[0].partition), ("orders", Some("us")));
    let ours = format!("{me}\nwake\norders\x1fus");
    assert_eq!(
        port.heard(&ours),
        None,
        "our own notification changes nothing"
    );
    assert_eq!(port.heard("garbage"), Some(PeerWake::All));
    assert!(WakeGates::new(me, false).peer_port().is_none());
}

#[tokio::test]
async fn a_peer_wake_opens_the_named_gates_and_everything_opens_all() {
    let gates = WakeGates::new(Uuid::now_v7(), true);
    let port = gates.peer_port().expect("peer wake is on");
    let (q, r) = (gates.gate("q"), gates.gate("r"));
    let (q_woken, r_woken) = (q.notified(), r.notified());
    tokio::pin!(q_woken, r_woken);
    q_woken.as_mut().enable();
    r_woken.as_mut().enable();
    let payload = format!("{}\nwake\nq\x1fp", Uuid::now_v7());
    port.open(&port.heard(&payload).expect("a peer's"));
    let short = Duration::from_millis(50);
    assert!(tokio::time::timeout(short, &mut q_woken).await.is_ok());
    assert_eq!(q.take_hints(), vec!["p".to_string()]);
    assert!(tokio::time::timeout(short, &mut r_woken).await.is_err());
    port.open(&PeerWake::All);
    assert!(tokio::time::timeout(short, &mut r_woken).await.is_ok());
}

#[tokio::test]
async fn a_drained_release_alone_wakes_no_parked_pop() {
    let gates = WakeGates::new(Uuid::now_v7(), false);
    let gate = gates.gate("q");
    let any = gates.any_gate();
    let (woken, any_woken) = (gate.notified(), any.notified());
    tokio::pin!(woken, any_woken);
    woken.as_mut().enable();
    any_woken.as_mut().enable();
    let drained = Line {
        queue: "q",
        partition: Some("p"),
        released: Some(Release {
            group: "g",
            pending: false,
        }),
    };
    gates.shared.open_hinted(&[drained]);
    let quiet = tokio::time::timeout(Duration::from_millis(50), &mut woken).await;
    assert!(
        quiet.is_err(),
        "nothing to claim: the queue's pops stay parked"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(10), &mut any_woken)
            .await
            .is_err()
    );
    assert!(gate.take_hints().is_empty(), "and no hint was left");
}

#[test]
fn a_peer_outage_queues_at_most_the_backlog_then_wakes_everything() {
    let gates = WakeGates::new(Uuid::new_v4(), true);
    let s = &gates.shared;
    // 10 000 ticks, each naming a queue of its own, while nothing drains the channel.
    for i in 0..10_000 {
        s.mark(&format!("q{i}"), &["p"], None);
        s.flush();
    }
    let tx = s.peer_out.as_ref().expect("peer wake is on");
    assert_eq!(tx.max_capacity() - tx.capacity(), PEER_BACKLOG);
    let mut rx = lock(&s.peer_in).take().expect("the receiver");
    let first = rx.try_recv().expect("a queued batch");
    assert!(!first.everything, "the backlog's batches are whole");
    // Room again: the next batch tells the peers that something was lost.
    s.mark("late", &[], None);
    s.flush();
    let mut last = None;
    while let Ok(b) = rx.try_recv() {
        last = Some(b);
    }
    let last = last.expect("the late batch");
    assert!(last.everything);
    let sent = payloads(Uuid::nil(), &last);
    assert!(matches!(parse_payload(&sent[0]), Some((_, PeerWake::All))));
}

#[tokio::test]
async fn a_failed_send_is_made_good_by_a_wake_all_notice() {
    let gates = WakeGates::new(Uuid::now_v7(), true);
    let mut port = gates.peer_port().expect("peer wake is on");
    assert!(port.owed().is_empty(), "nothing owed before a failure");
    gates.wake_partitions([("q", "p")]);
    let sent = tokio::time::timeout(Duration::from_secs(5), port.next())
        .await
        .expect("the tick's batch")
        .expect("the broker is alive");
    assert_eq!(
        received(gates.broker_id, &sent),
        vec![("q".into(), Some("p".into()))]
    );
    // Its send fails: no peer ever hears of that push.
    port.send_failed();
    let owed = port.owed();
    assert_eq!(owed.len(), 1);
    assert!(matches!(parse_payload(&owed[0]), Some((_, PeerWake::All))));
    assert!(!port.owed().is_empty(), "owed until a session delivered it");
    port.settled();
    assert!(port.owed().is_empty(), "and once only");
    drop(gates);
    assert!(port.gone());
    assert!(
        port.next().await.is_none(),
        "the session ends with the broker"
    );
}
