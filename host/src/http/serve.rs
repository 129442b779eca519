//! The HTTP door's connections: an accept loop that caps open connections and closes the ones
//! that stall, so slow or idle clients cannot hold the server's sockets and file descriptors.
//!
//! Per connection, a watchdog reads three clocks (decisions, with their defaults in `cli.rs`):
//! - header read: a request whose first byte has arrived must have its whole header within
//!   `header_read` (a half-sent header is closed, not waited on forever), and a new connection
//!   must begin its first request within `header_read` too (a silent socket holds no slot for
//!   longer);
//! - keep-alive idle: a connection with no request in progress and no bytes for `keepalive_idle`
//!   is closed (a request being served, however long, is never cut);
//! - body read: a request's body must arrive within `body_read` of its header (a trickled body
//!   fails that request with 400 and a message naming the flag).
//!
//! At the connection cap a new client is answered at once with 503 and closed, instead of
//! waiting in the kernel's backlog until some other client leaves.
//!
//! At the stop (SIGTERM's drain included) the listener closes at once, so new clients are
//! refused, and each connection ends after the requests its client has already sent: a request
//! being served finishes, a request whose bytes have arrived but are not read yet is read and
//! answered (with `connection: close`), and an idle connection closes at once. Checking the
//! socket for unread bytes before closing is what keeps a request sent just before the signal
//! from being dropped unanswered.

use crate::execution::accept::Acceptor;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt;

use tokio_rustls::TlsAcceptor;

use super::caller::ConnInfo;
use crate::execution::connection_threads::ConnectionThreads;
use crate::execution::repoll::RepollOnSelfWake;
use crate::limits::HoldingBody;
use crate::tenancy::{CertNames, Tenants};

/// Who may talk to the door: TLS (`--http-use-ssl`) and the tenants gate (`--tenants`, see
/// `gate.rs`), both run here, before the router.
#[derive(Clone, Default)]
pub struct Access {
    pub tls: Option<TlsAcceptor>,
    pub tenants: Option<Arc<Tenants>>,
}

/// Connection limits and timeouts of the HTTP door.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read: Duration,
    pub body_read: Duration,
    pub keepalive_idle: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read: Duration::from_secs(30),
            body_read: Duration::from_secs(300),
            keepalive_idle: Duration::from_secs(120),
        }
    }
}

/// What the watchdog of one connection reads, updated by its I/O and its requests.
struct Activity {
    started: Instant,
    /// Milliseconds since the connection's start: the last byte read or written.
    last_io_ms: AtomicU64,
    /// When the first byte of a request whose header is not complete yet arrived (0: none).
    header_started_ms: AtomicU64,
    /// Requests whose header has been read and whose response body has not finished.
    in_flight: AtomicUsize,
    /// Whether a request has begun on the connection (a header has been read).
    used: AtomicBool,
    /// The server is stopping: every response from now on says `connection: close`.
    closing: AtomicBool,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last_io_ms: AtomicU64::new(1),
            header_started_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            used: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        }
    }

    /// Milliseconds since the connection's start, never 0 (0 means "not set").
    fn now_ms(&self) -> u64 {
        millis(self.started.elapsed()).max(1)
    }

    fn touch(&self) {
        self.last_io_ms.store(self.now_ms(), Ordering::Relaxed);
    }
}

