//! The standard `wasi:nn@0.2.0-rc-2024-10-28` interfaces (`wit/deps/wasi-nn`), backed by the
//! models this server serves, for guests written against wasi:nn instead of (or beside)
//! Tessera's own `host` interface.
//!
//! - `load-by-name(name)` resolves a served model: `name` (its newest ready version) or
//!   `name:version`. The guest's `allowed_models` applies exactly as to BLS; a model it may not
//!   call is refused with `security`, an unknown or unready one with `not-found`.
//! - `compute` runs the model as a BLS call does: through the model's scheduler (dynamic
//!   batching, statistics, metrics), bounded by the guest's `max_execute_ms`, its time not
//!   charged to the guest. Inputs are named; the outputs come back in the model's output order.
//! - Tensor types map to Tessera's datatypes: FP16, FP32, FP64, BF16, U8 (UINT8), I32 (INT32),
//!   I64 (INT64). A model output of another datatype (BOOL, INT8, INT16, UINT16, UINT32, UINT64,
//!   BYTES) has no wasi:nn type: `compute` fails with `unsupported-operation` naming it.
//! - `load` (graph bytes from the guest) is refused with `unsupported-operation`: a guest runs
//!   the models the operator serves, it does not bring its own into the server.
//!
//! Error codes: the core error kinds map to `invalid-argument`, `not-found`,
//! `unsupported-operation`, `unknown`, `timeout` (the caller's BLS time limit) and
//! `runtime-error` (internal, unavailable, cancelled); the error's `data` is the message a BLS
//! caller would get.
//!
//! The host functions are synchronous, like the rest of the guest's imports: `compute` blocks
//! the guest's thread while the model runs (see `HostView::bls`).

use bytes::Bytes;
use wasmtime::component::{Linker, Resource};

use super::state::{GuestState, HostCalls, HostView, table_error};
use crate::error::{CoreError, ErrorKind};
use crate::infer::Parameters;
use crate::tensor::{DataType, Tensor};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/deps/wasi-nn",
        world: "ml",
        with: {
            "wasi:nn/tensor.tensor": super::NnTensor,
            "wasi:nn/graph.graph": super::NnGraph,
            "wasi:nn/inference.graph-execution-context": super::NnContext,
            "wasi:nn/errors.error": super::NnError,
        },
        imports: { default: trappable },
    });
}

use bindings::wasi::nn::errors::ErrorCode;
use bindings::wasi::nn::graph::{ExecutionTarget, GraphEncoding};
use bindings::wasi::nn::tensor::TensorType;
use bindings::wasi::nn::{errors, graph, inference, tensor};

/// Adds the wasi:nn interfaces to a guest linker.
pub(super) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    // On the view of interface `host`: `compute` is a BLS call.
    errors::add_to_linker::<GuestState, HostCalls>(linker, GuestState::host)?;
    tensor::add_to_linker::<GuestState, HostCalls>(linker, GuestState::host)?;
    graph::add_to_linker::<GuestState, HostCalls>(linker, GuestState::host)?;
    inference::add_to_linker::<GuestState, HostCalls>(linker, GuestState::host)
}

/// A wasi:nn tensor: no name (it gets one in `compute`), its bytes shared, never copied by handles,
/// and held on the guest's account (`Handles::hold`) until it leaves the table.
pub struct NnTensor {
    dimensions: Vec<u32>,
    ty: TensorType,
    data: Bytes,
}

impl NnTensor {
    /// What it takes in the host, on the guest's account.
    fn held_size(&self) -> usize {
        self.data.len() + self.dimensions.len() * std::mem::size_of::<u32>()
    }
}

impl HostView<'_> {
    /// Takes a wasi:nn tensor out of the table, and off the guest's account.
    fn take_nn_tensor(&mut self, handle: Resource<NnTensor>) -> wasmtime::Result<NnTensor> {
        let tensor = self.handles.table.delete(handle).map_err(table_error)?;
        self.handles.release(tensor.held_size());
        Ok(tensor)
    }
}

/// A served model a guest loaded by name.
pub struct NnGraph {
    model: String,
    version: Option<i64>,
}

