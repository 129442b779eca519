//! One guest instance: a store with the instantiated component, `initialize` on start, `execute`
//! per batch, `finalize` on drop. A trap, or memory grown near the cap, replaces the store with a
//! fresh one from the pre-instantiated component, so one bad batch never takes the model down.

use std::sync::{Arc, Mutex};

use wasmtime::component::Resource;
use wasmtime::{Engine, Store, Trap};

use super::convert::kind_from_wit;
use super::engine::EPOCH_TICK;
use super::host::{GuestShared, GuestState, HostRequest, HostTensor, SharedResponder};
use super::sandbox::{GuestLimiter, Sandbox};
use super::{bindings, wit};
use crate::backend::{ExecRequest, ModelInstance};
use crate::error::{CoreError, CoreResult};
use crate::tensor::Tensor;

struct Live {
    store: Store<GuestState>,
    model: bindings::Model,
}

pub(super) struct WasmInstance {
    engine: Engine,
    pre: bindings::ModelPre<GuestState>,
    sandbox: Sandbox,
    shared: Arc<GuestShared>,
    args: wit::InitializeArgs,
    decoupled: bool,
    /// `None` after a trap until the next request rebuilds it.
    live: Option<Live>,
}

impl WasmInstance {
    /// Creates the instance and starts it: a model whose `initialize` fails does not load.
    pub(super) fn start(
        engine: Engine,
        pre: bindings::ModelPre<GuestState>,
        sandbox: Sandbox,
        shared: Arc<GuestShared>,
        args: wit::InitializeArgs,
        decoupled: bool,
    ) -> CoreResult<Self> {
        let mut instance = Self { engine, pre, sandbox, shared, args, decoupled, live: None };
        instance.restart()?;
        Ok(instance)
    }

