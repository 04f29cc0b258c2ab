//! Connection buffers (docs/performance.md §7.3): a pooled tokio-postgres connection keeps, for
//! its whole life, the capacity of the largest statement it sent (the client's bind buffer and
//! the codec's write buffer) and of the largest answer it read (the codec's read buffer). Every
//! connection of the pool ends up holding the largest push bundle and the largest pop answer
//! any request ever gave it, so the pool's memory grew with its size, not with its work.
//!
//! This module charges each connection with an estimate of those buffers, from the payload
//! bytes the engine reports for the statements that carry payloads ([`Load`]), and keeps the
//! sum within a budget (`QUEEN_DB_BUFFERS_MB`). Beyond it, idle charged connections are
//! closed, least recently used first; when the connections over the budget are all busy, the
//! one just charged is marked, and the pool closes it instead of handing it out again. A closed
//! connection only costs a new one later (created lazily by the pool): nothing it did is lost,
//! since it is only retired between requests.
//!
//! Retirements are paced: at most one per [`RETIRE_EVERY`]. A new connection is a new
//! PostgreSQL backend that loads its catalog caches, compiles the PL/pgSQL functions again and
//! plans every statement afresh; under overload, bundles at their cap kept every connection
//! over the budget, and retiring one after each bundle spent PostgreSQL's CPU on reconnections
//! until delivery fell to a third (issue 36). Between retirements the total may stay over the
//! budget; it converges one connection at a time.
//!
//! Identity: a connection's statement cache (`Arc<StatementCache>`, one per connection, dropped
//! with it). A charge holds a weak reference to it, so its address is not reused while the
//! charge exists; a charge whose cache has died belongs to a closed connection and is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use deadpool_postgres::{ClientWrapper, Pool, StatementCache};

/// The payload bytes one statement moved: what it sent (bound parameters) and what it read
/// (its answer's rows). Only statements that carry payloads report one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    pub sent: usize,
    pub received: usize,
}

impl Load {
    pub fn sent(bytes: usize) -> Self {
        Load {
            sent: bytes,
            received: 0,
        }
    }

    pub fn received(bytes: usize) -> Self {
        Load {
            sent: 0,
            received: bytes,
        }
    }
}

/// The budget and the charges; share it behind an `Arc`.
pub struct Buffers {
    budget: usize,
    state: Mutex<State>,
    retired: AtomicU64,
}

/// What [`Buffers::metrics`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuffersSnapshot {
    pub budget_bytes: u64,
    /// The estimate over the charged connections now.
    pub bytes: u64,
    pub connections: u64,
    /// Connections closed to keep within the budget, since start.
    pub retired: u64,
}

/// The shortest time between two retirements.
pub const RETIRE_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    charges: HashMap<usize, Charge>,
    total: usize,
    /// When the last connection was retired.
    last_retired: Option<Instant>,
}

struct Charge {
    cache: Weak<StatementCache>,
    /// The largest statement sent and answer read so far.
    sent: usize,
    received: usize,
    /// Over the budget while busy: closed when the pool would hand it out next.
    retire: bool,
}

impl Charge {
    /// Estimated bytes held: the bind buffer and the codec's write buffer each hold the largest
    /// statement, the read buffer the largest answer; all three grow by doubling, so they sit
    /// between one and two times that: charged at two.
    fn bytes(&self) -> usize {
        2 * (2 * self.sent + self.received)
    }
}

fn key(cache: &Arc<StatementCache>) -> usize {
    Arc::as_ptr(cache) as usize
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Buffers {
    pub fn new(budget_bytes: usize) -> Self {
        Buffers {
            budget: budget_bytes,
            state: Mutex::new(State::default()),
            retired: AtomicU64::new(0),
        }
    }

    /// Charges the connection of `cache` with `load`, then keeps within the budget: idle
    /// charged connections of `pool` are closed, least recently used first, and if that is not
    /// enough this one is marked for retirement.
    pub fn charge(&self, pool: &Pool, cache: &Arc<StatementCache>, load: Load) {
        if !self.record(cache, load) {
            return;
        }
        let removed = pool.retain(|client, _| !self.evict_idle(client));
        drop(removed);
        let mut st = lock(&self.state);
        if st.total > self.budget {
            if let Some(charge) = st.charges.get_mut(&key(cache)) {
                charge.retire = true;
            }
        }
    }

    /// Records the charge; answers whether the total is now over the budget (dead charges
    /// dropped first).
    fn record(&self, cache: &Arc<StatementCache>, load: Load) -> bool {
        if load == Load::default() {
            return false; // nothing to charge: lean connections are never closed
        }
        let mut st = lock(&self.state);
        let charge = st.charges.entry(key(cache)).or_insert_with(|| Charge {
            cache: Arc::downgrade(cache),
            sent: 0,
            received: 0,
            retire: false,
        });
        let before = charge.bytes();
        charge.sent = charge.sent.max(load.sent);
        charge.received = charge.received.max(load.received);
        let grown = charge.bytes() - before;
        st.total += grown;
        if st.total <= self.budget {
            return false;
        }
        st.prune();
        st.total > self.budget
    }

    /// The pool's question for an idle connection while over the budget: close it? Yes for a
    /// charged one, until the total fits.
    fn evict_idle(&self, client: &ClientWrapper) -> bool {
        let mut st = lock(&self.state);
        if st.total <= self.budget || !st.may_retire() {
            return false;
        }
        let evicted = st.remove(key(&client.statement_cache));
        if evicted {
            st.last_retired = Some(Instant::now());
            self.retired.fetch_add(1, Relaxed);
        }
        evicted
    }

    /// The pool's question before handing out an idle connection: false when it was marked
    /// for retirement and the pace allows one (it is then closed, and its charge dropped).
    pub fn may_serve(&self, client: &ClientWrapper) -> bool {
        let k = key(&client.statement_cache);
        let mut st = lock(&self.state);
        if !st.charges.get(&k).is_some_and(|c| c.retire) || !st.may_retire() {
            return true;
        }
        st.remove(k);
        st.last_retired = Some(Instant::now());
        self.retired.fetch_add(1, Relaxed);
        false
    }

    pub fn metrics(&self) -> BuffersSnapshot {
        let st = lock(&self.state);
        BuffersSnapshot {
            budget_bytes: self.budget as u64,
            bytes: st.total as u64,
            connections: st.charges.len() as u64,
            retired: self.retired.load(Relaxed),
        }
    }
}

impl State {
    /// Whether [`RETIRE_EVERY`] has passed since the last retirement.
    fn may_retire(&self) -> bool {
        self.last_retired
            .is_none_or(|t| t.elapsed() >= RETIRE_EVERY)
    }

    /// Drops the charge of `k`; whether there was one.
    fn remove(&mut self, k: usize) -> bool {
        let Some(charge) = self.charges.remove(&k) else {
            return false;
        };
        self.total -= charge.bytes();
        true
    }

    /// Drops the charges of connections that closed.
    fn prune(&mut self) {
        let dead: Vec<usize> = self
            .charges
            .iter()
            .filter(|(_, c)| c.cache.strong_count() == 0)
            .map(|(&k, _)| k)
            .collect();
        for k in dead {
            self.remove(k);
        }
    }
}
