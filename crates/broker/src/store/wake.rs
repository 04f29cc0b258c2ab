//! The peer-wake connection (docs/engine.md §8.2): one dedicated PostgreSQL connection outside
//! the pool that `LISTEN`s on the wake channel and sends `pg_notify` in autocommit (never inside
//! a push transaction, whose commit would then serialise on the notification queue lock). The
//! wake gates (`accel/wake.rs`) decide what to send and what a received payload means; this
//! module only moves payloads.

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, NoTls, Statement};

use crate::error::Result;

/// The LISTEN/NOTIFY channel shared by every broker of a database.
pub const CHANNEL: &str = "queen_wake";

/// A listening connection: send with [`PeerChannel::notify`]; what other brokers send arrives
/// on the receiver [`listen`] returned. Dropping it closes the connection.
pub struct PeerChannel {
    client: Client,
    notify: Statement,
    driver: JoinHandle<()>,
}

impl Drop for PeerChannel {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Connects with `pg` and listens on [`CHANNEL`]. The receiver ends when the connection does.
pub async fn listen(
    pg: &tokio_postgres::Config,
) -> Result<(PeerChannel, mpsc::UnboundedReceiver<String>)> {
    let mut pg = pg.clone();
    pg.application_name("queen-rs-wake");
    let (client, mut connection) = pg.connect(NoTls).await?;
    let (note_tx, notes) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
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
    let ready = async {
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        client.prepare("SELECT pg_notify($1, $2)").await
    };
    match ready.await {
        Ok(notify) => Ok((
            PeerChannel {
                client,
                notify,
                driver,
            },
            notes,
        )),
        Err(e) => {
            driver.abort();
            Err(e.into())
        }
    }
}

impl PeerChannel {
    /// Sends `payload` to every broker listening on [`CHANNEL`] (this one included).
    pub async fn notify(&self, payload: &str) -> Result<()> {
        crate::telemetry::statement_sent();
        self.client
            .execute(&self.notify, &[&CHANNEL, &payload])
            .await?;
        Ok(())
    }
}
