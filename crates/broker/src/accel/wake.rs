//! Long-poll wake gates (engine.md §8): one `Notify` per queue that parked pops wait on, plus
//! one "any queue" gate for discovery pops.
//!
//! A wake (`wake_queue`, called after a push, an ack release or a seek has committed) is not
//! delivered inline: it marks the queue and a ticker opens the marked gates, at once when it
//! was idle and then at most once per 5 ms tick, so a hot queue costs a bounded number of
//! wake-ups per second rather than one per push. With peer wake on, the same tick hands the
//! marked queue names to a dedicated PostgreSQL connection that sends them to the other
//! brokers with `pg_notify('queen_wake', …)` in autocommit (never inside a push transaction,
//! whose commit would then serialise on the notification queue lock) and listens for theirs.
//! Wakes are hints: a lost one costs a parked pop at most one backoff interval.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, Notify};
use tokio_postgres::{AsyncMessage, NoTls};
use uuid::Uuid;

/// The coalescing tick of local wakes and of outgoing peer notifications.
const TICK: Duration = Duration::from_millis(5);
/// The LISTEN/NOTIFY channel shared by every broker of a database.
pub const CHANNEL: &str = "queen_wake";
/// PostgreSQL refuses notification payloads of 8000 bytes or more.
const MAX_PAYLOAD: usize = 7900;

/// The gates of one broker. Pushes only touch gates that a waiter created.
pub struct WakeGates {
    shared: Arc<Shared>,
    broker_id: Uuid,
    /// Connection settings of the peer-wake connection; `None` = in-process wake only.
    peer: Option<tokio_postgres::Config>,
    started: AtomicBool,
}

struct Shared {
    gates: Mutex<HashMap<String, Arc<Notify>>>,
    any: Arc<Notify>,
    marked: Mutex<Marked>,
    /// Wakes the ticker when the first queue is marked.
    tick: Notify,
    /// Marked queue names bound for the peer connection (present only with peer wake).
    peer_out: Option<mpsc::UnboundedSender<Vec<String>>>,
    peer_in: Mutex<Option<mpsc::UnboundedReceiver<Vec<String>>>>,
}

