//! Accepting connections without being exhausted by them, and draining without refusing them.
//!
//! `axum::serve` accepts every connection and keeps each as long as its peer likes: 600 that never
//! send a byte use up a process's descriptors and nobody is served. Here:
//!
//! * **A request's head must arrive in time**: a connection that has not sent a whole request head
//!   within [`ConnectionLimits::header_read_timeout`] of being accepted is closed, and so is a
//!   request head that trickles in on a kept-alive connection (hyper's own timer, same bound).
//! * **Idle connections go**: one with no request in flight and no byte either way for
//!   [`ConnectionLimits::idle_timeout`] is closed (a stream that sends keep-alives is not idle).
//! * **Caps with eviction, not exhaustion**: at most [`ConnectionLimits::max_connections`] at once
//!   (never more than the descriptors the process may open, less a reserve for its own files),
//!   and at most [`ConnectionLimits::max_fresh_per_peer`] from one address that have not yet sent
//!   a request. Past a cap the oldest connection that has no request in flight is closed to make
//!   room (the peer's own, for the per-address cap); when every connection is busy, new ones wait
//!   in the kernel's backlog until one ends. A busy server keeps answering `/healthz`.
//! * **Draining as documented**: when the shutdown signal comes the server goes on accepting, so
//!   that a new request is told `503` with `Retry-After` rather than refused a connection, while
//!   the calls in flight finish (see [`crate::serve`]); only then does it stop accepting and let
//!   each connection finish its response.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// How connections are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections at once (lowered to what the process's descriptor limit allows).
    pub max_connections: usize,
    /// Connections from one address that have not yet sent a whole request head.
    pub max_fresh_per_peer: usize,
    /// How long a request head may take to arrive (from the accept, or from its first byte).
    pub header_read_timeout: Duration,
    /// How long a connection with nothing in flight may stay silent.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_fresh_per_peer: 64,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

