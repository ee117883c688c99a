//! The accept loop of the admin and metrics servers, with what bounds a peer's hold on them:
//!
//! - at most [`ServerLimits::max_connections`] connections open at once per port. A connection
//!   arriving when all are taken closes the oldest one that has no request in flight (idle, or
//!   still sending its headers), so idle and slow peers cannot keep a probe out. When every one
//!   is handling a request, a small reserve ([`RESERVE`]) serves one request per connection
//!   within [`RESERVE_TIMEOUT`] and closes it; past the reserve too, the connection is closed at
//!   once;
//! - a connection waiting for a request (since accept, or since its last request was handled:
//!   a peer that does not read its response is cut too) is closed after
//!   [`ServerLimits::idle_timeout`] without a byte;
//! - once a request's first byte arrived, its headers must be complete within
//!   [`ServerLimits::header_read_timeout`] (a peer sending one byte a second is cut there);
//!   a watchdog beside each connection keeps both, whether or not anything reads the socket;
//! - an `accept` that fails (e.g. out of file descriptors) is logged and retried after a pause,
//!   never a busy loop; [`raise_open_files_limit`] makes that rarer.
//!
//! A request being handled has no timer: a reload may take its compile's time. A connection
//! buffers at most `MAX_BUF`.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::sync::lock;

/// Connections served when every slot is handling a request, each for one request within
/// [`RESERVE_TIMEOUT`]: enough for a kubelet's probes and a scrape.
pub const RESERVE: usize = 16;

/// Idle and header deadline of a connection served from the reserve.
pub const RESERVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause after a failed `accept` (EMFILE, ENFILE, ...), so it is not retried in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The bounds of one server (`admin.maxConnections`, `admin.headerReadTimeout`,
/// `admin.idleTimeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once (default 128); see the module's doc for what comes past it.
    pub max_connections: usize,
    /// From a request's first byte to the end of its headers (default 10 s).
    pub header_read_timeout: Duration,
    /// A connection without a request in flight and without a byte for this long is closed
    /// (default 30 s).
    pub idle_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 128,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Connections closed to make room for a new one (the oldest without a request in flight),
/// over every server of the process (`wisp_admin_connections_shed_total`).
pub static CONNECTIONS_SHED: AtomicU64 = AtomicU64::new(0);

/// Connections closed at accept: every slot handling a request and the reserve taken
/// (`wisp_admin_connections_refused_total`).
pub static CONNECTIONS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Connections closed by their idle or header-read timeout
/// (`wisp_admin_connections_timed_out_total`).
pub static CONNECTIONS_TIMED_OUT: AtomicU64 = AtomicU64::new(0);

/// Most bytes buffered per connection (hyper's default is ~400 KiB): a request head is a few
/// hundred bytes, so a peer cannot make the host hold more than this per connection.
const MAX_BUF: usize = 64 * 1024;

/// The open connections of one server, oldest first.
#[derive(Default)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, Arc<Conn>>,
}

/// One open connection: where it is in the request cycle, and how to close it.
struct Conn {
    phase: Mutex<Phase>,
    /// Signalled on every change of `phase`, for the watchdog.
    changed: Notify,
    close: CancellationToken,
}

/// Where a connection is: what its next deadline counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request since then (accept, or the end of the last request).
    Idle(Instant),
    /// A request's head arriving since its first byte.
    Head(Instant),
    /// A request being handled: no deadline.
    Busy,
}

impl Conn {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            phase: Mutex::new(Phase::Idle(Instant::now())),
            changed: Notify::new(),
            close: CancellationToken::new(),
        })
    }

    fn set(&self, phase: Phase) {
        *lock(&self.phase) = phase;
        self.changed.notify_one();
    }

    fn busy(&self) -> bool {
        *lock(&self.phase) == Phase::Busy
    }
}

