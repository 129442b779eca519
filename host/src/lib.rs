//! Tessera: an inference server that speaks NVIDIA Triton's protocols and reads Triton model
//! repositories. See the README for the architecture.
//!
//! One core request type ([`infer::InferRequest`]) is reached from every front door; the
//! [`repository::ModelManager`] owns models; [`backend`] turns model files into instances.

pub mod backend;
pub mod cache;
pub mod cli;
pub mod config;
pub mod error;
pub mod frontend;
pub mod grpc;
pub mod guest;
pub mod http;
pub mod infer;
pub mod metrics;
pub mod model;
pub mod repository;
pub mod scheduler;
pub mod sequence;
pub mod server;
pub mod shm;
pub mod stats;
pub mod tensor;

/// Types generated from the protobuf schemas in host/proto.
pub mod proto {
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
}
