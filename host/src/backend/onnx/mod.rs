//! ONNX Runtime backend (`backend: "onnxruntime"` / `platform: "onnxruntime_onnx"`), through the
//! `ort` crate with the library loaded at run time (the `onnxruntime` PyPI wheel's
//! libonnxruntime.so, installed by scripts/setup.sh).
//!
//! Threading decision: each instance's session uses `intra_op_thread_count` threads (Triton's ORT
//! backend parameter), defaulting to 1 with spinning off. Concurrency comes from instance_group
//! count, so N instances never fight over cores with N spinning thread pools.

mod direct;
mod status;
mod strings;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use ort::environment::Environment;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, TensorElementType, ValueType};

use super::{Backend, BackendKind, ExecRequest, InstanceContext, InstanceDevice, ModelInstance};
use crate::config::{ModelConfig, TensorConfig, datatype_to_config, pb};
use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, Tensor, bytes_elements, push_bytes_element};

/// Triton's default for auto-completed batching models (`--backend-config=default-max-batch-size`).
const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

pub struct OnnxBackend {
    library: Option<PathBuf>,
}

impl OnnxBackend {
    /// Uses libonnxruntime from `explicit` or the first location in [`library_candidates`],
    /// loaded when the first ONNX model loads (a server without ONNX models never opens it).
    /// Failure is not fatal: ONNX models then fail to load with the reason.
    pub fn new(explicit: Option<&Path>) -> Self {
        Self { library: explicit.map(Path::to_path_buf) }
    }

