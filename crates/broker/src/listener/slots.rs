//! Connection slots: who may hold one of the `QUEEN_MAX_CONNECTIONS` connections, and the
//! small spare pool beyond them.
//!
//! A connection is accepted first and then given a slot. A peer (an IPv4 address, an IPv6
//! /64) holds at most `QUEEN_PEER_CONNECTION_SHARE` percent of the slots, so one anonymous
//! peer cannot take them all. A connection that finds no slot — the broker is full, or its
//! peer holds its share — gets a spare one if there is one (the spare pool has the same
//! per-peer share): a spare connection answers `/health` and refuses anything else with a
//! 503, so liveness stays visible when the broker is full. With no spare slot either, the
//! connection is closed at once. Every slot is given back when its connection closes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::config::Config;

/// Connections beyond `QUEEN_MAX_CONNECTIONS` that may be open at once, each answering
/// `/health` only.
pub(super) const SPARE_CONNECTIONS: usize = 32;

/// How many slots there are, and how many one peer may hold.
#[derive(Clone, Copy, Debug)]
struct Caps {
    slots: usize,
    slots_per_peer: usize,
    spare: usize,
    spare_per_peer: usize,
}

impl Caps {
    fn new(max: usize, share_percent: u8) -> Self {
        let share = |n: usize| (n * usize::from(share_percent)).div_ceil(100).clamp(1, n);
        Caps {
            slots: max,
            slots_per_peer: share(max),
            spare: SPARE_CONNECTIONS,
            spare_per_peer: share(SPARE_CONNECTIONS),
        }
    }
}

/// Slots held in total and per peer.
#[derive(Default)]
struct Held {
    slots: usize,
    spare: usize,
    peers: HashMap<Peer, PeerHeld>,
}

#[derive(Default, Clone, Copy)]
struct PeerHeld {
    slots: usize,
    spare: usize,
}

/// Who a connection comes from, for the per-peer share: an IPv4 address (also when it comes
/// mapped into IPv6), or the /64 of an IPv6 address (one host usually has a whole /64).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Peer(IpAddr);

impl Peer {
    fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Peer(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer(IpAddr::V4(v4)),
                None => Peer(IpAddr::V6((u128::from(v6) & (u128::MAX << 64)).into())),
            },
        }
    }
}

/// The connection slots of one listener.
pub(super) struct Slots {
    caps: Caps,
    held: Mutex<Held>,
    /// Signalled when the last slot is given back.
    empty: Notify,
}

/// Why a connection got a spare slot rather than a full one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Every slot is held.
    Full,
    /// The peer holds its share of the slots.
    PeerShare,
}

/// What an accepted connection was given.
pub(super) enum Grant {
    /// A slot: the connection is served.
    Slot(Slot),
    /// A spare slot: the connection answers `/health` only.
    Spare(Slot, Refusal),
    /// Nothing: the connection is closed.
    None,
}

/// A slot held by one connection; given back on drop.
pub(super) struct Slot {
    slots: Arc<Slots>,
    peer: Peer,
    spare: bool,
}

impl Slots {
    pub(super) fn new(cfg: &Config) -> Arc<Self> {
        let max = usize::try_from(cfg.max_connections).unwrap_or(usize::MAX);
        Arc::new(Slots {
            caps: Caps::new(max, cfg.peer_connection_share),
            held: Mutex::new(Held::default()),
            empty: Notify::new(),
        })
    }

    /// The number of full slots.
    pub(super) fn capacity(&self) -> usize {
        self.caps.slots
    }

    /// The full slots one peer may hold.
    pub(super) fn per_peer(&self) -> usize {
        self.caps.slots_per_peer
    }

