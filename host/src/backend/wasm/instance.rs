//! One guest instance: a store with the instantiated component, `initialize` on start, `execute`
//! per batch, `finalize` on drop. A trap, or memory grown near the cap, replaces the store with a
//! fresh one from the pre-instantiated component, so one bad batch never takes the model down.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasmtime::component::{Linker, Resource, TypedFunc};
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use super::bindings::{self, wit};
use super::cache::{CompileCache, Prepared};
use super::convert::kind_from_wit;
use super::engine::EPOCH_TICK;
use super::live::{LiveSet, Member, Slot};
use super::pack;
use super::request::{BY_VALUE_INPUT_BYTES, READ_INPUTS_MAX_TOTAL};
use super::resources::{HostRequest, HostTensor};
use super::sandbox::{GuestLimiter, Sandbox};
use super::state::{GuestShared, GuestState, Offer, named_twice};
use super::tensor::latin1_bytes;
use crate::backend::mailbox::Mailbox;
use crate::backend::{ExecRequest, ModelInstance};
use crate::error::{CoreError, CoreResult};
use crate::stats::{ModelStats, Quota, TrapKind};
use crate::tensor::Tensor;

/// A started guest: its store and the instantiated component (kept in memory while it lives).
pub(super) struct Live {
    store: Store<GuestState>,
    model: bindings::Model,
    /// The component's `execute-by-value` (world `model-by-value`), called instead of `execute`
    /// when it has one.
    by_value: Option<ExecuteByValue>,
    _component: Prepared,
}

