//! The HTTP/1.1 listener and what it bounds per connection: at most `max_connections`
//! served at once (further connections wait in the kernel's listen backlog, unaccepted, until
//! one closes), a complete request head within `header_read_timeout_ms` of the connection
//! being ready for a request, and no more than `idle_timeout_ms` open with no request in
//! progress. A slow client thus holds a connection only for the configured times. The body
//! read timeout lives where bodies are read (`http::extract::RawBody`).
//!
//! Shutdown stops accepting, lets every connection finish its request in progress (idle ones
//! close at once), and returns when all are closed.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::config::Config;

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The per-connection limits, from the config.
#[derive(Clone, Copy)]
struct Limits {
    header_read: Duration,
    idle: Duration,
}

/// Serves `app` on `listener` until `stop` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    cfg: &Config,
    stop: impl Future<Output = ()>,
) {
    let max = u32::try_from(cfg.max_connections).unwrap_or(u32::MAX);
    let slots = Arc::new(Semaphore::new(max as usize));
    let limits = Limits {
        header_read: Duration::from_millis(cfg.header_read_timeout_ms),
        idle: Duration::from_millis(cfg.idle_timeout_ms),
    };
    let (closing, closing_rx) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        // A slot first: beyond the cap, connections stay in the backlog, not accepted.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = &mut stop => break,
        };
        let Ok(slot) = slot else { break };
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        match stream {
            Ok((stream, _)) => {
                let (app, closing_rx) = (app.clone(), closing_rx.clone());
                tokio::spawn(async move {
                    serve_connection(stream, app, limits, closing_rx).await;
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
    drop(listener);
    let _ = closing.send(true);
    // Every connection holds a slot until it is closed: all slots back means all closed.
    let _ = slots.acquire_many(max).await;
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    limits: Limits,
    mut closing: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = Busy::start(&requests);
        let mut app = app.clone();
        async move {
            let answer = tower_service::Service::call(&mut app, req).await;
            drop(busy);
            answer
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut shutting = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            // A closed channel means the server is gone: close as well.
            _ = closing.changed(), if !shutting => {
                conn.as_mut().graceful_shutdown();
                shutting = true;
            }
            () = activity.idle_for(limits.idle), if !shutting => {
                conn.as_mut().graceful_shutdown();
                shutting = true;
            }
        }
    }
}

/// Requests in progress on one connection, and when the last one ended.
struct Activity(Mutex<(usize, Instant)>);

impl Activity {
    fn new() -> Self {
        Activity(Mutex::new((0, Instant::now())))
    }

    fn state(&self) -> (usize, Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves once the connection has had no request in progress for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let (in_progress, since) = self.state();
            if in_progress > 0 {
                tokio::time::sleep(idle).await;
                continue;
            }
            let quiet = since.elapsed();
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    }
}

/// One request in progress; its end (or its cancellation) is recorded on drop.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.0.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(1);
        state.1 = Instant::now();
    }
}
