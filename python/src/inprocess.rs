//! The in-process door for Python (`tessera.tritonserver`, Triton's in-process API): requests
//! in, responses out, no socket. What it answers is `tessera::InProcess`'s; this file only moves
//! values across the language boundary, with the GIL released whenever the server works.
//!
//! Errors cross as `TesseraError(kind, message)`, `kind` being the server's error kind
//! (`"Invalid argument"`, `"Not found"`, ...), which the Python side maps to Triton's classes.

use std::ffi::c_int;
use std::sync::Mutex;

use bytes::Bytes;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tessera::{
    Answers, CoreError, CoreResult, DataType, InProcess, InferRequest, InferResponse, ParamValue, RequestedOutput,
    StartedDoor, Tensor, Waiting,
};

use crate::{parameters_to_py, tensors_to_py};

create_exception!(_tessera, TesseraError, PyException, "An error the server answered: args are (kind, message).");

pub fn core_error(e: CoreError) -> PyErr {
    TesseraError::new_err((e.kind.as_str(), e.message))
}

/// An input as Python passes it: `(name, datatype, shape, buffer)`; the buffer is any
/// C-contiguous object with the buffer protocol (its bytes are copied once, here).
type InputArgs<'py> = (String, String, Vec<i64>, Bound<'py, PyAny>);

/// The bytes of a C-contiguous buffer, whatever its item format.
fn buffer_bytes(object: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    let mut view = std::mem::MaybeUninit::<pyo3::ffi::Py_buffer>::uninit();
    // SAFETY: `view` is written by PyObject_GetBuffer before it is read, and released below
    // exactly once; the GIL is held (we have a `Bound`). PyBUF_C_CONTIGUOUS asks for a plain
    // contiguous byte range, refused (with Python's error) for a strided object.
    unsafe {
        if pyo3::ffi::PyObject_GetBuffer(object.as_ptr(), view.as_mut_ptr(), pyo3::ffi::PyBUF_C_CONTIGUOUS as c_int)
            == -1
        {
            return Err(PyErr::fetch(object.py()));
        }
        let mut view = view.assume_init();
        let len = usize::try_from(view.len).unwrap_or(0);
        let data = if len == 0 || view.buf.is_null() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(std::slice::from_raw_parts(view.buf as *const u8, len))
        };
        pyo3::ffi::PyBuffer_Release(&mut view);
        Ok(data)
    }
}

fn param_from_py(value: &Bound<'_, PyAny>) -> PyResult<ParamValue> {
    if let Ok(b) = value.cast::<pyo3::types::PyBool>() {
        return Ok(ParamValue::Bool(b.is_true()));
    }
    if let Ok(i) = value.extract::<i64>() {
        return Ok(ParamValue::Int(i));
    }
    if let Ok(u) = value.extract::<u64>() {
        return Ok(ParamValue::Uint(u));
    }
    if let Ok(d) = value.extract::<f64>() {
        return Ok(ParamValue::Double(d));
    }
    if let Ok(s) = value.extract::<String>() {
        return Ok(ParamValue::String(s));
    }
    Err(PyValueError::new_err(format!(
        "parameter values must be bool, int, float or str, not {}",
        value.get_type().name()?
    )))
}

/// A request as `tessera.tritonserver` builds it.
#[derive(FromPyObject)]
struct RequestArgs<'py> {
    model: String,
    version: Option<i64>,
    id: Option<String>,
    inputs: Vec<InputArgs<'py>>,
    outputs: Vec<String>,
    parameters: Bound<'py, PyDict>,
}

fn request_from_py(args: RequestArgs<'_>) -> PyResult<InferRequest> {
    let mut inputs = Vec::with_capacity(args.inputs.len());
    for (name, datatype, shape, buffer) in args.inputs {
        let datatype = DataType::from_protocol(&datatype).ok_or_else(|| {
            core_error(CoreError::invalid_arg(format!("input '{name}': unknown datatype {datatype}")))
        })?;
        let data = buffer_bytes(&buffer)?;
        inputs.push(Tensor::new(name, datatype, shape, data).map_err(core_error)?);
    }
    let mut parameters = tessera::Parameters::new();
    for (key, value) in args.parameters.iter() {
        parameters.insert(key.extract()?, param_from_py(&value)?);
    }
    Ok(InferRequest {
        model_name: args.model,
        model_version: args.version,
        id: args.id,
        inputs,
        outputs: args.outputs.into_iter().map(RequestedOutput::named).collect(),
        parameters,
        ..InferRequest::default()
    })
}

/// `(model, version, id, outputs, parameters, final)`, outputs being `(name, datatype, shape,
/// TensorBytes)`: the response's bytes, shared (no copy).
fn response_to_py<'py>(py: Python<'py>, response: InferResponse) -> PyResult<Bound<'py, PyAny>> {
    let outputs = tensors_to_py(py, &response.outputs)?;
    let parameters = parameters_to_py(py, &response.parameters)?;
    let tuple = (response.model_name, response.model_version, response.id, outputs, parameters, response.is_final);
    Ok(tuple.into_pyobject(py)?.into_any())
}

