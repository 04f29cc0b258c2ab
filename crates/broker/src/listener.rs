//! The HTTP/1.1 listener and what it bounds per connection: at most `max_connections`
//! served at once (further connections wait in the kernel's listen backlog, unaccepted, until
//! one closes); a request head complete within `header_read_timeout_ms` of its first byte;
//! and no more than `idle_timeout_ms` with no request in progress and none begun. A slow
//! client thus holds a connection only for the configured times, and any connection at most
//! `http_read_buffer_bytes` of read buffer (the largest request head it can send). The body read timeout lives
//! where bodies are read (`http::extract::RawBody`).
//!
//! Both clocks are kept here rather than by hyper, whose head timer starts as soon as a
//! connection waits for a request and so cannot tell an idle keep-alive from a slow head.
//! The bytes a connection reads between requests mark the start of a head.
//!
//! Shutdown stops accepting, lets every connection finish its request in progress (idle ones
//! close at once), and returns when all are closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};

use crate::config::Config;

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The per-connection limits, from the config.
#[derive(Clone, Copy)]
struct Limits {
    header_read: Duration,
    idle: Duration,
    read_buffer: usize,
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
        read_buffer: cfg.http_read_buffer_bytes,
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
    let io = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    // hyper's read buffer keeps the capacity of the largest read a connection ever made (up to
    // ~400 KiB by default) for as long as it stays open: capped, bodies just arrive in more
    // reads, and a keep-alive connection costs at most this much between requests.
    let conn = http1::Builder::new()
        .max_buf_size(limits.read_buffer)
        .serve_connection(TokioIo::new(io), service);
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
            // No request in progress: dropping the connection closes it.
            why = activity.expiry(limits) => {
                tracing::debug!(why, "closing a connection");
                return;
            }
        }
    }
}

/// One connection's state between requests.
struct State {
    /// Requests being handled.
    in_progress: usize,
    /// When the connection became ready for a request (accepted, or its last request ended).
    ready_since: Instant,
    /// When the first byte of the next request head arrived, if one did.
    head_since: Option<Instant>,
}

/// A connection's [`State`], and a signal for the watchdog whenever it changes.
struct Activity {
    state: Mutex<State>,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Activity {
            state: Mutex::new(State {
                in_progress: 0,
                ready_since: Instant::now(),
                head_since: None,
            }),
            changed: Notify::new(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Applies `f` and wakes the watchdog to recompute its deadline.
    fn update(&self, f: impl FnOnce(&mut State)) {
        self.with(f);
        self.changed.notify_waiters();
    }

    /// Bytes read while no request is in progress begin the next request's head.
    fn bytes_arrived(&self) {
        let begun = self.with(|s| {
            let begins = s.in_progress == 0 && s.head_since.is_none();
            if begins {
                s.head_since = Some(Instant::now());
            }
            begins
        });
        if begun {
            self.changed.notify_waiters();
        }
    }

    /// Resolves, naming the limit, once the connection has no request in progress and has
    /// either been idle for `limits.idle` or spent `limits.header_read` on a head.
    async fn expiry(&self, limits: Limits) -> &'static str {
        loop {
            // Registered before the state is read, so no change between the two is missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (in_progress, deadline, why) = self.with(|s| match s.head_since {
                Some(t) => (
                    s.in_progress,
                    t + limits.header_read,
                    "request head timeout",
                ),
                None => (s.in_progress, s.ready_since + limits.idle, "idle timeout"),
            });
            if in_progress > 0 {
                changed.await;
                continue;
            }
            if Instant::now() >= deadline {
                return why;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline.into()) => {}
                () = changed => {}
            }
        }
    }
}

/// One request in progress (its head is complete); its end or cancellation is recorded on
/// drop.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.update(|s| {
            s.in_progress += 1;
            s.head_since = None;
        });
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.update(|s| {
            s.in_progress = s.in_progress.saturating_sub(1);
            s.ready_since = Instant::now();
            s.head_since = None;
        });
    }
}

/// The connection's socket, reporting the bytes it reads to its [`Activity`].
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