/// `execute-by-value: func(requests: list<list<u8>>) -> list<answer>`: each request as a tensor
/// pack of its inputs ([`super::pack`]). A component built against an earlier `model-by-value`
/// (whose export took handles and tuples) does not match this type and is called through
/// `execute`.
type ExecuteByValue = TypedFunc<(&'static [Vec<u8>],), (Vec<wit::Answer>,)>;

/// What `execute` or `execute-by-value` returned.
enum Returned {
    /// `execute`: per request, the handles of its outputs or its error.
    Handles(Vec<Result<Vec<Resource<HostTensor>>, wit::Error>>),
    /// `execute-by-value`: per request, outputs by value, `given` or its error.
    ByValue(Vec<wit::Answer>),
}

impl Member for Live {
    /// Runs the guest's `finalize` within `deadline` and drops the store.
    fn retire(mut self, model: &str, deadline: Duration) {
        self.store.set_epoch_deadline(ticks_for(deadline));
        if let Err(e) = self.model.call_finalize(&mut self.store) {
            tracing::warn!(model, "finalize trapped: {e}");
        }
    }
}

pub(super) struct WasmInstance {
    engine: Engine,
    component: ComponentSource,
    sandbox: Sandbox,
    shared: Arc<GuestShared>,
    args: wit::InitializeArgs,
    decoupled: bool,
    /// The store, when live; see [`LiveSet`].
    slot: Arc<Slot<Live>>,
    live_set: Arc<LiveSet<Live>>,
    stats: Arc<ModelStats>,
    /// A decoupled model's: where requests wait to join its running call (see `adopt`).
    mailbox: Option<Arc<Mailbox>>,
    /// `max_async_requests`.
    max_async_requests: usize,
    /// With `isolation = fresh` (the component every execution's new instance comes from) or a
    /// sealed component (never on disk), the component, held so that it is never loaded again.
    pinned: Option<Prepared>,
}

/// How long a load waits for room in the live set when every live instance is executing (models
/// loading in parallel with a small `--wasm-max-instances`).
const LOAD_PATIENCE: Duration = Duration::from_secs(10);

/// What the backend hands a new instance besides its sandbox and arguments.
pub(super) struct InstanceParts {
    pub(super) engine: Engine,
    /// The component, prepared for the first start.
    pub(super) pre: Prepared,
    pub(super) component: ComponentSource,
    pub(super) live_set: Arc<LiveSet<Live>>,
    pub(super) stats: Arc<ModelStats>,
    pub(super) max_async_requests: usize,
    /// Whether to keep the component in memory for as long as the instance lives.
    pub(super) pin: bool,
}

/// Where an instance gets its component back after eviction.
pub(super) struct ComponentSource {
    pub(super) cache: Arc<CompileCache>,
    pub(super) linker: Arc<Linker<GuestState>>,
    pub(super) key: String,
    pub(super) path: PathBuf,
}

impl ComponentSource {
    fn load(&self, engine: &Engine) -> CoreResult<Prepared> {
        self.cache.reload(engine, &self.linker, &self.key, &self.path)
    }
}

impl WasmInstance {
    /// Creates the instance and starts it: a model whose `initialize` fails does not load. The
    /// store stays live until the live set needs its room.
    pub(super) fn start(
        parts: InstanceParts,
        sandbox: Sandbox,
        shared: Arc<GuestShared>,
        args: wit::InitializeArgs,
        decoupled: bool,
    ) -> CoreResult<Self> {
        let InstanceParts { engine, pre, component, live_set, stats, max_async_requests, pin } = parts;
        let slot = Slot::new(shared.model_name.clone(), Arc::clone(&stats));
        let mailbox = decoupled.then(Mailbox::new);
        let pinned = (sandbox.fresh || pin).then(|| Arc::clone(&pre));
        let instance = Self {
            engine,
            component,
            sandbox,
            shared,
            args,
            decoupled,
            slot,
            live_set,
            stats,
            mailbox,
            max_async_requests,
            pinned,
        };
        {
            let mut guard = instance.slot.lock()?;
            instance.ensure_live_with(&mut guard, Some(pre), LOAD_PATIENCE)?;
        }
        Ok(instance)
    }

    /// Gives the slot a store if it has none: room in the live set, then a fresh instance.
    fn ensure_live(&self, guard: &mut Option<Live>) -> CoreResult<()> {
        self.ensure_live_with(guard, None, Duration::ZERO)
    }

    fn ensure_live_with(&self, guard: &mut Option<Live>, pre: Option<Prepared>, patience: Duration) -> CoreResult<()> {
        self.live_set.touch(&self.slot);
        if guard.is_some() {
            return Ok(());
        }
        self.live_set.admit(&self.slot, patience)?;
        let built = match pre.or_else(|| self.pinned.clone()) {
            Some(pre) => Ok(pre),
            None => self.component.load(&self.engine),
        }
        .and_then(|pre| self.build(pre));
        match built {
            Ok(live) => {
                self.slot.put(guard, live);
                Ok(())
            }
            Err(e) => {
                self.live_set.leave(&self.slot);
                Err(e)
            }
        }
    }

    /// Instantiates the component in a fresh store and runs `initialize`.
    fn build(&self, component: Prepared) -> CoreResult<Live> {
        let mut store = sandboxed_store(&self.engine, &self.sandbox, Arc::clone(&self.shared))?;
        store.epoch_deadline_callback(|store| {
            // `initialize` and `finalize` have no deadline here: their epoch deadline is the limit.
            let Some(deadline) = store.data().call.deadline else {
                return Err(Trap::Interrupt.into());
            };
            if Instant::now() >= deadline {
                return Err(Trap::Interrupt.into());
            }
            // Still running after its first ticks: if this execution holds an async runtime's
            // worker (an inline run on a connection thread), hand the worker's other tasks to
            // another thread first, so a guest that loops stalls its own request only.
            crate::execution::hand_off_worker();
            Ok(UpdateDeadline::Continue(ticks_until(deadline)))
        });
        let failed = |e| instantiation_failed(&self.shared.model_name, e);
        let instance = component.instance_pre().instantiate(&mut store).map_err(failed)?;
        let model = bindings::Model::new(&mut store, &instance).map_err(failed)?;
        // Absent (or of another type) in components built for world `model`.
        let by_value = instance.get_typed_func(&mut store, "execute-by-value").ok();
        let initialized = model.call_initialize(&mut store, &self.args);
        match initialized {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(CoreError::new(
                    kind_from_wit(e.code),
                    format!("model '{}' initialize failed: {}", self.shared.model_name, e.message),
                ));
            }
            Err(trap) => return Err(self.trapped("initialize", &trap, &store.data().last_log)),
        }
        self.slot.set_memory(store.data().limits.peak());
        Ok(Live { store, model, by_value, _component: component })
    }

    fn run(&mut self, batch: Vec<ExecRequest>) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        if let Some(budget) = self.sandbox.max_cpu_per_second
            && !self.stats.usage.cpu_budget_left(budget)
        {
            self.stats.usage.record_refusal(Quota::Cpu);
            return Err(CoreError::unavailable(format!(
                "model '{}' has used its CPU quota of {} ms per second (max_cpu_ms_per_second); try again later",
                self.shared.model_name,
                budget.as_millis()
            )));
        }
        let slot = Arc::clone(&self.slot);
        let mut guard = slot.lock()?;
        self.ensure_live(&mut guard)?;
        let clock = self.shared.clock;
        let before = clock.now();
        let mut callees = Duration::ZERO;
        let outcome = self.call(&mut guard, batch, &mut callees);
        // What models called through BLS ran on this thread is theirs, not this guest's.
        let used = clock.now().saturating_sub(before).saturating_sub(callees);
        self.stats.usage.charge_cpu(used, self.sandbox.max_cpu_per_second);
        outcome
    }

    /// Runs `execute`; `callees` gets the CPU time BLS calls spent on this thread.
    fn call(
        &self,
        guard: &mut Option<Live>,
        batch: Vec<ExecRequest>,
        callees: &mut Duration,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        let ticks = ticks_for(self.sandbox.max_execute);
        let Some(live) = guard.as_mut() else {
            return Err(CoreError::internal("instance is not running"));
        };
        let count = batch.len();
        let call = live.store.data_mut().begin_execute(count, self.decoupled);
        // The guest's BLS calls are traced as children of the batch's (first) traced request.
        live.store.data_mut().bls.trace = batch.iter().find_map(|r| r.trace.clone());
        live.store.data_mut().bls.principals = batch.iter().filter_map(|r| r.principal.clone()).collect();
        live.store.data_mut().bls.unprincipaled = batch.iter().any(|r| r.principal.is_none());
        live.store.data_mut().bls.request_id = batch.first().and_then(|r| r.id.clone()).unwrap_or_default();
        // `execute-by-value` takes each request's inputs as a pack, small ones with their bytes, and
        // no handles: the guest asks for a request's handle (`request.at`) when it needs one.
        let by_value = live.by_value.is_some();
        let started = Instant::now();
        if self.decoupled {
            // A decoupled model's `execute-by-value` call may take in more requests (see `adopt`).
            let offer = self.mailbox.as_ref().filter(|_| by_value).map(|mailbox| Offer {
                mailbox: Arc::clone(mailbox),
                limit: self.max_async_requests,
                max_execute: self.sandbox.max_execute,
                model: self.shared.model_name.clone(),
            });
            let dones = batch.iter().map(|r| r.done.clone()).collect();
            live.store.data_mut().call.adoption.begin(offer, started + self.sandbox.max_execute, dones);
        }
        let mut budget = READ_INPUTS_MAX_TOTAL;
        let mut packs = Vec::with_capacity(if by_value { count } else { 0 });
        let mut handles = Vec::with_capacity(if by_value { 0 } else { count });
        for (position, request) in batch.into_iter().enumerate() {
            if by_value {
                packs.push(pack::pack_inputs(&request.inputs, BY_VALUE_INPUT_BYTES, &mut budget));
            }
            let (request, responder) = HostRequest::new(request, call, position);
            let state = live.store.data_mut();
            state.call.responders.push(responder);
            if by_value {
                state.call.pending_requests.push(Some(request));
            } else {
                let resource = state
                    .handles
                    .table
                    .push(request)
                    .map_err(|e| CoreError::internal(format!("resource table: {e}")))?;
                handles.push(resource);
            }
        }
        live.store.data_mut().last_log.clear();
        live.store.data_mut().bls.cpu = Duration::ZERO;
        // The limit is wall time from here, host calls included (the callback checks the clock).
        live.store.data_mut().call.deadline = Some(started + self.sandbox.max_execute);
        live.store.set_epoch_deadline(ticks.min(HAND_OFF_TICKS));
        let called = match live.by_value {
            Some(execute) => execute.call(&mut live.store, (&packs,)).map(|(answers,)| Returned::ByValue(answers)),
            None => live.model.call_execute(&mut live.store, &handles).map(Returned::Handles),
        };
        live.store.data_mut().call.deadline = None;
        // Spans the guest left open end with the call, before its trace can finish.
        live.store.data_mut().bls.spans.end_all();
        live.store.data_mut().bls.trace = None;
        live.store.data_mut().bls.principals.clear();
        live.store.data_mut().bls.unprincipaled = false;
        live.store.data_mut().bls.request_id.clear();
        let given = live.store.data_mut().end_execute();
        *callees = live.store.data().bls.cpu;
        let trap = called.as_ref().err().map(|trap| self.trapped("execute", trap, &live.store.data().last_log));
        // How the guest ended its own requests early, if it did (those of a call it opened).
        let ended = live.store.data_mut().call.adoption.end(count, trap.as_ref());
        // The contract: when execute returns, every request's stream is final, whatever
        // request or sender handles the guest kept.
        for responder in live.store.data_mut().call.responders.drain(..) {
            if let Ok(mut r) = responder.lock() {
                r.take();
            }
        }
        // A request handle the guest kept past its call keeps nothing of the caller's: its inputs
        // would otherwise stay in the server for as long as the instance lives.
        let state = live.store.data_mut();
        state.call.pending_requests.clear();
        let taken = std::mem::take(&mut state.call.taken_requests).into_iter().map(Resource::<HostRequest>::new_borrow);
        for handle in handles.iter().map(|h| Resource::<HostRequest>::new_borrow(h.rep())).chain(taken) {
            if let Ok(request) = state.handles.table.get_mut(&handle)
                && request.call == call
            {
                request.inputs = Vec::new();
                request.parameters = Default::default();
            }
        }
        let results = match (called, trap) {
            (Ok(results), _) => results,
            (Err(_), error) => {
                let error = error.unwrap_or_else(|| CoreError::internal("execute trapped"));
                // A trapped instance can never be entered again: drop it and rebuild it now, so
                // the next request does not pay for it.
                drop(self.slot.take(guard));
                self.restart_or_warn(guard);
                return Err(error);
            }
        };
        let peak = live.store.data().limits.peak();
        self.slot.set_memory(peak);
        let results = self.collect(live, results, given, count).map(|mut results| {
            for (result, ended) in results.iter_mut().zip(ended) {
                if let Some(ended) = ended {
                    *result = ended.map(|()| Vec::new());
                }
            }
            results
        });
        if results.is_err() {
            self.stats.usage.record_trap(TrapKind::Fault);
        }
        if self.sandbox.fresh {
            // `isolation = fresh`: nothing this execution left in the instance reaches the next,
            // which gets a new one (`ensure_live`) from the pre-instantiated component. Its
            // `finalize` is not called: the instance is thrown away, not unloaded.
            drop(self.slot.take(guard));
        } else if near_memory_limit(peak, self.sandbox.max_memory) {
            tracing::info!(model = self.shared.model_name.as_str(), "recycling a guest instance near its memory limit");
            drop(self.slot.take(guard));
            self.restart_or_warn(guard);
        }
        results
    }

    /// Counts a trap of `call` by kind and explains it.
    fn trapped(&self, call: &str, trap: &wasmtime::Error, log: &[String]) -> CoreError {
        self.stats.usage.record_trap(trap_kind(trap));
        trap_error(&self.shared.model_name, call, trap, &self.sandbox, log)
    }

    /// Rebuilds the instance now; if that fails, the next request tries again (and reports it).
    fn restart_or_warn(&self, guard: &mut Option<Live>) {
        if let Err(e) = self.ensure_live(guard) {
            tracing::warn!(
                model = self.shared.model_name.as_str(),
                "could not restart the instance yet: {}",
                e.message
            );
        }
    }

    /// Turns what the guest returned into per-request results.
    fn collect(
        &self,
        live: &mut Live,
        returned: Returned,
        given: Vec<Vec<Tensor>>,
        count: usize,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        match returned {
            Returned::Handles(results) => self.collect_handles(live.store.data_mut(), results, given, count),
            Returned::ByValue(results) => self.collect_by_value(results, given, count),
        }
    }

    /// `execute-by-value`'s answers: a request gets what it was given during the call (`given`,
    /// by position) and then the outputs its answer holds, each checked as `request.set-outputs`
    /// checks it (a bad one fails that request only), or its answer's error. A decoupled model
    /// may also answer with an empty list, as from `execute`, but no outputs.
    fn collect_by_value(
        &self,
        answers: Vec<wit::Answer>,
        given: Vec<Vec<Tensor>>,
        count: usize,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        if answers.len() != count && !(self.decoupled && answers.is_empty()) {
            return Err(CoreError::internal(format!(
                "model '{}' answered {} of {count} requests from execute-by-value",
                self.shared.model_name,
                answers.len()
            )));
        }
        let given = given.into_iter().chain(std::iter::repeat_with(Vec::new));
        let answers = answers.into_iter().map(Some).chain(std::iter::repeat(None)).take(count);
        Ok(answers
            .zip(given)
            .map(|(answer, mut given)| match answer {
                None | Some(wit::Answer::Given) => Ok(given),
                Some(wit::Answer::Error(e)) => Err(CoreError::new(kind_from_wit(e.code), e.message)),
                Some(wit::Answer::Outputs(_)) if self.decoupled => Err(CoreError::internal(format!(
                    "decoupled model '{}' answered with outputs; it must send them through response senders",
                    self.shared.model_name
                ))),
                Some(wit::Answer::Outputs(pack)) => {
                    let Some(bytes) = latin1_bytes(&pack) else {
                        return Err(CoreError::invalid_arg(
                            "execute-by-value: an answer's outputs hold a character above U+00FF, \
                             which is not one byte",
                        ));
                    };
                    given.extend(pack::unpack_outputs(Bytes::from(bytes))?);
                    match named_twice(given.iter(), "execute-by-value") {
                        Some(e) => Err(e),
                        None => Ok(given),
                    }
                }
            })
            .collect())
    }

    /// `execute`'s answer, taking tensors out of the table: a request answered `ok` gets the
    /// outputs it was given during the call (`given`, by position) and then the tensors returned.
    fn collect_handles(
        &self,
        state: &mut GuestState,
        results: Vec<Result<Vec<Resource<HostTensor>>, wit::Error>>,
        given: Vec<Vec<Tensor>>,
        count: usize,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        if self.decoupled {
            if !results.is_empty() {
                let got = results.len();
                drop_returned(state, results);
                return Err(CoreError::internal(format!(
                    "decoupled model '{}' returned {got} responses from execute; \
                     it must answer through response senders and return an empty list",
                    self.shared.model_name,
                )));
            }
            return Ok((0..count).map(|_| Ok(Vec::new())).collect());
        }
        if results.len() != count {
            let got = results.len();
            drop_returned(state, results);
            return Err(CoreError::internal(format!(
                "model '{}' returned {got} responses for {count} requests",
                self.shared.model_name
            )));
        }
        let given = given.into_iter().chain(std::iter::repeat_with(Vec::new));
        Ok(results
            .into_iter()
            .zip(given)
            .map(|(result, given)| match result {
                Ok(tensors) => {
                    let mut outputs = given;
                    outputs.reserve(tensors.len());
                    // Every handle leaves the table (and the guest's account), even after a bad one.
                    let mut bad = None;
                    for t in tensors {
                        match state.handles.take_tensor(t) {
                            Ok(tensor) => outputs.push(tensor),
                            Err(e) => bad = bad.or(Some(e)),
                        }
                    }
                    match bad {
                        Some(e) => Err(CoreError::internal(format!("bad tensor handle in response: {e}"))),
                        None => match named_twice(outputs.iter(), "execute") {
                            Some(e) => Err(e),
                            None => Ok(outputs),
                        },
                    }
                }
                Err(e) => Err(CoreError::new(kind_from_wit(e.code), e.message)),
            })
            .collect())
    }
}

