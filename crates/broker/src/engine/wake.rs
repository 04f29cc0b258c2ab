//! The cross-broker wake session (docs/engine.md §8.2): the wake gates' [`PeerPort`]
//! (accel/wake.rs) moved through the store's listening connection (store/wake.rs), so neither
//! floor below knows the other. What a peer's notification names reaches the hot-list ring
//! before the gates open, so a woken pop finds the ring current.

use std::ops::ControlFlow::{self, Break, Continue};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::accel::hotlist::HotList;
use crate::accel::wake::{PeerPort, PeerWake};
use crate::store::wake::{listen, PeerChannel};

/// The first wait before a reconnect; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Runs the peer session of `port` on the database `pg` until the broker is gone: sends the
/// wake ticks' payloads, hands the peers' to `hotlist` and the gates, and reconnects with
/// backoff when the connection drops.
pub fn start(port: PeerPort, hotlist: HotList, pg: tokio_postgres::Config) {
    tokio::spawn(run(port, hotlist, pg));
}

async fn run(mut port: PeerPort, hotlist: HotList, pg: tokio_postgres::Config) {
    let mut retry = RETRY_MIN;
    while !port.gone() {
        match listen(&pg).await {
            Ok((channel, notes)) => {
                retry = RETRY_MIN;
                if serve(&mut port, &hotlist, &channel, notes).await.is_break() {
                    return;
                }
            }
            Err(e) => tracing::warn!(error = %e.chain(), "peer wake: cannot connect"),
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// One connected session. `Break` = the broker is gone; `Continue` = reconnect.
async fn serve(
    port: &mut PeerPort,
    hotlist: &HotList,
    channel: &PeerChannel,
    mut notes: mpsc::UnboundedReceiver<String>,
) -> ControlFlow<()> {
    // Notifications may have been lost while no session was open.
    heard(port, hotlist, &PeerWake::All);
    if send_all(channel, &port.owed()).await.is_err() {
        return Continue(());
    }
    port.settled();
    loop {
        tokio::select! {
            tick = port.next() => {
                let Some(payloads) = tick else { return Break(()) };
                if send_all(channel, &payloads).await.is_err() {
                    port.send_failed();
                    return Continue(());
                }
            }
            note = notes.recv() => {
                let Some(payload) = note else { return Continue(()) };
                if let Some(wake) = port.heard(&payload) {
                    heard(port, hotlist, &wake);
                }
            }
        }
    }
}

/// A peer's wake: the ring learns it, then the gates open.
fn heard(port: &PeerPort, hotlist: &HotList, wake: &PeerWake<'_>) {
    hotlist.learn_peer(wake);
    port.open(wake);
}

/// Sends every payload; stops at the first failure (logged).
async fn send_all(channel: &PeerChannel, payloads: &[String]) -> Result<(), ()> {
    for payload in payloads {
        if let Err(e) = channel.notify(payload).await {
            tracing::warn!(error = %e.chain(), "peer wake: notify failed; the peers will be told to wake everything");
            return Err(());
        }
    }
    Ok(())
}
