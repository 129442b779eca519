//! `tessera._tessera`: the Tessera server embedded in a Python process (the `tessera` package's
//! native half; the PyTriton-compatible API is Python, in `tessera/pytriton/`).
//!
//! The server is the `tessera` library itself: flags parsed as `tessera serve` parses them, models
//! registered through `ServerHandle::register` with a `CallableBackend` whose instances call
//! a Python function. Tensors reach Python without a copy: each input is a [`TensorBytes`] that
//! exposes the request's bytes through the buffer protocol (read-only), and the Python side wraps
//! it with `numpy.frombuffer`. The GIL is held only while Python code runs.

// The buffer protocol is a C interface (one `unsafe` method, justified where it is).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod inprocess;

use bytes::Bytes;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use tessera::{
    CallableBackend, CoreError, CoreResult, DataType, ExecRequest, ParamValue, RawResponse, RegisteredModel,
    ServerHandle, Tensor,
};

/// A request tensor's bytes, shared with the server (no copy), readable through the buffer protocol.
#[pyclass(frozen, module = "tessera._tessera")]
struct TensorBytes {
    data: Bytes,
}

#[pymethods]
impl TensorBytes {
    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// # Safety
    /// Called by CPython with a valid `view`. The buffer is read-only and points into `data`, which
    /// lives as long as this object; `PyBuffer_FillInfo` takes a reference to the object for the
    /// view's lifetime, so the bytes outlive every view.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let data = &slf.get().data;
        let len = isize::try_from(data.len()).map_err(|_| PyValueError::new_err("tensor too large"))?;
        // SAFETY: see above; readonly = 1, so a writable request fails inside PyBuffer_FillInfo.
        let status =
            unsafe { pyo3::ffi::PyBuffer_FillInfo(view, slf.as_ptr(), data.as_ptr() as *mut c_void, len, 1, flags) };
        if status == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// # Safety
    /// Nothing to release: the view borrows `data`, kept alive by the reference the view holds.
    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}
}

fn param_to_py<'py>(py: Python<'py>, value: &ParamValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        ParamValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        ParamValue::Int(i) => i.into_pyobject(py)?.into_any(),
        ParamValue::Uint(u) => u.into_pyobject(py)?.into_any(),
        ParamValue::Double(d) => d.into_pyobject(py)?.into_any(),
        ParamValue::String(s) => s.into_pyobject(py)?.into_any(),
    })
}

/// Tensors as Python sees them: a list of `(name, datatype, shape, TensorBytes)`, the bytes
/// shared with the server (no copy).
pub(crate) fn tensors_to_py<'py>(py: Python<'py>, tensors: &[Tensor]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for tensor in tensors {
        let data = Bound::new(py, TensorBytes { data: tensor.data.clone() })?;
        list.append((tensor.name.as_str(), tensor.datatype.as_str(), tensor.shape.clone(), data))?;
    }
    Ok(list)
}

/// Request or response parameters as a Python dict.
pub(crate) fn parameters_to_py<'py>(py: Python<'py>, parameters: &tessera::Parameters) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in parameters {
        dict.set_item(key, param_to_py(py, value)?)?;
    }
    Ok(dict)
}

/// The batch as Python sees it: a list of `(inputs, requested_outputs, parameters)`, inputs as
/// [`tensors_to_py`] gives them.
fn batch_to_py<'py>(py: Python<'py>, batch: &[ExecRequest]) -> PyResult<Bound<'py, PyList>> {
    let requests = PyList::empty(py);
    for request in batch {
        let inputs = tensors_to_py(py, &request.inputs)?;
        requests.append((inputs, request.outputs.clone(), parameters_to_py(py, &request.parameters)?))?;
    }
    Ok(requests)
}

