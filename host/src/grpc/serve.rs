//! Serving the door's services on its listener: connections capped and handed to the connection
//! threads, TLS, keepalive, and the layers every call passes (restricted protocols, message
//! bounds) in front of the services.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::StreamExt;
use tonic::codec::CompressionEncoding;

use super::health::HealthService;
use super::options::GrpcOptions;
use super::{InferenceService, limits, restrict};
use crate::execution::connection_threads::{ConnectionThreads, OpenConnection};
use crate::frontend::Frontend;
use crate::proto::health::health_server::HealthServer;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;

/// An accepted connection holding one of the door's connection slots until it closes.
struct CappedStream {
    inner: tokio::net::TcpStream,
    _slot: tokio::sync::OwnedSemaphorePermit,
    /// Its place in its connection thread's count, when it runs on one.
    _open: Option<OpenConnection>,
    /// Until its first call arrives: when the connection is closed if none has. A client that
    /// connects and says nothing (or only the HTTP/2 preface, a TLS hello, pings) would otherwise
    /// hold a connection slot for ever, and enough of them would lock every client out. gRPC
    /// clients connect when they make a call, so a real one never trips it.
    silent_until: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Set by the first call on the connection (`limits::MessageLimits` marks it).
    used: ConnectionUse,
}

/// Whether a connection has carried a call. It reaches the layers through the connection's
/// [`GrpcConnectInfo`], which tonic puts in every request's extensions.
#[derive(Clone, Default, Debug)]
pub(super) struct ConnectionUse(Arc<std::sync::atomic::AtomicBool>);