/// Wakes waiting for the next tick.
#[derive(Default)]
struct Marked {
    local: HashSet<String>,
    any: bool,
    peer: HashSet<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WakeGates {
    /// Gates of the broker `broker_id`; `peer` enables cross-broker wake through that database.
    pub fn new(broker_id: Uuid, peer: Option<tokio_postgres::Config>) -> Self {
        let (tx, rx) = match peer {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        WakeGates {
            shared: Arc::new(Shared {
                gates: Mutex::default(),
                any: Arc::default(),
                marked: Mutex::default(),
                tick: Notify::new(),
                peer_out: tx,
                peer_in: Mutex::new(rx),
            }),
            broker_id,
            peer,
            started: AtomicBool::new(false),
        }
    }

    /// The gate of `queue`, created on first use by a waiter.
    pub fn gate(&self, queue: &str) -> Arc<Notify> {
        self.ensure_started();
        lock(&self.shared.gates)
            .entry(queue.to_string())
            .or_default()
            .clone()
    }

    /// The gate discovery pops wait on: opened by a wake of any queue.
    pub fn any_gate(&self) -> Arc<Notify> {
        self.ensure_started();
        self.shared.any.clone()
    }

    /// Marks `queue` for the next tick: its gate (if anyone ever waited on it), the discovery
    /// gate and, with peer wake, the other brokers.
    pub fn wake_queue(&self, queue: &str) {
        self.ensure_started();
        let has_gate = lock(&self.shared.gates).contains_key(queue);
        let first = {
            let mut m = lock(&self.shared.marked);
            let was_idle = m.local.is_empty() && !m.any && m.peer.is_empty();
            if has_gate && !m.local.contains(queue) {
                m.local.insert(queue.to_string());
            }
            m.any = true;
            if self.shared.peer_out.is_some() && !m.peer.contains(queue) {
                m.peer.insert(queue.to_string());
            }
            was_idle
        };
        if first {
            self.shared.tick.notify_one();
        }
    }

    /// Starts the ticker (and the peer connection) on the current runtime, once.
    fn ensure_started(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        rt.spawn(run_ticker(Arc::downgrade(&self.shared)));
        let receiver = lock(&self.shared.peer_in).take();
        if let (Some(pg), Some(rx)) = (self.peer.clone(), receiver) {
            rt.spawn(run_peer(
                Arc::downgrade(&self.shared),
                pg,
                self.broker_id,
                rx,
            ));
        }
    }
}

impl Shared {
    /// Opens the marked gates and hands the marked names to the peer connection.
    fn flush(&self) -> bool {
        let marked = std::mem::take(&mut *lock(&self.marked));
        if marked.local.is_empty() && !marked.any && marked.peer.is_empty() {
            return false;
        }
        self.open(marked.local.iter().map(String::as_str));
        if marked.any {
            self.any.notify_waiters();
        }
        if let (Some(tx), false) = (&self.peer_out, marked.peer.is_empty()) {
            let _ = tx.send(marked.peer.into_iter().collect());
        }
        true
    }

    fn open<'a>(&self, queues: impl Iterator<Item = &'a str>) {
        let gates = lock(&self.gates);
        for q in queues {
            if let Some(g) = gates.get(q) {
                g.notify_waiters();
            }
        }
    }

    /// Opens every gate: after the peer connection (re)connects, notifications may have been
    /// lost, so everything counts as dirty once.
    fn open_all(&self) {
        for g in lock(&self.gates).values() {
            g.notify_waiters();
        }
        self.any.notify_waiters();
    }
}

/// Leading-edge coalescing: the first wake after a quiet spell is delivered at once; wakes
/// arriving while the ticker is busy wait for the next 5 ms tick. Ends with the broker.
async fn run_ticker(shared: Weak<Shared>) {
    loop {
        let flushed = {
            let Some(s) = shared.upgrade() else { return };
            let signalled = s.tick.notified();
            tokio::pin!(signalled);
            signalled.as_mut().enable();
            let flushed = s.flush();
            if !flushed {
                // Bounded, so the task notices a dropped broker.
                let _ = tokio::time::timeout(Duration::from_secs(1), signalled).await;
            }
            flushed
        };
        if flushed {
            tokio::time::sleep(TICK).await;
        }
    }
}

/// The peer-wake connection: LISTEN on `queen_wake`, send the ticker's batches, open local
/// gates for other brokers' notifications; reconnect with backoff when the connection drops.
async fn run_peer(
    shared: Weak<Shared>,
    mut pg: tokio_postgres::Config,
    me: Uuid,
    mut out: mpsc::UnboundedReceiver<Vec<String>>,
) {
    pg.application_name("queen-rs-wake");
    let mut retry = Duration::from_millis(100);
    loop {
        match pg.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let (note_tx, mut notes) = mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                if note_tx.send(n.payload().to_string()).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "peer-wake connection failed");
                                return;
                            }
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => {
                        retry = Duration::from_millis(100);
                        match shared.upgrade() {
                            Some(s) => s.open_all(),
                            None => return,
                        }
                        if serve_peer(&shared, &client, me, &mut out, &mut notes)
                            .await
                            .is_break()
                        {
                            driver.abort();
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "peer wake: LISTEN failed"),
                }
                driver.abort();
            }
            Err(e) => tracing::warn!(error = %e, "peer wake: cannot connect"),
        }
        if shared.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}