/// An execution context of a graph: the same model (the server keeps no per-context state).
pub struct NnContext {
    model: String,
    version: Option<i64>,
}

/// A wasi:nn error resource.
pub struct NnError {
    code: ErrorCode,
    message: String,
}

type NnResult<T> = wasmtime::Result<Result<T, Resource<NnError>>>;

fn tensor_type(datatype: DataType) -> Option<TensorType> {
    Some(match datatype {
        DataType::Fp16 => TensorType::Fp16,
        DataType::Fp32 => TensorType::Fp32,
        DataType::Fp64 => TensorType::Fp64,
        DataType::Bf16 => TensorType::Bf16,
        DataType::Uint8 => TensorType::U8,
        DataType::Int32 => TensorType::I32,
        DataType::Int64 => TensorType::I64,
        _ => return None,
    })
}

fn datatype(ty: TensorType) -> DataType {
    match ty {
        TensorType::Fp16 => DataType::Fp16,
        TensorType::Fp32 => DataType::Fp32,
        TensorType::Fp64 => DataType::Fp64,
        TensorType::Bf16 => DataType::Bf16,
        TensorType::U8 => DataType::Uint8,
        TensorType::I32 => DataType::Int32,
        TensorType::I64 => DataType::Int64,
    }
}

fn error_code(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::InvalidArg => ErrorCode::InvalidArgument,
        ErrorKind::NotFound => ErrorCode::NotFound,
        ErrorKind::Unsupported => ErrorCode::UnsupportedOperation,
        ErrorKind::Unknown => ErrorCode::Unknown,
        ErrorKind::Internal | ErrorKind::Unavailable | ErrorKind::AlreadyExists | ErrorKind::Cancelled => {
            ErrorCode::RuntimeError
        }
    }
}

/// `name` or `name:version` (a positive integer after the last colon).
fn parse_graph_name(name: &str) -> (String, Option<i64>) {
    if let Some((model, version)) = name.rsplit_once(':')
        && let Ok(version) = version.parse::<i64>()
        && version > 0
        && !model.is_empty()
    {
        return (model.to_string(), Some(version));
    }
    (name.to_string(), None)
}

impl HostView<'_> {
    fn nn_error<T>(&mut self, code: ErrorCode, message: impl Into<String>) -> NnResult<T> {
        // Its text may quote the guest (a graph name): cut to 1 KiB, and held on the guest's
        // account until the guest drops the error (never refused: the error must reach it).
        let message = super::state::cut_text(message.into(), 1 << 10, "wasi:nn error messages keep");
        self.handles.hold_regardless(message.len());
        let error = self.handles.table.push(NnError { code, message }).map_err(table_error)?;
        Ok(Err(error))
    }

    fn nn_core_error<T>(&mut self, e: CoreError) -> NnResult<T> {
        self.nn_error(error_code(e.kind), e.message)
    }

    /// The model's outputs as wasi:nn tensors, or the first output that has no wasi:nn type.
    /// Every output is checked before any enters the table, so a refusal leaves nothing behind.
    fn nn_outputs(&mut self, model: &str, outputs: Vec<Tensor>) -> NnResult<Vec<(String, Resource<NnTensor>)>> {
        let mut converted = Vec::with_capacity(outputs.len());
        for output in outputs {
            let Some(ty) = tensor_type(output.datatype) else {
                return self.nn_error(
                    ErrorCode::UnsupportedOperation,
                    format!(
                        "model '{model}' output '{}' is {}, which wasi:nn has no tensor type for (it has FP16, FP32, \
                         FP64, BF16, U8, I32 and I64)",
                        output.name,
                        output.datatype.as_str()
                    ),
                );
            };
            let Ok(dimensions) = output.shape.iter().map(|&d| u32::try_from(d)).collect::<Result<Vec<u32>, _>>() else {
                return self.nn_error(
                    ErrorCode::UnsupportedOperation,
                    format!("model '{model}' output '{}' has a dimension wasi:nn cannot hold (u32)", output.name),
                );
            };
            converted.push((output.name, NnTensor { dimensions, ty, data: output.data }));
        }
        if let Err(e) = self.handles.hold(converted.iter().map(|(_, t)| t.held_size()).sum()) {
            return self.nn_core_error(e);
        }
        let mut handles = Vec::with_capacity(converted.len());
        for (name, tensor) in converted {
            handles.push((name, self.handles.table.push(tensor).map_err(table_error)?));
        }
        Ok(Ok(handles))
    }
}