    /// Instantiates the component in a fresh store and runs `initialize`.
    fn restart(&mut self) -> CoreResult<()> {
        let state =
            GuestState::new(self.sandbox.wasi()?, GuestLimiter::new(self.sandbox.max_memory), Arc::clone(&self.shared));
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(deadline_ticks(&self.sandbox));
        store.epoch_deadline_trap();
        let model = self.pre.instantiate(&mut store).map_err(|e| {
            CoreError::unavailable(format!(
                "failed to instantiate WebAssembly model '{}': {e:#}",
                self.shared.model_name
            ))
        })?;
        let initialized = model.call_initialize(&mut store, &self.args);
        match initialized {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(CoreError::new(
                    kind_from_wit(e.code),
                    format!("model '{}' initialize failed: {}", self.shared.model_name, e.message),
                ));
            }
            Err(trap) => {
                let log = &store.data().last_log;
                return Err(trap_error(&self.shared.model_name, "initialize", &trap, &self.sandbox, log));
            }
        }
        self.live = Some(Live { store, model });
        Ok(())
    }

    fn run(&mut self, batch: Vec<ExecRequest>) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        if self.live.is_none() {
            self.restart()?;
        }
        let ticks = deadline_ticks(&self.sandbox);
        let Some(live) = self.live.as_mut() else {
            return Err(CoreError::internal("instance is not running"));
        };
        let count = batch.len();
        let mut handles = Vec::with_capacity(count);
        for request in batch {
            let responder: SharedResponder = Arc::new(Mutex::new(request.responder));
            live.store.data_mut().call_responders.push(Arc::clone(&responder));
            let resource = live
                .store
                .data_mut()
                .table
                .push(HostRequest {
                    id: request.id.unwrap_or_default(),
                    inputs: request.inputs,
                    outputs: request.outputs,
                    parameters: request.parameters,
                    responder,
                })
                .map_err(|e| CoreError::internal(format!("resource table: {e}")))?;
            handles.push(resource);
        }
        live.store.data_mut().last_log.clear();
        live.store.set_epoch_deadline(ticks);
        let called = live.model.call_execute(&mut live.store, &handles);
        // The contract: when execute returns, every request's stream is final, whatever
        // request or sender handles the guest kept.
        for responder in live.store.data_mut().call_responders.drain(..) {
            if let Ok(mut r) = responder.lock() {
                r.take();
            }
        }
        let results = match called {
            Ok(results) => results,
            Err(trap) => {
                let log = &live.store.data().last_log;
                let error = trap_error(&self.shared.model_name, "execute", &trap, &self.sandbox, log);
                // A trapped instance can never be entered again: drop it, rebuild on the next request
                // (or now, so the next request does not pay for it).
                self.live = None;
                self.restart_or_warn();
                return Err(error);
            }
        };
        let high_water = near_memory_limit(live.store.data().limits.peak(), self.sandbox.max_memory);
        let results = self.collect(results, count);
        if high_water {
            tracing::info!(model = self.shared.model_name.as_str(), "recycling a guest instance near its memory limit");
            self.live = None;
            self.restart_or_warn();
        }
        results
    }

    /// Rebuilds the instance now; if that fails, the next request tries again (and reports it).
    fn restart_or_warn(&mut self) {
        if let Err(e) = self.restart() {
            tracing::warn!(
                model = self.shared.model_name.as_str(),
                "could not restart the instance yet: {}",
                e.message
            );
        }
    }

    /// Turns `execute`'s return value into per-request results, taking tensors out of the table.
    fn collect(
        &mut self,
        results: Vec<Result<Vec<Resource<HostTensor>>, wit::Error>>,
        count: usize,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        let Some(live) = self.live.as_mut() else {
            return Err(CoreError::internal("instance is not running"));
        };
        let table = &mut live.store.data_mut().table;
        if self.decoupled {
            if !results.is_empty() {
                return Err(CoreError::internal(format!(
                    "decoupled model '{}' returned {} responses from execute; \
                     it must answer through response senders and return an empty list",
                    self.shared.model_name,
                    results.len()
                )));
            }
            return Ok((0..count).map(|_| Ok(Vec::new())).collect());
        }
        if results.len() != count {
            let got = results.len();
            // Drop the handles the guest returned, then fail the whole batch.
            for result in results.into_iter().flatten() {
                for tensor in result {
                    let _ = table.delete(tensor);
                }
            }
            return Err(CoreError::internal(format!(
                "model '{}' returned {got} responses for {count} requests",
                self.shared.model_name
            )));
        }
        Ok(results
            .into_iter()
            .map(|result| match result {
                Ok(tensors) => tensors
                    .into_iter()
                    .map(|t| {
                        table
                            .delete(t)
                            .map(|t| t.0)
                            .map_err(|e| CoreError::internal(format!("bad tensor handle in response: {e}")))
                    })
                    .collect(),
                Err(e) => Err(CoreError::new(kind_from_wit(e.code), e.message)),
            })
            .collect())
    }
}

/// Epoch ticks for one call: `max_execute_ms` rounded down to whole ticks (at least one), plus
/// one because the tick in progress when the call starts may be almost over.
fn deadline_ticks(sandbox: &Sandbox) -> u64 {
    (sandbox.max_execute.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
}

/// Past three quarters of its cap, an instance is recycled between calls rather than left to trap
/// in one (guests that leak grow steadily).
fn near_memory_limit(peak: usize, max_memory: usize) -> bool {
    peak > max_memory / 4 * 3
}

impl ModelInstance for WasmInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        let count = batch.len();
        match self.run(batch) {
            Ok(results) => results,
            Err(e) => (0..count).map(|_| Err(e.clone())).collect(),
        }
    }

    /// A guest only computes; its host calls that wait (BLS, a full response buffer) go through
    /// `crate::infer::blocking`, and the epoch deadline bounds a loop.
    fn only_computes(&self) -> bool {
        true
    }
}

impl Drop for WasmInstance {
    fn drop(&mut self) {
        let ticks = deadline_ticks(&self.sandbox);
        if let Some(live) = self.live.as_mut() {
            live.store.set_epoch_deadline(ticks);
            if let Err(e) = live.model.call_finalize(&mut live.store) {
                tracing::warn!(model = self.shared.model_name.as_str(), "finalize trapped: {e}");
            }
        }
    }
}

