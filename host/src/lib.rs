//! Tessera: an inference server that speaks NVIDIA Triton's protocols and reads Triton model
//! repositories, with custom code as sandboxed WebAssembly components. See the README for the
//! architecture.
//!
//! As a library: build a [`ServerConfig`], [`Server::start`] it, and use the returned
//! [`ServerHandle`] to run requests in-process ([`ServerHandle::in_process`], the in-process door,
//! which takes the path the HTTP and gRPC doors take; or [`ServerHandle::infer`], the model
//! manager's [`Infer`], which BLS calls and ensemble steps use), to register models from code
//! ([`ServerHandle::register_model`] with any [`Backend`], e.g. a [`CallableBackend`]) and to
//! stop. `tessera serve` is built on exactly this API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tessera::{Listen, Server, ServerConfig};
//! use tessera::ControlMode;
//! let config = ServerConfig::default()
//!     .repository("model-repos/quickstart")
//!     .control_mode(ControlMode::None) // load every model found (default: explicit, none)
//!     .http(Listen::new("127.0.0.1", 0));
//! let server = Server::start(config).await?;
//! println!("HTTP on {:?}", server.http_address());
//! server.stop();
//! server.wait().await?;
//! # Ok(()) }
//! ```

// The modules are layered, each importing only from the ones below it: the one list of the
// layers, and the check that keeps them, is scripts/check-layers.sh.
mod backend;
mod cache;
mod config;
mod error;
mod execution;
mod frontend;
mod grpc;
mod http;
mod infer;
mod inprocess;
mod lifecycle;
mod limits;
mod metrics;
mod model;
/// Types generated from the protobuf schemas in host/proto.
mod proto;
mod repository;
mod restricted;
mod scheduler;
mod server;
mod shm;
mod stats;
mod tenancy;
mod tenant;
mod tensor;
mod trace;

/// The command line (`tessera serve`, `tessera guest build`), used by the binary.
pub mod cli;
/// Entry points for fuzzing the parsers (used by `fuzz/` and by this crate's tests).
#[doc(hidden)]
pub mod fuzzing;
/// GPUs found at run time: discovery, CUDA shared memory, NVML metrics.
pub mod gpu;
/// `tessera guest build`: source to `model.wasm`.
pub mod guest;

pub use backend::batch::execute_merged;
pub use backend::callable::CallableBackend;
pub use backend::unavailable::UnavailableBackend;
pub use backend::wasm::{Compiler, CompilerProcess, WasmOptions};
pub use backend::{
    Backend, BackendKind, ExecRequest, InstanceContext, InstanceDevice, ModelInstance, PYTORCH, RawResponse,
};
pub use config::{
    ConfigError, ModelConfig, datatype_from_config, datatype_to_config, parse_json as parse_config_json,
    parse_pbtxt as parse_config_pbtxt, pb,
};
pub use error::{CoreError, CoreResult, ErrorKind};
pub use frontend::{LogApplier, SettingValue};
pub use grpc::GrpcOptions;
pub use infer::{
    Infer, InferFuture, InferRequest, InferResponse, ParamValue, Parameters, RequestedOutput, ResponseStream,
};
pub use inprocess::{Answers, InProcess, Waiting};
pub use lifecycle::TrackedStream;
pub use repository::ControlMode;
pub use restricted::{ApiCategory, Restrictions};
pub use server::{
    DoorKind, DoorOptions, Listen, RegisteredModel, Server, ServerConfig, ServerHandle, StartError, StartedDoor,
    StopHandle,
};
pub use tensor::{DataType, Tensor};