impl tensor::Host for HostView<'_> {}

impl tensor::HostTensor for HostView<'_> {
    fn new(&mut self, dimensions: Vec<u32>, ty: TensorType, data: Vec<u8>) -> wasmtime::Result<Resource<NnTensor>> {
        // The WIT constructor cannot fail: a length that does not fit is reported by `compute`,
        // and past the guest's limit of held bytes it traps.
        let tensor = NnTensor { dimensions, ty, data: Bytes::from(data) };
        self.handles.hold_or_trap(tensor.held_size(), "wasi:nn tensor")?;
        self.handles.table.push(tensor).map_err(table_error)
    }

    fn dimensions(&mut self, handle: Resource<NnTensor>) -> wasmtime::Result<Vec<u32>> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.dimensions.clone())
    }

    fn ty(&mut self, handle: Resource<NnTensor>) -> wasmtime::Result<TensorType> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.ty)
    }

    fn data(&mut self, handle: Resource<NnTensor>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.data.to_vec())
    }

    fn drop(&mut self, handle: Resource<NnTensor>) -> wasmtime::Result<()> {
        self.take_nn_tensor(handle).map(|_| ())
    }
}

impl graph::Host for HostView<'_> {
    fn load(
        &mut self,
        _builder: Vec<Vec<u8>>,
        _encoding: GraphEncoding,
        _target: ExecutionTarget,
    ) -> NnResult<Resource<NnGraph>> {
        self.nn_error(
            ErrorCode::UnsupportedOperation,
            "this server runs only the models it serves: load one with load-by-name (its name, or name:version); \
             graph bytes from a guest are not loaded",
        )
    }

    fn load_by_name(&mut self, name: String) -> NnResult<Resource<NnGraph>> {
        let (model, version) = parse_graph_name(&name);
        if let Err(e) = self.check_allowed(&model) {
            return self.nn_error(ErrorCode::Security, e.message);
        }
        let infer = match self.bls_target() {
            Ok((infer, _)) => infer,
            Err(e) => return self.nn_core_error(e),
        };
        match infer.check_ready(&model, version) {
            Ok(()) => Ok(Ok(self.handles.table.push(NnGraph { model, version }).map_err(table_error)?)),
            Err(e) => self.nn_error(ErrorCode::NotFound, e.message),
        }
    }
}

