//! The data of a guest's store and the host side of the WIT imports a guest calls: tensors,
//! requests, response senders, logging, and the entry points of BLS (`infer`, `infer-async`,
//! `wait-any`, `infer-stream`), whose mechanism is in `bls`.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bls::{HostPendingInfer, HostResponseStream};
use super::convert::{datatype_from_wit, datatype_to_wit, kind_from_wit, params_to_wit, wit_error};
use super::outlet::{Outlet, SendDeadline};
use super::sandbox::{AllowList, GuestLimiter};
use super::{ExecutionClock, wit, wit_host};
use crate::backend::Sent;
use crate::error::{CoreError, CoreResult};
use crate::infer::{Infer, Parameters, RESPONSE_BUFFER};
use crate::tensor::Tensor;

/// A tensor resource: the core tensor, whose bytes are shared (`Bytes`), never copied by handles,
/// and, for bytes held on the guest's behalf (copied out of its memory, or a BLS call's outputs),
/// their charge on its account, shared by every handle to the same bytes (`tensor.with-name`):
/// the last one to go gives it back; and the charge of this handle's own name and shape
/// ([`own_size`]). A request's inputs are the caller's and charge nothing.
pub struct HostTensor(pub(super) Tensor, Option<Arc<usize>>, usize);

/// What a handle's name and shape take in the host: a guest could otherwise hold a million
/// handles of empty tensors with a megabyte name each.
fn own_size(tensor: &Tensor) -> usize {
    tensor.name.len() + tensor.shape.len() * std::mem::size_of::<i64>()
}

/// A request resource handed to `execute`.
pub struct HostRequest {
    pub(super) id: String,
    pub(super) inputs: Vec<Tensor>,
    pub(super) outputs: Vec<String>,
    pub(super) parameters: Parameters,
    pub(super) responder: SharedResponder,
    /// The `execute` call it was handed to ([`GuestState::begin_execute`]'s number) and its
    /// position in that call's batch: where `request.set-outputs` puts its outputs.
    pub(super) call: u64,
    pub(super) position: usize,
}

/// One request's way out, shared by the request and every sender made from it, so the host can
/// close it when `execute` returns whatever handles the guest still holds. `None` once closed.
pub(super) type SharedResponder = Arc<Mutex<Option<Outlet>>>;

/// A decoupled request's response sender.
pub struct HostSender(SharedResponder);

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
}

/// The data of one guest's store.
pub struct GuestState {
    pub(super) table: ResourceTable,
    pub(super) wasi: WasiCtx,
    pub(super) limits: GuestLimiter,
    pub(super) shared: Arc<GuestShared>,
    /// Log lines the guest wrote during the current call (kept to explain traps).
    pub(super) last_log: Vec<String>,
    /// Responders of the current `execute` call, closed when it returns.
    pub(super) call_responders: Vec<SharedResponder>,
    /// BLS calls of this store still open (bounded by `bls::MAX_OPEN_CALLS`).
    pub(super) calls_in_flight: Arc<AtomicUsize>,
    /// Woken whenever one of this store's `infer-async` calls finishes.
    pub(super) bls_done: Arc<tokio::sync::Notify>,
    /// Time (on the model's [`ExecutionClock`]) this thread spent in the models this guest called
    /// (a BLS callee that runs inline runs on the caller's thread) during the current `execute`:
    /// not the guest's own.
    pub(super) bls_cpu: Duration,
    /// When the current `execute` reaches its time limit (None outside `execute`).
    pub(super) execute_deadline: Option<std::time::Instant>,
    /// The number of the current (or last) `execute` call.
    execute_call: u64,
    /// The outputs `request.set-outputs` gave each request of the current `execute` call, by
    /// position in its batch; `None` outside `execute` and for a decoupled model.
    given_outputs: Option<Vec<Vec<Tensor>>>,
    /// The tensors `request.give-tensors` moved to each request of the current call, likewise,
    /// with the charges they had as handles: they stay on the guest's account until the call
    /// ends, as handles returned from `execute` do (a request's input passed on charges only its
    /// name and shape).
    given_tensors: Option<Vec<Vec<HostTensor>>>,
    /// Whether the current `execute` call is a decoupled model's.
    decoupled_call: bool,
    /// The requests of the current `execute-by-value` call, by position, until `request.at`
    /// gives the guest a handle to one (most requests never get one: a handle costs a Python
    /// guest microseconds to make and to drop).
    pub(super) pending_requests: Vec<Option<HostRequest>>,
    /// The table entries of the requests `request.at` gave out during the current call.
    pub(super) taken_requests: Vec<u32>,
    /// Bytes the host holds on the guest's behalf ([`held_limit`]): tensors it created or got
    /// from BLS calls (wasi:nn's too) and still has handles to, and outputs given by value until
    /// `execute` returns.
    held_bytes: usize,
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

/// How many of the guest's last log lines a trap message can quote from.
const LOG_LINES_KEPT: usize = 16;

/// The most bytes of one guest log line the server prints and keeps: the log is the operator's,
/// shared by every model, and a trap message quotes the last line to the caller.
const LOG_LINE_BYTES: usize = 8 << 10;

/// `message` cut to [`LOG_LINE_BYTES`] (at a character boundary), saying how much was cut.
fn log_line(message: String) -> String {
    cut_text(message, LOG_LINE_BYTES, "log lines keep")
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
        Self {
            table: ResourceTable::new(),
            wasi,
            limits,
            shared,
            last_log: Vec::new(),
            call_responders: Vec::new(),
            calls_in_flight: Arc::default(),
            bls_done: Arc::default(),
            bls_cpu: Duration::ZERO,
            execute_deadline: None,
            execute_call: 0,
            given_outputs: None,
            given_tensors: None,
            decoupled_call: false,
            pending_requests: Vec::new(),
            taken_requests: Vec::new(),
            held_bytes: 0,
        }
    }

