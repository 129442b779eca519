//! Tenants on the gRPC door (`--tenants`), as one tower layer in front of both services, like the
//! HTTP door's gate: the caller is identified by `authorization: Bearer <key>` metadata or by the
//! client certificate mutual TLS verified; its role for the method is checked; a `ModelInfer`
//! call is admitted against the tenant's rate and cap (a `ModelStreamInfer` stream admits each of
//! its requests as it arrives, in `stream.rs`). The services read the [`Requester`] from the
//! request's extensions. Without a tenants file, a call's `x-gateway-inference-fairness-id`
//! metadata names its flow ([`caller_of`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;
use tonic::transport::server::TlsConnectInfo;

use super::connection::GrpcConnectInfo;
use super::restrict::category;
pub use crate::frontend::Requester;
use crate::limits::HoldingBody;
use crate::tenancy::{AuthError, CertNames, OpenApi, Presented, Tenants, retry_after_secs};
use crate::tenant::{FAIRNESS_HEADER, fairness_principal};

/// The caller of a call, from what the layer recorded, else from the connection and the
/// fairness metadata.
pub fn caller_of<T>(request: &tonic::Request<T>) -> Requester {
    if let Some(caller) = request.extensions().get::<Requester>() {
        return caller.clone();
    }
    let peer = GrpcConnectInfo::of(request.extensions()).and_then(|c| c.peer);
    let fairness = request.metadata().get(FAIRNESS_HEADER).and_then(|v| v.to_str().ok());
    let principal = fairness_principal(fairness);
    Requester { peer, identity: None, principal }
}

#[derive(Clone)]
pub struct TenantLayer {
    tenants: Option<Arc<Tenants>>,
}

impl TenantLayer {
    pub fn new(tenants: Option<Arc<Tenants>>) -> Self {
        Self { tenants }
    }
}

impl<S> tower::Layer<S> for TenantLayer {
    type Service = TenantGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenantGate { inner, tenants: self.tenants.clone() }
    }
}

#[derive(Clone)]
pub struct TenantGate<S> {
    inner: S,
    tenants: Option<Arc<Tenants>>,
}

type Answer<E> = Pin<Box<dyn Future<Output = Result<http::Response<Body>, E>> + Send>>;

impl<S> tower::Service<http::Request<Body>> for TenantGate<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let Some(tenants) = &self.tenants else {
            return Box::pin(self.inner.call(request));
        };
        let path = request.uri().path();
        let category = category(path);
        // Open health is the server's; a model's readiness would tell who asks which models exist.
        let server_health = path.ends_with("/ServerLive") || path.ends_with("/ServerReady") || path.ends_with("/Check");
        if server_health && tenants.is_open(OpenApi::Health) {
            return Box::pin(self.inner.call(request));
        }
        let unary_infer = path.ends_with("/ModelInfer");
        let peer = GrpcConnectInfo::of(request.extensions()).and_then(|c| c.peer);
        // The certificate's names are read at the connection's first call, then kept.
        let certificate = request.extensions().get::<TlsConnectInfo<GrpcConnectInfo>>().and_then(|tls| {
            let names = tls.get_ref().certificate.get_or_init(|| {
                tls.peer_certs().and_then(|certs| certs.first().and_then(|c| CertNames::of_der(c.as_ref())))
            });
            names.as_ref()
        });
        let presented = Presented {
            authorization: request.headers().get(http::header::AUTHORIZATION).map(http::HeaderValue::as_bytes),
            certificate,
            peer: peer.map(|p| p.ip()),
        };
        let identity = match tenants.identify(presented) {
            Ok(identity) => identity,
            Err(e @ AuthError::Throttled(wait)) => return refuse(busy_status(&e.message(), wait)),
            Err(e) => return refuse(Status::unauthenticated(e.message())),
        };
        if let Some(category) = category
            && let Err(denied) = identity.may_use(category)
        {
            return refuse(Status::permission_denied(denied.0));
        }
        let admitted = if unary_infer {
            match identity.admit() {
                Ok(admitted) => Some(admitted),
                Err(busy) => return refuse(busy_status(&busy.message, busy.retry_after)),
            }
        } else {
            None
        };
        let principal = Some(Arc::clone(&identity.tenant.principal));
        request.extensions_mut().insert(Requester { peer, identity: Some(identity), principal });
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await?;
            Ok(match admitted {
                Some(admitted) => response.map(|body| Body::new(HoldingBody::new(body, admitted))),
                None => response,
            })
        })
    }
}

fn refuse<E: Send + 'static>(status: Status) -> Answer<E> {
    Box::pin(std::future::ready(Ok(status.into_http())))
}

/// RESOURCE_EXHAUSTED with a `retry-after` (seconds) in its metadata.
pub fn busy_status(message: &str, wait: std::time::Duration) -> Status {
    let mut status = Status::resource_exhausted(message);
    if let Ok(value) = retry_after_secs(wait).to_string().parse() {
        status.metadata_mut().insert("retry-after", value);
    }
    status
}
