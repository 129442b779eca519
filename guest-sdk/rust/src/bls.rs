//! Business logic scripting: calling other served models from a guest.

use crate::bindings::tessera::model::host;
use crate::bindings::tessera::model::types::Tensor as RawTensor;
use crate::{Error, ParamValue, Parameter, Tensor};

/// Runs a served model (any backend, another guest, an ensemble) in-process and returns its
/// outputs. `outputs` empty means all of them. The model must be listed in this model's
/// `allowed_models`; otherwise (and for any failure of the called model) the host's error comes
/// back here.
///
/// The inputs are borrowed: tensors received in a request are passed on without copying.
pub fn infer(model: &str, inputs: &[&Tensor], outputs: &[&str]) -> Result<Vec<Tensor>, Error> {
    InferRequest::new(model)
        .inputs(inputs)
        .outputs(outputs)
        .run()
}

/// Starts a call and returns at once (fan-out): calls started one after another run
/// concurrently on the host. Collect the outputs with [`PendingInfer::get`] or [`wait_all`].
///
/// An instance may have 64 calls in flight (started and not yet collected or dropped); starting
/// one more fails with an `unavailable` error, so wait for some first when fanning out wider.
/// Errors known before the call runs (a model not in `allowed_models`) come back here; errors of
/// the called model come back from [`PendingInfer::get`].
///
/// ```ignore
/// let calls: Vec<PendingInfer> = inputs.iter().map(|x| infer_async("model", &[x], &[])).collect::<Result<_, _>>()?;
/// for outputs in wait_all(calls) { let outputs = outputs?; /* ... */ }
/// ```
pub fn infer_async(model: &str, inputs: &[&Tensor], outputs: &[&str]) -> Result<PendingInfer, Error> {
    InferRequest::new(model).inputs(inputs).outputs(outputs).start()
}

/// Waits for every call, in order, and returns each one's outputs (or error).
pub fn wait_all(calls: Vec<PendingInfer>) -> Vec<Result<Vec<Tensor>, Error>> {
    calls.into_iter().map(PendingInfer::get).collect()
}

/// Blocks until one of `calls` has finished and returns its index (none: the list is empty, or
/// nothing finished within the model's BLS time limit).
pub fn wait_any(calls: &[&PendingInfer]) -> Option<usize> {
    let handles: Vec<&host::PendingInfer> = calls.iter().map(|c| &c.0).collect();
    host::wait_any(&handles).map(|i| i as usize)
}

/// A BLS call running on the host, started by [`infer_async`] or [`InferRequest::start`].
/// Dropping it without [`PendingInfer::get`] lets the call finish unobserved.
#[derive(Debug)]
pub struct PendingInfer(host::PendingInfer);

impl PendingInfer {
    /// Whether the call has finished (never blocks).
    pub fn is_ready(&self) -> bool {
        self.0.ready()
    }

    /// Waits for the call and returns its outputs.
    pub fn get(self) -> Result<Vec<Tensor>, Error> {
        self.0.get().map(|ts| ts.into_iter().map(Tensor::from_raw).collect())
    }
}

/// Calls a decoupled model and returns its responses as an iterator.
pub fn infer_stream(
    model: &str,
    inputs: &[&Tensor],
    outputs: &[&str],
) -> Result<ResponseStream, Error> {
    InferRequest::new(model)
        .inputs(inputs)
        .outputs(outputs)
        .stream()
}

/// A BLS call with every option: version, parameters.
#[derive(Debug)]
pub struct InferRequest<'a> {
    model: String,
    version: Option<i64>,
    inputs: Vec<&'a RawTensor>,
    outputs: Vec<String>,
    parameters: Vec<Parameter>,
}

impl<'a> InferRequest<'a> {
    /// A call to the newest ready version of `model`, with no inputs yet.
    pub fn new(model: &str) -> Self {
        InferRequest {
            model: model.to_string(),
            version: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            parameters: Vec::new(),
        }
    }

    /// Calls this version instead of the newest ready one.
    pub fn version(mut self, version: i64) -> Self {
        self.version = Some(version);
        self
    }

    /// Adds an input (borrowed: the bytes stay in the host).
    pub fn input(mut self, tensor: &'a Tensor) -> Self {
        self.inputs.push(&tensor.raw);
        self
    }

    /// Adds inputs.
    pub fn inputs(mut self, tensors: &[&'a Tensor]) -> Self {
        self.inputs.extend(tensors.iter().map(|t| &t.raw));
        self
    }

    /// Asks for an output (none asked means all).
    pub fn output(mut self, name: &str) -> Self {
        self.outputs.push(name.to_string());
        self
    }

    /// Asks for outputs.
    pub fn outputs(mut self, names: &[&str]) -> Self {
        self.outputs.extend(names.iter().map(|n| (*n).to_string()));
        self
    }

    /// Adds a request parameter.
    pub fn parameter(mut self, key: &str, value: ParamValue) -> Self {
        self.parameters.push(Parameter {
            key: key.to_string(),
            value,
        });
        self
    }

    /// Runs the call and returns the outputs.
    pub fn run(self) -> Result<Vec<Tensor>, Error> {
        host::infer(
            &self.model,
            self.version,
            &self.inputs,
            &self.outputs,
            &self.parameters,
        )
        .map(|ts| ts.into_iter().map(Tensor::from_raw).collect())
    }

    /// Starts the call without waiting for it (see [`infer_async`]).
    pub fn start(self) -> Result<PendingInfer, Error> {
        host::infer_async(
            &self.model,
            self.version,
            &self.inputs,
            &self.outputs,
            &self.parameters,
        )
        .map(PendingInfer)
    }

    /// Runs the call on a decoupled model: its responses, in order.
    pub fn stream(self) -> Result<ResponseStream, Error> {
        host::infer_stream(
            &self.model,
            self.version,
            &self.inputs,
            &self.outputs,
            &self.parameters,
        )
        .map(ResponseStream)
    }
}

/// The responses of a decoupled model called through [`infer_stream`]; ends after the final one.
#[derive(Debug)]
pub struct ResponseStream(host::ResponseStream);

impl Iterator for ResponseStream {
    type Item = Result<Vec<Tensor>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0
            .next()
            .map(|r| r.map(|ts| ts.into_iter().map(Tensor::from_raw).collect()))
    }
}
