//! Long-poll wake gates (docs/engine.md §8): one `Notify` per queue that parked pops wait on, plus
//! one "any queue" gate for discovery pops.
//!
//! A wake (`wake_queue`, called after a push, an ack release or a seek has committed) is not
//! delivered inline: it marks the queue and a ticker opens the marked gates, at once when it
//! was idle and then at most once per 5 ms tick, so a hot queue costs a bounded number of
//! wake-ups per second rather than one per push. Only the first commit after a pop armed its
//! wait also wakes one waiter of the queue at once (`Gate::parked`), so a consumer that caught
//! up does not wait for the tick. With peer wake on, the same tick queues the marked queue
//! names for the other brokers on a [`PeerPort`], which the engine's peer session
//! (`engine/wake.rs`) drains into the store floor's `LISTEN` connection; it hands the peers'
//! payloads back to the port, which opens the gates they name (this module writes no SQL).
//! Wakes are hints: a lost one costs a parked pop at most one backoff interval.
//!
//! A push also names the partitions it stored into (`wake_partitions`): each gate keeps a
//! mailbox of the newest 64 pushed-partition hints (drop-oldest), which a woken wildcard pop
//! tries with targeted claims before its candidate scan (docs/engine.md §5.2, §8.1). Peer
//! notifications carry the same hints as `queue\x1fpartition` lines while they fit, and an
//! ack that released a lease as a `queue\x1fpartition\x1fgroup` line (`wake_released`, with
//! data behind it; `tell_drained`, without: nothing to wake, but a peer's ring that met the
//! lease must not wait for its end); the payload format is `wake/payload.rs`. The engine tells
//! the hot-list ring what a peer's notification names before the port opens the gates, so
//! other brokers' commits reach the local caches first.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

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

/// The gates of one broker. Pushes only touch gates that a waiter created.
pub struct WakeGates {
    shared: Arc<Shared>,
    broker_id: Uuid,
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
    /// Gates of the broker `broker_id`; `peer` enables cross-broker wake (through the
    /// [`PeerPort`]).
    pub fn new(broker_id: Uuid, peer: bool) -> Self {
        let (tx, rx) = match peer {
            true => {
                let (tx, rx) = mpsc::channel(PEER_BACKLOG);
                (Some(tx), Some(rx))
            }
            false => (None, None),
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
            }),
            broker_id,
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

    /// The port of the peer session: `None` with peer wake off, or once taken.
    pub fn peer_port(&self) -> Option<PeerPort> {
        let out = lock(&self.shared.peer_in).take()?;
        Some(PeerPort::new(
            Arc::downgrade(&self.shared),
            self.broker_id,
            out,
        ))
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

    /// Starts the ticker on the current runtime, once.
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

    /// A peer's wake: records the partition hints on the existing gates, then opens them.
    fn open_hinted(&self, lines: &[Line<'_>]) {
        // A drained release wakes nothing (the hot-list readies what it must, and opens this
        // broker's gate itself).
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

mod payload;
mod port;

#[cfg(test)]
use payload::{parse_payload, payloads};
pub use payload::{Line, PeerWake, Release};
pub use port::PeerPort;
#[cfg(test)]
mod tests;