/// Serves `router` on `listener` until `stop` turns true, then closes the listener at once (new
/// clients are refused) and lets each connection answer what its client has already sent.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    access: Access,
    threads: Arc<ConnectionThreads>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    let mut acceptor = Acceptor::new("HTTP");
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors and the like: keep serving the connections we have, and
                // refuse the waiting one at once rather than leave it hanging.
                Err(e) => {
                    if let Some(stream) = acceptor.recover(&listener, e).await {
                        connections.spawn(async move { refuse_no_descriptors(stream).await });
                    }
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            let max = limits.max_connections;
            connections.spawn(async move { refuse(stream, max).await });
            continue;
        };
        let (router, limits, stop, access) = (router.clone(), limits.clone(), stop.clone(), access.clone());
        match threads.pick() {
            Some((_, runtime, open)) => {
                // A stream polls its events from the reactor it was registered with: re-register it
                // on the connection's own thread, or every read would wake that thread from here.
                let Ok(stream) = stream.into_std() else { continue };
                connections.spawn_on(
                    async move {
                        if let Ok(stream) = TcpStream::from_std(stream) {
                            serve_connection(stream, access, router, limits, stop).await;
                        }
                        drop((slot, open));
                    },
                    &runtime,
                );
            }
            None => {
                connections.spawn(async move {
                    serve_connection(stream, access, router, limits, stop).await;
                    drop(slot);
                });
            }
        }
    }
    // New clients are refused from here on (the kernel answers them), not left in the backlog
    // while the open connections finish.
    drop(listener);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Resolves once the server is stopping (the watch's guard is not held across awaits).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(drop);
}

/// Answers a client over the connection cap with 503 and closes.
async fn refuse(stream: TcpStream, max: usize) {
    let body = format!(
        "{{\"error\":\"the server has its maximum of {max} open HTTP connections (--http-max-connections); retry \
        later\"}}"
    );
    refuse_with(stream, body).await;
}

/// Answers a client the server took with its reserve descriptor with 503 and closes.
async fn refuse_no_descriptors(stream: TcpStream) {
    let body = "{\"error\":\"the server is out of file descriptors; retry later\"}".to_string();
    refuse_with(stream, body).await;
}

async fn refuse_with(mut stream: TcpStream, body: String) {
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: \
        close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
    let _ = stream.shutdown().await;
}

/// Serves one connection: over TLS first when the door has it (the handshake within the header
/// clock; the client certificate's names go with every request), then HTTP/1.1.
async fn serve_connection(
    stream: TcpStream,
    access: Access,
    router: Router,
    limits: ConnectionLimits,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let fd = stream.as_raw_fd();
    let peer = stream.peer_addr().ok();
    let tenants = access.tenants;
    let Some(acceptor) = access.tls else {
        let info = ConnInfo { peer, certificate: None };
        return serve_http(stream, fd, (info, tenants), router, limits, stop).await;
    };
    let stream = match tokio::time::timeout(limits.header_read, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!("HTTPS handshake with {peer:?} failed: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("HTTPS handshake with {peer:?} did not finish in time (--http-header-read-timeout)");
            return;
        }
    };
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|cert| CertNames::of_der(cert.as_ref()))
        .map(Arc::new);
    serve_http(stream, fd, (ConnInfo { peer, certificate }, tenants), router, limits, stop).await;
}

