//! The wake gates' side of cross-broker wake (docs/engine.md §8.2): what this broker owes the
//! other brokers of its database and what their notifications mean here. The session itself
//! (connect, send, receive, reconnect) is the engine's (`engine/wake.rs`), which calls this
//! port and moves payloads through the store's listening connection.

use std::sync::Weak;

use tokio::sync::mpsc;
use uuid::Uuid;

use super::payload::{parse_payload, payloads, PeerWake};
use super::{PeerBatch, Shared};

/// Taken once from [`super::WakeGates::peer_port`] by the task that runs the peer session.
pub struct PeerPort {
    shared: Weak<Shared>,
    me: Uuid,
    out: mpsc::Receiver<PeerBatch>,
    /// A send failed since the last wake-all notice reached the peers: their rings and gates
    /// missed something, so the next session first tells them to treat everything as dirty.
    owed: bool,
}

impl PeerPort {
    pub(super) fn new(shared: Weak<Shared>, me: Uuid, out: mpsc::Receiver<PeerBatch>) -> Self {
        PeerPort {
            shared,
            me,
            out,
            owed: false,
        }
    }

    /// Whether the broker is gone (the session should end).
    pub fn gone(&self) -> bool {
        self.shared.strong_count() == 0
    }

    /// The payloads a new session sends before anything else: a wake-all notice when a send
    /// failed since the last one reached the peers.
    pub fn owed(&self) -> Vec<String> {
        if !self.owed {
            return Vec::new();
        }
        let notice = PeerBatch {
            everything: true,
            ..PeerBatch::default()
        };
        payloads(self.me, &notice)
    }

    /// The owed notice reached the peers.
    pub fn settled(&mut self) {
        self.owed = false;
    }

    /// A send failed: what it carried is lost to the peers.
    pub fn send_failed(&mut self) {
        self.owed = true;
    }

    /// The payloads of the next wake tick bound for the peers; `None` once the broker is gone.
    pub async fn next(&mut self) -> Option<Vec<String>> {
        let batch = self.out.recv().await?;
        Some(payloads(self.me, &batch))
    }

    /// What a peer's payload asks for; `None` for this broker's own notifications. A payload
    /// that cannot be read asks for everything, which is never wrong, only wasteful.
    pub fn heard<'a>(&self, payload: &'a str) -> Option<PeerWake<'a>> {
        match parse_payload(payload) {
            Some((sender, _)) if sender == self.me => None,
            Some((_, wake)) => Some(wake),
            None => Some(PeerWake::All),
        }
    }

    /// Opens this broker's gates for what a peer's notification named: every gate for
    /// [`PeerWake::All`] (or a session that just opened: notifications may have been lost
    /// meanwhile), else the named queues with their hints. The caller tells its caches first,
    /// so a woken pop finds them current.
    pub fn open(&self, wake: &PeerWake<'_>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        match wake {
            PeerWake::All => shared.open_all(),
            PeerWake::Queues(lines) => shared.open_hinted(lines),
        }
    }
}