/// Epoch ticks (of 5 ms) an execution runs before the hand-off in the epoch callback, at most:
/// a thread held this long by one execution has stalled its other connections 5-10 ms, a few
/// scheduler slices.
const HAND_OFF_TICKS: u64 = 2;

/// Whole epoch ticks left until `deadline` (at least one): the callback checks the clock again
/// when they have passed.
fn ticks_until(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now()).as_millis();
    let tick = EPOCH_TICK.as_millis().max(1);
    u64::try_from(left.div_ceil(tick)).unwrap_or(u64::MAX).max(1)
}

/// Epoch ticks for a call that may take `limit`: rounded down to whole ticks (at least one),
/// plus one because the tick in progress when the call starts may be almost over.
/// A fresh store for one guest, within its sandbox: its grants, memory cap, hostcall budget, and
/// an epoch deadline of one time limit (what happens then is the caller's to set).
pub(super) fn sandboxed_store(
    engine: &Engine,
    sandbox: &Sandbox,
    shared: Arc<GuestShared>,
) -> CoreResult<Store<GuestState>> {
    let state = GuestState::new(sandbox.wasi()?, GuestLimiter::new(sandbox.max_memory), shared);
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_hostcall_fuel(sandbox.max_hostcall_bytes());
    store.set_epoch_deadline(ticks_for(sandbox.max_execute));
    Ok(store)
}

