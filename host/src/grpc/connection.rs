//! One gRPC connection: its slot under the connection cap, what it has carried (calls in flight,
//! since when it has been idle), and the two clocks that close it.
//!
//! - **Silent**: a connection that has made no call yet (nothing sent, or only the HTTP/2
//!   preface, a TLS hello or pings) is cut after `--http-header-read-timeout`. gRPC clients
//!   connect when they make a call, so a real one never trips it.
//! - **Idle**: a connection with no call in flight for `--grpc-max-connection-idle` is closed
//!   gracefully (HTTP/2 GOAWAY, as gRPC core's `GRPC_ARG_MAX_CONNECTION_IDLE_MS` does): its client
//!   sees the channel go idle and connects again at its next call, so long-lived channels keep
//!   working, while a client that made a call and went silent gives its slot back.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::execution::connection_threads::OpenConnection;

/// What a connection has carried. It reaches the layers through the connection's
/// [`GrpcConnectInfo`], which tonic puts in every request's extensions.
#[derive(Clone, Debug)]
pub(super) struct ConnectionUse(Arc<UseState>);

#[derive(Debug)]
struct UseState {
    started: Instant,
    /// Set by the first call.
    used: AtomicBool,
    /// Calls whose response has not finished.
    calls: AtomicUsize,
    /// Milliseconds since `started` when the last call in flight finished; [`BUSY`] while a call
    /// is in flight or before the first.
    idle_since_ms: AtomicU64,
}

const BUSY: u64 = u64::MAX;

impl Default for ConnectionUse {
    fn default() -> Self {
        Self(Arc::new(UseState {
            started: Instant::now(),
            used: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(BUSY),
        }))
    }
}

impl ConnectionUse {
    /// A call has begun; it is in flight until the guard is dropped (with its response).
    pub(super) fn begin_call(&self) -> CallInFlight {
        self.0.used.store(true, Ordering::Relaxed);
        self.0.calls.fetch_add(1, Ordering::AcqRel);
        self.0.idle_since_ms.store(BUSY, Ordering::Release);
        CallInFlight(self.clone())
    }

    fn marked(&self) -> bool {
        self.0.used.load(Ordering::Relaxed)
    }

    /// How long the connection has had no call in flight (`None`: one is in flight, or none has
    /// been made yet).
    fn idle_for(&self) -> Option<Duration> {
        let since = self.0.idle_since_ms.load(Ordering::Acquire);
        if since == BUSY || self.0.calls.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.0.started.elapsed().saturating_sub(Duration::from_millis(since)))
    }

    /// Resolves once the connection has had no call in flight for `limit` (never for `None`).
    pub(super) async fn idle(&self, limit: Option<Duration>) {
        let Some(limit) = limit else { return std::future::pending().await };
        loop {
            let wait = match self.idle_for() {
                Some(idle) if idle >= limit => return,
                Some(idle) => limit - idle,
                None => limit,
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// One call in flight on a connection (see [`ConnectionUse::begin_call`]).
#[derive(Debug)]
pub(super) struct CallInFlight(ConnectionUse);

impl Drop for CallInFlight {
    fn drop(&mut self) {
        let state = &self.0.0;
        if state.calls.fetch_sub(1, Ordering::AcqRel) == 1 {
            let now = u64::try_from(state.started.elapsed().as_millis()).unwrap_or(BUSY - 1);
            state.idle_since_ms.store(now, Ordering::Release);
        }
    }
}

/// A gRPC connection's information for the layers: what it has carried.
#[derive(Clone, Debug)]
pub(super) struct GrpcConnectInfo {
    pub(super) used: ConnectionUse,
    /// The client's address, for access lines and the tenants layer.
    pub(super) peer: Option<std::net::SocketAddr>,
    /// The names of the client's TLS certificate, read once per connection (`tenant.rs`).
    pub(super) certificate: std::sync::Arc<std::sync::OnceLock<Option<crate::tenancy::CertNames>>>,
}

impl GrpcConnectInfo {
    /// The connection info tonic put in a call's extensions (wrapped in TLS's on a TLS door).
    pub(super) fn of(extensions: &http::Extensions) -> Option<&Self> {
        extensions
            .get::<Self>()
            .or_else(|| extensions.get::<tonic::transport::server::TlsConnectInfo<Self>>().map(|t| t.get_ref()))
    }
}

/// An accepted connection holding one of the door's connection slots until it closes.
pub(super) struct CappedStream {
    inner: tokio::net::TcpStream,
    _slot: tokio::sync::OwnedSemaphorePermit,
    /// Its place in its connection thread's count, when it runs on one.
    _open: Option<OpenConnection>,
    /// Until its first call arrives: when the connection is cut if none has (see the module).
    silent_until: Option<Pin<Box<tokio::time::Sleep>>>,
    pub(super) used: ConnectionUse,
    /// Dropped with the stream: tells the connection's server that the connection is gone.
    _closed: tokio::sync::oneshot::Sender<()>,
}

impl CappedStream {
    pub(super) fn new(
        inner: tokio::net::TcpStream,
        slot: tokio::sync::OwnedSemaphorePermit,
        open: Option<OpenConnection>,
        first_bytes: Duration,
        closed: tokio::sync::oneshot::Sender<()>,
    ) -> Self {
        let silent_until = Some(Box::pin(tokio::time::sleep(first_bytes)));
        Self { inner, _slot: slot, _open: open, silent_until, used: ConnectionUse::default(), _closed: closed }
    }
}

impl tonic::transport::server::Connected for CappedStream {
    type ConnectInfo = GrpcConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        GrpcConnectInfo { used: self.used.clone(), peer: self.inner.peer_addr().ok(), certificate: Default::default() }
    }
}

impl tokio::io::AsyncRead for CappedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        use std::future::Future;
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.silent_until.is_some() && self.used.marked() {
            self.silent_until = None;
        }
        let Some(deadline) = self.silent_until.as_mut() else { return read };
        match read {
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                tracing::debug!("closing a gRPC connection that made no call (--http-header-read-timeout)");
                Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no call from the client")))
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for CappedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
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
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_idle_only_once_its_calls_are_done() {
        let connection = ConnectionUse::default();
        assert_eq!(connection.idle_for(), None, "no call yet: the silent clock's business");
        let first = connection.begin_call();
        let second = connection.begin_call();
        drop(first);
        assert_eq!(connection.idle_for(), None, "a call is still in flight");
        drop(second);
        assert!(connection.idle_for().is_some());
        let _third = connection.begin_call();
        assert_eq!(connection.idle_for(), None);
    }

    #[tokio::test]
    async fn the_idle_clock_fires_after_the_limit_and_never_without_one() {
        let connection = ConnectionUse::default();
        drop(connection.begin_call());
        let started = Instant::now();
        connection.idle(Some(Duration::from_millis(60))).await;
        assert!(started.elapsed() >= Duration::from_millis(55), "{:?}", started.elapsed());
        let never = tokio::time::timeout(Duration::from_millis(100), connection.idle(None)).await;
        assert!(never.is_err());
    }
}
