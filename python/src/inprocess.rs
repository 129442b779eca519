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
use pyo3::types::{PyDict, PyList};
use tessera::{
    Answers, CoreError, CoreResult, DataType, InProcess, InferRequest, InferResponse, ParamValue, RequestedOutput,
    StartedDoor, Tensor, Waiting,
};

use crate::{TensorBytes, param_to_py};

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
    let outputs = PyList::empty(py);
    for tensor in response.outputs {
        let data = Bound::new(py, TensorBytes { data: tensor.data })?;
        outputs.append((tensor.name, tensor.datatype.as_str(), tensor.shape, data))?;
    }
    let parameters = PyDict::new(py);
    for (key, value) in &response.parameters {
        parameters.set_item(key, param_to_py(py, value)?)?;
    }
    let tuple = (response.model_name, response.model_version, response.id, outputs, parameters, response.is_final);
    Ok(tuple.into_pyobject(py)?.into_any())
}

/// One answer for Python: a response tuple, or `TesseraError`.
fn answer_to_py(py: Python<'_>, answer: CoreResult<InferResponse>) -> PyResult<Py<PyAny>> {
    match answer {
        Ok(response) => Ok(response_to_py(py, response)?.unbind()),
        Err(e) => Err(core_error(e)),
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
    /// (None for a model that answers once). Errors before the request runs raise.
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
        let rest = match answers {
            Answers::One(_) => None,
            stream @ Answers::Stream(_) => {
                Some(AnswerStream { answers: Mutex::new(Some(stream)), runtime: self.runtime.clone() })
            }
        };
        let first = first.map(|answer| answer_to_py(py, answer)).transpose()?;
        Ok((first, rest))
    }

    /// Runs a request without blocking: `on_answer(item)` is called (with the GIL, on a server
    /// thread) for each answer (a response tuple), with `TesseraError` for an error, and with
    /// `None` after the last. Returns a handle whose `cancel()` drops the request.
    fn infer_async(&self, request: RequestArgs<'_>, on_answer: Py<PyAny>) -> PyResult<Cancel> {
        let request = request_from_py(request)?;
        let door = self.door.clone();
        let deliver = move |item: Option<CoreResult<InferResponse>>| {
            crate::keep_thread_state();
            Python::attach(|py| {
                let value = match item {
                    None => Ok(py.None()),
                    Some(Ok(response)) => response_to_py(py, response).map(Bound::unbind),
                    Some(Err(e)) => Ok(core_error(e).into_value(py).into_any()),
                };
                let result = value.and_then(|value| on_answer.call1(py, (value,)));
                if let Err(e) = result {
                    e.print(py);
                }
            });
        };
        let task = self.runtime.spawn(async move {
            match door.infer(request, Waiting::Async).await {
                Err(e) => deliver(Some(Err(e))),
                Ok(mut answers) => {
                    while let Some(answer) = answers.next().await {
                        deliver(Some(answer));
                    }
                }
            }
            deliver(None);
        });
        Ok(Cancel { abort: task.abort_handle() })
    }
}

/// The remaining answers of a decoupled model's request (see [`Door::infer`]).
#[pyclass(frozen, module = "tessera._tessera")]
pub struct AnswerStream {
    answers: Mutex<Option<Answers>>,
    runtime: tokio::runtime::Handle,
}

#[pymethods]
impl AnswerStream {
    /// The next answer (a response tuple), or None after the last; blocks without the GIL.
    fn next(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let next = py.detach(|| {
            let mut guard = self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match guard.as_mut() {
                Some(answers) => self.runtime.block_on(answers.next()),
                None => None,
            }
        });
        next.map(|answer| answer_to_py(py, answer)).transpose()
    }

    /// Drops the request: the model sees it cancelled, and `next()` returns None.
    fn cancel(&self) {
        let taken = self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        drop(taken);
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
        let timeout = std::time::Duration::from_secs_f64(timeout_secs.max(0.0));
        py.detach(|| self.runtime.block_on(async { tokio::time::timeout(timeout, self.door.ended()).await.is_ok() }))
    }
}
