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
#[path = "host_tests.rs"]
mod tests;