/// One request's result from Python: a list of `(name, datatype, shape, bytes)`, or a string (the
/// error message).
fn result_from_py(item: &Bound<'_, PyAny>) -> CoreResult<Vec<Tensor>> {
    if let Ok(message) = item.extract::<String>() {
        return Err(CoreError::internal(message));
    }
    let outputs = item
        .cast::<PyList>()
        .map_err(|_| CoreError::internal("the model function returned something other than a list of outputs"))?;
    let mut tensors = Vec::with_capacity(outputs.len());
    for output in outputs.iter() {
        let tuple = output.cast::<PyTuple>().map_err(|_| CoreError::internal("malformed output tuple"))?;
        let (name, datatype, shape, data): (String, String, Vec<i64>, Bound<'_, PyBytes>) =
            tuple.extract().map_err(|e| CoreError::internal(format!("malformed output: {e}")))?;
        let datatype = DataType::from_protocol(&datatype)
            .ok_or_else(|| CoreError::internal(format!("output '{name}' has unknown datatype {datatype}")))?;
        tensors.push(Tensor::new(name, datatype, shape, Bytes::copy_from_slice(data.as_bytes()))?);
    }
    Ok(tensors)
}

thread_local! {
    static THREAD_STATE_KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Gives this (server) thread a Python thread state that outlives each call: without it, every
/// `Python::attach` on a thread Python does not know creates and destroys one.
pub(crate) fn keep_thread_state() {
    THREAD_STATE_KEPT.with(|kept| {
        if !kept.get() {
            // SAFETY: called outside any `attach`, so this thread holds no GIL. `PyGILState_Ensure`
            // creates the thread's state and takes the GIL; `PyEval_SaveThread` releases the GIL and
            // keeps the state (its count stays 1), so later `PyGILState_Ensure`/`Release` pairs reuse it.
            unsafe {
                pyo3::ffi::PyGILState_Ensure();
                pyo3::ffi::PyEval_SaveThread();
            }
            kept.set(true);
        }
    });
}

/// The functions a bound model's instances call: `execute(batch)` for any batch, and for a
/// callable whose outermost decorator is `@batch`, `execute_batched(inputs, total_rows)` with the
/// requests' inputs already concatenated (see [`concatenated_inputs`]).
struct PythonModel {
    execute: Py<PyAny>,
    execute_batched: Option<Py<PyAny>>,
}

fn call_python(model: &PythonModel, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
    keep_thread_state();
    if batch.iter().any(|r| r.responder.is_some()) {
        return call_python_decoupled(&model.execute, batch);
    }
    if let Some(batched) = &model.execute_batched
        && let Some(inputs) = concatenated_inputs(&batch)
    {
        return call_python_batched(batched, &batch, inputs);
    }
    let function = &model.execute;
    let n = batch.len();
    Python::attach(|py| {
        let results = batch_to_py(py, &batch)
            .and_then(|requests| function.bind(py).call1((requests,)))
            .map_err(|e| CoreError::internal(format!("model function failed: {e}")));
        let results = match results {
            Ok(results) => results,
            Err(e) => return vec![Err(e); n],
        };
        let items: Vec<Bound<'_, PyAny>> = match results.try_iter() {
            Ok(iter) => iter.filter_map(Result::ok).collect(),
            Err(_) => return vec![Err(CoreError::internal("the model function did not return a list")); n],
        };
        if items.len() != n {
            let e =
                CoreError::internal(format!("the model function returned {} results for {n} requests", items.len()));
            return vec![Err(e); n];
        }
        items.iter().map(result_from_py).collect()
    })
}

/// The batch's inputs concatenated along dim 0, one tensor per input name, and each request's
/// rows (dim 0 of its first input), when the batch is regular: every request has the same
/// inputs in the same order, with the same datatypes (not BYTES) and the same dims after the
/// first. `None` otherwise: the general path then gives `@batch`'s own errors. One request's
/// tensors are passed as they are (no copy).
fn concatenated_inputs(batch: &[ExecRequest]) -> Option<(Vec<Tensor>, Vec<usize>)> {
    let first = batch.first()?;
    let regular = first.inputs.iter().all(|t| t.datatype != DataType::Bytes && !t.shape.is_empty())
        && batch.iter().all(|r| {
            r.inputs.len() == first.inputs.len()
                && r.inputs
                    .iter()
                    .zip(&first.inputs)
                    .all(|(t, f)| t.name == f.name && t.datatype == f.datatype && t.shape.get(1..) == f.shape.get(1..))
        });
    if !regular || first.inputs.is_empty() {
        return None;
    }
    let rows: Vec<usize> = batch.iter().map(|r| usize::try_from(r.inputs[0].shape[0]).unwrap_or(0)).collect();
    if batch.len() == 1 {
        return Some((first.inputs.clone(), rows));
    }
    let tensors = (0..first.inputs.len())
        .map(|i| {
            let mut shape = first.inputs[i].shape.clone();
            shape[0] = batch.iter().map(|r| r.inputs[i].shape[0]).sum();
            let mut data = bytes::BytesMut::with_capacity(batch.iter().map(|r| r.inputs[i].data.len()).sum());
            for request in batch {
                data.extend_from_slice(&request.inputs[i].data);
            }
            Tensor {
                name: first.inputs[i].name.clone(),
                datatype: first.inputs[i].datatype,
                shape,
                data: data.freeze(),
            }
        })
        .collect();
    Some((tensors, rows))
}

/// One call of a `@batch` callable for the whole batch: Python gets the concatenated inputs and
/// returns each output for the whole batch, which is split back per request here (slices of one
/// buffer, no copy). Per-request Python objects are what this saves: at concurrency 16 they were
/// most of the Python side's cost.
fn call_python_batched(
    function: &Py<PyAny>,
    batch: &[ExecRequest],
    (inputs, rows): (Vec<Tensor>, Vec<usize>),
) -> Vec<CoreResult<Vec<Tensor>>> {
    let n = batch.len();
    let total: usize = rows.iter().sum();
    // The outputs some request asked for; None when one wants them all.
    let wanted: Option<Vec<&str>> = if batch.iter().any(|r| r.outputs.is_empty()) {
        None
    } else {
        let mut names: Vec<&str> = batch.iter().flat_map(|r| r.outputs.iter().map(String::as_str)).collect();
        names.sort_unstable();
        names.dedup();
        Some(names)
    };
    let outputs = Python::attach(|py| {
        let args = tensors_to_py(py, &inputs)?;
        let result = function.bind(py).call1((args, total, wanted))?;
        Ok::<_, PyErr>(result_from_py(&result))
    });
    let outputs = match outputs {
        Ok(Ok(outputs)) => outputs,
        Ok(Err(e)) => return vec![Err(e); n],
        Err(e) => return vec![Err(CoreError::internal(format!("model function failed: {e}"))); n],
    };
    let mut results: Vec<CoreResult<Vec<Tensor>>> = vec![Ok(Vec::new()); n];
    for output in outputs {
        if output.datatype == DataType::Bytes {
            // Rows of BYTES have no fixed size; such models never take this path.
            let e = CoreError::internal(format!("output {} is BYTES: it cannot be split by rows", output.name));
            return vec![Err(e); n];
        }
        let row_bytes = output.data.len().checked_div(total).unwrap_or(0);
        if output.shape.first().and_then(|&d| usize::try_from(d).ok()) != Some(total)
            || row_bytes * total != output.data.len()
        {
            let e = CoreError::internal(format!(
                "output {} has shape {:?} for a batch of {total}",
                output.name, output.shape
            ));
            return vec![Err(e); n];
        }
        let mut start = 0;
        for ((request, &count), result) in batch.iter().zip(&rows).zip(results.iter_mut()) {
            let end = start + count * row_bytes;
            let wanted = request.outputs.is_empty() || request.outputs.contains(&output.name);
            if let (true, Ok(tensors)) = (wanted, result.as_mut()) {
                let mut shape = output.shape.clone();
                shape[0] = i64::try_from(count).unwrap_or(i64::MAX);
                let slice = output.data.slice(start..end);
                tensors.push(Tensor { name: output.name.clone(), datatype: output.datatype, shape, data: slice });
            }
            start = end;
        }
    }
    results
}

/// A decoupled model: `function(batch)` returns an iterator of `(request index, result)`, each
/// result one response (outputs or an error message) streamed at once; the streams end (final
/// flag) when the iterator is exhausted.
fn call_python_decoupled(function: &Py<PyAny>, mut batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
    let n = batch.len();
    let responders: Vec<_> = batch.iter_mut().map(|r| r.responder.take()).collect();
    // The responder is bounded: while the caller's buffer is full, wait without the GIL.
    let send = |py: Python<'_>, index: usize, outputs: CoreResult<Vec<Tensor>>| {
        if let Some(Some(responder)) = responders.get(index) {
            let _ = py.detach(|| responder.blocking_send(RawResponse::new(outputs, false)));
        }
    };
    Python::attach(|py| {
        let iterator = batch_to_py(py, &batch)
            .and_then(|requests| function.bind(py).call1((requests,)))
            .and_then(|results| results.try_iter());
        let iterator = match iterator {
            Ok(iterator) => iterator,
            Err(e) => {
                let error = CoreError::internal(format!("model function failed: {e}"));
                (0..n).for_each(|i| send(py, i, Err(error.clone())));
                return;
            }
        };
        for item in iterator {
            let parsed = item.and_then(|item| item.extract::<(usize, Bound<'_, PyAny>)>());
            match parsed {
                Ok((index, result)) => {
                    let outputs = result_from_py(&result);
                    send(py, index, outputs);
                }
                Err(e) => {
                    let error = CoreError::internal(format!("model function failed: {e}"));
                    (0..n).for_each(|i| send(py, i, Err(error.clone())));
                    return;
                }
            }
        }
    });
    // Dropping the responders ends every request's stream.
    drop(responders);
    (0..n).map(|_| Ok(Vec::new())).collect()
}

/// What `Server` and `Server.bind` take for one model: `(name, version, config_json, execute,
/// execute_batched or None)`.
type ModelArgs = (String, i64, String, Py<PyAny>, Option<Py<PyAny>>);

/// A model whose instances call Python (see `call_python`).
fn python_model((name, version, config_json, execute, execute_batched): ModelArgs) -> PyResult<RegisteredModel> {
    let mut config = tessera::parse_config_json(&config_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    config.name = name;
    let model = PythonModel { execute, execute_batched };
    // Inline: a Python call costs about what two thread wake-ups do (measured: 104 µs
    // server-side per request handed to a blocking thread, 46 µs inline).
    let backend = CallableBackend::new(move |batch| call_python(&model, batch)).inline(true);
    Ok(RegisteredModel { config, version, backend: Arc::new(backend) })
}

/// A running server.
#[pyclass(module = "tessera._tessera")]
struct Server {
    runtime: Option<tokio::runtime::Runtime>,
    handle: Option<ServerHandle>,
    stopped: Arc<AtomicBool>,
}

fn runtime_error(e: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

#[pymethods]
impl Server {
    /// Starts a server from `tessera serve` flags (e.g. `["--model-repository", dir, "--http-port",
    /// "8000"]`) serving `models` (`(name, version, config_json, function)`, see [`Self::bind`])
    /// from the start, before the repository loads; returns once every door listens.
    /// With `wait_for_bound`, a repository ensemble whose steps are in no repository waits for
    /// them to be bound later (PyTriton's `bind` after start) instead of failing the start.
    #[new]
    #[pyo3(signature = (flags, models = Vec::new(), wait_for_bound = false))]
    fn new(py: Python<'_>, flags: Vec<String>, models: Vec<ModelArgs>, wait_for_bound: bool) -> PyResult<Self> {
        let mut config = tessera::cli::embedded_server_config(&flags).map_err(PyValueError::new_err)?;
        config.ensembles_wait_for_registered = wait_for_bound;
        for model in models {
            config.registered_models.push(python_model(model)?);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("tessera")
            // Threads that ran Python keep a Python thread state (`keep_thread_state`); blocking
            // threads that never retire do not leak one each time the pool shrinks and regrows.
            .thread_keep_alive(std::time::Duration::from_secs(365 * 24 * 3600))
            .build()
            .map_err(runtime_error)?;
        let handle = py.detach(|| runtime.block_on(tessera::Server::start(config))).map_err(runtime_error)?;
        Ok(Self { runtime: Some(runtime), handle: Some(handle), stopped: Arc::new(AtomicBool::new(false)) })
    }

    #[getter]
    fn http_port(&self) -> Option<u16> {
        self.handle.as_ref().and_then(|h| h.http_address()).map(|a| a.port())
    }

    #[getter]
    fn grpc_port(&self) -> Option<u16> {
        self.handle.as_ref().and_then(|h| h.grpc_address()).map(|a| a.port())
    }

    #[getter]
    fn metrics_port(&self) -> Option<u16> {
        self.handle.as_ref().and_then(|h| h.metrics_address()).map(|a| a.port())
    }

    fn is_alive(&self) -> bool {
        self.handle.is_some() && !self.stopped.load(Ordering::Relaxed)
    }

    /// Serves a model: `(name, version, config_json, execute, execute_batched)`, the config as
    /// Triton's ModelConfig in JSON. `execute(batch)` gets the batch (see `batch_to_py`) and
    /// returns one result per request; `execute_batched` (or None), see [`call_python_batched`].
    fn bind(&self, py: Python<'_>, model: ModelArgs) -> PyResult<()> {
        let (Some(runtime), Some(handle)) = (self.runtime.as_ref(), self.handle.as_ref()) else {
            return Err(PyRuntimeError::new_err("the server is stopped"));
        };
        let model = python_model(model)?;
        py.detach(|| runtime.block_on(handle.register(model))).map_err(|e| PyValueError::new_err(e.message))
    }

    /// The in-process door (Triton's in-process API answers through it).
    fn in_process(&self) -> PyResult<inprocess::Door> {
        let (Some(runtime), Some(handle)) = (self.runtime.as_ref(), self.handle.as_ref()) else {
            return Err(PyRuntimeError::new_err("the server is stopped"));
        };
        Ok(inprocess::Door::new(handle.in_process(), runtime.handle().clone()))
    }

    /// Starts a network door on the running server: `kind` "http", "grpc" or "metrics";
    /// `restricted` Triton's `--http-restricted-api` / `--grpc-restricted-protocol` values for it
    /// (None keeps the server's).
    #[pyo3(signature = (kind, address, port, restricted = None))]
    fn start_door(
        &mut self,
        py: Python<'_>,
        kind: &str,
        address: String,
        port: u16,
        restricted: Option<Vec<String>>,
    ) -> PyResult<inprocess::NetworkDoor> {
        let (Some(runtime), Some(handle)) = (self.runtime.as_ref(), self.handle.as_mut()) else {
            return Err(PyRuntimeError::new_err("the server is stopped"));
        };
        let (kind, flag) = match kind {
            "http" => (tessera::DoorKind::Http, "--http-restricted-api"),
            "grpc" => (tessera::DoorKind::Grpc, "--grpc-restricted-protocol"),
            "metrics" => (tessera::DoorKind::Metrics, ""),
            other => return Err(PyValueError::new_err(format!("unknown door '{other}'"))),
        };
        let restrictions = restricted
            .map(|values| tessera::Restrictions::parse(flag, &values))
            .transpose()
            .map_err(PyValueError::new_err)?;
        let listen = tessera::Listen::new(address, port);
        let options = tessera::DoorOptions { restrictions };
        let door = py.detach(|| runtime.block_on(handle.start_door(kind, &listen, options))).map_err(runtime_error)?;
        Ok(inprocess::NetworkDoor { door, runtime: runtime.handle().clone() })
    }

    /// Asks the server to stop without waiting (safe from a model function); `stop()` finishes it.
    fn request_stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.as_ref() {
            handle.stop();
        }
    }

    /// Stops the doors, then waits (up to the exit timeout) for requests in flight, the
    /// in-process door's included.
    fn stop(&mut self, py: Python<'_>) -> PyResult<()> {
        self.stopped.store(true, Ordering::Relaxed);
        let (Some(runtime), Some(handle)) = (self.runtime.take(), self.handle.take()) else {
            return Ok(());
        };
        // The doors close first; then requests in flight (in-process ones too) get up to the exit
        // timeout to finish, as Triton's ServerStop gives them.
        handle.stop();
        let stopping = handle.stop_handle();
        py.detach(|| runtime.block_on(stopping.drain_then_stop()));
        let result = py.detach(|| runtime.block_on(handle.wait()));
        py.detach(move || runtime.shutdown_timeout(std::time::Duration::from_secs(5)));
        result.map_err(runtime_error)
    }
}

#[pymodule]
fn _tessera(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Server>()?;
    m.add_class::<TensorBytes>()?;
    m.add_class::<inprocess::Door>()?;
    m.add_class::<inprocess::AnswerStream>()?;
    m.add_class::<inprocess::Cancel>()?;
    m.add_class::<inprocess::NetworkDoor>()?;
    m.add("TesseraError", m.py().get_type::<inprocess::TesseraError>())?;
    Ok(())
}