    /// ONNX Runtime allows one environment per process, so it is created once and shared by every
    /// server this process starts (an embedder may start several); the first library path wins.
    fn environment(&self) -> Result<&'static Environment, String> {
        static ENVIRONMENT: std::sync::OnceLock<Result<Environment, String>> = std::sync::OnceLock::new();
        ENVIRONMENT
            .get_or_init(|| {
                let environment = find_library(self.library.as_deref()).and_then(|path| {
                    tracing::info!(library = %path.display(), "loading ONNX Runtime");
                    ort::init_from(&path)
                        .map_err(|e| format!("failed to load ONNX Runtime from {}: {e}", path.display()))?
                        .with_name("tessera")
                        .build()
                        .map_err(|e| format!("failed to create the ONNX Runtime environment: {e}"))
                });
                if let Err(reason) = &environment {
                    tracing::error!("{reason}");
                }
                environment
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether the loaded library has the CUDA execution provider (the `onnxruntime-gpu` build).
    fn cuda_support(&self) -> Result<(), String> {
        self.environment()?;
        match <ort::ep::CUDA as ort::ep::ExecutionProvider>::is_available() {
            Ok(true) => Ok(()),
            Ok(false) => Err("the ONNX Runtime library this server loaded has no CUDA execution provider (it is a \
                CPU-only build: install the onnxruntime-gpu wheel and pass its library with --onnxruntime-library)"
                .into()),
            Err(e) => Err(format!("ONNX Runtime could not list its execution providers: {e}")),
        }
    }

    /// A session of the model at `model_path`, or of `plaintext` (a sealed file's) when given.
    fn session(
        &self,
        config: &ModelConfig,
        model_path: &Path,
        plaintext: Option<&[u8]>,
        device: InstanceDevice,
    ) -> CoreResult<Session> {
        // As Triton's ONNX Runtime backend: `model.onnx` may be a directory holding `model.onnx`
        // (and its external data files); ModelMesh's adapter lays models out that way.
        let model_path = &if model_path.is_dir() { model_path.join("model.onnx") } else { model_path.to_path_buf() };
        if plaintext.is_none() && crate::backend::sealed::file_is_sealed(model_path) {
            return Err(CoreError::unavailable(
                "model.onnx is sealed inside a model.onnx directory: a sealed ONNX model must be the file itself \
                 (ONNX Runtime reads external data files by path, so they cannot be sealed)",
            ));
        }
        let environment = self.environment().map_err(CoreError::unavailable)?;
        let threads = thread_param(config, "intra_op_thread_count")?.unwrap_or(1);
        let inter_threads = thread_param(config, "inter_op_thread_count")?.unwrap_or(1);
        let fail =
            |e: ort::Error| CoreError::internal(format!("failed to load ONNX model {}: {e}", model_path.display()));
        let options = |e: ort::Error<ort::session::builder::SessionBuilder>| fail(e.into());
        let mut builder = Session::builder(environment).map_err(fail)?;
        if let InstanceDevice::Gpu(id) = device {
            self.cuda_support().map_err(CoreError::unavailable)?;
            // error_on_failure: a CUDA provider that cannot start fails the load instead of
            // ONNX Runtime silently running the model on CPU.
            let cuda = ort::ep::CUDA::default().with_device_id(id as i32).build().error_on_failure();
            builder = builder.with_execution_providers([cuda]).map_err(options)?;
        }
        let mut builder = builder
            .with_intra_threads(threads)
            .map_err(options)?
            .with_inter_threads(inter_threads)
            .map_err(options)?
            .with_intra_op_spinning(threads > 1)
            .map_err(options)?;
        match plaintext {
            Some(bytes) => builder.commit_from_memory(bytes),
            None => builder.commit_from_file(model_path),
        }
        .map_err(fail)
    }
}

fn thread_param(config: &ModelConfig, key: &str) -> CoreResult<Option<usize>> {
    let Some(param) = config.parameters.get(key) else { return Ok(None) };
    let value: usize = param.string_value.trim().parse().map_err(|_| {
        CoreError::invalid_arg(format!(
            "parameter '{key}' must be a non-negative integer, got '{}'",
            param.string_value
        ))
    })?;
    // 0 means "ONNX Runtime's default" in Triton; we keep our 1-thread default for it.
    Ok(Some(value.max(1)))
}

/// Where libonnxruntime is looked for, in order: `ORT_DYLIB_PATH`, next to the executable (and
/// ../lib), the workspace's `.venv` made by scripts/setup.sh, then system library directories.
pub fn library_candidates() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        dirs.push(dir.to_path_buf());
        dirs.push(dir.join("lib"));
        dirs.push(dir.join("../lib"));
    }
    let venv_lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
    if let Ok(entries) = std::fs::read_dir(&venv_lib) {
        for entry in entries.flatten() {
            dirs.push(entry.path().join("site-packages/onnxruntime/capi"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/lib"));
    dirs.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
    dirs.push(PathBuf::from("/usr/lib"));
    dirs
}

fn find_library(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH") {
        return Ok(PathBuf::from(path));
    }
    let candidates = library_candidates();
    for dir in &candidates {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n == "libonnxruntime.so" || n.starts_with("libonnxruntime.so."))
            })
            .collect();
        found.sort();
        if let Some(path) = found.pop() {
            return Ok(path);
        }
    }
    let searched: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "ONNX Runtime library (libonnxruntime.so) not found; run scripts/setup.sh, pass \
        --onnxruntime-library, or set ORT_DYLIB_PATH. Searched: {}",
        searched.join(", ")
    ))
}

fn datatype_from_ort(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Bfloat16 => DataType::Bf16,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Float64 => DataType::Fp64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

/// (name, datatype, shape with -1 for dynamic dims) of each model input or output.
fn io_signature(outlets: &[ort::value::Outlet]) -> CoreResult<Vec<(String, DataType, Vec<i64>)>> {
    outlets
        .iter()
        .map(|o| match o.dtype() {
            ValueType::Tensor { ty, shape, .. } => {
                let dt = datatype_from_ort(*ty).ok_or_else(|| {
                    CoreError::unsupported(format!("ONNX tensor '{}' has unsupported element type {ty:?}", o.name()))
                })?;
                Ok((o.name().to_string(), dt, shape.iter().map(|&d| if d < 0 { -1 } else { d }).collect()))
            }
            other => Err(CoreError::unsupported(format!("ONNX value '{}' is not a tensor ({other:?})", o.name()))),
        })
        .collect()
}

impl Backend for OnnxBackend {
    fn kind(&self) -> BackendKind {
        BackendKind { name: "onnxruntime", platforms: &["onnxruntime_onnx"], default_model_filename: "model.onnx" }
    }

    fn gpu_support(&self) -> Result<(), String> {
        self.cuda_support()
    }

    fn autocomplete(&self, config: &mut ModelConfig, model_path: &Path) -> CoreResult<()> {
        self.complete_from(config, model_path, None)
    }

    fn autocomplete_sealed(&self, config: &mut ModelConfig, model_path: &Path, plaintext: &[u8]) -> CoreResult<()> {
        self.complete_from(config, model_path, Some(plaintext))
    }

    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        self.instance(ctx)
    }
}