async fn serve_http<S>(
    stream: S,
    fd: RawFd,
    (info, tenants): (ConnInfo, Option<Arc<Tenants>>),
    router: Router,
    limits: ConnectionLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(WatchedIo { inner: stream, activity: Arc::clone(&activity) });
    let body_read = limits.body_read;
    let service_activity = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        // The header is complete: the request is in flight until its response body ends.
        service_activity.header_started_ms.store(0, Ordering::Relaxed);
        service_activity.used.store(true, Ordering::Relaxed);
        service_activity.in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlight(Arc::clone(&service_activity));
        let mut request = request.map(|body| Body::new(DeadlineBody::new(body, body_read)));
        let gate = tenants.as_deref().map(|tenants| super::gate::check(tenants, &info, &mut request));
        request.extensions_mut().insert(info.clone());
        let router = router.clone();
        let activity = Arc::clone(&service_activity);
        async move {
            let (refused, admitted) = match gate {
                Some(Err(refusal)) => (Some(*refusal), None),
                Some(Ok(admitted)) => (None, admitted),
                None => (None, None),
            };
            let mut response = match refused {
                Some(refusal) => refusal,
                None => router.oneshot(request).await.unwrap_or_else(|never| match never {}),
            };
            if activity.closing.load(Ordering::Relaxed) {
                // The server is stopping: this is the connection's last response.
                response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            // The tenant's admission is held, with the request's place on its connection, until
            // the response body ends.
            Ok::<_, std::convert::Infallible>(response.map(|body| Body::new(HoldingBody::new(body, (guard, admitted)))))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    // Self-wakes (the request body's "want" signal) are polled again in place, not rescheduled.
    let mut connection = RepollOnSelfWake::new(builder.serve_connection(io, service).with_upgrades());
    let tick =
        (limits.header_read.min(limits.keepalive_idle) / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut watchdog = tokio::time::interval(tick);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = &mut connection => {
                if let Err(e) = result {
                    tracing::debug!("HTTP connection ended: {e}");
                }
                return;
            }
            _ = stopped(&mut stop), if !stopping => {
                stopping = true;
                activity.closing.store(true, Ordering::Relaxed);
                // A request the client has sent but hyper has not read yet (its bytes wait in
                // the socket or in hyper's buffer) is read and answered, with `connection: close`;
                // closing now would drop it unanswered. Otherwise hyper closes an idle connection
                // at once and a busy one after its response.
                let unread = activity.in_flight.load(Ordering::Relaxed) == 0
                    && (activity.header_started_ms.load(Ordering::Relaxed) > 0 || bytes_waiting(fd));
                if !unread {
                    connection.inner_mut().graceful_shutdown();
                }
            }
            _ = watchdog.tick() => {
                if let Some(reason) = stalled(&activity, &limits) {
                    tracing::debug!("closing HTTP connection: {reason}");
                    return;
                }
            }
        }
    }
}

/// Whether the client has sent bytes the server has not read yet (a request's beginning).
#[allow(unsafe_code)]
fn bytes_waiting(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: `fd` is the connection's socket, open while the connection that owns it is alive
    // (the caller holds it); `recv` writes at most one byte into `byte`, which outlives the call.
    // MSG_PEEK leaves the byte in the socket for hyper to read; MSG_DONTWAIT never blocks.
    let read = unsafe { libc::recv(fd, (&raw mut byte).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    read > 0
}

/// Why a connection should be closed now, if it should.
fn stalled(activity: &Activity, limits: &ConnectionLimits) -> Option<&'static str> {
    if activity.in_flight.load(Ordering::Relaxed) > 0 {
        return None;
    }
    let now = activity.now_ms();
    let header_started = activity.header_started_ms.load(Ordering::Relaxed);
    if header_started > 0 {
        return (now.saturating_sub(header_started) > millis(limits.header_read))
            .then_some("the request header did not arrive in time (--http-header-read-timeout)");
    }
    let last = activity.last_io_ms.load(Ordering::Relaxed);
    if !activity.used.load(Ordering::Relaxed) {
        // A connection that has sent nothing yet gets the header's time, not a kept-alive one's.
        let limit = limits.header_read.min(limits.keepalive_idle);
        return (now.saturating_sub(last) > millis(limit))
            .then_some("no request on a new connection (--http-header-read-timeout)");
    }
    (now.saturating_sub(last) > millis(limits.keepalive_idle))
        .then_some("idle keep-alive connection (--http-keepalive-timeout)")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Decrements the connection's in-flight count when a response body is done (or dropped).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // Idle time counts from the end of the last response.
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request body that must be complete by a deadline set when its header arrived.
struct DeadlineBody {
    inner: hyper::body::Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl DeadlineBody {
    fn new(inner: hyper::body::Incoming, limit: Duration) -> Self {
        Self { inner, deadline: Box::pin(tokio::time::sleep(limit)), limit }
    }
}

/// The error a body read past its deadline ends with; its text reaches the client in the
/// request's error.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} (--http-body-read-timeout)")]
pub struct BodyTimeout(Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            let limit = self.limit;
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's stream, recording when bytes move and when a new request's first byte arrives.
struct WatchedIo<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let now = self.activity.now_ms();
            self.activity.last_io_ms.store(now, Ordering::Relaxed);
            if self.activity.in_flight.load(Ordering::Relaxed) == 0 {
                // Bytes with no request in progress: the next request's header has begun.
                let _ = self.activity.header_started_ms.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
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
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