/// One answer for Python: a response tuple, or a `TesseraError` instance (not raised: an error
/// the model answered is a response's error, which the iterator raises or returns).
fn answer_to_py(py: Python<'_>, answer: CoreResult<InferResponse>) -> PyResult<Py<PyAny>> {
    match answer {
        Ok(response) => Ok(response_to_py(py, response)?.unbind()),
        Err(e) => Ok(core_error(e).into_value(py).into_any()),
    }
}

/// A running server's in-process door, from `Server.in_process()`.
#[pyclass(frozen, module = "tessera._tessera")]
pub struct Door {
    door: InProcess,
    runtime: tokio::runtime::Handle,
}

impl Door {
    pub fn new(door: InProcess, runtime: tokio::runtime::Handle) -> Self {
        Self { door, runtime }
    }
}

fn json_text(value: &serde_json::Value) -> String {
    value.to_string()
}

#[pymethods]
impl Door {
    fn live(&self) -> bool {
        self.door.live()
    }

    fn ready(&self) -> bool {
        self.door.ready()
    }

    /// Server metadata as JSON text.
    fn metadata(&self) -> String {
        json_text(&self.door.metadata())
    }

    #[pyo3(signature = (name, version = None))]
    fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.door.model_ready(name, version)
    }

    #[pyo3(signature = (name, version = None))]
    fn model_metadata(&self, name: &str, version: Option<i64>) -> PyResult<String> {
        self.door.model_metadata(name, version).map(|v| json_text(&v)).map_err(core_error)
    }

    #[pyo3(signature = (name, version = None))]
    fn model_config(&self, name: &str, version: Option<i64>) -> PyResult<String> {
        self.door.model_config(name, version).map(|v| json_text(&v)).map_err(core_error)
    }

    #[pyo3(signature = (name, version = None))]
    fn is_decoupled(&self, name: &str, version: Option<i64>) -> PyResult<bool> {
        self.door.is_decoupled(name, version).map_err(core_error)
    }

    #[pyo3(signature = (name = None, version = None))]
    fn statistics(&self, name: Option<&str>, version: Option<i64>) -> PyResult<String> {
        self.door.statistics(name, version).map(|v| json_text(&v)).map_err(core_error)
    }

    #[pyo3(signature = (ready_only = false))]
    fn index(&self, ready_only: bool) -> String {
        json_text(&self.door.index(ready_only))
    }

    #[pyo3(signature = (name, config = None, files = Vec::new()))]
    fn load(&self, py: Python<'_>, name: &str, config: Option<String>, files: Vec<(String, Vec<u8>)>) -> PyResult<()> {
        py.detach(|| self.runtime.block_on(self.door.load(name, config, files))).map_err(core_error)
    }

    #[pyo3(signature = (name, unload_dependents = false))]
    fn unload(&self, py: Python<'_>, name: &str, unload_dependents: bool) -> PyResult<()> {
        py.detach(|| self.runtime.block_on(self.door.unload(name, unload_dependents))).map_err(core_error)
    }

    fn metrics(&self, py: Python<'_>) -> String {
        py.detach(|| self.door.metrics())
    }

    /// Runs a request, blocking this thread (without the GIL) until its first answer; returns
    /// `(first answer or None, rest)`, `rest` an [`AnswerStream`] for a decoupled model's others
    /// (None for a model that answers once). An answer is a response tuple or an error instance.
    /// Errors before the request runs (no such model) raise.
    fn infer(&self, py: Python<'_>, request: RequestArgs<'_>) -> PyResult<(Option<Py<PyAny>>, Option<AnswerStream>)> {
        let request = request_from_py(request)?;
        let (first, answers) = py
            .detach(|| {
                self.runtime.block_on(async {
                    let mut answers = self.door.infer(request, Waiting::Blocking).await?;
                    let first = answers.next().await;
                    Ok::<_, CoreError>((first, answers))
                })
            })
            .map_err(core_error)?;
        let first_is_last = answers.is_over()
            || match &first {
                None => true,
                Some(Ok(response)) => response.is_final,
                Some(Err(_)) => false,
            };
        let rest = match answers {
            Answers::One(_) => None,
            stream @ Answers::Stream(_) => Some(AnswerStream::new(stream, first_is_last, self.runtime.clone())),
        };
        let first = first.map(|answer| answer_to_py(py, answer)).transpose()?;
        Ok((first, rest))
    }

    /// Runs a request without blocking: `on_answer(item, last)` is called (with the GIL, on a
    /// server thread) for each answer — a response tuple or an error instance, `last` true when
    /// no other follows — and `on_answer(None, True)` once a stream has ended. A request for a
    /// model that is not there raises here. Returns a handle whose `cancel()` drops the request.
    fn infer_async(&self, request: RequestArgs<'_>, on_answer: Py<PyAny>) -> PyResult<Cancel> {
        let request = request_from_py(request)?;
        // Triton raises for an unknown model when the request is submitted, not later.
        self.door.is_decoupled(&request.model_name, request.model_version).map_err(core_error)?;
        let door = self.door.clone();
        let deliver = move |item: Option<CoreResult<InferResponse>>, last: bool| {
            crate::keep_thread_state();
            Python::attach(|py| {
                let value = match item {
                    None => Ok(py.None()),
                    Some(answer) => answer_to_py(py, answer),
                };
                let result = value.and_then(|value| on_answer.call1(py, (value, last)));
                if let Err(e) = result {
                    e.print(py);
                }
            });
        };
        let task = self.runtime.spawn(async move {
            match door.infer(request, Waiting::Async).await {
                Err(e) => deliver(Some(Err(e)), true),
                Ok(Answers::One(answer)) => deliver(answer, true),
                Ok(mut answers) => {
                    while let Some(answer) = answers.next().await {
                        // A stream cut by the server's stop ends with its error.
                        let last = matches!(&answer, Ok(response) if response.is_final) || answers.is_over();
                        deliver(Some(answer), last);
                        if last {
                            return;
                        }
                    }
                    deliver(None, true);
                }
            }
        });
        Ok(Cancel { abort: task.abort_handle() })
    }
}

