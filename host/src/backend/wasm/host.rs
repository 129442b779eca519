//! WIT interface `host`: logging, the entry points of BLS (`infer`, `infer-async`, `wait-any`,
//! `infer-stream`), whose mechanism is in `bls`, and of adoption (`wait`, `adopt`, `finish`), in
//! `adopt`.

use wasmtime::component::Resource;

use super::bindings::{wit, wit_host};
use super::resources::{HostPendingInfer, HostResponseStream, HostTensor};
use super::state::{HostView, cut_text, table_error};

/// How many of the guest's last log lines a trap message can quote from.
const LOG_LINES_KEPT: usize = 16;

/// The most bytes of one guest log line the server prints and keeps: the log is the operator's,
/// shared by every model, and a trap message quotes the last line to the caller.
const LOG_LINE_BYTES: usize = 8 << 10;

/// `message` cut to [`LOG_LINE_BYTES`] (at a character boundary), saying how much was cut.
fn log_line(message: String) -> String {
    cut_text(message, LOG_LINE_BYTES, "log lines keep")
}

impl wit_host::Host for HostView<'_> {
    fn log(&mut self, level: wit_host::LogLevel, message: String) -> wasmtime::Result<()> {
        let message = log_line(message);
        let model = self.shared.model_name.as_str();
        let request_id = self.bls.request_id.as_str();
        match level {
            wit_host::LogLevel::Error => tracing::error!(model, request_id, "{message}"),
            wit_host::LogLevel::Warn => tracing::warn!(model, request_id, "{message}"),
            wit_host::LogLevel::Info => tracing::info!(model, request_id, "{message}"),
            wit_host::LogLevel::Verbose => tracing::debug!(model, request_id, "{message}"),
        }
        if self.last_log.len() >= LOG_LINES_KEPT {
            self.last_log.remove(0);
        }
        self.last_log.push(message);
        Ok(())
    }

    fn infer(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<Vec<Resource<HostTensor>>, wit::Error>> {
        let call = match self.bls_call(model, version, inputs, outputs, parameters)? {
            Ok(call) => call,
            Err(e) => return Ok(Err(e)),
        };
        match self.bls_timed(call, |infer, request| async move { infer.infer(request).await }) {
            Ok(response) => self.handles.new_held_tensors(response.outputs),
            Err(e) => Ok(Err(e)),
        }
    }

    fn infer_async(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<Resource<HostPendingInfer>, wit::Error>> {
        match self.bls_call(model, version, inputs, outputs, parameters)? {
            Ok(call) => self.bls_start(call),
            Err(e) => Ok(Err(e)),
        }
    }

    fn wait_any(&mut self, calls: Vec<Resource<HostPendingInfer>>) -> wasmtime::Result<Option<u32>> {
        super::bls::wait_any(self, &calls)
    }

    fn wait(
        &mut self,
        calls: Vec<Resource<HostPendingInfer>>,
        timeout_ns: Option<u64>,
    ) -> wasmtime::Result<wit_host::Wake> {
        self.wait_wake(&calls, timeout_ns)
    }

    fn adopt(&mut self, close: bool) -> wasmtime::Result<Option<Vec<super::adopt::Adopted>>> {
        self.adopt_requests(close)
    }

    fn finish(&mut self, position: u32, answer: wit::Answer) -> wasmtime::Result<()> {
        self.finish_request(position, answer);
        Ok(())
    }

    fn infer_stream(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<Resource<HostResponseStream>, wit::Error>> {
        let call = match self.bls_call(model, version, inputs, outputs, parameters)? {
            Ok(call) => call,
            Err(e) => return Ok(Err(e)),
        };
        let open = match self.open_call() {
            Ok(open) => open,
            Err(e) => return Ok(Err(e)),
        };
        match self.bls_timed(call, |infer, request| async move { infer.infer_stream(request).await }) {
            Ok(stream) => Ok(Ok(self.handles.table.push(HostResponseStream(stream, open)).map_err(table_error)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
