//! Long-poll wake gates (docs/engine.md §8): one `Notify` per queue that parked pops wait on, plus
//! one "any queue" gate for discovery pops.
//!
//! A wake (`wake_queue`, called after a push, an ack release or a seek has committed) is not
//! delivered inline: it marks the queue and a ticker opens the marked gates, at once when it
//! was idle and then at most once per 5 ms tick, so a hot queue costs a bounded number of
//! wake-ups per second rather than one per push. Only the first commit after a pop armed its
//! wait also wakes one waiter of the queue at once (`Gate::parked`), so a consumer that caught
//! up does not wait for the tick. With peer wake on, the same tick hands the
//! marked queue names to a [`PeerLink`] (the store floor's dedicated `LISTEN` connection, wired
//! in by the engine: this module writes no SQL) that sends them to the other brokers and
//! delivers theirs.
//! Wakes are hints: a lost one costs a parked pop at most one backoff interval.
//!
//! A push also names the partitions it stored into (`wake_partitions`): each gate keeps a
//! mailbox of the newest 64 pushed-partition hints (drop-oldest), which a woken wildcard pop
//! tries with targeted claims before its candidate scan (docs/engine.md §5.2, §8.1). Peer
//! notifications carry the same hints as `queue\x1fpartition` lines while they fit, and an
//! ack that released a lease as a `queue\x1fpartition\x1fgroup` line (`wake_released`, with
//! data behind it; `tell_drained`, without: nothing to wake, but a peer's ring that met the
//! lease must not wait for its end); the payload format is `wake/payload.rs`. What a peer's notification
//! names is also handed to a [`PeerObserver`] (the hot-list ring), so other brokers' commits
//! reach the local caches.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::futures::Notified;
use tokio::sync::{mpsc, Notify};
use uuid::Uuid;

/// The coalescing tick of local wakes and of outgoing peer notifications.
const TICK: Duration = Duration::from_millis(5);
/// Pushed-partition hints kept per gate, and per queue in one peer tick: the newest ones.
pub const HINT_MAILBOX: usize = 64;
/// Tick batches queued for the peer connection (a second's worth of ticks). While it is down
/// or slower than the ticks, further batches are dropped and the next one that fits tells
/// the peers to wake everything instead, so a long outage costs no memory.
pub const PEER_BACKLOG: usize = 200;

/// The channel to the other brokers of the database (cross-broker wake).
pub trait PeerLink: Send + Sync + 'static {
    /// Opens a session: a sender, and the payloads other brokers send (the receiver ends when
    /// the session does). An error is the reason, for the log.
    fn connect(&self) -> BoxFuture<'_, Result<PeerConnection, String>>;
}

/// One open session of a [`PeerLink`].
pub struct PeerConnection {
    pub sender: Box<dyn PeerSender>,
    pub notes: mpsc::UnboundedReceiver<String>,
}

/// Receives what other brokers' notifications name, before their gates open. Each call is a
/// hint, as stale as a notification can be; `everything` follows a reconnect, when
/// notifications may have been lost.
pub trait PeerObserver: Send + Sync + 'static {
    /// A peer stored messages into the partition.
    fn pushed(&self, queue: &str, partition: &str);
    /// A peer's ack released the group's lease on the partition; `pending`: with data behind
    /// the cursor.
    fn released(&self, queue: &str, partition: &str, group: &str, pending: bool);
    /// Something changed on the queue that the notification could not name.
    fn queue(&self, queue: &str);
    /// Anything may have changed.
    fn everything(&self);
}

/// The sending half of a peer session.
pub trait PeerSender: Send + Sync {
    /// Sends one payload to every broker of the database.
    fn notify<'a>(&'a self, payload: &'a str) -> BoxFuture<'a, Result<(), String>>;
}

/// The gates of one broker. Pushes only touch gates that a waiter created.
pub struct WakeGates {
    shared: Arc<Shared>,
    broker_id: Uuid,
    /// The peer-wake channel; `None` = in-process wake only.
    peer: Option<Arc<dyn PeerLink>>,
    started: AtomicBool,
}

