//! Long-poll wake gates: one `Notify` per queue that a parked pop waits on, opened by a push
//! to that queue, plus one "any queue" gate for discovery pops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Per-queue gates, created lazily by the first waiter; pushes only touch existing gates.
#[derive(Default)]
pub struct WakeGates {
    gates: Mutex<HashMap<String, Arc<Notify>>>,
    any: Arc<Notify>,
}

impl WakeGates {
    /// The gate of `queue`, created on first use by a waiter.
    pub fn gate(&self, queue: &str) -> Arc<Notify> {
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        gates.entry(queue.to_string()).or_default().clone()
    }

    /// The gate discovery pops wait on: opened by a push to any queue.
    pub fn any_gate(&self) -> Arc<Notify> {
        self.any.clone()
    }

    /// Opens the gate of `queue` (if anyone ever waited on it) and the discovery gate.
    pub fn wake_queue(&self, queue: &str) {
        let gate = self.gates.lock().unwrap_or_else(|p| p.into_inner()).get(queue).cloned();
        if let Some(g) = gate {
            g.notify_waiters();
        }
        self.any.notify_waiters();
    }
}