/// Explains a trap: time limit, memory limit, or a guest panic with its last log lines.
pub(super) fn trap_error(
    model: &str,
    call: &str,
    error: &wasmtime::Error,
    sandbox: &Sandbox,
    log: &[String],
) -> CoreError {
    let trap = error.downcast_ref::<Trap>();
    let detail = match trap {
        Some(Trap::Interrupt) => {
            format!("exceeded its time limit of {} ms (max_execute_ms)", sandbox.max_execute.as_millis())
        }
        Some(Trap::AllocationTooLarge) => {
            format!("exceeded its memory limit of {} bytes (max_memory_bytes)", sandbox.max_memory)
        }
        _ if format!("{error:#}").contains("grow") => {
            format!("exceeded its memory limit of {} bytes (max_memory_bytes): {error}", sandbox.max_memory)
        }
        Some(trap) => format!("trapped: {trap}\n{error}"),
        None => format!("trapped: {error:#}"),
    };
    let mut message = format!("WebAssembly model '{model}' {call} {detail}");
    if let Some(last) = log.last() {
        message.push_str(&format!(" (last guest log: {last})"));
    }
    CoreError::internal(message)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::error::ErrorKind;

    fn sandbox(params: &[(&str, &str)]) -> Sandbox {
        let config = super::super::sandbox::tests::config(params);
        Sandbox::from_config(&config, Path::new("/models/guest/1")).expect("sandbox")
    }

    #[test]
    fn time_limit_traps_name_the_limit() {
        let s = sandbox(&[("max_execute_ms", "250")]);
        let e = trap_error("m", "execute", &wasmtime::Error::from(Trap::Interrupt), &s, &[]);
        assert_eq!(e.kind, ErrorKind::Internal);
        assert_eq!(e.message, "WebAssembly model 'm' execute exceeded its time limit of 250 ms (max_execute_ms)");
    }

    #[test]
    fn memory_traps_name_the_limit() {
        let s = sandbox(&[("max_memory_bytes", "1048576")]);
        let e = trap_error("m", "execute", &wasmtime::Error::from(Trap::AllocationTooLarge), &s, &[]);
        assert_eq!(
            e.message,
            "WebAssembly model 'm' execute exceeded its memory limit of 1048576 bytes (max_memory_bytes)"
        );
        // The limiter's refusal arrives as a plain error mentioning the grow.
        let refused = wasmtime::Error::msg("linear memory would grow to 2000000 bytes, beyond the model's limit");
        let e = trap_error("m", "initialize", &refused, &s, &[]);
        assert_eq!(
            e.message,
            "WebAssembly model 'm' initialize exceeded its memory limit of 1048576 bytes (max_memory_bytes): \
             linear memory would grow to 2000000 bytes, beyond the model's limit"
        );
    }

    #[test]
    fn other_errors_are_traps_with_the_last_log_line() {
        let s = sandbox(&[]);
        let panic = wasmtime::Error::msg("guest panicked").context("error while executing at wasm backtrace");
        let log = ["first".to_string(), "panicked at src/lib.rs:3".to_string()];
        let e = trap_error("m", "execute", &panic, &s, &log);
        assert_eq!(e.kind, ErrorKind::Internal);
        assert_eq!(
            e.message,
            "WebAssembly model 'm' execute trapped: error while executing at wasm backtrace: guest panicked \
             (last guest log: panicked at src/lib.rs:3)"
        );
        let e = trap_error("m", "execute", &wasmtime::Error::from(Trap::UnreachableCodeReached), &s, &[]);
        assert!(e.message.starts_with("WebAssembly model 'm' execute trapped: "), "{}", e.message);
        assert!(!e.message.contains("last guest log"));
    }

    #[test]
    fn deadlines_round_down_to_ticks_plus_one() {
        assert_eq!(deadline_ticks(&sandbox(&[("max_execute_ms", "1")])), 2, "at least one whole tick");
        assert_eq!(deadline_ticks(&sandbox(&[("max_execute_ms", "12")])), 3);
        assert_eq!(deadline_ticks(&sandbox(&[])), 10_000 / 5 + 1);
    }

    #[test]
    fn recycling_starts_past_three_quarters_of_the_cap() {
        assert!(!near_memory_limit(0, 1 << 20));
        assert!(!near_memory_limit(786_432, 1 << 20));
        assert!(near_memory_limit(786_433, 1 << 20));
    }
}