pub(super) fn instantiation_failed(model: &str, e: wasmtime::Error) -> CoreError {
    CoreError::unavailable(format!("failed to instantiate WebAssembly model '{model}': {e:#}"))
}

fn ticks_for(limit: Duration) -> u64 {
    (limit.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
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
    /// `crate::execution::blocking`, and the epoch deadline bounds a loop.
    fn only_computes(&self) -> bool {
        // A file read blocks on the runtime (wasmtime-wasi), which panics on an async worker.
        !self.sandbox.grants_filesystem()
    }

    fn mailbox(&self) -> Option<Arc<Mailbox>> {
        self.mailbox.clone()
    }
}

impl Drop for WasmInstance {
    fn drop(&mut self) {
        // A panic in `execute` (caught by the pool, which then drops the instance) poisons the
        // lock: the store is still taken out, so the gauges come back down.
        let mut guard = self.slot.lock_even_if_poisoned();
        if let Some(live) = self.slot.take(&mut guard) {
            live.retire(&self.shared.model_name, self.sandbox.max_execute);
        }
        drop(guard);
        self.live_set.leave(&self.slot);
        if let Some(mailbox) = &self.mailbox {
            mailbox.reset(&CoreError::unavailable(format!("model '{}' is unloading", self.shared.model_name)));
        }
    }
}

/// Which kind of trap `error` is: what [`trap_error`] explains and the per-model trap counters
/// count.
pub(super) fn trap_kind(error: &wasmtime::Error) -> TrapKind {
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => TrapKind::Timeout,
        Some(Trap::AllocationTooLarge) => TrapKind::Memory,
        _ if grow_refusal(error).is_some() || passed_too_much(error) => TrapKind::Memory,
        _ => TrapKind::Fault,
    }
}

