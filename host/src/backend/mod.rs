//! Backends turn a model version directory into executable instances. The scheduler only sees
//! [`ModelInstance`]; nothing here knows about HTTP or gRPC.

pub mod onnx;

use std::path::Path;
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};
use crate::tensor::Tensor;

/// One request as an instance sees it: inputs already checked against the config and reshaped to
/// what the model expects, plus the names of the outputs the caller needs.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
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
    fn create_instance(&self, config: &ModelConfig, model_path: &Path) -> CoreResult<Box<dyn ModelInstance>>;
}

/// The backends this server was started with.
#[derive(Clone)]
pub struct Backends {
    onnx: Arc<onnx::OnnxBackend>,
}

impl Backends {
    pub fn new(onnx: onnx::OnnxBackend) -> Self {
        Self { onnx: Arc::new(onnx) }
    }

    /// Picks the backend for a config, as Triton does from `backend`, then `platform`, then the
    /// files present in the version directory (auto-complete).
    pub fn resolve(&self, config: &ModelConfig, version_dir: Option<&Path>) -> CoreResult<Arc<dyn Backend>> {
        let onnx: Arc<dyn Backend> = self.onnx.clone();
        match (config.backend.as_str(), config.platform.as_str()) {
            ("onnxruntime", "" | "onnxruntime_onnx") | ("", "onnxruntime_onnx") => Ok(onnx),
            ("", "") => {
                let has_onnx = version_dir.is_some_and(|dir| dir.join(onnx.default_model_filename()).is_file());
                if has_onnx {
                    Ok(onnx)
                } else {
                    Err(CoreError::invalid_arg(
                        "model configuration must specify 'backend' or 'platform' (no model file from which to infer it)",
                    ))
                }
            }
            (backend, "") => Err(CoreError::unsupported(format!(
                "backend '{backend}' is not supported by this server (supported: onnxruntime)"
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