    /// Starts an `execute` call of `count` requests: its number, for the requests' `call`.
    /// A decoupled model's requests take no outputs by value.
    pub(super) fn begin_execute(&mut self, count: usize, decoupled: bool) -> u64 {
        self.execute_call += 1;
        self.given_outputs = (!decoupled).then(|| vec![Vec::new(); count]);
        self.given_tensors = (!decoupled).then(|| std::iter::repeat_with(Vec::new).take(count).collect());
        self.decoupled_call = decoupled;
        self.execute_call
    }

    /// Ends the `execute` call: the outputs each request was given, those of `request.set-outputs`
    /// (which leave the guest's account) and then those of `request.give-tensors`.
    pub(super) fn end_execute(&mut self) -> Vec<Vec<Tensor>> {
        let mut given = self.given_outputs.take().unwrap_or_default();
        let given_bytes: usize = given.iter().flatten().map(|t| t.data.len() + own_size(t)).sum();
        self.release(given_bytes);
        for (outputs, tensors) in given.iter_mut().zip(self.given_tensors.take().unwrap_or_default()) {
            for held in tensors {
                outputs.push(self.discharge(held));
            }
        }
        self.decoupled_call = false;
        given
    }

    /// Where a request of the current `execute` call keeps what `call` (`request.set-outputs`,
    /// `request.give-tensors`) gives it: its position in the batch, or why it cannot be given
    /// anything.
    fn given_position(&self, handle: &Resource<HostRequest>, call: &str) -> wasmtime::Result<CoreResult<usize>> {
        let request = self.table.get(handle).map_err(table_error)?;
        if self.decoupled_call {
            return Ok(Err(CoreError::unsupported(format!(
                "{call}: a decoupled model answers through response senders"
            ))));
        }
        let current = request.call == self.execute_call && self.given_outputs.is_some();
        if !current {
            return Ok(Err(CoreError::invalid_arg(format!(
                "{call}: the request is not one of the current execute call's"
            ))));
        }
        Ok(Ok(request.position))
    }