impl OnnxBackend {
    /// Triton's auto-complete from the model's own inputs and outputs.
    fn complete_from(&self, config: &mut ModelConfig, model_path: &Path, plaintext: Option<&[u8]>) -> CoreResult<()> {
        let session = self.session(config, model_path, plaintext, InstanceDevice::Cpu)?;
        let inputs = io_signature(session.inputs())?;
        let outputs = io_signature(session.outputs())?;
        if config.backend.is_empty() && config.platform.is_empty() {
            config.backend = self.name().to_string();
        }
        let all_batchable = inputs.iter().chain(&outputs).all(|(_, _, s)| s.first() == Some(&-1));
        if config.max_batch_size == 0 && config.input.is_empty() && config.output.is_empty() && all_batchable {
            config.max_batch_size = DEFAULT_MAX_BATCH_SIZE;
            if config.scheduling_choice.is_none() {
                config.scheduling_choice =
                    Some(pb::model_config::SchedulingChoice::DynamicBatching(Default::default()));
            }
        }
        let batching = config.max_batch_size > 0;
        complete_tensors(&mut config.input, &inputs, batching);
        complete_tensors(&mut config.output, &outputs, batching);
        Ok(())
    }

    fn instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        let config = ctx.config;
        let session = self.session(config, ctx.model_path, ctx.model_plaintext, ctx.device)?;
        let model_inputs = io_signature(session.inputs())?;
        let model_outputs = io_signature(session.outputs())?;
        let batching = config.max_batch_size > 0;
        for input in &config.input {
            match model_inputs.iter().find(|(n, ..)| n == &input.name) {
                Some(model) => check_against_model("input", input, batching, model)?,
                None if input.optional => {}
                None => {
                    return Err(CoreError::invalid_arg(format!(
                        "unexpected inference input '{}', allowed inputs are: {}",
                        input.name,
                        names(&model_inputs)
                    )));
                }
            }
        }
        for output in &config.output {
            let model = model_outputs.iter().find(|(n, ..)| n == &output.name).ok_or_else(|| {
                CoreError::invalid_arg(format!(
                    "unexpected inference output '{}', allowed outputs are: {}",
                    output.name,
                    names(&model_outputs)
                ))
            })?;
            check_against_model("output", output, batching, model)?;
        }
        let on_cpu = ctx.device == InstanceDevice::Cpu;
        let direct = if on_cpu {
            direct::DirectRun::new(
                model_inputs.iter().map(|(name, dt, _)| (name.as_str(), *dt)),
                model_outputs.iter().map(|(name, dt, _)| (name.as_str(), *dt)),
            )
        } else {
            None
        };
        Ok(Box::new(OnnxInstance { session, on_cpu, direct }))
    }
}

/// Checks a configured tensor against the model file, as Triton's ORT backend does at load: same
/// datatype, and the full shape (batch dim + dims, or the reshape) compatible with the model's.
fn check_against_model(
    role: &str,
    tensor: &impl TensorConfig,
    batching: bool,
    (_, model_type, model_shape): &(String, DataType, Vec<i64>),
) -> CoreResult<()> {
    let name = tensor.name();
    let dims = tensor.dims();
    let reshape = tensor.reshape();
    let configured = crate::config::datatype_from_config(tensor.data_type());
    if configured != Some(*model_type) {
        return Err(CoreError::invalid_arg(format!(
            "unexpected datatype {} for {role} '{name}', the model provides {}",
            configured.map_or("TYPE_INVALID".to_string(), |d| d.to_string()),
            model_type
        )));
    }
    let mut full: Vec<i64> = if batching { vec![-1] } else { Vec::new() };
    full.extend_from_slice(reshape.map_or(dims, |r| &r.shape[..]));
    let compatible =
        full.len() == model_shape.len() && full.iter().zip(model_shape).all(|(&c, &m)| c == -1 || m == -1 || c == m);
    if !compatible {
        return Err(CoreError::invalid_arg(format!(
            "{role} '{name}': the model expects shape {} but the model configuration specifies {}{}",
            crate::tensor::format_shape(model_shape),
            crate::tensor::format_shape(&full),
            if batching { " (an initial batch dimension because max_batch_size > 0, followed by dims)" } else { "" }
        )));
    }
    Ok(())
}