/// One queue's gate: what parked pops wait on, plus the partitions pushed since a woken pop
/// last drained them. A hint only suggests where to look first; the wildcard scan stays the
/// backstop, so a dropped or stale hint costs nothing but a wasted targeted claim.
#[derive(Default)]
pub struct Gate {
    notify: Notify,
    hints: Mutex<VecDeque<String>>,
    /// Waits armed on the gate right now (see [`Gate::parked`]).
    parked: AtomicUsize,
    /// A commit already woke one of them at once since a wait was last armed.
    kicked: AtomicBool,
}

impl Gate {
    /// Resolves when the gate opens; `enable` it before re-checking so no wake is lost.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Counts a wait, armed (enabled) just before, among the gate's parked ones until the
    /// guard drops: the first commit after it wakes one waiter at once instead of at the
    /// next tick.
    pub fn parked(&self) -> Parked<'_> {
        self.parked.fetch_add(1, Ordering::AcqRel);
        self.kicked.store(false, Ordering::Release);
        Parked { gate: self }
    }

    /// A commit's wake: one parked waiter at once, if any and none was woken this way since
    /// the last wait was armed, so a consumer that caught up claims a new message without
    /// waiting for the tick; the others (other groups, discovery) still wake on the tick.
    /// Bounded by the number of waits armed, not by the commit rate.
    fn kick(&self) {
        if self.parked.load(Ordering::Acquire) > 0 && !self.kicked.swap(true, Ordering::AcqRel) {
            self.notify.notify_one();
        }
    }

    /// Takes every pending hint, oldest first.
    pub fn take_hints(&self) -> Vec<String> {
        lock(&self.hints).drain(..).collect()
    }

    fn hint(&self, partition: &str) {
        remember(&mut lock(&self.hints), partition);
    }
}

/// A wait counted on its gate (see [`Gate::parked`]).
pub struct Parked<'a> {
    gate: &'a Gate,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.gate.parked.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A waiter's hold on a gate. Dropping the last handle of a queue's gate removes the gate:
/// every other reference is taken and released under the gate map's lock, so the count seen
/// there is exact.
pub struct GateHandle {
    gate: Arc<Gate>,
    /// The map and name the gate is registered under; `None` for the discovery gate.
    owner: Option<(Arc<Shared>, String)>,
}

impl std::ops::Deref for GateHandle {
    type Target = Gate;

    fn deref(&self) -> &Gate {
        &self.gate
    }
}

impl Drop for GateHandle {
    fn drop(&mut self) {
        let Some((shared, queue)) = &self.owner else {
            return;
        };
        let mut gates = lock(&shared.gates);
        // Two references: the map's and ours. Hints and parked wakes die with the gate; both
        // only ever matter to a waiter.
        if Arc::strong_count(&self.gate) == 2
            && gates.get(queue).is_some_and(|g| Arc::ptr_eq(g, &self.gate))
        {
            gates.remove(queue);
        }
    }
}

/// Adds `partition` to a hint mailbox unless it is already there, dropping the oldest entry
/// when full.
fn remember(mailbox: &mut VecDeque<String>, partition: &str) {
    if mailbox.iter().any(|p| p == partition) {
        return;
    }
    if mailbox.len() >= HINT_MAILBOX {
        mailbox.pop_front();
    }
    mailbox.push_back(partition.to_string());
}

/// One tick's notification to the peers: per marked queue the partitions hinted (empty = the
/// queue only), and the (queue, partition, group, data left behind) leases acks released.
#[derive(Default)]
struct PeerBatch {
    queues: HashMap<String, VecDeque<String>>,
    released: BTreeSet<(String, String, String, bool)>,
    /// Earlier batches were dropped: the peers must treat everything as dirty.
    everything: bool,
}

impl PeerBatch {
    fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.released.is_empty() && !self.everything
    }
}

struct Shared {
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    any: Arc<Gate>,
    marked: Mutex<Marked>,
    /// Wakes the ticker when the first queue is marked.
    tick: Notify,
    /// Marked queues bound for the peer connection (present only with peer wake).
    peer_out: Option<mpsc::Sender<PeerBatch>>,
    peer_in: Mutex<Option<mpsc::Receiver<PeerBatch>>>,
    /// A batch was dropped because [`PEER_BACKLOG`] were queued.
    peer_lost: AtomicBool,
    /// Told what peers' notifications name (set once, by the engine).
    observer: OnceLock<Arc<dyn PeerObserver>>,
}