impl ConnectionLimits {
    /// These limits with `max_connections` no higher than the descriptors the process may open
    /// (its soft `RLIMIT_NOFILE`), less a reserve for its own files (the journal, spill files,
    /// commands' pipes, the database and Redis pools): a quarter of the limit, at least 64.
    pub fn within_descriptors(mut self) -> Self {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        if let Some(limit) = limit.and_then(|limit| usize::try_from(limit).ok()) {
            let reserve = (limit / 4).max(64);
            self.max_connections = self.max_connections.min(limit.saturating_sub(reserve).max(16));
        }
        self
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit (what a service
/// manager allows), as servers do: the default soft limit (1 024) is far below what a server
/// under load holds. Returns the limit now in force.
pub fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.maximum.is_some_and(|hard| limit.current.is_some_and(|soft| soft < hard)) {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current
}

/// One connection as the tracker sees it.
#[derive(Debug)]
struct Tracked {
    peer: IpAddr,
    accepted: Instant,
    /// A whole request head has arrived at least once.
    requested: AtomicBool,
    /// Requests whose response has not ended (a stream counts until it ends).
    in_flight: AtomicUsize,
    /// Milliseconds since the tracker started, at the last byte either way.
    last_activity: AtomicU64,
    /// Fired to close the connection at once (evicted, timed out).
    close: CancellationToken,
}

/// The connections of one listener.
#[derive(Debug)]
pub struct Tracker {
    limits: ConnectionLimits,
    started: Instant,
    next: AtomicU64,
    connections: Mutex<HashMap<u64, Arc<Tracked>>>,
    /// Wakes the accept loop waiting for room.
    freed: tokio::sync::Notify,
    /// Connections closed to make room or for silence, by reason (for the log and the metrics).
    pub evicted: AtomicU64,
    /// Connections closed because no request head arrived in time.
    pub timed_out: AtomicU64,
}

impl Tracker {
    fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            started: Instant::now(),
            next: AtomicU64::new(0),
            connections: Mutex::default(),
            freed: tokio::sync::Notify::new(),
            evicted: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        })
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.connections.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Makes room for a connection from `peer` (closing others if a cap says so); false when
    /// every connection is busy and none can go.
    fn admit(&self, peer: IpAddr) -> bool {
        let connections = self.connections.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh_of_peer: Vec<&Arc<Tracked>> = connections
            .values()
            .filter(|c| c.peer == peer && !c.requested.load(Ordering::Relaxed) && !c.close.is_cancelled())
            .collect();
        if fresh_of_peer.len() >= self.limits.max_fresh_per_peer
            && let Some(oldest) = fresh_of_peer.iter().min_by_key(|c| c.accepted)
        {
            oldest.close.cancel();
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let open = connections.values().filter(|c| !c.close.is_cancelled()).count();
        if open < self.limits.max_connections {
            return true;
        }
        // Full: the oldest connection with nothing in flight goes, one that never sent a request
        // before one that did.
        let idle = connections
            .values()
            .filter(|c| c.in_flight.load(Ordering::Relaxed) == 0 && !c.close.is_cancelled())
            .min_by_key(|c| (c.requested.load(Ordering::Relaxed), c.last_activity.load(Ordering::Relaxed)));
        match idle {
            Some(victim) => {
                victim.close.cancel();
                self.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    fn add(&self, peer: IpAddr) -> (u64, Arc<Tracked>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let tracked = Arc::new(Tracked {
            peer,
            accepted: Instant::now(),
            requested: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_activity: AtomicU64::new(self.now()),
            close: CancellationToken::new(),
        });
        self.connections.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tracked.clone());
        (id, tracked)
    }

    fn remove(&self, id: u64) {
        self.connections.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        self.freed.notify_waiters();
    }

    /// Closes connections whose head did not arrive in time, and idle ones.
    fn sweep(&self) {
        let now = self.now();
        let header = self.limits.header_read_timeout;
        let idle = self.limits.idle_timeout.as_millis() as u64;
        for connection in self.connections.lock().unwrap_or_else(PoisonError::into_inner).values() {
            if connection.close.is_cancelled() {
                continue;
            }
            if !connection.requested.load(Ordering::Relaxed) && connection.accepted.elapsed() > header {
                connection.close.cancel();
                self.timed_out.fetch_add(1, Ordering::Relaxed);
            } else if connection.in_flight.load(Ordering::Relaxed) == 0
                && now.saturating_sub(connection.last_activity.load(Ordering::Relaxed)) > idle
            {
                connection.close.cancel();
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The socket, noting each byte's time.
struct Watched<T> {
    inner: T,
    tracked: Arc<Tracked>,
    tracker: Arc<Tracker>,
}

impl<T> Watched<T> {
    fn touch(&self) {
        self.tracked.last_activity.store(self.tracker.now(), Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that counts its request as in flight until it ends (or is dropped).
struct Counted {
    inner: Body,
    tracked: Arc<Tracked>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.tracked.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl HttpBody for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What serving ends with.
#[derive(Debug)]
pub struct Serving {
    /// The connections, for the metrics and the log.
    pub tracker: Arc<Tracker>,
    task: tokio::task::JoinHandle<()>,
    stop_accepting: CancellationToken,
    closing: CancellationToken,
}

impl Serving {
    /// Stops accepting, lets every connection finish the response it is sending (each closes
    /// once it has nothing in flight), and waits up to `grace` for them; then closes the rest.
    pub async fn finish(self, grace: Duration) {
        self.stop_accepting.cancel();
        self.closing.cancel();
        let deadline = Instant::now() + grace;
        while self.tracker.open() > 0 && Instant::now() < deadline {
            tokio::select! {
                () = self.tracker.freed.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        let left = self.tracker.open();
        if left > 0 {
            tracing::warn!(connections = left, "connections still open after shutdown; closing them");
            for connection in self.tracker.connections.lock().unwrap_or_else(PoisonError::into_inner).values()
            {
                connection.close.cancel();
            }
        }
        self.task.abort();
    }
}

/// Serves `app` on `listener` under `limits` until [`Serving::finish`].
pub fn serve(listener: TcpListener, app: Router, limits: ConnectionLimits) -> Serving {
    let tracker = Tracker::new(limits.within_descriptors());
    let stop_accepting = CancellationToken::new();
    let closing = CancellationToken::new();
    let (accept_tracker, stop, closed) = (tracker.clone(), stop_accepting.clone(), closing.clone());
    let task = tokio::spawn(async move {
        let sweeper = accept_tracker.clone();
        let sweeping = stop.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = ticks.tick() => sweeper.sweep(),
                    () = sweeping.cancelled() => return,
                }
            }
        });
        let mut logged_full = false;
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = stop.cancelled() => return,
            };
            let (socket, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors (or another passing failure): wait, never stop serving.
                    tracing::warn!(%error, "accepting a connection failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = socket.set_nodelay(true);
            while !accept_tracker.admit(peer.ip()) {
                if !logged_full {
                    tracing::warn!(
                        limit = accept_tracker.limits.max_connections,
                        "every connection is busy; new ones wait"
                    );
                    logged_full = true;
                }
                tokio::select! {
                    () = accept_tracker.freed.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    () = stop.cancelled() => return,
                }
            }
            logged_full = false;
            connection(socket, peer, app.clone(), accept_tracker.clone(), closed.clone());
        }
    });
    Serving { tracker, task, stop_accepting, closing }
}

/// Serves one connection until it ends, is closed, or the server closes.
fn connection(
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    tracker: Arc<Tracker>,
    closing: CancellationToken,
) {
    let (id, tracked) = tracker.add(peer.ip());
    let io = TokioIo::new(Watched { inner: socket, tracked: tracked.clone(), tracker: tracker.clone() });
    let counted = tracked.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        counted.requested.store(true, Ordering::Relaxed);
        counted.in_flight.fetch_add(1, Ordering::Relaxed);
        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        let tracked = counted.clone();
        let app = app.clone();
        async move {
            let response = app.oneshot(request.map(Body::new)).await.unwrap_or_else(|never| match never {});
            // An upgraded connection (a device's WebSocket) is in flight for as long as it lives.
            if response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                tracked.in_flight.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, std::convert::Infallible>(response.map(|body| Counted { inner: body, tracked }))
        }
    });
    tokio::spawn(async move {
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).header_read_timeout(tracker.limits.header_read_timeout);
        builder.http2().timer(TokioTimer::new()).enable_connect_protocol();
        let connection = builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(connection);
        let mut draining = false;
        loop {
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        tracing::trace!(%error, "connection ended with an error");
                    }
                    break;
                }
                // Evicted or silent too long: closed at once (nothing is in flight, or the peer
                // never sent a request).
                () = tracked.close.cancelled() => break,
                () = closing.cancelled(), if !draining => {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
        tracker.remove(id);
    });
}