/// Auto-complete: fills datatype and dims of configured tensors from the model, and adds every
/// model tensor when the config lists none (the batch dimension is dropped when batching).
fn complete_tensors<T: TensorConfig>(configured: &mut Vec<T>, model: &[(String, DataType, Vec<i64>)], batching: bool) {
    let none_configured = configured.is_empty();
    for (name, dt, shape) in model {
        let dims = if batching { shape.get(1..).unwrap_or_default().to_vec() } else { shape.clone() };
        match configured.iter_mut().find(|t| t.name() == name) {
            Some(tensor) => tensor.complete(datatype_to_config(*dt), dims),
            None if none_configured => configured.push(T::new(name.clone(), datatype_to_config(*dt), dims)),
            None => {}
        }
    }
}

fn names(sig: &[(String, DataType, Vec<i64>)]) -> String {
    sig.iter().map(|(n, ..)| n.as_str()).collect::<Vec<_>>().join(", ")
}

struct OnnxInstance {
    session: Session,
    /// A CPU session only computes; a GPU one waits on the device.
    on_cpu: bool,
    /// The C API path for CPU models of plain numeric tensors (see [`direct`]).
    direct: Option<direct::DirectRun>,
}

impl ModelInstance for OnnxInstance {
    /// Several requests (a dynamic batch) run as one session call on inputs stacked along dim 0;
    /// each request then gets its rows of the outputs it asked for.
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        super::batch::execute_merged(batch, |request| self.run(request))
    }

    fn only_computes(&self) -> bool {
        self.on_cpu
    }
}

impl OnnxInstance {
    fn run(&mut self, request: ExecRequest) -> CoreResult<Vec<Tensor>> {
        if let Some(direct) = &self.direct
            && let Some(result) = direct.run(&mut self.session, &request)
        {
            return result;
        }
        let mut inputs: Vec<(String, SessionInputValue<'static>)> = Vec::with_capacity(request.inputs.len());
        for tensor in &request.inputs {
            inputs.push((tensor.name.clone(), to_ort(tensor)?.into()));
        }
        let outputs =
            self.session.run(inputs).map_err(|e| CoreError::internal(format!("onnxruntime execution failure: {e}")))?;
        request
            .outputs
            .iter()
            .map(|name| {
                let value = outputs
                    .get(name.as_str())
                    .ok_or_else(|| CoreError::internal(format!("model did not produce output '{name}'")))?;
                from_ort(name, value)
            })
            .collect()
    }
}

fn ort_err(name: &str) -> impl Fn(ort::Error) -> CoreError + '_ {
    move |e| CoreError::invalid_arg(format!("failed to create ONNX tensor for input '{name}': {e}"))
}

/// Decodes little-endian element bytes into a typed vector.
macro_rules! decode {
    ($data:expr, $ty:ty, $n:literal) => {
        $data.chunks_exact($n).map(|c| <$ty>::from_le_bytes(c.try_into().unwrap_or([0; $n]))).collect::<Vec<$ty>>()
    };
}