/// The remaining answers of a decoupled model's request (see [`Door::infer`]). The stream is
/// dropped (the request leaves the server) after its final answer, or at `cancel()`.
#[pyclass(frozen, module = "tessera._tessera")]
pub struct AnswerStream {
    answers: Mutex<Option<Answers>>,
    cancelled: tokio::sync::watch::Sender<bool>,
    runtime: tokio::runtime::Handle,
}

impl AnswerStream {
    fn new(answers: Answers, ended: bool, runtime: tokio::runtime::Handle) -> Self {
        let answers = if ended { None } else { Some(answers) };
        Self { answers: Mutex::new(answers), cancelled: tokio::sync::watch::channel(false).0, runtime }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Answers>> {
        self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[pymethods]
impl AnswerStream {
    /// The next answer (a response tuple or an error instance), or None after the last; blocks
    /// without the GIL. The stream is taken out while waiting, so `cancel()` never waits on it.
    fn next(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let next = py.detach(|| {
            let taken = self.slot().take();
            let mut answers = taken?;
            let mut cancelled = self.cancelled.subscribe();
            let answer = self.runtime.block_on(async {
                tokio::select! {
                    answer = answers.next() => answer,
                    _ = cancelled.wait_for(|c| *c) => None,
                }
            });
            let ended = *self.cancelled.borrow()
                || answers.is_over()
                || matches!(&answer, None | Some(Ok(InferResponse { is_final: true, .. })));
            if !ended {
                *self.slot() = Some(answers);
            }
            answer
        });
        next.map(|answer| answer_to_py(py, answer)).transpose()
    }

    /// Whether nothing follows: the last answer has been returned (a final response, the end, or
    /// the error of a stream the server's stop cut short), or the request was cancelled.
    fn ended(&self) -> bool {
        self.slot().is_none()
    }

    /// Drops the request: the model sees it cancelled, and `next()` returns None.
    fn cancel(&self, py: Python<'_>) {
        py.detach(|| {
            self.cancelled.send_replace(true);
            let taken = self.slot().take();
            drop(taken);
        });
    }
}

/// Cancels an asynchronous request (see [`Door::infer_async`]).
#[pyclass(frozen, module = "tessera._tessera")]
pub struct Cancel {
    abort: tokio::task::AbortHandle,
}

#[pymethods]
impl Cancel {
    fn cancel(&self) {
        self.abort.abort();
    }
}

/// A network door started on a running server (`Server.start_door`).
#[pyclass(frozen, module = "tessera._tessera")]
pub struct NetworkDoor {
    pub door: StartedDoor,
    pub runtime: tokio::runtime::Handle,
}

#[pymethods]
impl NetworkDoor {
    #[getter]
    fn port(&self) -> Option<u16> {
        self.door.address().map(|a| a.port())
    }

    /// Stops the door and waits (without the GIL, up to `timeout_secs`) until its port is closed
    /// and its connections are done. Returns whether it ended in time.
    #[pyo3(signature = (timeout_secs = 30.0))]
    fn stop(&self, py: Python<'_>, timeout_secs: f64) -> bool {
        self.door.stop();
        let timeout = std::time::Duration::try_from_secs_f64(timeout_secs.max(0.0)).unwrap_or(std::time::Duration::MAX);
        py.detach(|| self.runtime.block_on(async { tokio::time::timeout(timeout, self.door.ended()).await.is_ok() }))
    }
}