/// Wakes waiting for the next tick.
#[derive(Default)]
struct Marked {
    local: HashSet<String>,
    any: bool,
    peer: PeerBatch,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WakeGates {
    /// Gates of the broker `broker_id`; `peer` enables cross-broker wake through that channel.
    pub fn new(broker_id: Uuid, peer: Option<Arc<dyn PeerLink>>) -> Self {
        let (tx, rx) = match peer {
            Some(_) => {
                let (tx, rx) = mpsc::channel(PEER_BACKLOG);
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
                peer_lost: AtomicBool::new(false),
                observer: OnceLock::new(),
            }),
            broker_id,
            peer,
            started: AtomicBool::new(false),
        }
    }

    /// The gate of `queue`, created on first use by a waiter and freed when the last waiter
    /// drops its handle, so names polled once cost nothing afterwards.
    pub fn gate(&self, queue: &str) -> GateHandle {
        self.ensure_started();
        let gate = lock(&self.shared.gates)
            .entry(queue.to_string())
            .or_default()
            .clone();
        GateHandle {
            gate,
            owner: Some((self.shared.clone(), queue.to_string())),
        }
    }

    /// The gate discovery pops wait on: opened by a wake of any queue. It never holds hints
    /// and lives as long as the broker.
    pub fn any_gate(&self) -> GateHandle {
        self.ensure_started();
        GateHandle {
            gate: self.shared.any.clone(),
            owner: None,
        }
    }

    /// Hands what peers' notifications name to `observer` from now on (the first call wins).
    pub fn observe(&self, observer: Arc<dyn PeerObserver>) {
        let _ = self.shared.observer.set(observer);
    }

    /// Opens the queue's gate now, for this broker's parked pops only: for a cache that just
    /// found work for them (a due revisit, candidates handed back), not for a commit.
    pub fn open_local(&self, queue: &str) {
        self.shared.open(std::iter::once(queue));
    }

    /// How many per-queue gates exist (one per queue with a waiting pop), for `/metrics`.
    pub fn gate_count(&self) -> usize {
        lock(&self.shared.gates).len()
    }

    /// Marks `queue` for the next tick: its gate (if anyone ever waited on it), the discovery
    /// gate and, with peer wake, the other brokers. For wakes that cannot name a partition
    /// (a released lease, a seek of every partition, a group delete).
    pub fn wake_queue(&self, queue: &str) {
        self.mark(queue, &[], None);
    }

    /// `wake_queue` once `delay` has passed: for work that becomes claimable later (a nacked
    /// batch held back for its queue's retryDelay), so parked pops claim it when the hold
    /// ends rather than at their next backoff tick. The timer holds only a weak reference:
    /// a broker shutting down does not wait for it.
    pub fn wake_queue_after(&self, queue: &str, delay: Duration) {
        self.ensure_started();
        let shared = Arc::downgrade(&self.shared);
        let queue = queue.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(shared) = shared.upgrade() {
                shared.mark(&queue, &[], None);
            }
        });
    }

    /// Like `wake_queue` for every queue a committed write stored into, and records the
    /// `(queue, partition)` pairs as hints: in the gates' mailboxes at once (so a pop woken by
    /// the coming tick finds them) and, with peer wake, in the next notification.
    pub fn wake_partitions<'a>(&self, stored: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut seen: HashSet<(&str, &str)> = HashSet::new();
        let mut by_queue: HashMap<&str, Vec<&str>> = HashMap::new();
        for (queue, partition) in stored {
            if seen.insert((queue, partition)) {
                by_queue.entry(queue).or_default().push(partition);
            }
        }
        for (queue, partitions) in by_queue {
            self.mark(queue, &partitions, None);
        }
    }

    /// Like `wake_queue` for an ack that released `group`'s lease on the partition with data
    /// behind it; the peers learn which lease, so their rings can serve it at once.
    pub fn wake_released(&self, queue: &str, partition: &str, group: &str) {
        self.mark(queue, &[], Some((partition, group)));
    }

    /// Tells the peers (only: nothing here is woken) that an ack released `group`'s lease on
    /// the partition with nothing behind it. A peer's ring that met the lease parked the
    /// partition until the lease's end; the pushes that come next would not hurry it.
    pub fn tell_drained(&self, queue: &str, partition: &str, group: &str) {
        if self.shared.peer_out.is_none() {
            return;
        }
        self.ensure_started();
        let key = (queue.into(), partition.into(), group.into(), false);
        self.shared.update(|m| {
            m.peer.released.insert(key);
        });
    }

    /// Marks `queue` for the next tick, with the pushed `partitions` as hints and the lease a
    /// peer should learn was `released` (partition, group).
    fn mark(&self, queue: &str, partitions: &[&str], released: Option<(&str, &str)>) {
        self.ensure_started();
        self.shared.mark(queue, partitions, released);
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
        if let (Some(link), Some(rx)) = (self.peer.clone(), receiver) {
            rt.spawn(run_peer(
                Arc::downgrade(&self.shared),
                link,
                self.broker_id,
                rx,
            ));
        }
    }
}

