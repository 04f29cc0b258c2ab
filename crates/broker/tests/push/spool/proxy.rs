//! A TCP proxy in front of PostgreSQL that, once armed, breaks the connection of the next push
//! write PostgreSQL stores (a data row saying `queued`) either after its commit (the broker
//! loses the answer of a committed write: a commit in doubt) or before it (the `Sync` that
//! would commit it is held back and a `Flush` sent instead, so the proxy sees the rows and
//! PostgreSQL rolls the write back when the connection goes: a write that failed as an
//! outage). The broker sees a closed connection either way, for that one write only.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Mutex;

/// Where the armed proxy breaks the write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// After the commit: the answer is lost.
    AfterCommit,
    /// Before it: the `Sync` never reaches PostgreSQL, which rolls the write back.
    BeforeCommit,
}

pub struct CutProxy {
    armed: Arc<AtomicBool>,
    mode: Arc<std::sync::Mutex<Cut>>,
    cuts: Arc<AtomicU32>,
}

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl CutProxy {
    /// Starts the proxy for `upstream`; returns it and the settings that connect through it.
    pub async fn start(upstream: &tokio_postgres::Config) -> (CutProxy, tokio_postgres::Config) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = CutProxy {
            armed: Arc::new(AtomicBool::new(false)),
            mode: Arc::new(std::sync::Mutex::new(Cut::AfterCommit)),
            cuts: Arc::new(AtomicU32::new(0)),
        };
        let shared = (proxy.armed.clone(), proxy.mode.clone(), proxy.cuts.clone());
        let target = upstream.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = connect_upstream(&target).await;
                tokio::spawn(pump(client, server, shared.clone()));
            }
        });
        // `host` adds to the hosts: build the settings anew, with the proxy as the only one.
        let mut through = tokio_postgres::Config::new();
        through.host("127.0.0.1").port(port);
        if let Some(user) = upstream.get_user() {
            through.user(user);
        }
        if let Some(password) = upstream.get_password() {
            through.password(password);
        }
        if let Some(db) = upstream.get_dbname() {
            through.dbname(db);
        }
        (proxy, through)
    }

    /// Breaks the next stored push write, at `cut`.
    pub fn arm(&self, cut: Cut) {
        *self.mode.lock().unwrap() = cut;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Writes broken so far.
    pub fn cuts(&self) -> u32 {
        self.cuts.load(Ordering::SeqCst)
    }
}

async fn connect_upstream(cfg: &tokio_postgres::Config) -> Box<dyn Io> {
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    match cfg.get_hosts().first().expect("a host") {
        tokio_postgres::config::Host::Tcp(host) => {
            Box::new(TcpStream::connect((host.as_str(), port)).await.unwrap())
        }
        tokio_postgres::config::Host::Unix(dir) => Box::new(
            UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))
                .await
                .unwrap(),
        ),
    }
}

type Shared = (Arc<AtomicBool>, Arc<std::sync::Mutex<Cut>>, Arc<AtomicU32>);

/// One connection's state between its two directions.
struct Conn {
    server_w: Mutex<WriteHalf<Box<dyn Io>>>,
    /// A `Sync` held back while an armed proxy waits to see what the statement does, and
    /// whether the statement it follows was over before it came.
    held: Mutex<(Option<Vec<u8>>, bool)>,
}

/// Relays one connection, message by message in both directions.
async fn pump(client: TcpStream, server: Box<dyn Io>, shared: Shared) {
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = tokio::io::split(server);
    let conn = Arc::new(Conn {
        server_w: Mutex::new(server_w),
        held: Mutex::new((None, false)),
    });
    let up = tokio::spawn(upstream(client_r, conn.clone(), shared.clone()));
    downstream(server_r, client_w, conn, shared).await;
    up.abort();
}

async fn read_message(r: &mut (impl AsyncRead + Unpin), typed: bool) -> Option<Vec<u8>> {
    let mut head = vec![0u8; if typed { 5 } else { 4 }];
    r.read_exact(&mut head).await.ok()?;
    let at = head.len() - 4;
    let len = u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    r.read_exact(&mut body).await.ok()?;
    head.extend_from_slice(&body);
    Some(head)
}

/// Client to server; while armed to cut before the commit, a `Sync` after an `Execute` is held.
async fn upstream(mut client_r: OwnedReadHalf, conn: Arc<Conn>, (armed, mode, _): Shared) {
    let Some(startup) = read_message(&mut client_r, false).await else {
        return;
    };
    if conn
        .server_w
        .lock()
        .await
        .write_all(&startup)
        .await
        .is_err()
    {
        return;
    }
    let mut executed = false;
    while let Some(msg) = read_message(&mut client_r, true).await {
        if msg[0] == b'E' {
            executed = true;
            conn.held.lock().await.1 = false;
        }
        let before_commit = *mode.lock().unwrap() == Cut::BeforeCommit;
        if msg[0] == b'S' && executed && before_commit && armed.load(Ordering::SeqCst) {
            executed = false;
            let mut held = conn.held.lock().await;
            if !held.1 {
                held.0 = Some(msg);
                // PostgreSQL sends nothing before a Sync or a Flush: ask for the rows without
                // the commit.
                let flush = [b'H', 0, 0, 0, 4];
                if conn.server_w.lock().await.write_all(&flush).await.is_err() {
                    return;
                }
                continue;
            }
        }
        if msg[0] == b'S' {
            executed = false;
        }
        if conn.server_w.lock().await.write_all(&msg).await.is_err() {
            return;
        }
    }
}

/// Server to client, watching for the write to break.
async fn downstream(
    mut server_r: ReadHalf<Box<dyn Io>>,
    mut client_w: OwnedWriteHalf,
    conn: Arc<Conn>,
    (armed, mode, cuts): Shared,
) {
    let mut cutting = false;
    while let Some(msg) = read_message(&mut server_r, true).await {
        let stored = msg[0] == b'D' && msg.windows(8).any(|w| w == b"\"queued\"");
        if !cutting && stored && armed.swap(false, Ordering::SeqCst) {
            cuts.fetch_add(1, Ordering::SeqCst);
            if *mode.lock().unwrap() == Cut::BeforeCommit {
                return; // the held Sync never goes: PostgreSQL rolls the write back
            }
            cutting = true;
        }
        if cutting {
            if msg[0] == b'Z' {
                return; // the statement is over: committed
            }
            continue;
        }
        if client_w.write_all(&msg).await.is_err() {
            return;
        }
        // A statement that was not the one to break is over: let its Sync go.
        if matches!(msg[0], b'C' | b'E' | b'I' | b's') {
            let mut held = conn.held.lock().await;
            match held.0.take() {
                Some(sync) => {
                    if conn.server_w.lock().await.write_all(&sync).await.is_err() {
                        return;
                    }
                }
                None => held.1 = true,
            }
        }
    }
}