    fn with<R>(&self, f: impl FnOnce(&mut Held) -> R) -> R {
        f(&mut self.held.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A slot for a connection from `ip`: a full one if the broker and the peer have room,
    /// else a spare one if the spare pool and the peer's share of it have room.
    pub(super) fn assign(self: &Arc<Self>, ip: IpAddr) -> Grant {
        let peer = Peer::of(ip);
        let caps = self.caps;
        let granted = self.with(|held| {
            let mine = held.peers.get(&peer).copied().unwrap_or_default();
            let refusal = if held.slots >= caps.slots {
                Refusal::Full
            } else if mine.slots >= caps.slots_per_peer {
                Refusal::PeerShare
            } else {
                held.slots += 1;
                held.peers.entry(peer).or_default().slots += 1;
                return Some(None);
            };
            if held.spare >= caps.spare || mine.spare >= caps.spare_per_peer {
                return None;
            }
            held.spare += 1;
            held.peers.entry(peer).or_default().spare += 1;
            Some(Some(refusal))
        });
        let slot = |spare| Slot {
            slots: self.clone(),
            peer,
            spare,
        };
        match granted {
            Some(None) => Grant::Slot(slot(false)),
            Some(Some(refusal)) => Grant::Spare(slot(true), refusal),
            None => Grant::None,
        }
    }

    /// Resolves once no slot is held (every connection closed).
    pub(super) async fn emptied(&self) {
        loop {
            let changed = self.empty.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.with(|held| held.slots + held.spare == 0) {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let empty = self.slots.with(|held| {
            if self.spare {
                held.spare = held.spare.saturating_sub(1);
            } else {
                held.slots = held.slots.saturating_sub(1);
            }
            if let Some(mine) = held.peers.get_mut(&self.peer) {
                if self.spare {
                    mine.spare = mine.spare.saturating_sub(1);
                } else {
                    mine.slots = mine.slots.saturating_sub(1);
                }
                if mine.slots == 0 && mine.spare == 0 {
                    held.peers.remove(&self.peer);
                }
            }
            held.slots + held.spare == 0
        });
        if empty {
            self.slots.empty.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(max: usize, share: u8) -> Arc<Slots> {
        Arc::new(Slots {
            caps: Caps::new(max, share),
            held: Mutex::new(Held::default()),
            empty: Notify::new(),
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn kind(g: &Grant) -> &'static str {
        match g {
            Grant::Slot(_) => "slot",
            Grant::Spare(_, Refusal::Full) => "spare/full",
            Grant::Spare(_, Refusal::PeerShare) => "spare/share",
            Grant::None => "none",
        }
    }

    #[test]
    fn a_peer_holds_its_share_then_spare_then_nothing() {
        let s = slots(4, 50);
        let a = ip("10.0.0.1");
        let held: Vec<Grant> = (0..2 + SPARE_CONNECTIONS / 2 + 1)
            .map(|_| s.assign(a))
            .collect();
        let kinds: Vec<_> = held.iter().map(kind).collect();
        assert_eq!(&kinds[..2], ["slot", "slot"]);
        assert!(kinds[2..kinds.len() - 1]
            .iter()
            .all(|k| *k == "spare/share"));
        assert_eq!(kinds.last(), Some(&"none"));
        // Other peers still get the other half.
        let others: Vec<Grant> = ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
            .into_iter()
            .map(|p| s.assign(ip(p)))
            .collect();
        let kinds: Vec<_> = others.iter().map(kind).collect();
        assert_eq!(kinds, ["slot", "slot", "spare/full"]);
    }

    #[test]
    fn slots_come_back_on_drop() {
        let s = slots(1, 100);
        let first = s.assign(ip("10.0.0.1"));
        assert_eq!(kind(&first), "slot");
        let second = s.assign(ip("10.0.0.1"));
        assert_eq!(kind(&second), "spare/full");
        drop(first);
        assert_eq!(kind(&s.assign(ip("10.0.0.1"))), "slot");
    }

    #[test]
    fn ipv6_peers_are_their_64_and_mapped_ipv4_is_ipv4() {
        assert_eq!(
            Peer::of(ip("2001:db8::1")),
            Peer::of(ip("2001:db8::ffff:1"))
        );
        assert_ne!(Peer::of(ip("2001:db8::1")), Peer::of(ip("2001:db8:0:1::1")));
        assert_eq!(Peer::of(ip("::ffff:10.0.0.1")), Peer::of(ip("10.0.0.1")));
    }

    #[test]
    fn the_share_is_at_least_one_slot() {
        let caps = Caps::new(1, 1);
        assert_eq!((caps.slots_per_peer, caps.spare_per_peer), (1, 1));
        let caps = Caps::new(4096, 50);
        assert_eq!(caps.slots_per_peer, 2048);
    }
}
