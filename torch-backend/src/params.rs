//! Triton's PyTorch backend parameters (`parameters { key: "..." value: { string_value: "..." } }`).
//!
//! | parameter | Tessera |
//! |---|---|
//! | `DISABLE_OPTIMIZED_EXECUTION` | honoured: the graph executor's optimisation is switched per call |
//! | `INFERENCE_MODE` | accepted; `forward()` always runs under `no_grad` (tch has no inference-mode |
//! |                  | guard), which gives the same results; logged at load when `true`               |
//! | `ENABLE_JIT_PROFILING` | honoured (libtorch's profiling mode, set per call) |
//! | `ENABLE_TENSOR_FUSER` | honoured (libtorch's tensor-expression fuser, set per call) |
//! | `INTRA_OP_THREAD_COUNT` | honoured; process-wide in libtorch, as in Triton |
//! | `INTER_OP_THREAD_COUNT` | honoured while libtorch still accepts it (before its first parallel |
//! |                         | work); otherwise the load fails saying so                          |
//! | `ENABLE_CACHE_CLEANING` | CPU instances: accepted, nothing to clean (as in Triton); GPU instances: refused |
//! | `ENABLE_JIT_EXECUTOR`, `ENABLE_NVFUSER`, `ENABLE_WEIGHT_SHARING` (when `true`) | refused with a message |
//!
//! Other keys are not PyTorch backend parameters and are left to whoever reads them.

use tessera::{CoreError, CoreResult, InstanceDevice, ModelConfig};

#[derive(Debug, Clone, Default)]
pub struct TorchParams {
    pub disable_optimized_execution: bool,
    pub inference_mode: bool,
    pub jit_profiling: Option<bool>,
    pub tensor_fuser: Option<bool>,
    pub intra_op_threads: Option<i32>,
    pub inter_op_threads: Option<i32>,
}

fn refused(key: &str, why: &str) -> CoreError {
    CoreError::unsupported(format!("parameter '{key}' is not supported by Tessera's TorchScript backend: {why}"))
}

impl TorchParams {
    pub fn from_config(config: &ModelConfig, device: InstanceDevice) -> CoreResult<Self> {
        let get = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim().to_string());
        let flag = |key: &str| -> CoreResult<Option<bool>> {
            match get(key) {
                None => Ok(None),
                Some(v) => match v.to_ascii_lowercase().as_str() {
                    "true" | "1" | "yes" | "on" => Ok(Some(true)),
                    "false" | "0" | "no" | "off" => Ok(Some(false)),
                    _ => Err(CoreError::invalid_arg(format!(
                        "failed to parse parameter '{key}' of model '{}': expected 'true' or 'false', got '{v}'",
                        config.name
                    ))),
                },
            }
        };
        let count = |key: &str| -> CoreResult<Option<i32>> {
            match get(key) {
                None => Ok(None),
                Some(v) => match v.parse::<i32>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(CoreError::invalid_arg(format!(
                        "parameter '{key}' of model '{}' must be a positive integer, got '{v}'",
                        config.name
                    ))),
                },
            }
        };
        if flag("ENABLE_WEIGHT_SHARING")? == Some(true) {
            return Err(refused("ENABLE_WEIGHT_SHARING", "each instance loads its own copy of the module"));
        }
        if flag("ENABLE_NVFUSER")?.is_some() {
            return Err(refused("ENABLE_NVFUSER", "NVFuser was removed from libtorch 2.x"));
        }
        if flag("ENABLE_JIT_EXECUTOR")?.is_some() {
            return Err(refused("ENABLE_JIT_EXECUTOR", "tch offers no switch for libtorch's executor mode"));
        }
        if flag("ENABLE_CACHE_CLEANING")? == Some(true) && matches!(device, InstanceDevice::Gpu(_)) {
            return Err(refused("ENABLE_CACHE_CLEANING", "tch offers no way to empty libtorch's CUDA cache"));
        }
        let params = Self {
            disable_optimized_execution: flag("DISABLE_OPTIMIZED_EXECUTION")?.unwrap_or(false),
            inference_mode: flag("INFERENCE_MODE")?.unwrap_or(true),
            jit_profiling: flag("ENABLE_JIT_PROFILING")?,
            tensor_fuser: flag("ENABLE_TENSOR_FUSER")?,
            intra_op_threads: count("INTRA_OP_THREAD_COUNT")?,
            inter_op_threads: count("INTER_OP_THREAD_COUNT")?,
        };
        if params.inference_mode {
            tracing::info!(
                model = config.name.as_str(),
                "INFERENCE_MODE: forward() runs under no_grad (tch has no inference-mode guard); results are the same"
            );
        }
        Ok(params)
    }

    /// The process-wide thread counts (libtorch has one intra-op and one inter-op pool).
    pub fn apply_process_wide(&self) -> CoreResult<()> {
        if let Some(n) = self.intra_op_threads {
            tch::set_num_threads(n);
        }
        if let Some(n) = self.inter_op_threads
            && tch::get_num_interop_threads() != n
        {
            // libtorch throws once its inter-op pool exists; tch turns that into a panic.
            std::panic::catch_unwind(|| tch::set_num_interop_threads(n)).map_err(|_| {
                CoreError::invalid_arg(format!(
                    "INTER_OP_THREAD_COUNT={n} cannot be applied: libtorch's inter-op pool already runs with {} \
                    threads (it can be sized once per process, before the first model runs)",
                    tch::get_num_interop_threads()
                ))
            })?;
        }
        Ok(())
    }

    /// The thread-local JIT settings, applied before every `forward()` (an instance thread may run
    /// other models' instances too).
    pub fn apply_per_call(&self) -> CoreResult<()> {
        let fail = |e: tch::TchError| CoreError::internal(format!("failed to apply PyTorch settings: {e}"));
        tch::jit::f_set_graph_executor_optimize(!self.disable_optimized_execution).map_err(fail)?;
        if let Some(on) = self.jit_profiling {
            tch::jit::f_set_profiling_mode(on).map_err(fail)?;
        }
        if let Some(on) = self.tensor_fuser {
            tch::jit::f_set_tensor_expr_fuser_enabled(on).map_err(fail)?;
        }
        Ok(())
    }
}
