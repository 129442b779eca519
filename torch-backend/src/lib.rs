//! TorchScript backend (`backend: "pytorch"` / `platform: "pytorch_libtorch"`, `model.pt`), through
//! the `tch` crate over libtorch. A crate of its own, registered by the `tessera` binary built with
//! its `torch` feature (scripts/setup.sh turns it on), so that the server library builds the same
//! with or without libtorch; without it the server refuses such models with a message saying how
//! to get the backend.
//!
//! It follows Triton's PyTorch backend:
//! - inputs bind to `forward()` arguments by argument name when every configured input is one,
//!   else by `<name>__<index>`, else by their order in the config ([`naming`]); outputs by
//!   `<name>__<index>`, else by config order, into the tuple / list / tensor `forward()` returns;
//! - a dynamic batch is one `forward()` call on inputs stacked along dim 0;
//! - the datatypes are those TorchScript tensors have (no unsigned types beyond UINT8); BYTES
//!   (Triton's `List[str]`) is refused at load with a clear message;
//! - parameters: see [`params`]; each one Triton defines is honoured or refused, never ignored.
//!
//! GPU instances (KIND_GPU) load the module onto `cuda:<id>`; libtorch's CUDA half
//! (libtorch_cuda.so) is opened only then, so the server runs where CUDA libraries are absent.

mod naming;
mod params;
mod schema;

use std::path::Path;

use bytes::Bytes;
use tch::{CModule, Device, IValue, Kind};

pub use params::TorchParams;
use tessera::{
    Backend, BackendKind, CoreError, CoreResult, DataType, ExecRequest, InstanceContext, InstanceDevice, ModelConfig,
    ModelInstance, PYTORCH, Tensor, datatype_from_config,
};

pub struct TorchBackend;

impl TorchBackend {
    pub fn new() -> Self {
        Self
    }
}

impl Default for TorchBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// The libtorch type a Triton datatype maps to, as Triton's PyTorch backend maps them.
pub fn kind_of(datatype: DataType) -> Option<Kind> {
    Some(match datatype {
        DataType::Bool => Kind::Bool,
        DataType::Uint8 => Kind::Uint8,
        DataType::Int8 => Kind::Int8,
        DataType::Int16 => Kind::Int16,
        DataType::Int32 => Kind::Int,
        DataType::Int64 => Kind::Int64,
        DataType::Fp16 => Kind::Half,
        DataType::Bf16 => Kind::BFloat16,
        DataType::Fp32 => Kind::Float,
        DataType::Fp64 => Kind::Double,
        DataType::Uint16 | DataType::Uint32 | DataType::Uint64 | DataType::Bytes => return None,
    })
}

fn datatype_of(kind: Kind) -> Option<DataType> {
    Some(match kind {
        Kind::Bool => DataType::Bool,
        Kind::Uint8 => DataType::Uint8,
        Kind::Int8 => DataType::Int8,
        Kind::Int16 => DataType::Int16,
        Kind::Int => DataType::Int32,
        Kind::Int64 => DataType::Int64,
        Kind::Half => DataType::Fp16,
        Kind::BFloat16 => DataType::Bf16,
        Kind::Float => DataType::Fp32,
        Kind::Double => DataType::Fp64,
        _ => return None,
    })
}

/// Checks a tensor's configured datatype; BYTES and unsigned types wider than 8 bits are refused.
fn check_datatype(role: &str, name: &str, data_type: i32, model: &str) -> CoreResult<DataType> {
    let datatype = datatype_from_config(data_type).ok_or_else(|| {
        CoreError::invalid_arg(format!("unsupported datatype for {role} '{name}' for model '{model}'"))
    })?;
    if datatype == DataType::Bytes {
        return Err(CoreError::unsupported(format!(
            "{role} '{name}' of model '{model}' is TYPE_STRING: Tessera's TorchScript backend does not support \
            string (List[str]) tensors; pre- or post-process strings in a Wasm guest or an ensemble step"
        )));
    }
    if kind_of(datatype).is_none() {
        return Err(CoreError::unsupported(format!(
            "unsupported datatype {} for {role} '{name}' for model '{model}' (TorchScript has no such tensor type)",
            tessera::datatype_to_config(datatype).as_str_name()
        )));
    }
    Ok(datatype)
}

