//! The host's side of the guest's WIT resources, as `bindings` maps them (`with`): tensors,
//! requests and response senders (interface `types`), BLS calls (interface `host`), metric
//! families, metrics and spans (interface `telemetry`), and what they hold. Data only: the
//! interfaces' files implement them, on the views `state` projects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::outlet::Outlet;
use crate::error::CoreResult;
use crate::infer::{InferResponse, Parameters, ResponseStream};
use crate::stats::custom::{ModelFamily, Series};
use crate::tensor::Tensor;
use crate::trace::{GuestSpan, SpanValue, Trace, now_ns};

/// A tensor resource: the core tensor, whose bytes are shared (`Bytes`), never copied by handles,
/// and, for bytes held on the guest's behalf (copied out of its memory, or a BLS call's outputs),
/// their charge on its account, shared by every handle to the same bytes (`tensor.with-name`):
/// the last one to go gives it back; and the charge of this handle's own name and shape
/// ([`own_size`]). A request's inputs are the caller's and charge nothing.
pub struct HostTensor(pub(super) Tensor, pub(super) Option<Arc<usize>>, pub(super) usize);

/// A request resource handed to `execute`.
pub struct HostRequest {
    pub(super) id: String,
    pub(super) inputs: Vec<Tensor>,
    pub(super) outputs: Vec<String>,
    pub(super) parameters: Parameters,
    pub(super) responder: SharedResponder,
    /// Where `request.set-response-parameters` puts its response's parameters.
    pub(super) response_parameters: Option<Arc<crate::backend::ResponseParameters>>,
    /// The `execute` call it was handed to ([`GuestState::begin_execute`]'s number) and its
    /// position in that call's batch: where `request.set-outputs` puts its outputs.
    pub(super) call: u64,
    pub(super) position: usize,
}

impl HostRequest {
    /// The host side of `request`, handed to the guest as the `position`-th request of execute
    /// call `call`, and its way out (which the call also keeps, to close when it returns).
    pub(super) fn new(request: crate::backend::ExecRequest, call: u64, position: usize) -> (Self, SharedResponder) {
        let responder: SharedResponder = Arc::new(Mutex::new(request.responder.map(Outlet::new)));
        let host = Self {
            id: request.id.unwrap_or_default(),
            inputs: request.inputs,
            outputs: request.outputs,
            parameters: request.parameters,
            responder: Arc::clone(&responder),
            response_parameters: request.response_parameters,
            call,
            position,
        };
        (host, responder)
    }
}

/// One request's way out, shared by the request and every sender made from it, so the host can
/// close it when `execute` returns whatever handles the guest still holds. `None` once closed.
pub(super) type SharedResponder = Arc<Mutex<Option<Outlet>>>;

/// A decoupled request's response sender.
pub struct HostSender(pub(super) SharedResponder);

/// Responses of a BLS `infer-stream` call (which the callee buffers up to 64 of), open until
/// the guest drops the handle.
pub struct HostResponseStream(
    pub(super) ResponseStream,
    #[allow(dead_code, reason = "held, never read: the call stays open until the stream is dropped")]
    pub(super)  Arc<OpenCall>,
);

/// A BLS call started by `infer-async`: the spawned call fills `slot` and wakes the store's
/// waiters (`GuestShared::bls_done`).
pub struct HostPendingInfer {
    pub(super) slot: Arc<Mutex<Option<CoreResult<InferResponse>>>>,
    /// Set once `get` handed the result out.
    pub(super) taken: bool,
    /// Open until the result is taken or the handle dropped (the spawned call holds it too).
    pub(super) open: Option<Arc<OpenCall>>,
}

/// One open call of a store, counted until the last holder drops it.
pub(super) struct OpenCall(pub(super) Arc<AtomicUsize>);

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A metric family resource.
pub struct HostMetricFamily(pub(super) Arc<ModelFamily>);

/// A metric (series) resource.
pub struct HostMetric(pub(super) Arc<Series>);

/// A span resource: `None` once ended, or from the start when its request is not traced.
pub struct HostSpan(pub(super) Arc<Mutex<Option<OpenSpan>>>);

/// A span being recorded, and the trace it goes to when it ends.
pub(super) struct OpenSpan {
    pub(super) trace: Trace,
    pub(super) span: GuestSpan,
    pub(super) dropped: i64,
}

impl OpenSpan {
    pub(super) fn end(mut self) {
        self.span.end_ns = now_ns();
        if self.dropped > 0 {
            self.span.attributes.push(("tessera.dropped".into(), SpanValue::Int(self.dropped)));
        }
        self.trace.add_guest_span(self.span);
    }
}

/// The spans the current `execute` call opened (to end those still open when it returns).
#[derive(Default)]
pub(super) struct CallSpans {
    pub(super) open: Vec<Weak<Mutex<Option<OpenSpan>>>>,
    pub(super) opened: usize,
}

impl CallSpans {
    /// Ends every span still open; the next call starts with none.
    pub(super) fn end_all(&mut self) {
        for span in self.open.drain(..).filter_map(|s| s.upgrade()) {
            if let Some(open) = span.lock().unwrap_or_else(PoisonError::into_inner).take() {
                open.end();
            }
        }
        self.opened = 0;
    }
}

/// An open `wasi:keyvalue` bucket: its name only (`keyvalue` chooses the space at each call).
pub struct KvBucket {
    pub(super) name: String,
}