/// The limiter's refusal in `error`'s chain, if it is there: the guest's linear memory would have
/// grown past its cap ([`super::sandbox::GuestLimiter`]). Errors are matched one link of the
/// chain at a time, never in the formatted chain: its backtrace names functions the guest chose.
fn grow_refusal(error: &wasmtime::Error) -> Option<String> {
    error.chain().map(ToString::to_string).find(|e| e.starts_with(super::sandbox::GROW_REFUSED))
}

/// Takes every handle a rejected `execute` result returned out of the table (and off the guest's
/// account), whatever becomes of the batch.
fn drop_returned(state: &mut GuestState, results: Vec<Result<Vec<Resource<HostTensor>>, wit::Error>>) {
    for tensor in results.into_iter().flatten().flatten() {
        let _ = state.handles.take_tensor(tensor);
    }
}

/// wasmtime refused to copy more of a call's arguments: the store's hostcall fuel
/// ([`Sandbox::max_hostcall_bytes`]) ran out. wasmtime's error type for it is private; its
/// message (wasmtime 48, pinned in Cargo.toml) is what identifies it.
fn passed_too_much(error: &wasmtime::Error) -> bool {
    const HOSTCALL_FUEL_EXHAUSTED: &str = "too much data is being copied between the host and the guest: \
                                           fuel allocated for hostcalls has been exhausted";
    error.chain().any(|e| e.to_string() == HOSTCALL_FUEL_EXHAUSTED)
}