impl ConnectionUse {
    pub(super) fn mark(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn marked(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A gRPC connection's information for the layers: whether it has carried a call.
#[derive(Clone, Debug)]
pub(super) struct GrpcConnectInfo {
    pub(super) used: ConnectionUse,
}

impl CappedStream {
    fn new(
        inner: tokio::net::TcpStream,
        slot: tokio::sync::OwnedSemaphorePermit,
        open: Option<OpenConnection>,
        first_bytes: Duration,
    ) -> Self {
        let silent_until = Some(Box::pin(tokio::time::sleep(first_bytes)));
        Self { inner, _slot: slot, _open: open, silent_until, used: ConnectionUse::default() }
    }
}

impl tonic::transport::server::Connected for CappedStream {
    type ConnectInfo = GrpcConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        GrpcConnectInfo { used: self.used.clone() }
    }
}

impl tokio::io::AsyncRead for CappedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::future::Future;
        use std::task::Poll;
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
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Serves both services on `listener` until `stop` turns true: on the connection threads when
/// there are any (one tonic server per thread, fed the connections the accept loop gives it),
/// else on the accepting runtime.
pub async fn serve(
    frontend: Arc<Frontend>,
    listener: tokio::net::TcpListener,
    options: GrpcOptions,
    budget: crate::limits::RequestBudget,
    threads: Arc<ConnectionThreads>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let inference = GrpcInferenceServiceServer::new(InferenceService {
        frontend: Arc::clone(&frontend),
        shutdown: stop.clone(),
        stream_responses: options.stream_responses,
    })
    .max_decoding_message_size(options.max_message_size)
    .max_encoding_message_size(options.max_message_size)
    .accept_compressed(CompressionEncoding::Gzip)
    .accept_compressed(CompressionEncoding::Deflate);
    let inference = match options.response_compression {
        Some(encoding) => inference.send_compressed(encoding),
        None => inference,
    };
    let health = HealthServer::new(HealthService { frontend })
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    let services = Services { inference, health, options, budget, stop };
    // Small requests are latency-bound: no Nagle delay on accepted connections. Past the
    // connection cap a new connection is closed at once: its client fails fast (UNAVAILABLE)
    // instead of waiting in the backlog.
    let slots = Arc::new(tokio::sync::Semaphore::new(services.options.max_connections.max(1)));
    let max_connections = services.options.max_connections;
    let first_bytes = services.options.first_bytes_timeout;
    let admit = move |stream: tokio::net::TcpStream| {
        let _ = stream.set_nodelay(true);
        let slot = Arc::clone(&slots).try_acquire_owned().ok();
        if slot.is_none() {
            tracing::warn!("gRPC connection refused: {max_connections} open (--grpc-max-connections)");
        }
        slot.map(|slot| (stream, slot))
    };
    let runtimes = threads.runtimes();
    if runtimes.is_empty() {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).filter_map(move |conn| match conn {
            Ok(stream) => admit(stream).map(|(inner, slot)| Ok(CappedStream::new(inner, slot, None, first_bytes))),
            Err(e) => Some(Err(e)),
        });
        return services.serve(incoming).await.map_err(|e| e.to_string());
    }
    // One server per connection thread, each reading its connections from a channel. A stream is
    // re-registered with its thread's reactor there, so its reads wake that thread only.
    let mut senders = Vec::with_capacity(runtimes.len());
    let mut servers = tokio::task::JoinSet::new();
    for runtime in &runtimes {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Admitted>();
        senders.push(tx);
        let incoming = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(move |(stream, slot, open)| {
            tokio::net::TcpStream::from_std(stream).map(|inner| CappedStream::new(inner, slot, Some(open), first_bytes))
        });
        servers.spawn_on(services.clone().serve(incoming), runtime);
    }
    let mut stopped = services.stop.clone();
    let mut failed = None;
    let mut acceptor = crate::execution::accept::Acceptor::new("gRPC");
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|s| *s) => break,
            // A thread's server ended before the stop (its TLS setup failed, say): the door fails
            // now, instead of handing that thread connections nobody serves.
            ended = servers.join_next() => {
                // The servers also end at the stop, which may win this race: not a failure.
                if !*services.stop.borrow() {
                    failed = Some(match ended {
                        Some(Ok(Err(e))) => e.to_string(),
                        Some(Err(e)) => e.to_string(),
                        Some(Ok(Ok(()))) | None => "a gRPC server thread stopped".to_string(),
                    });
                }
                break;
            }
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors and the like: keep serving the connections we have; one taken
            // with the reserve descriptor is closed at once (its client sees UNAVAILABLE).
            Err(e) => {
                drop(acceptor.recover(&listener, e).await);
                continue;
            }
        };
        let Some((stream, slot)) = admit(stream) else { continue };
        let (Some((index, _, open)), Ok(stream)) = (threads.pick(), stream.into_std()) else { continue };
        if let Some(tx) = senders.get(index) {
            let _ = tx.send((stream, slot, open));
        }
    }
    // New clients are refused from here on, not left in the backlog while the others drain.
    drop(listener);
    drop(senders);
    if let Some(e) = failed {
        return Err(e);
    }
    let mut result = Ok(());
    while let Some(ended) = servers.join_next().await {
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e.to_string()),
            Err(e) => result = Err(e.to_string()),
        }
    }
    result
}

/// A connection the accept loop hands to a connection thread's server.
type Admitted = (std::net::TcpStream, tokio::sync::OwnedSemaphorePermit, OpenConnection);

/// What each of the door's tonic servers is built from.
#[derive(Clone)]
struct Services {
    inference: GrpcInferenceServiceServer<InferenceService>,
    health: HealthServer<HealthService>,
    options: GrpcOptions,
    budget: crate::limits::RequestBudget,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Services {
    async fn serve(
        self,
        incoming: impl tokio_stream::Stream<Item = std::io::Result<CappedStream>> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        let mut stopped = self.stop.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.options.tls {
            builder = builder.tls_config(tls.server_config())?;
        }
        builder
            .http2_keepalive_interval(Some(self.options.keepalive_time))
            .http2_keepalive_timeout(Some(self.options.keepalive_timeout))
            // Restricted calls are refused before their message is read (restrict.rs).
            .layer(restrict::RestrictionLayer::new(self.options.restrictions.clone()))
            .layer(limits::MessageLimitsLayer::new(self.budget, self.options.max_message_size))
            .add_service(self.inference)
            .add_service(self.health)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
    }
}
