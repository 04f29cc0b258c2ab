//! Cross-broker wake wiring: the wake gates' [`PeerLink`] (accel/wake.rs) served by the store's
//! listening connection (store/wake.rs), so neither of the two floors below knows the other.

use futures::future::BoxFuture;

use crate::accel::wake::{PeerConnection, PeerLink, PeerSender};
use crate::store::wake::{listen, PeerChannel};

/// The peer link of a broker whose database is reached with these settings.
pub struct StorePeerLink(pub tokio_postgres::Config);

impl PeerLink for StorePeerLink {
    fn connect(&self) -> BoxFuture<'_, Result<PeerConnection, String>> {
        Box::pin(async move {
            let (channel, notes) = listen(&self.0).await.map_err(|e| e.chain())?;
            Ok(PeerConnection {
                sender: Box::new(channel),
                notes,
            })
        })
    }
}

impl PeerSender for PeerChannel {
    fn notify<'a>(&'a self, payload: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            PeerChannel::notify(self, payload)
                .await
                .map_err(|e| e.chain())
        })
    }
}