impl Backend for TorchBackend {
    fn kind(&self) -> BackendKind {
        PYTORCH
    }

    /// GPUs are usable when libtorch's CUDA half loads (a CPU-only libtorch, or one whose CUDA
    /// libraries are missing, keeps KIND_AUTO models on CPU and refuses KIND_GPU with the reason).
    fn gpu_support(&self) -> Result<(), String> {
        cuda::available()
    }

    /// TorchScript files do not carry enough metadata to complete a config (Triton's backend
    /// skips auto-complete too): the config must list the inputs and outputs.
    fn autocomplete(&self, config: &mut ModelConfig, _model_path: &Path) -> CoreResult<()> {
        if config.backend.is_empty() && config.platform.is_empty() {
            config.platform = "pytorch_libtorch".into();
        }
        tracing::warn!(
            model = config.name.as_str(),
            "skipping model configuration auto-complete: not supported for the pytorch backend"
        );
        Ok(())
    }

    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        let config = ctx.config;
        let model = config.name.as_str();
        let params = TorchParams::from_config(config, ctx.device)?;
        params.apply_process_wide()?;
        let device = match ctx.device {
            InstanceDevice::Cpu => Device::Cpu,
            InstanceDevice::Gpu(id) => {
                cuda::ensure_available(id)?;
                Device::Cuda(id as usize)
            }
        };
        if ctx.model_plaintext.is_none() && !ctx.model_path.is_file() {
            return Err(CoreError::unavailable(format!(
                "unable to find '{}' for model instance '{}'",
                ctx.model_path.display(),
                ctx.instance_name
            )));
        }
        // A sealed model (encrypted at rest) loads from its plaintext in memory.
        let module = match ctx.model_plaintext {
            Some(bytes) => CModule::load_data_on_device(&mut std::io::Cursor::new(bytes), device),
            None => CModule::load_on_device(ctx.model_path, device),
        }
        .map_err(|e| CoreError::internal(format!("failed to load model '{model}': {}", first_lines(&e.to_string()))))?;
        let arguments = schema::forward_arguments(&module)
            .map_err(|e| CoreError::internal(format!("failed to load model '{model}': {e}")))?;
        if config.input.is_empty() {
            return Err(CoreError::internal(
                "model configuration must contain at least one input, none were specified.",
            ));
        }
        if config.output.is_empty() {
            return Err(CoreError::internal(
                "model configuration must contain at least one output, none were specified.",
            ));
        }
        if arguments.len() != config.input.len() {
            return Err(CoreError::invalid_arg(format!(
                "unable to load model '{model}', configuration expects {} inputs, model provides {}",
                config.input.len(),
                arguments.len()
            )));
        }
        let mut inputs = Vec::with_capacity(config.input.len());
        let input_names: Vec<&str> = config.input.iter().map(|i| i.name.as_str()).collect();
        let input_index = naming::input_indices(&input_names, &arguments, model)?;
        for (input, index) in config.input.iter().zip(input_index) {
            let datatype = check_datatype("input", &input.name, input.data_type, model)?;
            inputs.push(InputBinding { name: input.name.clone(), position: index, datatype });
        }
        let output_names: Vec<&str> = config.output.iter().map(|o| o.name.as_str()).collect();
        let output_index = naming::output_indices(&output_names);
        let mut outputs = Vec::with_capacity(config.output.len());
        for (output, index) in config.output.iter().zip(output_index) {
            let datatype = check_datatype("output", &output.name, output.data_type, model)?;
            outputs.push(OutputBinding { name: output.name.clone(), index, datatype });
        }
        tracing::info!(
            model,
            instance = ctx.instance_name.as_str(),
            ?device,
            arguments = ?arguments,
            "TorchScript model loaded"
        );
        Ok(Box::new(TorchInstance { module, device, inputs, outputs, params, model: model.to_string() }))
    }
}

/// libtorch errors carry a C++ backtrace after the message; the first lines say what went wrong.
fn first_lines(message: &str) -> String {
    let cut = message.find("\nException raised from").unwrap_or(message.len());
    message[..cut].lines().take(6).collect::<Vec<_>>().join(" ").trim().to_string()
}