/// One connected session. `Break` = the broker is gone; `Continue` = reconnect.
async fn serve_peer(
    shared: &Weak<Shared>,
    client: &tokio_postgres::Client,
    me: Uuid,
    out: &mut mpsc::UnboundedReceiver<Vec<String>>,
    notes: &mut mpsc::UnboundedReceiver<String>,
) -> std::ops::ControlFlow<()> {
    use std::ops::ControlFlow::{Break, Continue};
    let Ok(notify) = client.prepare("SELECT pg_notify($1, $2)").await else {
        return Continue(());
    };
    loop {
        tokio::select! {
            batch = out.recv() => {
                let Some(queues) = batch else { return Break(()) };
                for payload in payloads(me, &queues) {
                    if let Err(e) = client.execute(&notify, &[&CHANNEL, &payload]).await {
                        tracing::warn!(error = %e, "peer wake: notify failed");
                        return Continue(());
                    }
                }
            }
            note = notes.recv() => {
                let Some(payload) = note else { return Continue(()) };
                let Some(s) = shared.upgrade() else { return Break(()) };
                match parse_payload(&payload) {
                    Some((sender, _)) if sender == me => {}
                    Some((_, PeerWake::All)) | None => s.open_all(),
                    Some((_, PeerWake::Queues(queues))) => {
                        s.open(queues.into_iter());
                        s.any.notify_waiters();
                    }
                }
            }
        }
    }
}

/// What a peer notification asks for.
#[derive(Debug, PartialEq)]
enum PeerWake<'a> {
    Queues(Vec<&'a str>),
    All,
}

/// The kind line of a wake notification. Other kinds (config invalidation, ring repairs) may
/// share the channel later; a receiver that does not know a kind wakes everything, which is
/// never wrong, only wasteful.
const KIND_WAKE: &str = "wake";

/// Notification payloads for `queues`: the sender id, the kind, then one queue name per line
/// (names never contain control characters), split below PostgreSQL's payload limit. A name
/// too long for any payload becomes an empty line, which means "wake everything".
fn payloads(sender: Uuid, queues: &[String]) -> Vec<String> {
    let head = format!("{sender}\n{KIND_WAKE}");
    let mut out = Vec::new();
    let mut current = head.clone();
    for q in queues {
        let name = if head.len() + 1 + q.len() > MAX_PAYLOAD {
            ""
        } else {
            q.as_str()
        };
        if current.len() + 1 + name.len() > MAX_PAYLOAD {
            out.push(std::mem::replace(&mut current, head.clone()));
        }
        current.push('\n');
        current.push_str(name);
    }
    if current.len() > head.len() {
        out.push(current);
    }
    out
}

fn parse_payload(payload: &str) -> Option<(Uuid, PeerWake<'_>)> {
    let mut lines = payload.split('\n');
    let sender = lines.next()?.parse().ok()?;
    let kind = lines.next();
    let queues: Vec<&str> = lines.collect();
    if kind != Some(KIND_WAKE) || queues.is_empty() || queues.iter().any(|q| q.is_empty()) {
        return Some((sender, PeerWake::All));
    }
    Some((sender, PeerWake::Queues(queues)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_split() {
        let me = Uuid::now_v7();
        let queues: Vec<String> = (0..2000).map(|i| format!("queue-{i}")).collect();
        let sent = payloads(me, &queues);
        assert!(sent.len() > 1, "2000 names need several payloads");
        let mut seen = Vec::new();
        for p in &sent {
            assert!(p.len() < 8000);
            match parse_payload(p) {
                Some((sender, PeerWake::Queues(qs))) => {
                    assert_eq!(sender, me);
                    seen.extend(qs.into_iter().map(str::to_string));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(seen, queues);
    }

    #[test]
    fn oversized_names_wake_everything() {
        let me = Uuid::now_v7();
        let sent = payloads(me, &["x".repeat(9000)]);
        assert_eq!(sent.len(), 1);
        assert_eq!(parse_payload(&sent[0]), Some((me, PeerWake::All)));
        assert_eq!(parse_payload("garbage"), None);
        assert_eq!(
            parse_payload(&format!("{me}\nrepair\nq")),
            Some((me, PeerWake::All))
        );
    }

    #[tokio::test]
    async fn a_wake_opens_the_gate_and_the_discovery_gate() {
        let gates = WakeGates::new(Uuid::now_v7(), None);
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
    async fn wakes_of_unpolled_queues_allocate_no_gate() {
        let gates = WakeGates::new(Uuid::now_v7(), None);
        gates.wake_queue("nobody-waits-here");
        tokio::time::sleep(TICK * 4).await;
        assert!(lock(&gates.shared.gates).is_empty());
    }
}