    /// Why `more` cannot join what the request at `position` was given ([`named_twice`]).
    fn twice_with_given<'a>(
        &'a self,
        position: usize,
        more: impl Iterator<Item = &'a Tensor>,
        call: &str,
    ) -> Option<CoreError> {
        let by_value = self.given_outputs.as_ref().and_then(|g| g.get(position)).into_iter().flatten();
        let handles = self.given_tensors.as_ref().and_then(|g| g.get(position)).into_iter().flatten().map(|h| &h.0);
        named_twice(by_value.chain(handles).chain(more), call)
    }

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
        if let Some(e) = over_held_limit(self.held_bytes, size, self.limits.max_memory()) {
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
    fn discharge(&mut self, HostTensor(tensor, charge, own): HostTensor) -> Tensor {
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
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A bad handle is the guest's bug: it traps the call rather than returning an error.
pub(super) fn table_error(e: wasmtime::component::ResourceTableError) -> wasmtime::Error {
    wasmtime::Error::msg(format!("resource table: {e}"))
}

impl wit::Host for GuestState {}

impl wit::HostTensor for GuestState {
    fn create(
        &mut self,
        name: String,
        datatype: wit::DataType,
        shape: Vec<i64>,
        data: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, wit::Error>> {
        match Tensor::new_as("tensor", name, datatype_from_wit(datatype), shape, Bytes::from(data)) {
            Ok(t) => Ok(self.new_held_tensors(vec![t])?.map(|mut handles| handles.remove(0))),
            Err(e) => Ok(Err(wit_error(e))),
        }
    }

    fn create_latin1(
        &mut self,
        name: String,
        datatype: wit::DataType,
        shape: Vec<i64>,
        data: String,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, wit::Error>> {
        match latin1_bytes(&data) {
            Some(bytes) => self.create(name, datatype, shape, bytes),
            None => Ok(Err(wit_error(CoreError::invalid_arg(format!(
                "tensor '{name}': create-latin1 data holds a character above U+00FF, which is not one byte"
            ))))),
        }
    }

    fn name(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<String> {
        Ok(self.tensor(&handle)?.name.clone())
    }

    fn datatype(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<wit::DataType> {
        Ok(datatype_to_wit(self.tensor(&handle)?.datatype))
    }

    fn shape(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Vec<i64>> {
        Ok(self.tensor(&handle)?.shape.clone())
    }

    fn byte_size(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<u64> {
        Ok(self.tensor(&handle)?.data.len() as u64)
    }

    fn data(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.tensor(&handle)?.data.to_vec())
    }

    fn read(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<wit::TensorData> {
        let t = self.tensor(&handle)?;
        Ok(wit::TensorData { datatype: datatype_to_wit(t.datatype), shape: t.shape.clone(), data: t.data.to_vec() })
    }

    fn with_name(&mut self, handle: Resource<HostTensor>, name: String) -> wasmtime::Result<Resource<HostTensor>> {
        let HostTensor(tensor, charge, _) = self.table.get(&handle).map_err(table_error)?;
        let mut tensor = tensor.clone();
        tensor.name = name;
        // The same bytes: the same charge, given back when the last handle to them goes. The
        // new name is this handle's own; WIT gives `with-name` no error, so past the limit it traps.
        let charge = charge.clone();
        let own = own_size(&tensor);
        self.hold_or_trap(own, "tensor.with-name")?;
        self.table.push(HostTensor(tensor, charge, own)).map_err(table_error)
    }

    fn drop(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<()> {
        self.take_tensor(handle).map(|_| ())
    }
}

impl wit::HostRequest for GuestState {
    fn id(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<String> {
        Ok(self.table.get(&handle).map_err(table_error)?.id.clone())
    }

    fn input(&mut self, handle: Resource<HostRequest>, name: String) -> wasmtime::Result<Option<Resource<HostTensor>>> {
        let found = self.table.get(&handle).map_err(table_error)?.inputs.iter().find(|t| t.name == name).cloned();
        found.map(|t| self.new_tensor(t)).transpose()
    }

    fn inputs(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<Resource<HostTensor>>> {
        let inputs = self.table.get(&handle).map_err(table_error)?.inputs.clone();
        self.new_tensors(inputs)
    }

    fn read_inputs(
        &mut self,
        requests: Vec<Resource<HostRequest>>,
        max_bytes: u64,
    ) -> wasmtime::Result<Vec<Vec<wit::InputData>>> {
        each_request_once(&requests, "request.read-inputs")?;
        let mut budget = READ_INPUTS_MAX_TOTAL;
        let mut out = Vec::with_capacity(requests.len());
        for handle in &requests {
            let request = self.table.get(handle).map_err(table_error)?;
            out.push(input_data(&request.inputs, max_bytes, &mut budget));
        }
        Ok(out)
    }

    fn set_outputs(
        &mut self,
        requests: Vec<Resource<HostRequest>>,
        outputs: Vec<Vec<wit::OutputData>>,
    ) -> wasmtime::Result<Vec<Result<(), wit::Error>>> {
        const CALL: &str = "request.set-outputs";
        one_list_each(&requests, outputs.len(), "outputs", CALL)?;
        let mut results = Vec::with_capacity(requests.len());
        for (handle, given) in requests.iter().zip(outputs) {
            let given = self.given_position(handle, CALL)?.and_then(|position| {
                let tensors = given.into_iter().map(output_from_wit).collect::<CoreResult<Vec<Tensor>>>()?;
                if let Some(e) = self.twice_with_given(position, tensors.iter(), CALL) {
                    return Err(e);
                }
                self.hold(tensors.iter().map(|t| t.data.len() + own_size(t)).sum())?;
                Ok((position, tensors))
            });
            results.push(
                given
                    .map(|(position, tensors)| {
                        if let Some(slot) = self.given_outputs.as_mut().and_then(|g| g.get_mut(position)) {
                            slot.extend(tensors);
                        }
                    })
                    .map_err(wit_error),
            );
        }
        Ok(results)
    }

    fn give_tensors(
        &mut self,
        requests: Vec<Resource<HostRequest>>,
        tensors: Vec<Vec<Resource<HostTensor>>>,
    ) -> wasmtime::Result<Vec<Result<(), wit::Error>>> {
        const CALL: &str = "request.give-tensors";
        one_list_each(&requests, tensors.len(), "tensors", CALL)?;
        let mut results = Vec::with_capacity(requests.len());
        for (handle, handles) in requests.iter().zip(tensors) {
            // Every handle leaves the table, whatever becomes of the request: one given stays on
            // the guest's account until the call ends, one refused leaves it now.
            let moved = handles
                .into_iter()
                .map(|h| self.table.delete(h).map_err(table_error))
                .collect::<Result<Vec<_>, _>>()?;
            let given = self.given_position(handle, CALL)?.and_then(|position| {
                match self.twice_with_given(position, moved.iter().map(|h| &h.0), CALL) {
                    Some(e) => Err(e),
                    None => Ok(position),
                }
            });
            let slot = given.as_ref().ok().and_then(|&p| self.given_tensors.as_mut()?.get_mut(p));
            match (slot, given) {
                (Some(slot), Ok(_)) => {
                    slot.extend(moved);
                    results.push(Ok(()));
                }
                (_, given) => {
                    for held in moved {
                        self.discharge(held);
                    }
                    let e = given.err().unwrap_or_else(|| CoreError::internal(format!("{CALL}: no such request")));
                    results.push(Err(wit_error(e)));
                }
            }
        }
        Ok(results)
    }

    fn at(&mut self, position: u32) -> wasmtime::Result<Option<Resource<HostRequest>>> {
        let Some(request) = self.pending_requests.get_mut(position as usize).and_then(Option::take) else {
            return Ok(None);
        };
        let handle = self.table.push(request).map_err(table_error)?;
        self.taken_requests.push(handle.rep());
        Ok(Some(handle))
    }

    fn requested_outputs(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<String>> {
        Ok(self.table.get(&handle).map_err(table_error)?.outputs.clone())
    }

    fn parameters(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<wit::Parameter>> {
        Ok(params_to_wit(&self.table.get(&handle).map_err(table_error)?.parameters))
    }

    fn sender(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Resource<HostSender>> {
        let responder = Arc::clone(&self.table.get(&handle).map_err(table_error)?.responder);
        self.table.push(HostSender(responder)).map_err(table_error)
    }

    fn drop(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<()> {
        self.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

impl wit::HostResponseSender for GuestState {
    fn send(
        &mut self,
        handle: Resource<HostSender>,
        outputs: Vec<Resource<HostTensor>>,
        final_: bool,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let mut tensors = Vec::with_capacity(outputs.len());
        for t in outputs {
            tensors.push(self.take_tensor(t)?);
        }
        let limits = self.send_limits();
        let sender = self.table.get_mut(&handle).map_err(table_error)?;
        Ok(send_on(sender, Ok(tensors), final_, limits))
    }

    fn send_error(
        &mut self,
        handle: Resource<HostSender>,
        error: wit::Error,
        final_: bool,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let limits = self.send_limits();
        let sender = self.table.get_mut(&handle).map_err(table_error)?;
        Ok(send_on(sender, Err(CoreError::new(kind_from_wit(error.code), error.message)), final_, limits))
    }

    fn drop(&mut self, handle: Resource<HostSender>) -> wasmtime::Result<()> {
        self.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

/// Traps a batch call that names a request twice: a guest repeating a handle would make the host
/// copy (or hold) without bound, in host memory, where the guest's memory cap does not reach.
fn each_request_once(requests: &[Resource<HostRequest>], call: &str) -> wasmtime::Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(requests.len());
    if requests.iter().all(|r| seen.insert(r.rep())) {
        return Ok(());
    }
    Err(wasmtime::Error::msg(format!("{call}: the same request handle was passed twice")))
}

/// Traps a batch call whose lists (of `what`) do not match its requests one to one, or that names
/// a request twice ([`each_request_once`]): both are the guest's bugs.
fn one_list_each(requests: &[Resource<HostRequest>], lists: usize, what: &str, call: &str) -> wasmtime::Result<()> {
    if requests.len() != lists {
        return Err(wasmtime::Error::msg(format!("{call}: {} requests but {lists} lists of {what}", requests.len())));
    }
    each_request_once(requests, call)
}

/// The most input bytes one `request.read-inputs` call copies into the guest; inputs past it
/// come without their bytes (the guest reads them through `request.input`), so a batch of many
/// small inputs cannot take a guest's memory in one call.
pub(super) const READ_INPUTS_MAX_TOTAL: usize = 1 << 20;

/// The most bytes of one input `execute-by-value` passes with the call (as `request.read-inputs`
/// with a `max-bytes` of 4 KiB); larger ones come without their bytes.
pub(super) const BY_VALUE_INPUT_BYTES: u64 = 4 << 10;

/// Whether an input of `size` bytes goes to the guest with its bytes: at most `max_bytes`, and
/// while `budget` (bytes of the whole call, [`READ_INPUTS_MAX_TOTAL`]) lasts, which it then takes.
pub(super) fn copied_within(size: usize, max_bytes: u64, budget: &mut usize) -> bool {
    let copy = size as u64 <= max_bytes && size <= *budget;
    if copy {
        *budget -= size;
    }
    copy
}

/// A request's inputs as `input-data` records: each with its bytes if [`copied_within`], the
/// others without.
fn input_data(inputs: &[Tensor], max_bytes: u64, budget: &mut usize) -> Vec<wit::InputData> {
    inputs
        .iter()
        .map(|t| {
            let copy = copied_within(t.data.len(), max_bytes, budget);
            wit::InputData {
                name: t.name.clone(),
                datatype: datatype_to_wit(t.datatype),
                shape: t.shape.clone(),
                data: copy.then(|| t.data.to_vec()),
            }
        })
        .collect()
}

/// An output given by value with `request.set-outputs`, checked as `tensor.create-latin1` checks.
fn output_from_wit(output: wit::OutputData) -> CoreResult<Tensor> {
    let (name, datatype, shape, data_latin1) = output;
    let Some(bytes) = latin1_bytes(&data_latin1) else {
        return Err(CoreError::invalid_arg(format!(
            "output '{name}': its data holds a character above U+00FF, which is not one byte"
        )));
    };
    Tensor::new_as("output", name, datatype_from_wit(datatype), shape, Bytes::from(bytes))
}

/// The bytes a latin-1 string stands for (each character one byte), or `None` if a character is
/// above U+00FF. ASCII text is its own bytes.
pub(super) fn latin1_bytes(text: &str) -> Option<Vec<u8>> {
    if text.is_ascii() {
        return Some(text.as_bytes().to_vec());
    }
    text.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect()
}

impl GuestState {
    /// How long a send may wait for its reader, and how many bytes of one request's responses
    /// the server may buffer for it (`max_memory_bytes`; see [`Outlet`]).
    fn send_limits(&self) -> (SendDeadline, usize) {
        (self.execute_deadline.zip(self.shared.runtime.clone()), self.limits.max_memory())
    }
}

fn send_on(
    sender: &mut HostSender,
    item: CoreResult<Vec<Tensor>>,
    final_: bool,
    (until, budget): (SendDeadline, usize),
) -> Result<(), wit::Error> {
    let Ok(mut slot) = sender.0.lock() else {
        return Err(wit_error(CoreError::internal("response sender state is poisoned")));
    };
    let Some(outlet) = slot.as_ref() else {
        return Err(wit_error(CoreError::unavailable(
            "no more responses can be sent for this request \
             (the final response was sent, or the model is not decoupled)",
        )));
    };
    // An empty final response only carries the final flag (as Triton's repeat sends it).
    let flag_only = final_ && matches!(&item, Ok(outputs) if outputs.is_empty());
    if !flag_only {
        // A gone receiver means the caller stopped listening; that is not the guest's error.
        // Waits while the caller's buffer is full (the guest runs on a blocking thread), up to
        // the execution's deadline: a caller that does not read cannot hold the instance longer.
        if outlet.send(item, final_, budget, &until) == Sent::TimedOut {
            let error = CoreError::unavailable(format!(
                "the caller of this request has not read its responses ({RESPONSE_BUFFER} are waiting, or \
                 max_memory_bytes of them) within the model's time limit (max_execute_ms); the request is closed \
                 and this response dropped"
            ));
            // The request ends after what it buffered, with this error as its final response
            // once the caller reads again; the guest is free at once.
            if let (Some(outlet), Some((_, runtime))) = (slot.take(), until) {
                outlet.fail_when_read(error.clone(), &runtime);
            }
            return Err(wit_error(error));
        }
    }
    if final_ {
        *slot = None;
    }
    Ok(())
}

impl wit_host::Host for GuestState {
    fn log(&mut self, level: wit_host::LogLevel, message: String) -> wasmtime::Result<()> {
        let message = log_line(message);
        let model = self.shared.model_name.as_str();
        match level {
            wit_host::LogLevel::Error => tracing::error!(model, "{message}"),
            wit_host::LogLevel::Warn => tracing::warn!(model, "{message}"),
            wit_host::LogLevel::Info => tracing::info!(model, "{message}"),
            wit_host::LogLevel::Verbose => tracing::debug!(model, "{message}"),
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
        let clock = self.shared.clock;
        let started = clock.now();
        let called = Self::bls(call, |infer, request| async move { infer.infer(request).await });
        self.bls_cpu += clock.now().saturating_sub(started);
        match called {
            Ok(response) => self.new_held_tensors(response.outputs),
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
        let clock = self.shared.clock;
        let started = clock.now();
        let called = Self::bls(call, |infer, request| async move { infer.infer_stream(request).await });
        self.bls_cpu += clock.now().saturating_sub(started);
        match called {
            Ok(stream) => Ok(Ok(self.table.push(HostResponseStream(stream, open)).map_err(table_error)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use wit::{HostRequest as _, HostResponseSender as _, HostTensor as _};
    use wit_host::Host as _;

    use super::*;
    use crate::tensor::DataType;

    pub(in super::super) fn shared(allowed_models: AllowList, infer: Option<Weak<dyn Infer>>) -> Arc<GuestShared> {
        Arc::new(GuestShared {
            model_name: "guest".into(),
            allowed_models,
            bls_timeout: Duration::from_millis(500),
            infer,
            runtime: None,
            clock: ExecutionClock::Wall,
        })
    }

    pub(in super::super) fn state(shared: Arc<GuestShared>) -> GuestState {
        GuestState::new(WasiCtx::builder().build(), GuestLimiter::new(1 << 20), shared)
    }

    fn request(
        state: &mut GuestState,
        responder: Option<crate::backend::Responder>,
    ) -> (Resource<HostRequest>, SharedResponder) {
        let responder: SharedResponder = Arc::new(Mutex::new(responder.map(Outlet::new)));
        let input =
            Tensor::new("IN", DataType::Int32, vec![2], Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0])).expect("tensor");
        let handle = state
            .table
            .push(HostRequest {
                id: "req-1".into(),
                inputs: vec![input],
                outputs: vec!["OUT".into()],
                parameters: Parameters::from([("k".into(), crate::infer::ParamValue::Int(3))]),
                responder: Arc::clone(&responder),
                call: state.execute_call,
                position: 0,
            })
            .expect("push request");
        (handle, responder)
    }

    #[test]
    fn tensors() {
        let mut s = state(shared(AllowList::Nothing, None));
        let t = s.create("X".into(), wit::DataType::Uint8, vec![3], vec![1, 2, 3]).expect("no trap").expect("valid");
        assert_eq!(s.name(Resource::new_borrow(t.rep())).expect("name"), "X");
        assert_eq!(s.datatype(Resource::new_borrow(t.rep())).expect("datatype"), wit::DataType::Uint8);
        assert_eq!(s.shape(Resource::new_borrow(t.rep())).expect("shape"), vec![3]);
        assert_eq!(s.byte_size(Resource::new_borrow(t.rep())).expect("size"), 3);
        assert_eq!(s.data(Resource::new_borrow(t.rep())).expect("data"), vec![1, 2, 3]);
        let renamed = s.with_name(Resource::new_borrow(t.rep()), "Y".into()).expect("renamed");
        assert_eq!(s.tensor(&renamed).expect("renamed tensor").name, "Y");
        assert_eq!(s.tensor(&t).expect("original").name, "X", "renaming makes a new tensor");
        // Data that does not fit the shape is the guest's error, not a trap.
        let bad = s.create("X".into(), wit::DataType::Int32, vec![2], vec![0; 3]).expect("no trap");
        assert!(bad.is_err());
        wit::HostTensor::drop(&mut s, t).expect("drop");
        wit::HostTensor::drop(&mut s, renamed).expect("drop");
        assert!(s.table.is_empty());
    }

    #[test]
    fn read_inputs_copies_small_inputs_of_each_request_once() {
        let mut s = state(shared(AllowList::Nothing, None));
        let (a, _) = request(&mut s, None);
        let (b, _) = request(&mut s, None);
        let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
        let read = s.read_inputs(vec![borrow(&a), borrow(&b)], 8).expect("no trap");
        assert_eq!(read.len(), 2, "one list per request, in order");
        for inputs in &read {
            assert_eq!(inputs.len(), 1);
            let input = &inputs[0];
            assert_eq!(
                (input.name.as_str(), input.datatype, input.shape.as_slice()),
                ("IN", wit::DataType::Int32, &[2][..])
            );
            assert_eq!(input.data.as_deref(), Some(&[1u8, 0, 0, 0, 2, 0, 0, 0][..]));
        }
        // Above max-bytes an input comes without its bytes (the guest reads it as a handle).
        let read = s.read_inputs(vec![borrow(&a)], 7).expect("no trap");
        assert!(read[0][0].data.is_none());
        // The same request twice would let a guest make the host copy without bound: a trap.
        let twice = s.read_inputs(vec![borrow(&a), borrow(&a)], 8);
        assert!(twice.is_err_and(|e| e.to_string().contains("passed twice")));
    }

    #[test]
    fn read_inputs_copies_at_most_its_budget_per_call() {
        let mut s = state(shared(AllowList::Nothing, None));
        let size = READ_INPUTS_MAX_TOTAL / 3 + 1;
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let input =
                    Tensor::new("IN", DataType::Uint8, vec![size as i64], Bytes::from(vec![i; size])).expect("tensor");
                s.table
                    .push(HostRequest {
                        id: format!("r{i}"),
                        inputs: vec![input],
                        outputs: Vec::new(),
                        parameters: Parameters::default(),
                        responder: Arc::new(Mutex::new(None)),
                        call: 0,
                        position: usize::from(i),
                    })
                    .expect("push request")
            })
            .collect();
        let borrows = handles.iter().map(|r| Resource::<HostRequest>::new_borrow(r.rep())).collect();
        let read = s.read_inputs(borrows, u64::MAX).expect("no trap");
        let copied: Vec<bool> = read.iter().map(|inputs| inputs[0].data.is_some()).collect();
        assert_eq!(copied, vec![true, true, false], "the third input would pass the per-call budget");
        assert_eq!(read[1][0].data.as_ref().map(Vec::len), Some(size));
    }

    /// A request without inputs of `execute` call `call`, at `position` in its batch.
    fn host_request(call: u64, position: usize) -> HostRequest {
        HostRequest {
            id: format!("r{position}"),
            inputs: Vec::new(),
            outputs: Vec::new(),
            parameters: Parameters::default(),
            responder: Arc::new(Mutex::new(None)),
            call,
            position,
        }
    }

    /// A request of the current `execute` call at `position`.
    fn request_at(state: &mut GuestState, call: u64, position: usize) -> Resource<HostRequest> {
        state.table.push(host_request(call, position)).expect("push request")
    }

    fn output(name: &str, data: &str) -> wit::OutputData {
        let shape = vec![data.chars().count() as i64];
        (name.into(), wit::DataType::Uint8, shape, data.into())
    }

    #[test]
    fn set_outputs_gives_each_request_of_the_call_its_outputs() {
        let mut s = state(shared(AllowList::Nothing, None));
        let call = s.begin_execute(2, false);
        let (a, b) = (request_at(&mut s, call, 0), request_at(&mut s, call, 1));
        let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
        // Out of order, a byte above 0x7f, and a bad output that fails only its own request.
        let results = s
            .set_outputs(vec![borrow(&b), borrow(&a)], vec![vec![output("Y", "\u{ff}\u{1}")], vec![output("X", "ab")]])
            .expect("no trap");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let mut bad = output("Z", "abc");
        bad.2 = vec![2];
        let results = s.set_outputs(vec![borrow(&a)], vec![vec![output("X2", "c"), bad]]).expect("no trap");
        let message = results[0].as_ref().map_err(|e| e.message.clone()).expect_err("Z does not fit");
        assert_eq!(message, "output byte size mismatch for output 'Z'. Expected 2, got 3");
        let given = s.end_execute();
        let names = |ts: &Vec<Tensor>| ts.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&given[0]), vec!["X"], "a failed call gives that request nothing");
        assert_eq!(names(&given[1]), vec!["Y"]);
        assert_eq!(&given[1][0].data[..], &[0xff, 0x01], "each character is one byte");
        assert_eq!(&given[0][0].data[..], b"ab");
    }

    #[test]
    fn give_tensors_moves_handles_after_the_outputs_given_by_value() {
        let mut s = state(shared(AllowList::Nothing, None));
        let call = s.begin_execute(2, false);
        let (a, b) = (request_at(&mut s, call, 0), request_at(&mut s, call, 1));
        let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
        let made = |s: &mut GuestState, name: &str| {
            wit::HostTensor::create(s, name.into(), wit::DataType::Uint8, vec![2], b"xy".to_vec())
                .expect("no trap")
                .expect("created")
        };
        let results = s.set_outputs(vec![borrow(&a)], vec![vec![output("V", "v")]]).expect("no trap");
        assert!(results[0].is_ok());
        let held = s.held_bytes;
        let h2 = made(&mut s, "H2");
        let one = s.held_bytes - held;
        let (h1, h3) = (made(&mut s, "H1"), made(&mut s, "V"));
        let reps = [h1.rep(), h2.rep(), h3.rep()];
        assert!(one > 0, "created tensors are on the guest's account");
        let results = s.give_tensors(vec![borrow(&a), borrow(&b)], vec![vec![h1, h3], vec![h2]]).expect("no trap");
        // a name given twice (V, by value and as a handle) fails that request only
        let message = results[0].as_ref().map_err(|e| e.message.clone()).expect_err("V twice");
        assert_eq!(message, "request.give-tensors: output 'V' given twice for one request");
        assert!(results[1].is_ok());
        // H2 stays on the guest's account until the call ends (a guest giving one buffer again
        // and again must meet the limit); the refused H1 and V left it at once
        assert_eq!(s.held_bytes, held + one);
        for rep in reps {
            assert!(s.tensor(&Resource::new_borrow(rep)).is_err(), "the handle left the table");
        }
        let given = s.end_execute();
        let names = |ts: &Vec<Tensor>| ts.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&given[0]), vec!["V"], "the refused handles were not given");
        assert_eq!(names(&given[1]), vec!["H2"]);
        assert_eq!(s.held_bytes, 0);
        // Outside the call, and for a decoupled model, a request gets an error; the handle still moves.
        let h = made(&mut s, "H");
        let results = s.give_tensors(vec![borrow(&a)], vec![vec![h]]).expect("no trap");
        assert!(results[0].as_ref().is_err_and(|e| e.message.contains("not one of the current")));
        let call = s.begin_execute(1, true);
        let r = request_at(&mut s, call, 0);
        let h = made(&mut s, "H");
        let results = s.give_tensors(vec![borrow(&r)], vec![vec![h]]).expect("no trap");
        assert!(results[0].as_ref().is_err_and(|e| e.message.contains("decoupled")));
        assert_eq!(s.held_bytes, 0);
        // Guest bugs trap: lists of different lengths, a request twice.
        s.begin_execute(1, false);
        assert!(s.give_tensors(vec![borrow(&r)], Vec::new()).is_err());
        let twice = s.give_tensors(vec![borrow(&r), borrow(&r)], vec![Vec::new(), Vec::new()]);
        assert!(twice.is_err_and(|e| e.to_string().contains("passed twice")));
    }

    #[test]
    fn tensors_given_stay_on_the_guests_account_until_the_call_ends() {
        // A guest that copies one buffer out again and again and gives each copy away must meet
        // the held-bytes limit (4 x its 1 MiB here) within the call, not grow the server.
        let mut s = state(shared(AllowList::Nothing, None));
        let call = s.begin_execute(1, false);
        let r = request_at(&mut s, call, 0);
        let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
        let chunk = vec![7u8; 64 << 10];
        let mut given = 0;
        let refused = loop {
            let created = wit::HostTensor::create(
                &mut s,
                format!("T{given}"),
                wit::DataType::Uint8,
                vec![64 << 10],
                chunk.clone(),
            )
            .expect("no trap");
            let h = match created {
                Ok(h) => h,
                Err(e) => break e,
            };
            let results = s.give_tensors(vec![borrow(&r)], vec![vec![h]]).expect("no trap");
            assert!(results[0].is_ok());
            given += 1;
            assert!(given < 100, "4 MiB of 64 KiB tensors is 64");
        };
        assert!(refused.message.contains("4 x max_memory_bytes"), "{}", refused.message);
        assert_eq!(s.end_execute()[0].len(), given);
        assert_eq!(s.held_bytes, 0, "the call's end gives it all back");
    }

    #[test]
    fn set_outputs_refuses_requests_of_another_call_and_decoupled_models() {
        let mut s = state(shared(AllowList::Nothing, None));
        let call = s.begin_execute(1, false);
        let kept = request_at(&mut s, call, 0);
        s.end_execute();
        // A guest that kept a request from an earlier call cannot answer the new call's first.
        s.begin_execute(1, false);
        let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
        let results = s.set_outputs(vec![borrow(&kept)], vec![vec![output("X", "a")]]).expect("no trap");
        assert!(results[0].as_ref().is_err_and(|e| e.message.contains("not one of the current")));
        assert!(s.end_execute()[0].is_empty());
        // Outside execute (a handle kept until finalize) likewise.
        let results = s.set_outputs(vec![borrow(&kept)], vec![vec![output("X", "a")]]).expect("no trap");
        assert!(results[0].as_ref().is_err_and(|e| e.message.contains("not one of the current")));
        let call = s.begin_execute(1, true);
        let r = request_at(&mut s, call, 0);
        let results = s.set_outputs(vec![borrow(&r)], vec![vec![output("X", "a")]]).expect("no trap");
        assert!(results[0].as_ref().is_err_and(|e| e.message.contains("decoupled")));
        // Guest bugs trap: lists of different lengths, a request twice.
        let call = s.begin_execute(1, false);
        let r = request_at(&mut s, call, 0);
        assert!(s.set_outputs(vec![borrow(&r)], Vec::new()).is_err());
        let twice = s.set_outputs(vec![borrow(&r), borrow(&r)], vec![Vec::new(), Vec::new()]);
        assert!(twice.is_err_and(|e| e.to_string().contains("passed twice")));
    }

    #[test]
    fn bytes_a_guest_made_are_held_up_to_four_times_its_memory_limit() {
        // The test state's memory limit is 1 MiB: its tensors may hold 4 MiB in the host.
        let mut s = state(shared(AllowList::Nothing, None));
        let mib = 1usize << 20;
        // Each handle's name and shape count too: 9 bytes here, so four of these leave room for
        // a renamed handle's own 9.
        let n = mib - 18;
        let make = |s: &mut GuestState| s.create("T".into(), wit::DataType::Uint8, vec![n as i64], vec![0; n]);
        let held: Vec<_> = (0..4).map(|_| make(&mut s).expect("no trap").expect("within the limit")).collect();
        let refused = make(&mut s).expect("no trap").expect_err("past the limit");
        assert!(refused.message.contains("4 x max_memory_bytes"), "{}", refused.message);
        assert_eq!(refused.code, wit::ErrorCode::Internal);
        let long_name = s.with_name(Resource::new_borrow(held[1].rep()), "N".repeat(mib));
        assert!(long_name.is_err(), "a renamed handle's megabyte name past the limit traps");
        // A renamed handle shares the bytes and their charge: dropping the original gives
        // nothing back while the rename holds them (else create, rename, drop would grow the
        // host without bound).
        let renamed = s.with_name(Resource::new_borrow(held[0].rep()), "U".into()).expect("with-name");
        let mut held = held.into_iter();
        let first = held.next().expect("four");
        wit::HostTensor::drop(&mut s, first).expect("drop");
        assert!(make(&mut s).expect("no trap").is_err(), "the rename still holds the bytes");
        wit::HostTensor::drop(&mut s, renamed).expect("drop");
        let again = make(&mut s).expect("no trap").expect("the last handle gave the bytes back");
        // Given outputs count until execute returns.
        let call = s.begin_execute(1, false);
        let r = request_at(&mut s, call, 0);
        let big = (String::from("Y"), wit::DataType::Uint8, vec![mib as i64], "a".repeat(mib));
        let give = |s: &mut GuestState, what| s.set_outputs(vec![Resource::new_borrow(r.rep())], vec![vec![what]]);
        let results = give(&mut s, big.clone()).expect("no trap");
        assert!(results[0].as_ref().is_err_and(|e| e.message.contains("max_memory_bytes")), "{results:?}");
        s.take_tensor(again).expect("moves into a response");
        assert!(give(&mut s, big).expect("no trap")[0].is_ok());
        assert!(make(&mut s).expect("no trap").is_err(), "the given output still counts");
        assert_eq!(s.end_execute()[0].len(), 1);
        assert!(make(&mut s).expect("no trap").is_ok(), "it left with the response");
        for t in held {
            wit::HostTensor::drop(&mut s, t).expect("drop");
        }
    }

    #[test]
    fn set_outputs_refuses_an_output_given_twice() {
        let mut s = state(shared(AllowList::Nothing, None));
        let call = s.begin_execute(1, false);
        let r = request_at(&mut s, call, 0);
        let borrow = || Resource::<HostRequest>::new_borrow(r.rep());
        let twice = s.set_outputs(vec![borrow()], vec![vec![output("X", "a"), output("X", "b")]]).expect("no trap");
        assert!(twice[0].as_ref().is_err_and(|e| e.message.contains("'X' given twice")), "{twice:?}");
        assert!(s.set_outputs(vec![borrow()], vec![vec![output("X", "a")]]).expect("no trap")[0].is_ok());
        let again = s.set_outputs(vec![borrow()], vec![vec![output("X", "c")]]).expect("no trap");
        assert!(again[0].is_err(), "a later call cannot give the same name again");
        assert_eq!(s.end_execute()[0].len(), 1);
    }

    #[test]
    fn request_at_gives_each_pending_request_of_the_call_once() {
        let mut s = state(shared(AllowList::Nothing, None));
        let call = s.begin_execute(2, false);
        for position in 0..2 {
            s.pending_requests.push(Some(host_request(call, position)));
        }
        let second = s.at(1).expect("no trap").expect("the second request");
        assert_eq!(s.id(Resource::new_borrow(second.rep())).expect("id"), "r1");
        assert!(s.at(1).expect("no trap").is_none(), "a handle is given once per call");
        assert!(s.at(2).expect("no trap").is_none(), "past the batch");
        assert_eq!(s.taken_requests, vec![second.rep()]);
        // what it is given lands at its position in the batch
        let given = s.set_outputs(vec![Resource::new_borrow(second.rep())], vec![vec![output("X", "a")]]);
        assert!(given.expect("no trap")[0].is_ok());
        let outputs = s.end_execute();
        assert_eq!((outputs[0].len(), outputs[1].len()), (0, 1));
        // outside an execute-by-value call there is nothing to take
        s.pending_requests.clear();
        assert!(s.at(0).expect("no trap").is_none());
    }

    #[test]
    fn requests() {
        let mut s = state(shared(AllowList::Nothing, None));
        let (r, _) = request(&mut s, None);
        let borrow = || Resource::<HostRequest>::new_borrow(r.rep());
        assert_eq!(s.id(borrow()).expect("id"), "req-1");
        assert_eq!(s.requested_outputs(borrow()).expect("outputs"), vec!["OUT".to_string()]);
        let params = s.parameters(borrow()).expect("parameters");
        assert_eq!(params.len(), 1);
        assert!(matches!(params[0].value, wit::ParamValue::Int(3)));
        let found = s.input(borrow(), "IN".into()).expect("input").expect("present");
        assert_eq!(s.tensor(&found).expect("tensor").shape, vec![2]);
        assert!(s.input(borrow(), "NOPE".into()).expect("input").is_none());
        assert_eq!(s.inputs(borrow()).expect("inputs").len(), 1);
    }

    #[test]
    fn senders_close_after_the_final_response() {
        let mut s = state(shared(AllowList::Nothing, None));
        let (tx, mut rx) = crate::backend::responder();
        let (r, _) = request(&mut s, Some(tx));
        let sender = s.sender(Resource::new_borrow(r.rep())).expect("sender");
        let out = s.create("OUT".into(), wit::DataType::Uint8, vec![1], vec![7]).expect("no trap").expect("valid");
        s.send(Resource::new_borrow(sender.rep()), vec![out], false).expect("no trap").expect("sent");
        let error = wit::Error { code: wit::ErrorCode::NotFound, message: "nope".into() };
        s.send_error(Resource::new_borrow(sender.rep()), error, false).expect("no trap").expect("sent");
        // An empty final response carries only the flag.
        s.send(Resource::new_borrow(sender.rep()), vec![], true).expect("no trap").expect("sent");
        let late = s.send(Resource::new_borrow(sender.rep()), vec![], true).expect("no trap").expect_err("closed");
        assert_eq!(late.code, wit::ErrorCode::Unavailable);
        assert_eq!(
            late.message,
            "no more responses can be sent for this request \
             (the final response was sent, or the model is not decoupled)"
        );

        let first = rx.try_recv().expect("first response");
        assert!(!first.is_final);
        assert_eq!(first.outputs.expect("outputs")[0].data.as_ref(), &[7u8]);
        let second = rx.try_recv().expect("error response");
        let e = second.outputs.expect_err("an error");
        assert_eq!((e.kind, e.message.as_str()), (crate::error::ErrorKind::NotFound, "nope"));
        // The responder was dropped: the stream ends with no flag-only message.
        assert!(matches!(rx.try_recv(), Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)));
    }

    #[test]
    fn a_non_decoupled_request_has_a_closed_sender() {
        let mut s = state(shared(AllowList::Nothing, None));
        let (r, _) = request(&mut s, None);
        let sender = s.sender(Resource::new_borrow(r.rep())).expect("sender");
        let refused = s.send(sender, vec![], false).expect("no trap").expect_err("closed");
        assert_eq!(refused.code, wit::ErrorCode::Unavailable);
    }

    #[test]
    fn bad_handles_trap() {
        let mut s = state(shared(AllowList::Nothing, None));
        let e = s.name(Resource::new_borrow(12345)).expect_err("a trap");
        assert!(e.to_string().starts_with("resource table: "), "{e}");
    }

    #[test]
    fn latin1_strings_are_their_bytes() {
        assert_eq!(latin1_bytes("abc"), Some(b"abc".to_vec()));
        let all: String = (0u8..=255).map(char::from).collect();
        assert_eq!(latin1_bytes(&all), Some((0u8..=255).collect()));
        assert_eq!(latin1_bytes("\u{100}"), None);
        let mut s = state(shared(AllowList::Nothing, None));
        let t = s.create_latin1("t".into(), wit::DataType::Uint8, vec![2], "\u{ff}\u{0}".into());
        let t = t.expect("no trap").expect("valid");
        assert_eq!(s.tensor(&t).expect("tensor").data.as_ref(), &[255u8, 0]);
        let bad = s.create_latin1("t".into(), wit::DataType::Uint8, vec![1], "\u{263a}".into()).expect("no trap");
        assert!(bad.is_err_and(|e| e.message.contains("above U+00FF")));
    }

    #[test]
    fn log_keeps_the_last_lines() {
        let mut s = state(shared(AllowList::Nothing, None));
        for i in 0..20 {
            s.log(wit_host::LogLevel::Info, format!("line {i}")).expect("log");
        }
        assert_eq!(s.last_log.len(), LOG_LINES_KEPT);
        assert_eq!(s.last_log.first().map(String::as_str), Some("line 4"));
        assert_eq!(s.last_log.last().map(String::as_str), Some("line 19"));
    }

    #[test]
    fn log_lines_are_cut_at_eight_kib() {
        let mut s = state(shared(AllowList::Nothing, None));
        s.log(wit_host::LogLevel::Error, "\u{e9}".repeat(5000)).expect("log");
        let kept = s.last_log.last().expect("a line");
        // 4096 two-byte characters fill 8 KiB exactly; the other 904 are cut.
        assert_eq!(kept, &format!("{}... (1808 more bytes cut; log lines keep 8192)", "\u{e9}".repeat(4096)));
        s.log(wit_host::LogLevel::Error, "y".repeat(1 << 20)).expect("log");
        let kept = s.last_log.last().map_or(0, String::capacity);
        assert!(kept < 32 << 10, "a megabyte line keeps a new small buffer, not the guest's: {kept}");
        s.log(wit_host::LogLevel::Info, "x".repeat(LOG_LINE_BYTES)).expect("log");
        assert_eq!(s.last_log.last().map(String::len), Some(LOG_LINE_BYTES), "a line of the limit is whole");
    }
}
