//! Serving the door's services on its listener: connections capped and handed to the connection
//! threads, TLS, keepalive, and the layers every call passes (restricted protocols, message
//! bounds) in front of the services.
//!
//! Each connection gets its own tonic server (a clone of the door's router, TLS set up once),
//! so that it can be shut down on its own, gracefully, when it has been idle too long
//! (`connection.rs`); the door's stop shuts them all down the same way, after the listener has
//! closed.

use std::sync::Arc;
use std::time::Duration;

use tonic::codec::CompressionEncoding;
use tower::layer::util::{Identity, Stack};

use super::connection::CappedStream;
use super::health::HealthService;
use super::options::GrpcOptions;
use super::{InferenceService, limits, restrict, tenant};
use crate::execution::connection_threads::{ConnectionThreads, OpenConnection};
use crate::frontend::Frontend;
use crate::proto::health::health_server::HealthServer;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;

/// Serves both services on `listener` until `stop` turns true, each connection on a connection
/// thread when there are any (else on the accepting runtime); then closes the listener at once
/// and waits for the connections to finish what they carry.
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
    let router = router(inference, health, &options, budget).map_err(|e| e.to_string())?;
    let clocks = Clocks { first_bytes: options.first_bytes_timeout, idle: options.max_connection_idle };
    // Past the connection cap a new connection is closed at once: its client fails fast
    // (UNAVAILABLE) instead of waiting in the backlog.
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    let mut stopped = stop.clone();
    let mut acceptor = crate::execution::accept::Acceptor::new("gRPC");
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|s| *s) => break,
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
        while connections.try_join_next().is_some() {}
        // Small requests are latency-bound: no Nagle delay.
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!("gRPC connection refused: {} open (--grpc-max-connections)", options.max_connections);
            continue;
        };
        let (router, stop) = (router.clone(), stop.clone());
        match threads.pick() {
            Some((_, runtime, open)) => {
                // A stream polls its events from the reactor it was registered with: re-register it
                // on the connection's own thread, so its reads wake that thread only.
                let Ok(stream) = stream.into_std() else { continue };
                connections.spawn_on(
                    async move {
                        if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                            serve_connection(router, stream, slot, Some(open), clocks, stop).await;
                        }
                    },
                    &runtime,
                );
            }
            None => {
                connections.spawn(serve_connection(router, stream, slot, None, clocks, stop));
            }
        }
    }
    // New clients are refused from here on, not left in the backlog while the others finish.
    drop(listener);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// A connection's clocks (see `connection.rs`).
#[derive(Clone, Copy)]
struct Clocks {
    first_bytes: Duration,
    idle: Option<Duration>,
}

/// The door's services behind its layers, ready to serve connections (cloned for each).
type GrpcRouter = tonic::transport::server::Router<
    Stack<limits::MessageLimitsLayer, Stack<restrict::RestrictionLayer, Stack<tenant::TenantLayer, Identity>>>,
>;

fn router(
    inference: GrpcInferenceServiceServer<InferenceService>,
    health: HealthServer<HealthService>,
    options: &GrpcOptions,
    budget: crate::limits::RequestBudget,
) -> Result<GrpcRouter, tonic::transport::Error> {
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &options.tls {
        builder = builder.tls_config(tls.server_config())?;
    }
    Ok(builder
        .http2_keepalive_interval(Some(options.keepalive_time))
        .http2_keepalive_timeout(Some(options.keepalive_timeout))
        // Callers without a tenant, and restricted calls, are refused before their message is read.
        .layer(tenant::TenantLayer::new(options.tenants.clone()))
        .layer(restrict::RestrictionLayer::new(options.restrictions.clone()))
        .layer(limits::MessageLimitsLayer::new(budget, options.max_message_size))
        .add_service(inference)
        .add_service(health))
}

/// Serves one connection on its own tonic server until it closes, or until the door stops or the
/// connection has been idle for its limit: then it is shut down gracefully (GOAWAY; calls it
/// carries finish first).
async fn serve_connection(
    router: GrpcRouter,
    stream: tokio::net::TcpStream,
    slot: tokio::sync::OwnedSemaphorePermit,
    open: Option<OpenConnection>,
    clocks: Clocks,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    let connection = CappedStream::new(stream, slot, open, clocks.first_bytes, closed_tx);
    let used = connection.used.clone();
    // The server's incoming connections: this one, then nothing until it has closed (an end
    // sooner would shut the server, and so the connection, down at once).
    let incoming = futures_util::stream::unfold(Some(Incoming::Connection(connection, closed)), |step| async move {
        match step? {
            Incoming::Connection(connection, closed) => {
                Some((Ok::<_, std::io::Error>(connection), Some(Incoming::Closed(closed))))
            }
            Incoming::Closed(closed) => {
                let _ = closed.await;
                None
            }
        }
    });
    let idle = clocks.idle;
    let shutdown = async move {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {}
            () = used.idle(idle) => {
                tracing::debug!("closing a gRPC connection idle for {idle:?} (--grpc-max-connection-idle)");
            }
        }
    };
    if let Err(e) = router.serve_with_incoming_shutdown(incoming, shutdown).await {
        tracing::debug!("gRPC connection ended: {e}");
    }
}

/// Where a connection's incoming stream is.
enum Incoming {
    Connection(CappedStream, tokio::sync::oneshot::Receiver<()>),
    Closed(tokio::sync::oneshot::Receiver<()>),
}