impl Shared {
    /// Marks `queue` (and its pushed-partition hints, or the lease a peer should learn was
    /// `released`) for the next tick.
    fn mark(&self, queue: &str, partitions: &[&str], released: Option<(&str, &str)>) {
        // Hinted under the map's lock, never through a clone: a gate's reference count must
        // only move under that lock (see `GateHandle`).
        let has_gate = match lock(&self.gates).get(queue) {
            Some(gate) => {
                for p in partitions {
                    gate.hint(p);
                }
                gate.kick();
                true
            }
            None => false,
        };
        let peers = self.peer_out.is_some();
        self.update(|m| {
            if has_gate && !m.local.contains(queue) {
                m.local.insert(queue.to_string());
            }
            m.any = true;
            if peers {
                match released {
                    Some((p, g)) => {
                        let key = (queue.to_string(), p.to_string(), g.to_string(), true);
                        m.peer.released.insert(key);
                    }
                    None => {
                        let hinted = m.peer.queues.entry(queue.to_string()).or_default();
                        for p in partitions {
                            remember(hinted, p);
                        }
                    }
                }
            }
        });
    }

    /// Changes what waits for the next tick; the first change after a quiet spell starts the
    /// ticker at once.
    fn update(&self, change: impl FnOnce(&mut Marked)) {
        let first = {
            let mut m = lock(&self.marked);
            let was_idle = m.local.is_empty() && !m.any && m.peer.is_empty();
            change(&mut m);
            was_idle
        };
        if first {
            self.tick.notify_one();
        }
    }

    /// Opens the marked gates and hands the marked names to the peer connection.
    fn flush(&self) -> bool {
        let marked = std::mem::take(&mut *lock(&self.marked));
        if marked.local.is_empty() && !marked.any && marked.peer.is_empty() {
            return false;
        }
        self.open(marked.local.iter().map(String::as_str));
        if marked.any {
            self.any.notify.notify_waiters();
        }
        if let (Some(tx), false) = (&self.peer_out, marked.peer.is_empty()) {
            self.send_peer(tx, marked.peer);
        }
        true
    }

    /// Queues `batch` for the peer connection, or drops it when [`PEER_BACKLOG`] batches are
    /// waiting already; then the next batch that fits asks the peers to wake everything.
    fn send_peer(&self, tx: &mpsc::Sender<PeerBatch>, mut batch: PeerBatch) {
        batch.everything |= self.peer_lost.swap(false, Ordering::AcqRel);
        if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(batch) {
            self.peer_lost.store(true, Ordering::Release);
        }
    }

