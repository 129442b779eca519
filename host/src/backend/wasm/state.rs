//! The data of a guest's store: its resource table (tensors, requests, response senders, BLS
//! calls), its limits and what the host holds on its behalf, in parts by concern, and the views
//! of those parts that the WIT interfaces are implemented on. The interfaces are one file each:
//! `tensor`, `request`, `sender` (interface `types`), `host` and `bls` (interface `host`),
//! `telemetry`, `nn`, `clocks`.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::wit;
use super::convert::wit_error;
use super::resources::{CallSpans, HostRequest, HostTensor, SharedResponder};
use super::sandbox::{AllowList, GuestLimiter};
use super::timing::ExecutionClock;
use crate::backend::mailbox::{Done, Mailbox};
use crate::error::{CoreError, CoreResult};
use crate::infer::Infer;
use crate::stats::custom::CustomMetrics;
use crate::tensor::Tensor;

/// What a handle's name and shape take in the host: a guest could otherwise hold a million
/// handles of empty tensors with a megabyte name each.
pub(super) fn own_size(tensor: &Tensor) -> usize {
    tensor.name.len() + tensor.shape.len() * std::mem::size_of::<i64>()
}

/// What the guest's telemetry needs that every store of its model shares.
#[derive(Default)]
pub(super) struct GuestTelemetry {
    /// The server's custom metrics; `None` where there are none (an auto-complete instance).
    pub(super) metrics: Option<Arc<CustomMetrics>>,
    pub(super) model_version: i64,
}

/// What every store of one model shares.
pub(super) struct GuestShared {
    pub(super) model_name: String,
    pub(super) allowed_models: AllowList,
    pub(super) bls_timeout: Duration,
    /// Where BLS calls go; `None` if the backend was never connected.
    pub(super) infer: Option<Weak<dyn Infer>>,
    pub(super) runtime: Option<tokio::runtime::Handle>,
    /// How executions (and the BLS calls inside them) are timed.
    pub(super) clock: ExecutionClock,
    /// Where the guest's metrics go, and the version they are labelled with.
    pub(super) telemetry: GuestTelemetry,
    /// What the guest may reach beyond models: its configuration values and key-value store.
    pub(super) capabilities: super::grants::Capabilities,
}

/// The data of one guest's store, in parts by concern. Each WIT interface is implemented on a
/// view of the parts it needs ([`TypesView`], [`HostView`]), projected by the getter its
/// `add_to_linker` is given (`engine.rs`), as wasmtime-wasi's `WasiCtxView` is.
pub struct GuestState {
    pub(super) wasi: WasiCtx,
    pub(super) limits: GuestLimiter,
    pub(super) shared: Arc<GuestShared>,
    /// Every handle the guest holds, and the bytes held on its behalf.
    pub(super) handles: Handles,
    /// The current `execute` call.
    pub(super) call: ExecuteCall,
    /// The store's BLS calls.
    pub(super) bls: BlsCalls,
    /// Log lines the guest wrote during the current call (kept to explain traps).
    pub(super) last_log: Vec<String>,
}

/// The resource table, and the bytes the host holds for the guest's tensors.
pub struct Handles {
    pub(super) table: ResourceTable,
    /// Bytes the host holds on the guest's behalf ([`held_limit`]): tensors it created or got
    /// from BLS calls (wasi:nn's too) and still has handles to, and outputs given by value until
    /// `execute` returns.
    pub(super) held_bytes: usize,
    /// The guest's memory limit, which [`held_limit`] is a multiple of.
    max_memory: usize,
}

impl Handles {
    /// The guest's memory limit (`max_memory_bytes`).
    pub(super) fn max_memory(&self) -> usize {
        self.max_memory
    }
}

/// The adoption state of the current `execute-by-value` call (see `adopt`).
#[derive(Default)]
pub struct Adoption {
    /// Set while a decoupled model's `execute-by-value` call runs.
    pub(super) offer: Option<Offer>,
    /// Whether the guest opened the current call (`adopt`).
    pub(super) open: bool,
    /// The current call's requests by position, for a decoupled model.
    pub(super) requests: Vec<Tracked>,
}

/// What a call may adopt into.
pub(super) struct Offer {
    pub(super) mailbox: Arc<Mailbox>,
    pub(super) limit: usize,
    pub(super) max_execute: Duration,
    pub(super) model: String,
}

/// One request of the call: its time limit, its caller, and its end once it has one.
pub(super) struct Tracked {
    pub(super) deadline: Instant,
    pub(super) done: Option<Done>,
    pub(super) ended: Option<CoreResult<()>>,
}