/// The function a Python guest's numpy traps in when its C++ code throws
/// (scripts/build-numpy-wasi.sh): the guest's libc++abi has no exception support.
const NUMPY_CXX_EXCEPTION: &str = "tessera_numpy_cxx_exception";

/// Explains a trap: time limit, memory limit, or a guest panic with its last log lines.
pub(super) fn trap_error(
    model: &str,
    call: &str,
    error: &wasmtime::Error,
    sandbox: &Sandbox,
    log: &[String],
) -> CoreError {
    let trap = error.downcast_ref::<Trap>();
    let detail = match (trap_kind(error), trap) {
        (TrapKind::Timeout, _) => {
            format!("exceeded its time limit of {} ms (max_execute_ms)", sandbox.max_execute.as_millis())
        }
        (TrapKind::Memory, _) if passed_too_much(error) => format!(
            "passed more than {} bytes to the host in one call (2 x max_memory_bytes)",
            sandbox.max_hostcall_bytes()
        ),
        (TrapKind::Memory, Some(Trap::AllocationTooLarge)) => {
            format!("exceeded its memory limit of {} bytes (max_memory_bytes)", sandbox.max_memory)
        }
        (TrapKind::Memory, _) => {
            // The limiter's own words, not the top of the chain (a backtrace the guest names).
            let why = grow_refusal(error).unwrap_or_else(|| error.to_string());
            format!("exceeded its memory limit of {} bytes (max_memory_bytes): {why}", sandbox.max_memory)
        }
        (TrapKind::Fault, Some(trap)) if format!("{error:?}").contains(NUMPY_CXX_EXCEPTION) => format!(
            "trapped: numpy threw a C++ exception, which a WebAssembly guest cannot catch (numpy raises it \
             for some invalid arguments, e.g. a zero-length FFT): {trap}\n{error}"
        ),
        (TrapKind::Fault, Some(trap)) => format!("trapped: {trap}\n{error}"),
        (TrapKind::Fault, None) => format!("trapped: {error:#}"),
    };
    let mut message = format!("WebAssembly model '{model}' {call} {detail}");
    if let Some(last) = log.last() {
        message.push_str(&format!(" (last guest log: {last})"));
    }
    CoreError::internal(message)
}

#[cfg(test)]
#[path = "instance_tests.rs"]
mod tests;
