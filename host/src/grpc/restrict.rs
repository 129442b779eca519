//! Triton's `--grpc-restricted-protocol`, as one tower layer in front of both services (HTTP's
//! `--http-restricted-api` is one middleware too): a call in a restricted category needs the
//! metadata `triton-grpc-protocol-<key>: <value>`, else it is answered UNAVAILABLE with Triton's
//! message before its message is read. The category comes from the method's path.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;

use crate::restricted::{ApiCategory, Restrictions};

/// The category of a gRPC method, by its path (`/package.Service/Method`); `None` for a method
/// no category names (tonic answers UNIMPLEMENTED for those).
pub fn category(path: &str) -> Option<ApiCategory> {
    let (service, method) = path.trim_start_matches('/').split_once('/')?;
    Some(match (service, method) {
        ("grpc.health.v1.Health", "Check") => ApiCategory::Health,
        ("inference.GRPCInferenceService", method) => match method {
            "ServerLive" | "ServerReady" | "ModelReady" => ApiCategory::Health,
            "ServerMetadata" | "ModelMetadata" => ApiCategory::Metadata,
            "ModelInfer" | "ModelStreamInfer" => ApiCategory::Inference,
            "ModelConfig" => ApiCategory::ModelConfig,
            "ModelStatistics" => ApiCategory::Statistics,
            "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => ApiCategory::ModelRepository,
            "SystemSharedMemoryStatus"
            | "SystemSharedMemoryRegister"
            | "SystemSharedMemoryUnregister"
            | "CudaSharedMemoryStatus"
            | "CudaSharedMemoryRegister"
            | "CudaSharedMemoryUnregister" => ApiCategory::SharedMemory,
            "TraceSetting" => ApiCategory::Trace,
            "LogSettings" => ApiCategory::Logging,
            _ => return None,
        },
        _ => return None,
    })
}

/// The layer (`Server::builder().layer(...)`).
#[derive(Clone)]
pub struct RestrictionLayer {
    restrictions: Restrictions,
}

impl RestrictionLayer {
    pub fn new(restrictions: Restrictions) -> Self {
        Self { restrictions }
    }
}

impl<S> tower::Layer<S> for RestrictionLayer {
    type Service = Restricted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Restricted { inner, restrictions: self.restrictions.clone() }
    }
}

#[derive(Clone)]
pub struct Restricted<S> {
    inner: S,
    restrictions: Restrictions,
}

impl<S> tower::Service<http::Request<Body>> for Restricted<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if let Some(category) = category(request.uri().path()) {
            let headers = request.headers();
            let checked = self
                .restrictions
                .check(category, "triton-grpc-protocol-", |name| headers.get(name).and_then(|v| v.to_str().ok()));
            if let Err(refusal) = checked {
                let status = Status::unavailable(format!(
                    "This protocol is restricted, expecting header '{}'",
                    refusal.expected
                ));
                return Box::pin(std::future::ready(Ok(status.into_http())));
            }
        }
        Box::pin(self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_of_both_services_has_its_category() {
        let methods = [
            ("/grpc.health.v1.Health/Check", ApiCategory::Health),
            ("/inference.GRPCInferenceService/ServerLive", ApiCategory::Health),
            ("/inference.GRPCInferenceService/ModelMetadata", ApiCategory::Metadata),
            ("/inference.GRPCInferenceService/ModelStreamInfer", ApiCategory::Inference),
            ("/inference.GRPCInferenceService/ModelConfig", ApiCategory::ModelConfig),
            ("/inference.GRPCInferenceService/ModelStatistics", ApiCategory::Statistics),
            ("/inference.GRPCInferenceService/RepositoryModelLoad", ApiCategory::ModelRepository),
            ("/inference.GRPCInferenceService/CudaSharedMemoryRegister", ApiCategory::SharedMemory),
            ("/inference.GRPCInferenceService/TraceSetting", ApiCategory::Trace),
            ("/inference.GRPCInferenceService/LogSettings", ApiCategory::Logging),
        ];
        for (path, expected) in methods {
            assert_eq!(category(path), Some(expected), "{path}");
        }
        assert_eq!(category("/inference.GRPCInferenceService/Nope"), None);
        assert_eq!(category("/grpc.health.v1.Health/Watch"), None);
        assert_eq!(category("garbage"), None);
    }
}