struct InputBinding {
    name: String,
    /// The `forward()` argument it is passed as.
    position: usize,
    datatype: DataType,
}

struct OutputBinding {
    name: String,
    /// Its index in what `forward()` returns.
    index: usize,
    datatype: DataType,
}

struct TorchInstance {
    module: CModule,
    device: Device,
    inputs: Vec<InputBinding>,
    outputs: Vec<OutputBinding>,
    params: TorchParams,
    model: String,
}

impl ModelInstance for TorchInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        tessera::execute_merged(batch, |request| self.run(request))
    }

    /// On the CPU a forward pass only computes; on a GPU it waits on the device.
    fn only_computes(&self) -> bool {
        self.device == Device::Cpu
    }
}

impl TorchInstance {
    fn run(&mut self, request: ExecRequest) -> CoreResult<Vec<Tensor>> {
        // Thread-local settings: the instance's thread may have served another model before.
        self.params.apply_per_call()?;
        let _no_grad = tch::no_grad_guard();
        let mut arguments: Vec<Option<IValue>> = (0..self.inputs.len()).map(|_| None).collect();
        for binding in &self.inputs {
            let tensor = request
                .inputs
                .iter()
                .find(|t| t.name == binding.name)
                .ok_or_else(|| CoreError::invalid_arg(format!("expected input '{}' is missing", binding.name)))?;
            let value = to_torch(tensor, binding.datatype, self.device)?;
            if let Some(slot) = arguments.get_mut(binding.position) {
                *slot = Some(IValue::Tensor(value));
            }
        }
        let arguments: Vec<IValue> = arguments
            .into_iter()
            .enumerate()
            .map(|(i, a)| a.ok_or_else(|| CoreError::internal(format!("no input is bound to forward() argument {i}"))))
            .collect::<CoreResult<_>>()?;
        let result = self
            .module
            .forward_is(&arguments)
            .map_err(|e| CoreError::internal(format!("PyTorch execute failure: {}", first_lines(&e.to_string()))))?;
        let produced = flatten_outputs(result)?;
        let mut outputs = Vec::with_capacity(request.outputs.len());
        for name in &request.outputs {
            let binding = self
                .outputs
                .iter()
                .find(|o| &o.name == name)
                .ok_or_else(|| CoreError::invalid_arg(format!("unexpected inference output '{name}'")))?;
            let value = produced.get(binding.index).ok_or_else(|| {
                CoreError::invalid_arg(format!(
                    "The output {name} in the model configuration refers to an output index which doesn't exist. \
                    This model has {} outputs",
                    produced.len()
                ))
            })?;
            outputs.push(from_torch(name, value, binding.datatype, &self.model)?);
        }
        Ok(outputs)
    }
}

/// What `forward()` returned, as a list of tensors: a tensor, or a tuple / list of tensors.
fn flatten_outputs(value: IValue) -> CoreResult<Vec<tch::Tensor>> {
    let tensor = |v: IValue, i: usize| match v {
        IValue::Tensor(t) => Ok(t),
        other => Err(CoreError::internal(format!(
            "output at index {i} must be a tensor, the model returned {}",
            ivalue_kind(&other)
        ))),
    };
    match value {
        IValue::Tensor(t) => Ok(vec![t]),
        IValue::Tuple(items) | IValue::GenericList(items) => {
            items.into_iter().enumerate().map(|(i, v)| tensor(v, i)).collect()
        }
        IValue::TensorList(items) => Ok(items),
        other => Err(CoreError::internal(format!(
            "the model's forward() returned {}; expected a tensor or a tuple or list of tensors",
            ivalue_kind(&other)
        ))),
    }
}

fn ivalue_kind(value: &IValue) -> &'static str {
    match value {
        IValue::None => "None",
        IValue::Tensor(_) => "a tensor",
        IValue::Double(_) => "a float",
        IValue::Int(_) => "an int",
        IValue::Bool(_) => "a bool",
        IValue::Tuple(_) => "a tuple",
        IValue::IntList(_) | IValue::DoubleList(_) | IValue::BoolList(_) | IValue::TensorList(_) => "a list",
        IValue::GenericList(_) => "a list",
        IValue::String(_) | IValue::StringList(_) => "a string",
        IValue::GenericDict(_) => "a dict",
        IValue::Object(_) => "an object",
        _ => "an unsupported value",
    }
}