/// What the host keeps for the current `execute` call.
#[derive(Default)]
pub struct ExecuteCall {
    /// Responders of the current `execute` call, closed when it returns.
    pub(super) responders: Vec<SharedResponder>,
    /// When the current `execute` reaches its time limit (None outside `execute`).
    pub(super) deadline: Option<std::time::Instant>,
    /// The number of the current (or last) `execute` call.
    pub(super) number: u64,
    /// The outputs `request.set-outputs` gave each request of the current `execute` call, by
    /// position in its batch; `None` outside `execute` and for a decoupled model.
    pub(super) given_outputs: Option<Vec<Vec<Tensor>>>,
    /// The tensors `request.give-tensors` moved to each request of the current call, likewise,
    /// with the charges they had as handles: they stay on the guest's account until the call
    /// ends, as handles returned from `execute` do (a request's input passed on charges only its
    /// name and shape).
    pub(super) given_tensors: Option<Vec<Vec<HostTensor>>>,
    /// Whether the current `execute` call is a decoupled model's.
    pub(super) decoupled: bool,
    /// The requests of the current `execute-by-value` call, by position, until `request.at`
    /// gives the guest a handle to one (most requests never get one: a handle costs a Python
    /// guest microseconds to make and to drop).
    pub(super) pending_requests: Vec<Option<HostRequest>>,
    /// The table entries of the requests `request.at` gave out during the current call.
    pub(super) taken_requests: Vec<u32>,
    /// Requests that join the call while it runs, and each request's end (see `adopt`).
    pub(super) adoption: Adoption,
}

/// The store's BLS calls.
#[derive(Default)]
pub struct BlsCalls {
    /// Calls still open (bounded by `bls::MAX_OPEN_CALLS`).
    pub(super) in_flight: Arc<AtomicUsize>,
    /// Woken whenever one of this store's `infer-async` calls finishes.
    pub(super) done: Arc<tokio::sync::Notify>,
    /// Time (on the model's [`ExecutionClock`]) this thread spent in the models this guest called
    /// (a BLS callee that runs inline runs on the caller's thread) during the current `execute`:
    /// not the guest's own.
    pub(super) cpu: Duration,
    /// The trace the current `execute` call's BLS calls are children of: the batch's first
    /// traced request's (a WIT call does not say which request it serves).
    pub(super) trace: Option<crate::trace::Trace>,
    /// Who the current `execute` call's requests run as (one each; empty: no principals). A BLS
    /// call may reach only models every one of them may call, and runs as the first.
    pub(super) principals: Vec<std::sync::Arc<crate::tenant::Principal>>,
    /// Whether some request of the current call runs as no principal (the in-process API,
    /// warmup): its key-value space is the model's common one.
    pub(super) unprincipaled: bool,
    /// The id of the current `execute` call's first request (empty: none), which the guest's
    /// log lines carry.
    pub(super) request_id: String,
    /// The spans the guest opened in `trace` during the current `execute` call.
    pub(super) spans: CallSpans,
}

/// What WIT interface `types` (tensors, requests, response senders) works on.
pub struct TypesView<'a> {
    pub(super) handles: &'a mut Handles,
    pub(super) call: &'a mut ExecuteCall,
    pub(super) shared: &'a GuestShared,
}

/// What WIT interface `host` (logging, BLS, adoption) and wasi:nn (whose `compute` is a BLS
/// call) work on.
pub struct HostView<'a> {
    pub(super) handles: &'a mut Handles,
    pub(super) bls: &'a mut BlsCalls,
    pub(super) shared: &'a GuestShared,
    pub(super) last_log: &'a mut Vec<String>,
    pub(super) call: &'a mut ExecuteCall,
}

/// What `wasi:config` and `wasi:keyvalue` work on: the model's grants, the guest's handles (open
/// buckets), and who the current call's requests run as (which decides a key-value space).
pub struct CapabilityView<'a> {
    pub(super) handles: &'a mut Handles,
    pub(super) shared: &'a GuestShared,
    pub(super) principals: &'a [Arc<crate::tenant::Principal>],
    /// Whether some request of the current call runs as no principal.
    pub(super) unprincipaled: bool,
}

/// [`HasData`] for `wasi:config` and `wasi:keyvalue`: their `add_to_linker` gets a
/// [`CapabilityView`].
pub struct CapabilityCalls;

impl HasData for CapabilityCalls {
    type Data<'a> = CapabilityView<'a>;
}

/// [`HasData`] for interface `types`: its `add_to_linker` gets a [`TypesView`].
pub struct Types;

impl HasData for Types {
    type Data<'a> = TypesView<'a>;
}

/// [`HasData`] for interface `host` and wasi:nn: their `add_to_linker` gets a [`HostView`].
pub struct HostCalls;

impl HasData for HostCalls {
    type Data<'a> = HostView<'a>;
}

