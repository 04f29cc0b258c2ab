//! The HTTP/1.1 listener and what it bounds per connection. A connection is accepted, then
//! given a slot ([`slots`]): at most `max_connections` are served at once, one peer holds at
//! most its share of them, and a small spare pool beyond them answers `/health` (anything
//! else gets a 503) so liveness stays visible when the broker is full; a connection that finds
//! no slot at all is closed at once. A connection must send its first bytes within
//! `first_byte_timeout_ms`; a request head must be complete within `header_read_timeout_ms` of
//! its first byte; and a connection that has served a request may stay `idle_timeout_ms` with
//! no request in progress and none begun. A slow or silent client thus holds a slot only for
//! the configured times, and any connection at most `http_read_buffer_bytes` of read buffer
//! (the largest request head it can send). The body read timeout lives where bodies are read
//! (`http::extract::RawBody`).
//!
//! The clocks are kept here rather than by hyper, whose head timer starts as soon as a
//! connection waits for a request and so cannot tell an idle keep-alive from a slow head.
//! The bytes a connection reads between requests mark the start of a head.
//!
//! Shutdown stops accepting, lets every connection finish its request in progress (idle ones
//! close at once), and returns when all are closed.

mod slots;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use crate::config::Config;
use crate::error::Error;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};
use slots::{Grant, Refusal, Slots};

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Connections refused a slot are logged, each kind at most once per window.
static SLOT_REFUSALS: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// The one path a spare connection serves.
const HEALTH_PATH: &str = "/health";

/// The per-connection limits, from the config.
#[derive(Clone, Copy)]
struct Limits {
    first_byte: Duration,
    header_read: Duration,
    idle: Duration,
    read_buffer: usize,
}

/// What a connection may be asked: everything, or (on a spare slot) `/health` only, every
/// other request answered with a 503 naming the refusal.
#[derive(Clone, Copy)]
enum Scope {
    Full,
    HealthOnly(Refusal),
}

/// Serves `app` on `listener` until `stop` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    cfg: &Config,
    stop: impl Future<Output = ()>,
) {
    let slots = Slots::new(cfg);
    let limits = Limits {
        first_byte: Duration::from_millis(cfg.first_byte_timeout_ms),
        header_read: Duration::from_millis(cfg.header_read_timeout_ms),
        idle: Duration::from_millis(cfg.idle_timeout_ms),
        read_buffer: cfg.http_read_buffer_bytes,
    };
    let (closing, closing_rx) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let (slot, scope) = match slots.assign(peer.ip()) {
            Grant::Slot(slot) => (slot, Scope::Full),
            Grant::Spare(slot, why) => {
                let what = match why {
                    Refusal::Full => "connection limit reached: answering /health only",
                    Refusal::PeerShare => {
                        "a peer holds its share of connections: answering it /health only"
                    }
                };
                if let Some(suppressed) = SLOT_REFUSALS.admit(what) {
                    tracing::warn!(%peer, suppressed, "{what}");
                }
                (slot, Scope::HealthOnly(why))
            }
            Grant::None => {
                let what = "no connection slot, not even a spare one: closing connections";
                if let Some(suppressed) = SLOT_REFUSALS.admit(what) {
                    tracing::warn!(%peer, suppressed, "{what}");
                }
                continue;
            }
        };
        let refused = Refused {
            max: slots.capacity(),
            per_peer: slots.per_peer(),
        };
        let (app, closing_rx) = (app.clone(), closing_rx.clone());
        tokio::spawn(async move {
            serve_connection(stream, app, scope, refused, limits, closing_rx).await;
            drop(slot);
        });
    }
    drop(listener);
    let _ = closing.send(true);
    // Every connection holds a slot until it is closed: none held means all closed.
    slots.emptied().await;
}

/// The numbers a spare connection's 503 names.
#[derive(Clone, Copy)]
struct Refused {
    max: usize,
    per_peer: usize,
}

impl Refused {
    fn answer(self, why: Refusal) -> Response {
        let reason = match why {
            Refusal::Full => format!(
                "the broker is serving its limit of {} connections; only {HEALTH_PATH} is answered on this one",
                self.max
            ),
            Refusal::PeerShare => format!(
                "this address holds its share of {} of the broker's connections; only {HEALTH_PATH} is answered on this one",
                self.per_peer
            ),
        };
        Error::TryLater(reason).into_response()
    }
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    scope: Scope,
    refused: Refused,
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
            let answer = match scope {
                Scope::HealthOnly(why) if req.uri().path() != HEALTH_PATH => {
                    Ok(refused.answer(why))
                }
                _ => tower_service::Service::call(&mut app, req).await,
            };
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
    // reads, and a keep-alive connection costs at most this much between requests. A spare
    // connection answers one request and closes.
    let conn = http1::Builder::new()
        .max_buf_size(limits.read_buffer)
        .keep_alive(matches!(scope, Scope::Full))
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
    /// Whether any bytes arrived yet: until then the first-byte deadline applies, not the
    /// idle timeout.
    spoke: bool,
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
                spoke: false,
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
            s.spoke = true;
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
    /// either sent nothing for `limits.first_byte` since it was accepted, been idle for
    /// `limits.idle` after a request, or spent `limits.header_read` on a head.
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
                None if !s.spoke => (
                    s.in_progress,
                    s.ready_since + limits.first_byte.min(limits.idle),
                    "first byte timeout",
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