fn to_torch(tensor: &Tensor, datatype: DataType, device: Device) -> CoreResult<tch::Tensor> {
    let kind = kind_of(datatype)
        .ok_or_else(|| CoreError::invalid_arg(format!("unsupported datatype for input '{}'", tensor.name)))?;
    if tensor.datatype != datatype {
        return Err(CoreError::invalid_arg(format!(
            "unexpected datatype {} for input '{}', expecting {datatype}",
            tensor.datatype, tensor.name
        )));
    }
    let value = tch::Tensor::f_from_data_size(&tensor.data, &tensor.shape, kind)
        .map_err(|e| CoreError::invalid_arg(format!("failed to create tensor for input '{}': {e}", tensor.name)))?;
    if device == Device::Cpu {
        return Ok(value);
    }
    value
        .f_to_device(device)
        .map_err(|e| CoreError::internal(format!("failed to copy input '{}' to {device:?}: {e}", tensor.name)))
}

fn from_torch(name: &str, value: &tch::Tensor, expected: DataType, model: &str) -> CoreResult<Tensor> {
    let read_err = |e: tch::TchError| CoreError::internal(format!("failed to read output '{name}': {e}"));
    let kind = value.f_kind().map_err(read_err)?;
    let datatype = datatype_of(kind).ok_or_else(|| {
        CoreError::internal(format!("output '{name}' of model '{model}' has a type ({kind:?}) Triton cannot return"))
    })?;
    if datatype != expected {
        return Err(CoreError::internal(format!(
            "configuration expects datatype {} for output '{name}', model provides {}",
            tessera::datatype_to_config(expected).as_str_name(),
            tessera::datatype_to_config(datatype).as_str_name()
        )));
    }
    let shape = value.size();
    if shape.is_empty() {
        return Err(CoreError::internal(format!(
            "output '{name}' is a scalar which is not supported (model '{model}')"
        )));
    }
    let host = value.f_to_device(Device::Cpu).and_then(|t| t.f_contiguous()).map_err(read_err)?;
    let numel = host.numel();
    let size = datatype.element_size().unwrap_or(1);
    let mut data = vec![0u8; numel * size];
    if numel > 0 {
        host.f_copy_data_u8(&mut data, numel).map_err(read_err)?;
    }
    Tensor::new(name, datatype, shape, Bytes::from(data))
}

/// libtorch's CUDA half, opened on first use of a GPU instance.
mod cuda {
    use std::sync::OnceLock;

    use tessera::{CoreError, CoreResult};

    static OPENED: OnceLock<Result<(), String>> = OnceLock::new();

    /// Opens libtorch_cuda.so once (its static initialisers register the CUDA device type with
    /// libtorch); the error says why CUDA cannot be used.
    pub fn available() -> Result<(), String> {
        if tessera::gpu::devices().is_empty() {
            return Err("this machine has no GPU".into());
        }
        OPENED.get_or_init(open).clone()
    }

    /// [`available`], and device `id` exists for libtorch.
    pub fn ensure_available(id: u32) -> CoreResult<()> {
        available().map_err(CoreError::unavailable)?;
        let count = tch::Cuda::device_count();
        if i64::from(id) >= count {
            return Err(CoreError::invalid_arg(format!(
                "libtorch sees {count} CUDA device(s); GPU {id} is not one of them"
            )));
        }
        Ok(())
    }

    fn open() -> Result<(), String> {
        tessera::gpu::dlopen_global("libtorch_cuda.so").map_err(|e| {
            format!(
                "libtorch's CUDA library could not be opened ({e}): the libtorch this server runs with is a \
                CPU-only build or its CUDA dependencies are not on the library path"
            )
        })?;
        if tch::Cuda::is_available() {
            Ok(())
        } else {
            Err("libtorch_cuda.so is loaded but libtorch reports no usable CUDA device".into())
        }
    }
}