/// Why a request cannot have these outputs: a name twice, which would reach the response once, the
/// others dropped unseen.
pub(super) fn named_twice<'a>(outputs: impl Iterator<Item = &'a Tensor>, call: &str) -> Option<CoreError> {
    let mut names: Vec<&str> = outputs.map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    let pair = names.windows(2).find(|pair| pair[0] == pair[1])?;
    Some(CoreError::invalid_arg(format!("{call}: output '{}' given twice for one request", pair[0])))
}

/// Why the host refuses to hold more bytes for a guest: they would pass [`held_limit`]. Without
/// it a guest could copy one buffer out again and again (creating tensors and keeping the handles,
/// or giving outputs), or call a model again and again keeping every output, and grow the
/// server's memory, where its own cap does not reach.
fn over_held_limit(held: usize, more: usize, max_memory: usize) -> Option<CoreError> {
    let limit = held_limit(max_memory);
    (held.saturating_add(more) > limit).then(|| {
        CoreError::internal(format!(
            "the tensors the host holds for this guest already take {held} bytes; {more} more would pass \
             its limit of {limit} bytes (4 x max_memory_bytes)"
        ))
    })
}

/// How many bytes the host may hold for a guest's tensors: four times its own memory limit, so a
/// batch's outputs may well outgrow the guest's memory (each is copied out and freed in turn),
/// but a guest cannot grow the server without bound.
fn held_limit(max_memory: usize) -> usize {
    max_memory.saturating_mul(4)
}

/// `text` cut to `limit` bytes (at a character boundary), saying how much was cut, in a new
/// allocation: a truncated `String` would keep the whole of the guest's buffer.
pub(super) fn cut_text(text: String, limit: usize, what: &str) -> String {
    if text.len() <= limit {
        return text;
    }
    let end = text.floor_char_boundary(limit);
    format!("{}... ({} more bytes cut; {what} {limit})", &text[..end], text.len() - end)
}

impl GuestState {
    pub(super) fn new(wasi: WasiCtx, limits: GuestLimiter, shared: Arc<GuestShared>) -> Self {
        let handles = Handles { table: ResourceTable::new(), held_bytes: 0, max_memory: limits.max_memory() };
        Self {
            wasi,
            limits,
            shared,
            handles,
            call: ExecuteCall::default(),
            bls: BlsCalls::default(),
            last_log: Vec::new(),
        }
    }

    /// The view interface `types` works on.
    pub(super) fn types(&mut self) -> TypesView<'_> {
        TypesView { handles: &mut self.handles, call: &mut self.call, shared: &self.shared }
    }

    /// The view interface `host` and wasi:nn work on.
    pub(super) fn host(&mut self) -> HostView<'_> {
        HostView {
            handles: &mut self.handles,
            bls: &mut self.bls,
            shared: &self.shared,
            last_log: &mut self.last_log,
            call: &mut self.call,
        }
    }

    /// The view `wasi:config` and `wasi:keyvalue` work on.
    pub(super) fn capabilities(&mut self) -> CapabilityView<'_> {
        CapabilityView {
            handles: &mut self.handles,
            shared: &self.shared,
            principals: &self.bls.principals,
            unprincipaled: self.bls.unprincipaled,
        }
    }

    /// Starts an `execute` call of `count` requests: its number, for the requests' `call`.
    /// A decoupled model's requests take no outputs by value.
    pub(super) fn begin_execute(&mut self, count: usize, decoupled: bool) -> u64 {
        let call = &mut self.call;
        call.number += 1;
        call.given_outputs = (!decoupled).then(|| vec![Vec::new(); count]);
        call.given_tensors = (!decoupled).then(|| std::iter::repeat_with(Vec::new).take(count).collect());
        call.decoupled = decoupled;
        call.number
    }

    /// Ends the `execute` call: the outputs each request was given, those of `request.set-outputs`
    /// (which leave the guest's account) and then those of `request.give-tensors`.
    pub(super) fn end_execute(&mut self) -> Vec<Vec<Tensor>> {
        let mut given = self.call.given_outputs.take().unwrap_or_default();
        let given_bytes: usize = given.iter().flatten().map(|t| t.data.len() + own_size(t)).sum();
        self.handles.release(given_bytes);
        for (outputs, tensors) in given.iter_mut().zip(self.call.given_tensors.take().unwrap_or_default()) {
            for held in tensors {
                outputs.push(self.handles.discharge(held));
            }
        }
        self.call.decoupled = false;
        given
    }
}