impl graph::HostGraph for HostView<'_> {
    fn init_execution_context(&mut self, handle: Resource<NnGraph>) -> NnResult<Resource<NnContext>> {
        let graph = self.handles.table.get(&handle).map_err(table_error)?;
        let context = NnContext { model: graph.model.clone(), version: graph.version };
        Ok(Ok(self.handles.table.push(context).map_err(table_error)?))
    }

    fn drop(&mut self, handle: Resource<NnGraph>) -> wasmtime::Result<()> {
        self.handles.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

impl inference::Host for HostView<'_> {}

impl inference::HostGraphExecutionContext for HostView<'_> {
    fn compute(
        &mut self,
        handle: Resource<NnContext>,
        inputs: Vec<(String, Resource<NnTensor>)>,
    ) -> NnResult<Vec<(String, Resource<NnTensor>)>> {
        let context = self.handles.table.get(&handle).map_err(table_error)?;
        let (model, version) = (context.model.clone(), context.version);
        // The inputs are owned: they leave the guest's table whatever happens next.
        let mut taken = Vec::with_capacity(inputs.len());
        for (name, tensor) in inputs {
            taken.push((name, self.take_nn_tensor(tensor)?));
        }
        let mut tensors = Vec::with_capacity(taken.len());
        for (name, t) in taken {
            let shape = t.dimensions.iter().map(|&d| i64::from(d)).collect();
            match Tensor::new(name.clone(), datatype(t.ty), shape, t.data) {
                Ok(tensor) => tensors.push(tensor),
                Err(e) => return self.nn_error(ErrorCode::InvalidArgument, format!("input '{name}': {}", e.message)),
            }
        }
        // The allow-list was checked by `load-by-name`, which made the graph behind this context.
        let call = match self.bls_request(model.clone(), version, tensors, Vec::new(), Parameters::new()) {
            Ok(call) => call,
            Err(e) => return self.nn_core_error(e),
        };
        let clock = self.shared.clock;
        let started = clock.now();
        let called = Self::bls_bounded(call, |infer, request| async move { infer.infer(request).await });
        self.bls.cpu += clock.now().saturating_sub(started);
        match called {
            Ok(Ok(response)) => self.nn_outputs(&model, response.outputs),
            Ok(Err(e)) => self.nn_core_error(e),
            Err(super::bls::TimedOut(e)) => self.nn_error(ErrorCode::Timeout, e.message),
        }
    }

    fn drop(&mut self, handle: Resource<NnContext>) -> wasmtime::Result<()> {
        self.handles.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

impl errors::Host for HostView<'_> {}

impl errors::HostError for HostView<'_> {
    fn code(&mut self, handle: Resource<NnError>) -> wasmtime::Result<ErrorCode> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.code)
    }

    fn data(&mut self, handle: Resource<NnError>) -> wasmtime::Result<String> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.message.clone())
    }

    fn drop(&mut self, handle: Resource<NnError>) -> wasmtime::Result<()> {
        let error = self.handles.table.delete(handle).map_err(table_error)?;
        self.handles.release(error.message.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Weak};
    use std::time::Duration;

    use errors::HostError as _;
    use graph::{Host as _, HostGraph as _};
    use inference::HostGraphExecutionContext as _;
    use tensor::HostTensor as _;

    use super::super::sandbox::AllowList;
    use super::super::state::GuestShared;
    use super::super::test_support::state;
    use super::super::timing::ExecutionClock;
    use super::*;
    use crate::error::CoreResult;
    use crate::infer::{Infer, InferFuture, InferRequest, InferResponse, ResponseStream};

    /// Served models: `add` answers its first input as `SUM` (FP32) and as `POSITIVE` (BOOL),
    /// `slow` never answers, anything else is not served.
    struct Models;

    impl Infer for Models {
        fn infer(&self, request: InferRequest) -> InferFuture<'_, InferResponse> {
            Box::pin(async move {
                if request.model_name == "slow" {
                    std::future::pending::<()>().await;
                }
                let input = request.inputs.first().cloned().ok_or_else(|| CoreError::invalid_arg("no input"))?;
                let mut outputs = vec![Tensor { name: "SUM".into(), ..input.clone() }];
                if request.parameters.is_empty() && input.shape == [1] {
                    outputs.push(Tensor::new("POSITIVE", DataType::Bool, vec![1], Bytes::from_static(&[1]))?);
                }
                Ok(InferResponse { model_name: request.model_name, outputs, is_final: true, ..Default::default() })
            })
        }

        fn infer_stream(&self, _request: InferRequest) -> InferFuture<'_, ResponseStream> {
            Box::pin(async { Err(CoreError::unsupported("no streams here")) })
        }

        fn check_ready(&self, model: &str, version: Option<i64>) -> CoreResult<()> {
            match (model, version) {
                ("add" | "slow", None | Some(1)) => Ok(()),
                _ => Err(CoreError::not_found(format!("Request for unknown model: '{model}' is not found"))),
            }
        }
    }

    fn guest(runtime: &tokio::runtime::Runtime, infer: &Arc<dyn Infer>) -> GuestState {
        let infer: Weak<dyn Infer> = Arc::downgrade(infer);
        state(Arc::new(GuestShared {
            model_name: "guest".into(),
            allowed_models: AllowList::Only(vec!["add".into(), "slow".into(), "missing".into()]),
            bls_timeout: Duration::from_millis(200),
            infer: Some(infer),
            runtime: Some(runtime.handle().clone()),
            clock: ExecutionClock::Wall,
            telemetry: Default::default(),
            capabilities: Default::default(),
        }))
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().expect("runtime")
    }

    fn error_of(s: &mut GuestState, e: Resource<NnError>) -> (ErrorCode, String) {
        let rep = e.rep();
        let code = s.host().code(Resource::new_borrow(rep)).expect("code");
        let data = errors::HostError::data(&mut s.host(), Resource::new_borrow(rep)).expect("data");
        errors::HostError::drop(&mut s.host(), e).expect("drop");
        (code, data)
    }

    fn context(s: &mut GuestState, name: &str) -> Result<Resource<NnContext>, (ErrorCode, String)> {
        let graph = match s.host().load_by_name(name.into()).expect("no trap") {
            Ok(g) => g,
            Err(e) => return Err(error_of(s, e)),
        };
        let context = s.host().init_execution_context(Resource::new_borrow(graph.rep())).expect("no trap").ok();
        graph::HostGraph::drop(&mut s.host(), graph).expect("drop");
        Ok(context.expect("a context"))
    }

    fn f32_input(s: &mut GuestState, dims: Vec<u32>, bytes: usize) -> (String, Resource<NnTensor>) {
        ("IN".to_string(), s.host().new(dims, TensorType::Fp32, vec![0; bytes]).expect("tensor"))
    }

    #[test]
    fn load_by_name_checks_the_allow_list_then_that_the_model_is_served() {
        let rt = runtime();
        let infer: Arc<dyn Infer> = Arc::new(Models);
        let mut s = guest(&rt, &infer);
        assert!(context(&mut s, "add").is_ok());
        assert!(context(&mut s, "add:1").is_ok());
        let (code, data) = context(&mut s, "other").expect_err("not allowed");
        assert_eq!(code, ErrorCode::Security);
        assert!(data.contains("not allowed to call model 'other'"), "{data}");
        let (code, data) = context(&mut s, "missing").expect_err("not served");
        assert_eq!(code, ErrorCode::NotFound);
        assert!(data.contains("'missing' is not found"), "{data}");
        assert_eq!(context(&mut s, "add:2").expect_err("no version 2").0, ErrorCode::NotFound);
        let graph = s.host().load(vec![vec![1, 2, 3]], GraphEncoding::Onnx, ExecutionTarget::Cpu).expect("no trap");
        let (code, data) = error_of(&mut s, graph.expect_err("graph bytes are refused"));
        assert_eq!(code, ErrorCode::UnsupportedOperation);
        assert!(data.contains("load-by-name"), "{data}");
    }

    #[test]
    fn compute_maps_tensors_both_ways_and_refuses_what_wasi_nn_cannot_hold() {
        let rt = runtime();
        let infer: Arc<dyn Infer> = Arc::new(Models);
        let mut s = guest(&rt, &infer);
        let ctx = context(&mut s, "add").expect("context");
        // Two elements: only SUM comes back (FP32, as sent).
        let input = f32_input(&mut s, vec![2], 8);
        let outputs =
            s.host().compute(Resource::new_borrow(ctx.rep()), vec![input]).expect("no trap").expect("computed");
        assert_eq!(outputs.len(), 1);
        let (name, sum) = &outputs[0];
        assert_eq!(name, "SUM");
        assert_eq!(s.host().dimensions(Resource::new_borrow(sum.rep())).expect("dims"), vec![2]);
        assert_eq!(s.host().ty(Resource::new_borrow(sum.rep())).expect("ty"), TensorType::Fp32);
        assert_eq!(tensor::HostTensor::data(&mut s.host(), Resource::new_borrow(sum.rep())).expect("data"), vec![0; 8]);
        // One element: the model also answers a BOOL output, which wasi:nn has no type for.
        let input = f32_input(&mut s, vec![1], 4);
        let e = s.host().compute(Resource::new_borrow(ctx.rep()), vec![input]).expect("no trap").expect_err("BOOL");
        let (code, data) = error_of(&mut s, e);
        assert_eq!(code, ErrorCode::UnsupportedOperation);
        assert!(data.contains("output 'POSITIVE' is BOOL"), "{data}");
        // SUM, converted before POSITIVE was refused, is not left in the table: only the context
        // and the first call's SUM are there (compute took both inputs).
        assert_eq!(s.handles.table.iter_mut().count(), 2, "an output of the refused compute stayed behind");
        // Bytes that do not fit the dimensions: invalid-argument, and the input is gone either way.
        let (name, bad) = f32_input(&mut s, vec![3], 8);
        let bad_rep = bad.rep();
        let e =
            s.host().compute(Resource::new_borrow(ctx.rep()), vec![(name, bad)]).expect("no trap").expect_err("size");
        let (code, data) = error_of(&mut s, e);
        assert_eq!(code, ErrorCode::InvalidArgument);
        assert!(data.contains("input 'IN'"), "{data}");
        assert!(s.host().dimensions(Resource::new_borrow(bad_rep)).is_err(), "compute takes its inputs");
    }

    #[test]
    fn tensors_are_held_on_the_guests_account() {
        // The test state's memory limit is 1 MiB: its tensors may hold 4 MiB in the host.
        let rt = runtime();
        let infer: Arc<dyn Infer> = Arc::new(Models);
        let mut s = guest(&rt, &infer);
        // Its one dimension counts too: 4 bytes, so each of these holds 1 MiB.
        let n = (1 << 18) - 1;
        let mut held: Vec<_> = (0..4).map(|_| f32_input(&mut s, vec![n], 4 * n as usize).1).collect();
        let trap =
            s.host().new(vec![1], TensorType::Fp32, vec![0; 4]).expect_err("past the limit: the constructor traps");
        assert!(
            format!("{trap:#}").starts_with(
                "wasi:nn tensor: the tensors the host holds for this guest already take 4194304 bytes; 8 more"
            ),
            "{trap:#}"
        );
        // `compute` takes its input off the account and puts its output on.
        let ctx = context(&mut s, "add").expect("context");
        let input = held.pop().expect("four");
        let outputs = s.host().compute(Resource::new_borrow(ctx.rep()), vec![("IN".into(), input)]).expect("no trap");
        let [(_, sum)]: [_; 1] = outputs.expect("computed").try_into().expect("SUM only");
        assert!(s.host().new(vec![1], TensorType::Fp32, vec![0; 4]).is_err(), "SUM holds the MiB its input gave back");
        tensor::HostTensor::drop(&mut s.host(), sum).expect("drop");
        held.push(s.host().new(vec![1], TensorType::Fp32, vec![0; 4]).expect("a dropped tensor gave its bytes back"));
    }

    #[test]
    fn compute_past_the_time_limit_is_a_timeout() {
        let rt = runtime();
        let infer: Arc<dyn Infer> = Arc::new(Models);
        let mut s = guest(&rt, &infer);
        let ctx = context(&mut s, "slow").expect("context");
        let input = f32_input(&mut s, vec![2], 8);
        let e =
            s.host().compute(Resource::new_borrow(ctx.rep()), vec![input]).expect("no trap").expect_err("timed out");
        let (code, data) = error_of(&mut s, e);
        assert_eq!(code, ErrorCode::Timeout);
        assert!(data.contains("timed out after 200 ms"), "{data}");
    }

    #[test]
    fn graph_names_take_an_optional_version_after_the_last_colon() {
        assert_eq!(parse_graph_name("add_sub"), ("add_sub".into(), None));
        assert_eq!(parse_graph_name("add_sub:2"), ("add_sub".into(), Some(2)));
        assert_eq!(parse_graph_name("a:b:3"), ("a:b".into(), Some(3)));
        assert_eq!(parse_graph_name("add_sub:0"), ("add_sub:0".into(), None), "versions start at 1");
        assert_eq!(parse_graph_name("add_sub:x"), ("add_sub:x".into(), None));
        assert_eq!(parse_graph_name(":4"), (":4".into(), None));
    }

    #[test]
    fn every_wasi_nn_type_maps_to_a_datatype_and_back() {
        for ty in [
            TensorType::Fp16,
            TensorType::Fp32,
            TensorType::Fp64,
            TensorType::Bf16,
            TensorType::U8,
            TensorType::I32,
            TensorType::I64,
        ] {
            assert_eq!(tensor_type(datatype(ty)), Some(ty));
        }
        for missing in [
            DataType::Bool,
            DataType::Int8,
            DataType::Int16,
            DataType::Uint16,
            DataType::Uint32,
            DataType::Uint64,
            DataType::Bytes,
        ] {
            assert_eq!(tensor_type(missing), None, "{missing:?}");
        }
    }
}
