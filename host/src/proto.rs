//! Types generated from the protobuf schemas in host/proto (build.rs compiles them).

/// Package `inference`: Triton's ModelConfig and the KServe v2 / Triton gRPC service.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod inference {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}
/// Package `grpc.health.v1`: the standard gRPC health service.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod health {
    include!(concat!(env!("OUT_DIR"), "/grpc.health.v1.rs"));
}
