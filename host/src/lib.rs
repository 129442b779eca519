//! Tessera: an inference server that speaks NVIDIA Triton's protocols and reads Triton model
//! repositories. See the README for the architecture.
//!
//! One core request type ([`infer::InferRequest`]) is reached from every front door; the
//! [`repository::ModelManager`] owns models; [`backend`] turns model files into instances.

pub mod backend;
pub mod cli;
pub mod config;
pub mod error;
pub mod guest;
pub mod http;
pub mod infer;
pub mod model;
pub mod repository;
pub mod server;
pub mod stats;
pub mod tensor;