impl Slots {
    /// A slot for a new connection: a free one, or that of the oldest connection with no
    /// request in flight (closed now); `None` when every one is handling a request.
    fn take(&mut self, max: usize) -> Option<(u64, Arc<Conn>)> {
        if self.open.len() >= max {
            let oldest = self
                .open
                .iter()
                .find(|(_, c)| !c.busy())
                .map(|(id, _)| *id)?;
            if let Some(c) = self.open.remove(&oldest) {
                c.close.cancel();
                CONNECTIONS_SHED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let id = self.next;
        self.next += 1;
        let c = Conn::new();
        self.open.insert(id, c.clone());
        Some((id, c))
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes; then stops
/// accepting, closes idle connections and lets requests in flight finish.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let slots = Arc::new(Mutex::new(Slots::default()));
    let reserve = Arc::new(Semaphore::new(RESERVE));
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut failing = false;
    loop {
        let tcp = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, "admin server: accept failed; retrying every 50 ms");
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        if std::mem::take(&mut failing) {
            tracing::info!("admin server: accepting again");
        }
        let taken = lock(&slots).take(limits.max_connections.max(1));
        let (hold, conn, limits) = if let Some((id, conn)) = taken {
            let hold = Hold::Slot(id, slots.clone());
            (hold, conn, ConnLimits::from(limits))
        } else if let Ok(p) = reserve.clone().try_acquire_owned() {
            (Hold::Reserve(p), Conn::new(), ConnLimits::reserve())
        } else {
            CONNECTIONS_REFUSED.fetch_add(1, Ordering::Relaxed);
            drop(tcp);
            continue;
        };
        let (router, stop) = (router.clone(), stop.clone());
        tracker.spawn(async move {
            serve_connection(tcp, router, limits, &conn, stop).await;
            drop(hold);
        });
    }
    stop.cancel();
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// What a connection holds while open: a slot (given back on drop, unless it was taken to make
/// room) or a permit of the reserve.
enum Hold {
    Slot(u64, Arc<Mutex<Slots>>),
    /// Held only to be dropped with the connection.
    Reserve(#[allow(dead_code)] OwnedSemaphorePermit),
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Hold::Slot(id, slots) = self {
            lock(slots).open.remove(id);
        }
    }
}

/// The deadlines and keep-alive of one connection.
#[derive(Clone, Copy, Debug)]
struct ConnLimits {
    header: Duration,
    idle: Duration,
    keep_alive: bool,
}

impl From<ServerLimits> for ConnLimits {
    fn from(l: ServerLimits) -> Self {
        Self {
            header: l.header_read_timeout,
            idle: l.idle_timeout,
            keep_alive: true,
        }
    }
}

impl ConnLimits {
    /// One request, short deadlines, then closed.
    fn reserve() -> Self {
        Self {
            header: RESERVE_TIMEOUT,
            idle: RESERVE_TIMEOUT,
            keep_alive: false,
        }
    }
}

/// Serves one connection until it ends, its watchdog cuts it, `stop` asks for a graceful
/// close, or `conn.close` for an immediate one (its slot was taken).
async fn serve_connection(
    tcp: TcpStream,
    router: Router,
    limits: ConnLimits,
    conn: &Arc<Conn>,
    stop: CancellationToken,
) {
    let io = TokioIo::new(Deadlines {
        tcp,
        conn: conn.clone(),
    });
    let inner = TowerToHyperService::new(router);
    let c = conn.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        c.set(Phase::Busy);
        let busy = Busy(c.clone());
        let call = inner.call(req);
        async move {
            let r = call.await;
            drop(busy);
            r
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(limits.keep_alive).max_buf_size(MAX_BUF);
    let http = builder.serve_connection(io, service);
    let mut http = std::pin::pin!(http);
    let r = tokio::select! {
        r = http.as_mut() => r,
        () = conn.close.cancelled() => return,
        why = watchdog(conn, limits) => return timed_out(why),
        () = stop.cancelled() => {
            http.as_mut().graceful_shutdown();
            tokio::select! {
                r = http.as_mut() => r,
                why = watchdog(conn, limits) => return timed_out(why),
            }
        }
    };
    if let Err(e) = r {
        tracing::debug!(error = %e, "admin connection closed");
    }
}

fn timed_out(why: &str) {
    CONNECTIONS_TIMED_OUT.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(why, "admin connection closed");
}

/// Returns (with why) once `conn` has been idle past `limits.idle`, or a request's head has
/// been arriving for longer than `limits.header`; never while a request is handled. Runs beside
/// the connection, so it fires whether or not anything reads the socket.
async fn watchdog(conn: &Conn, limits: ConnLimits) -> &'static str {
    loop {
        let deadline = match *lock(&conn.phase) {
            Phase::Busy => None,
            Phase::Idle(t) => Some((t + limits.idle, "idle past the idle timeout")),
            Phase::Head(t) => Some((
                t + limits.header,
                "request headers not complete within the header read timeout",
            )),
        };
        // A change between the read above and this wait leaves a permit: it is not missed.
        let changed = conn.changed.notified();
        match deadline {
            None => changed.await,
            Some((at, why)) if at <= Instant::now() => return why,
            Some((at, _)) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = changed => {}
                }
            }
        }
    }
}

/// A request being handled; its drop ends it (the connection is idle from then on).
struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.set(Phase::Idle(Instant::now()));
    }
}

/// A connection's socket that marks the first byte of a request's head (the header read
/// timeout counts from it) for the [`watchdog`].
struct Deadlines {
    tcp: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Deadlines {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            let mut phase = lock(&this.conn.phase);
            if matches!(*phase, Phase::Idle(_)) {
                *phase = Phase::Head(Instant::now());
                drop(phase);
                this.conn.changed.notify_one();
            }
        }
        r
    }
}

impl AsyncWrite for Deadlines {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// Raises the soft limit on open files to the hard limit (the admin and metrics servers, the
/// API clients and the module cache share it; many systems start processes at a soft 1,024).
/// Returns the (old, new) soft limit, `u64::MAX` for none; an error is setrlimit's.
pub fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    // `None` is no limit.
    let (old, max) = (
        lim.current.unwrap_or(u64::MAX),
        lim.maximum.unwrap_or(u64::MAX),
    );
    if old >= max {
        return Ok((old, old));
    }
    let raised = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    setrlimit(Resource::Nofile, raised).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("setrlimit(RLIMIT_NOFILE, {max}): {e}"),
        )
    })?;
    Ok((old, max))
}
