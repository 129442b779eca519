//! The standard gRPC health service.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Status};

use super::{GrpcResult, ok};
use crate::frontend::Frontend;
use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_server::Health;
use crate::proto::health::{HealthCheckRequest, HealthCheckResponse};

/// `grpc.health.v1.Health`, as Triton answers it: `Check` reports readiness whatever service is
/// named; `Watch` is not implemented.
pub struct HealthService {
    pub(super) frontend: Arc<Frontend>,
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, _: Request<HealthCheckRequest>) -> GrpcResult<HealthCheckResponse> {
        let status = if self.frontend.server_ready() { ServingStatus::Serving } else { ServingStatus::NotServing };
        ok(HealthCheckResponse { status: status as i32 })
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, _: Request<HealthCheckRequest>) -> GrpcResult<Self::WatchStream> {
        Err(Status::unimplemented("Watch is not implemented; use Check"))
    }
}