fn to_ort(tensor: &Tensor) -> CoreResult<DynValue> {
    use ort::value::Tensor as T;
    let shape = tensor.shape.clone();
    let d = &tensor.data[..];
    let e = ort_err(&tensor.name);
    Ok(match tensor.datatype {
        DataType::Bool => {
            T::from_array((shape, d.iter().map(|&b| b != 0).collect::<Vec<bool>>())).map_err(e)?.into_dyn()
        }
        DataType::Uint8 => T::from_array((shape, d.to_vec())).map_err(e)?.into_dyn(),
        DataType::Int8 => {
            T::from_array((shape, d.iter().map(|&b| b as i8).collect::<Vec<i8>>())).map_err(e)?.into_dyn()
        }
        DataType::Uint16 => T::from_array((shape, decode!(d, u16, 2))).map_err(e)?.into_dyn(),
        DataType::Int16 => T::from_array((shape, decode!(d, i16, 2))).map_err(e)?.into_dyn(),
        DataType::Uint32 => T::from_array((shape, decode!(d, u32, 4))).map_err(e)?.into_dyn(),
        DataType::Int32 => T::from_array((shape, decode!(d, i32, 4))).map_err(e)?.into_dyn(),
        DataType::Uint64 => T::from_array((shape, decode!(d, u64, 8))).map_err(e)?.into_dyn(),
        DataType::Int64 => T::from_array((shape, decode!(d, i64, 8))).map_err(e)?.into_dyn(),
        DataType::Fp32 => T::from_array((shape, decode!(d, f32, 4))).map_err(e)?.into_dyn(),
        DataType::Fp64 => T::from_array((shape, decode!(d, f64, 8))).map_err(e)?.into_dyn(),
        DataType::Fp16 => {
            T::from_array((shape, decode!(d, u16, 2).into_iter().map(half::f16::from_bits).collect::<Vec<_>>()))
                .map_err(e)?
                .into_dyn()
        }
        DataType::Bf16 => {
            T::from_array((shape, decode!(d, u16, 2).into_iter().map(half::bf16::from_bits).collect::<Vec<_>>()))
                .map_err(e)?
                .into_dyn()
        }
        // Arbitrary bytes (NUL included), as Triton's BYTES elements are.
        DataType::Bytes => strings::tensor_from_bytes(shape, bytes_elements(d).collect::<Vec<_>>().into_iter())?,
    })
}

/// Encodes a typed slice as little-endian bytes.
macro_rules! encode {
    ($value:expr, $ty:ty, $name:expr) => {{
        let (shape, data) = $value
            .try_extract_tensor::<$ty>()
            .map_err(|e| CoreError::internal(format!("failed to read output '{}': {e}", $name)))?;
        let mut out = Vec::with_capacity(std::mem::size_of_val(data));
        for v in data {
            out.extend_from_slice(&v.to_le_bytes());
        }
        (shape.to_vec(), out)
    }};
}

fn from_ort(name: &str, value: &DynValue) -> CoreResult<Tensor> {
    let ValueType::Tensor { ty, .. } = value.dtype() else {
        return Err(CoreError::internal(format!("output '{name}' is not a tensor")));
    };
    let datatype = datatype_from_ort(*ty)
        .ok_or_else(|| CoreError::internal(format!("output '{name}' has unsupported element type {ty:?}")))?;
    let (shape, data) = match datatype {
        DataType::Bool => {
            let (shape, data) = value
                .try_extract_tensor::<bool>()
                .map_err(|e| CoreError::internal(format!("failed to read output '{name}': {e}")))?;
            (shape.to_vec(), data.iter().map(|&b| u8::from(b)).collect())
        }
        DataType::Uint8 => encode!(value, u8, name),
        DataType::Int8 => encode!(value, i8, name),
        DataType::Uint16 => encode!(value, u16, name),
        DataType::Int16 => encode!(value, i16, name),
        DataType::Uint32 => encode!(value, u32, name),
        DataType::Int32 => encode!(value, i32, name),
        DataType::Uint64 => encode!(value, u64, name),
        DataType::Int64 => encode!(value, i64, name),
        DataType::Fp32 => encode!(value, f32, name),
        DataType::Fp64 => encode!(value, f64, name),
        DataType::Fp16 => encode!(value, half::f16, name),
        DataType::Bf16 => encode!(value, half::bf16, name),
        DataType::Bytes => {
            let ValueType::Tensor { shape, .. } = value.dtype() else {
                return Err(CoreError::internal(format!("output '{name}' is not a tensor")));
            };
            let count = shape.num_elements();
            let mut out = Vec::new();
            for element in strings::tensor_to_bytes(value, count)? {
                push_bytes_element(&mut out, &element)?;
            }
            (shape.to_vec(), out)
        }
    };
    Tensor::new(name, datatype, shape, Bytes::from(data))
}