impl TypesView<'_> {
    /// Where a request of the current `execute` call keeps what `call` (`request.set-outputs`,
    /// `request.give-tensors`) gives it: its position in the batch, or why it cannot be given
    /// anything.
    pub(super) fn given_position(
        &self,
        handle: &Resource<HostRequest>,
        call: &str,
    ) -> wasmtime::Result<CoreResult<usize>> {
        let request = self.handles.table.get(handle).map_err(table_error)?;
        if self.call.decoupled {
            return Ok(Err(CoreError::unsupported(format!(
                "{call}: a decoupled model answers through response senders"
            ))));
        }
        let current = request.call == self.call.number && self.call.given_outputs.is_some();
        if !current {
            return Ok(Err(CoreError::invalid_arg(format!(
                "{call}: the request is not one of the current execute call's"
            ))));
        }
        Ok(Ok(request.position))
    }

    /// Why `more` cannot join what the request at `position` was given ([`named_twice`]).
    pub(super) fn twice_with_given<'a>(
        &'a self,
        position: usize,
        more: impl Iterator<Item = &'a Tensor>,
        call: &str,
    ) -> Option<CoreError> {
        let by_value = self.call.given_outputs.as_ref().and_then(|g| g.get(position)).into_iter().flatten();
        let handles =
            self.call.given_tensors.as_ref().and_then(|g| g.get(position)).into_iter().flatten().map(|h| &h.0);
        named_twice(by_value.chain(handles).chain(more), call)
    }
}

impl Handles {
    pub(super) fn tensor(&self, handle: &Resource<HostTensor>) -> wasmtime::Result<&Tensor> {
        self.table.get(handle).map(|t| &t.0).map_err(table_error)
    }

    /// A handle to a tensor of the caller's (a request's input), on nobody's account.
    pub(super) fn new_tensor(&mut self, tensor: Tensor) -> wasmtime::Result<Resource<HostTensor>> {
        self.table.push(HostTensor(tensor, None, 0)).map_err(table_error)
    }

    /// Puts `size` more bytes the host holds for the guest on its account; refused past
    /// [`held_limit`].
    pub(super) fn hold(&mut self, size: usize) -> CoreResult<()> {
        if let Some(e) = over_held_limit(self.held_bytes, size, self.max_memory) {
            return Err(e);
        }
        self.held_bytes += size;
        Ok(())
    }

    /// Puts `size` bytes on the guest's account whatever its balance, for what WIT gives no way
    /// to refuse and that is small and bounded (a wasi:nn error's text): later holds see them.
    pub(super) fn hold_regardless(&mut self, size: usize) {
        self.held_bytes = self.held_bytes.saturating_add(size);
    }

    /// [`Self::hold`] for a host call WIT gives no error result: past the limit, `call` traps.
    pub(super) fn hold_or_trap(&mut self, size: usize, call: &str) -> wasmtime::Result<()> {
        self.hold(size).map_err(|e| wasmtime::Error::msg(format!("{call}: {}", e.message)))
    }

    /// Takes `size` bytes the host no longer holds for the guest off its account.
    pub(super) fn release(&mut self, size: usize) {
        self.held_bytes = self.held_bytes.saturating_sub(size);
    }

    /// Handles to tensors held on the guest's account (its own, or a BLS call's outputs): an
    /// error past its limit, which drops them all.
    pub(super) fn new_held_tensors(
        &mut self,
        tensors: Vec<Tensor>,
    ) -> wasmtime::Result<Result<Vec<Resource<HostTensor>>, wit::Error>> {
        if let Err(e) = self.hold(tensors.iter().map(|t| t.data.len() + own_size(t)).sum()) {
            return Ok(Err(wit_error(e)));
        }
        let mut handles = Vec::with_capacity(tensors.len());
        for tensor in tensors {
            let (size, own) = (tensor.data.len(), own_size(&tensor));
            handles.push(self.table.push(HostTensor(tensor, Some(Arc::new(size)), own)).map_err(table_error)?);
        }
        Ok(Ok(handles))
    }

    /// Takes a tensor out of the table (it moves into a response, or is dropped), and off the
    /// guest's account.
    pub(super) fn take_tensor(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Tensor> {
        let held = self.table.delete(handle).map_err(table_error)?;
        Ok(self.discharge(held))
    }

    /// A tensor out of its handle, and the handle's charges off the guest's account.
    pub(super) fn discharge(&mut self, HostTensor(tensor, charge, own): HostTensor) -> Tensor {
        self.release(own);
        if let Some(size) = charge.and_then(Arc::into_inner) {
            self.release(size);
        }
        tensor
    }

    /// Hands a request's inputs to the guest as new handles.
    pub(super) fn new_tensors(&mut self, tensors: Vec<Tensor>) -> wasmtime::Result<Vec<Resource<HostTensor>>> {
        tensors.into_iter().map(|t| self.new_tensor(t)).collect()
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.handles.table }
    }
}

/// A bad handle is the guest's bug: it traps the call rather than returning an error.
pub(super) fn table_error(e: wasmtime::component::ResourceTableError) -> wasmtime::Error {
    wasmtime::Error::msg(format!("resource table: {e}"))
}

impl wit::Host for TypesView<'_> {}
