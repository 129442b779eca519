//! Backends turn a model version directory into executable instances. The scheduler only sees
//! [`ModelInstance`]; nothing here knows about HTTP or gRPC.

pub mod onnx;
pub mod wasm;

use std::path::Path;
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};
use crate::infer::Parameters;
use crate::tensor::Tensor;

/// One response of a decoupled model: its outputs (or error) and whether it is the final one.
#[derive(Debug)]
pub struct RawResponse {
    pub outputs: CoreResult<Vec<Tensor>>,
    pub is_final: bool,
}

/// Where a decoupled model's responses for one request go. Dropping the sender also ends the
/// request: a final flag without a response.
pub type Responder = tokio::sync::mpsc::UnboundedSender<RawResponse>;

/// One request as an instance sees it: inputs already checked against the config and reshaped to
/// what the model expects, plus the names of the outputs the caller needs.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub id: Option<String>,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
    pub parameters: Parameters,
    /// Set for decoupled models only.
    pub responder: Option<Responder>,
}

/// What a backend gets to create one instance.
pub struct InstanceContext<'a> {
    pub config: &'a ModelConfig,
    pub model_dir: &'a Path,
    pub version_dir: &'a Path,
    /// The model file (`<version_dir>/<default_model_filename>`).
    pub model_path: &'a Path,
    pub version: i64,
    /// `<group name>_<index>`, as Triton names instances.
    pub instance_name: String,
}

/// One loaded copy of a model (Triton's "model instance"). An instance runs one batch at a time;
/// the scheduler guarantees that by taking `&mut self`.
pub trait ModelInstance: Send {
    /// Executes a batch; returns one result per request, in order.
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>>;
}

pub trait Backend: Send + Sync {
    /// The `backend:` name in config.pbtxt.
    fn name(&self) -> &'static str;
    /// The legacy `platform:` string Triton reports for this backend.
    fn platform(&self) -> &'static str;
    fn default_model_filename(&self) -> &'static str;
    /// Fills inputs, outputs and max_batch_size from the model file (Triton's auto-complete).
    fn autocomplete(&self, config: &mut ModelConfig, model_path: &Path) -> CoreResult<()>;
    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>>;
}

/// The backends this server was started with.
#[derive(Clone)]
pub struct Backends {
    onnx: Arc<onnx::OnnxBackend>,
    pub wasm: Arc<wasm::WasmBackend>,
}

impl Backends {
    pub fn new(onnx: onnx::OnnxBackend, wasm: wasm::WasmBackend) -> Self {
        Self { onnx: Arc::new(onnx), wasm: Arc::new(wasm) }
    }

    /// Picks the backend for a config, as Triton does from `backend`, then `platform`, then the
    /// files present in the version directory (auto-complete).
    pub fn resolve(&self, config: &ModelConfig, version_dir: Option<&Path>) -> CoreResult<Arc<dyn Backend>> {
        let onnx: Arc<dyn Backend> = self.onnx.clone();
        let wasm: Arc<dyn Backend> = self.wasm.clone();
        match (config.backend.as_str(), config.platform.as_str()) {
            ("onnxruntime", "" | "onnxruntime_onnx") | ("", "onnxruntime_onnx") => Ok(onnx),
            ("wasm", "" | "wasm") | ("", "wasm") => Ok(wasm),
            ("", "") => {
                let has = |b: &Arc<dyn Backend>| version_dir.is_some_and(|dir| dir.join(b.default_model_filename()).is_file());
                if has(&onnx) {
                    Ok(onnx)
                } else if has(&wasm) {
                    Ok(wasm)
                } else {
                    Err(CoreError::invalid_arg(
                        "model configuration must specify 'backend' or 'platform' (no model file from which to infer it)",
                    ))
                }
            }
            (backend, "") => Err(CoreError::unsupported(format!(
                "backend '{backend}' is not supported by this server (supported: onnxruntime, wasm)"
            ))),
            ("", platform) => Err(CoreError::unsupported(format!(
                "platform '{platform}' is not supported by this server (supported: onnxruntime_onnx)"
            ))),
            (backend, platform) => Err(CoreError::invalid_arg(format!(
                "backend '{backend}' and platform '{platform}' do not agree"
            ))),
        }
    }
}
