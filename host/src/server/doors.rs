//! The network doors of a running server: HTTP, gRPC and metrics, each a task on the server's
//! runtime. They start with the server (the ports in [`super::ServerConfig`]) or later, one at a
//! time, through [`super::ServerHandle::start_door`] — as Triton's `tritonfrontend` starts its
//! frontends after the in-process server, so an embedded server opens no port unless asked.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

use super::{Listen, StartError, bind};
use crate::execution::connection_threads::ConnectionThreads;
use crate::frontend::Frontend;
use crate::grpc::GrpcOptions;
use crate::http::{ConnectionLimits, HttpState, openai_router, router};
use crate::limits::RequestBudget;
use crate::metrics::MetricsState;
use crate::restricted::Restrictions;

/// Which door to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorKind {
    Http,
    Grpc,
    Metrics,
    /// OpenAI's API alone (`/v1`), with the HTTP door's settings.
    OpenAi,
}

/// What a door is started with beyond where it listens.
#[derive(Debug, Clone, Default)]
pub struct DoorOptions {
    /// Triton's `--http-restricted-api` / `--grpc-restricted-protocol` for this door; `None`
    /// keeps the server's.
    pub restrictions: Option<Restrictions>,
}

/// A door started after the server ([`super::ServerHandle::start_door`]): its address, and a
/// stop of its own (the server's stop ends it too).
pub struct StartedDoor {
    address: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    /// Turns true once the door's task has ended (its listener closed).
    ended: watch::Receiver<bool>,
}

impl StartedDoor {
    pub(super) fn new(address: Option<SocketAddr>, stop: watch::Sender<bool>, ended: watch::Receiver<bool>) -> Self {
        Self { address, stop, ended }
    }

    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// Stops taking connections; requests in flight finish (as at the server's stop).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until the door has ended: its port is closed and its connections are done.
    pub async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
    }
}

/// Everything the doors are built from, kept by the handle so a door can start later.
pub(super) struct Doors {
    pub frontend: Arc<Frontend>,
    pub http_restrictions: Restrictions,
    pub http_max_input_size: usize,
    pub http_connections: ConnectionLimits,
    /// HTTPS on the HTTP door (`--http-use-ssl`).
    pub http_tls: Option<tokio_rustls::TlsAcceptor>,
    /// `--tenants` (the gRPC door's copy is in `grpc_options`).
    pub tenants: Option<Arc<crate::tenancy::Tenants>>,
    pub grpc_options: GrpcOptions,
    pub budget: RequestBudget,
    pub threads: Arc<ConnectionThreads>,
    /// The metrics door's state (its GPU sampler starts with the door).
    pub metrics: MetricsState,
    pub gpu_metrics_interval: Option<std::time::Duration>,
    /// The server's stop signal.
    pub stop: watch::Receiver<bool>,
}

/// Loads the tenants file (and starts watching it until `stop`) and makes the HTTP door's TLS
/// acceptor: either failing stops the start, with what is wrong.
pub(super) fn access(
    tenants: Option<&std::path::Path>,
    http_tls: Option<&crate::http::HttpTls>,
    stop: &watch::Receiver<bool>,
) -> Result<(Option<Arc<crate::tenancy::Tenants>>, Option<tokio_rustls::TlsAcceptor>), StartError> {
    let tenants = match tenants {
        Some(path) => {
            let tenants = crate::tenancy::Tenants::load(path).map_err(StartError::Config)?;
            tokio::spawn(Arc::clone(&tenants).watch(stop.clone()));
            Some(tenants)
        }
        None => None,
    };
    let acceptor = http_tls.map(crate::http::HttpTls::acceptor).transpose().map_err(StartError::Config)?;
    Ok((tenants, acceptor))
}

pub(super) type DoorTask = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

impl Doors {
    /// Binds a door and returns its address and the task that serves it until `stop` turns true.
    pub async fn open(
        &self,
        kind: DoorKind,
        listen: &Listen,
        options: DoorOptions,
        stop: watch::Receiver<bool>,
    ) -> Result<(Option<SocketAddr>, DoorTask), StartError> {
        let what = match kind {
            DoorKind::Http => "HTTPService",
            DoorKind::Grpc => "GRPCInferenceService",
            DoorKind::Metrics => "Metrics Service",
            DoorKind::OpenAi => "OpenAI Service",
        };
        let listener = bind(what, listen).await?;
        let address = listener.local_addr().ok();
        let task: DoorTask = match kind {
            DoorKind::Http | DoorKind::OpenAi => {
                let state = HttpState {
                    frontend: Arc::clone(&self.frontend),
                    restrictions: Arc::new(options.restrictions.unwrap_or_else(|| self.http_restrictions.clone())),
                    max_input_size: self.http_max_input_size,
                    body_budget: self.budget.clone(),
                };
                let (limits, threads) = (self.http_connections.clone(), Arc::clone(&self.threads));
                let router = if kind == DoorKind::OpenAi { openai_router(state) } else { router(state) };
                let access = crate::http::Access { tls: self.http_tls.clone(), tenants: self.tenants.clone() };
                Box::pin(async move {
                    crate::http::serve(listener, router, limits, access, threads, stop)
                        .await
                        .map_err(|e| format!("HTTP server failed: {e}"))
                })
            }
            DoorKind::Grpc => {
                let mut grpc = self.grpc_options.clone();
                if let Some(restrictions) = options.restrictions {
                    grpc.restrictions = restrictions;
                }
                let (frontend, budget, threads) =
                    (Arc::clone(&self.frontend), self.budget.clone(), Arc::clone(&self.threads));
                Box::pin(async move {
                    crate::grpc::serve(frontend, listener, grpc, budget, threads, stop)
                        .await
                        .map_err(|e| format!("gRPC server failed: {e}"))
                })
            }
            DoorKind::Metrics => {
                let mut state = self.metrics.clone();
                state.gpu = self.gpu_metrics_interval.and_then(crate::gpu::metrics::GpuSampler::start);
                let mut stop = stop;
                Box::pin(async move {
                    axum::serve(listener, crate::metrics::router(state))
                        .with_graceful_shutdown(async move {
                            let _ = stop.wait_for(|s| *s).await;
                        })
                        .await
                        .map_err(|e| format!("metrics server failed: {e}"))
                })
            }
        };
        Ok((address, task))
    }

    /// A stop signal for one door started later: it turns true on the door's own stop or the
    /// server's, whichever comes first.
    pub fn door_stop(&self) -> (watch::Sender<bool>, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        let forward = tx.clone();
        let mut server = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = server.wait_for(|s| *s) => { let _ = forward.send(true); }
                () = forward.closed() => {}
            }
        });
        (tx, rx)
    }
}