    fn open<'a>(&self, queues: impl Iterator<Item = &'a str>) {
        let gates = lock(&self.gates);
        for q in queues {
            if let Some(g) = gates.get(q) {
                g.notify.notify_waiters();
            }
        }
    }

    /// A peer's wake: tells the observer, records the partition hints on the existing gates,
    /// then opens them.
    fn open_hinted(&self, lines: &[Line<'_>]) {
        if let Some(observer) = self.observer.get() {
            for line in lines {
                match (line.partition, &line.released) {
                    (Some(p), Some(r)) => observer.released(line.queue, p, r.group, r.pending),
                    (Some(p), None) => observer.pushed(line.queue, p),
                    (None, _) => observer.queue(line.queue),
                }
            }
        }
        // A drained release wakes nothing (the observer readies what it must, and opens
        // this broker's gate itself).
        let waking = || {
            lines
                .iter()
                .filter(|l| l.released.as_ref().is_none_or(|r| r.pending))
        };
        if waking().next().is_none() {
            return;
        }
        let gates = lock(&self.gates);
        for line in waking() {
            if let (Some(g), Some(p)) = (gates.get(line.queue), line.partition) {
                g.hint(p);
            }
        }
        for line in waking() {
            if let Some(g) = gates.get(line.queue) {
                g.notify.notify_waiters();
            }
        }
        self.any.notify.notify_waiters();
    }

    /// Opens every gate: after the peer connection (re)connects, notifications may have been
    /// lost, so everything counts as dirty once.
    fn open_all(&self) {
        if let Some(observer) = self.observer.get() {
            observer.everything();
        }
        for g in lock(&self.gates).values() {
            g.notify.notify_waiters();
        }
        self.any.notify.notify_waiters();
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

/// The peer-wake session loop: send the ticker's batches, open local gates for other brokers'
/// notifications; reconnect with backoff when the session drops. A batch whose send failed is
/// lost to the peers, so the first thing a later session sends is a wake-all notice
/// (`owed`): their rings and gates then treat everything as dirty once, as this broker does
/// for what it may have missed receiving.
async fn run_peer(
    shared: Weak<Shared>,
    link: Arc<dyn PeerLink>,
    me: Uuid,
    mut out: mpsc::Receiver<PeerBatch>,
) {
    let mut retry = Duration::from_millis(100);
    let mut owed = false;
    loop {
        match link.connect().await {
            Ok(mut session) => {
                retry = Duration::from_millis(100);
                match shared.upgrade() {
                    Some(s) => s.open_all(),
                    None => return,
                }
                if serve_peer(&shared, &mut session, me, &mut out, &mut owed)
                    .await
                    .is_break()
                {
                    return;
                }
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

/// One connected session. `Break` = the broker is gone; `Continue` = reconnect. `owed`: a
/// send failed since the last notice reached the peers; it is cleared once the wake-all
/// notice is sent.
async fn serve_peer(
    shared: &Weak<Shared>,
    session: &mut PeerConnection,
    me: Uuid,
    out: &mut mpsc::Receiver<PeerBatch>,
    owed: &mut bool,
) -> std::ops::ControlFlow<()> {
    use std::ops::ControlFlow::{Break, Continue};
    if *owed {
        let notice = PeerBatch {
            everything: true,
            ..PeerBatch::default()
        };
        if send_all(session, me, &notice).await.is_err() {
            return Continue(());
        }
        *owed = false;
    }
    loop {
        tokio::select! {
            batch = out.recv() => {
                let Some(batch) = batch else { return Break(()) };
                if send_all(session, me, &batch).await.is_err() {
                    *owed = true;
                    return Continue(());
                }
            }
            note = session.notes.recv() => {
                let Some(payload) = note else { return Continue(()) };
                let Some(s) = shared.upgrade() else { return Break(()) };
                match parse_payload(&payload) {
                    Some((sender, _)) if sender == me => {}
                    Some((_, PeerWake::All)) | None => s.open_all(),
                    Some((_, PeerWake::Queues(lines))) => s.open_hinted(&lines),
                }
            }
        }
    }
}

/// Sends every payload of `batch`; stops at the first failure (logged).
async fn send_all(session: &PeerConnection, me: Uuid, batch: &PeerBatch) -> Result<(), ()> {
    for payload in payloads(me, batch) {
        if let Err(e) = session.sender.notify(&payload).await {
            tracing::warn!(error = %e, "peer wake: notify failed; the peers will be told to wake everything");
            return Err(());
        }
    }
    Ok(())
}

mod payload;

#[cfg(test)]
use payload::Release;
use payload::{parse_payload, payloads, Line, PeerWake};
#[cfg(test)]
mod tests;
