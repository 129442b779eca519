//! The instances of one model version. A semaphore with one permit per idle instance means a
//! request waits (rather than fails) when all instances are busy, and no instance ever runs two
//! batches at once. Execution statistics are recorded here, once per execution, whichever
//! scheduler formed the batch.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::fair::FairWaiters;
use super::rate_limit::{Claim, RateLimiter};
use crate::backend::mailbox::{Done, Mailbox, with_room};
use crate::backend::{ExecRequest, ModelInstance};
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::execution::{Caller, InlineGate};
use crate::stats::ModelStats;
use crate::tensor::Tensor;
use crate::trace::{Trace, activity};

/// One result per request of a batch, always as many as the batch had.
pub type BatchResults = Vec<CoreResult<Vec<Tensor>>>;

/// What a model's scheduler does each time an instance's slot is given back
/// ([`InstancePool::on_release`]).
pub type ReleaseHook = Arc<dyn Fn() + Send + Sync>;

/// An idle instance's slot, held while one batch runs on it. Giving it back (dropping it, also
/// when its instance is retired after a panic) calls the pool's release hook once the slot is
/// free again: a scheduler whose queue has no task of its own learns there that its next batch
/// may run, wherever the slot was given back (an execution's own thread, a caller that left).
pub struct InstanceSlot {
    permit: Option<OwnedSemaphorePermit>,
    on_release: Option<ReleaseHook>,
}

impl InstanceSlot {
    fn new(permit: OwnedSemaphorePermit, on_release: Option<ReleaseHook>) -> Self {
        Self { permit: Some(permit), on_release }
    }

    /// Gives the slot up for good, with its retired instance.
    fn retire(mut self) {
        if let Some(permit) = self.permit.take() {
            permit.forget();
        }
    }
}

impl Drop for InstanceSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        if let Some(hook) = &self.on_release {
            hook();
        }
    }
}

pub struct InstancePool {
    idle: Arc<Mutex<Vec<Pooled>>>,
    /// The server's rate limiter, when `--rate-limit execution_count` is on.
    limiter: Option<Arc<RateLimiter>>,
    available: Arc<Semaphore>,
    /// Instances not retired after a panic; at zero the semaphore is closed so that waiting and
    /// later requests fail instead of waiting forever.
    alive: Arc<AtomicUsize>,
    /// Permits in all: the instance count, or fewer under `max_concurrent_executions`; never
    /// more than `alive`.
    slots: Arc<AtomicUsize>,
    stats: Arc<ModelStats>,
    /// When the last execution ended, in µs since `epoch` (0: none yet): how [`Dispatch::Caller`]
    /// and the dynamic batcher tell a lone request from one arriving under load.
    epoch: Instant,
    last_done_us: AtomicU64,
    /// How long the last successful execution ran on its instance, in µs.
    last_took_us: AtomicU64,
    /// An arrival this soon after an execution ended means load ([`Self::under_load`]).
    back_to_back: Duration,
    /// Whether executions have been short enough to run inline (see [`InlineGate`]).
    gate: InlineGate,
    /// The `max_queue_size` quota: requests waiting for an instance beyond it are refused.
    max_queue: Option<usize>,
    /// Called whenever a slot is given back (see [`InstanceSlot`]).
    on_release: OnceLock<ReleaseHook>,
    /// The instances' mailboxes, for those that take requests while they execute (see
    /// [`super::adopt`]), and what wakes requests waiting for room in one.
    mailboxes: Vec<Arc<Mailbox>>,
    room: Arc<Notify>,
    /// The direct scheduler's fair line for slots (see `super::fair`); `None` for the batchers,
    /// which keep their own queues.
    fair: Option<Arc<FairWaiters<InstanceSlot>>>,
}

/// A caller's request runs inline only when no execution ended this recently: closer arrivals
/// mean load, where handing off is cheaper (see [`Dispatch`]). A lone client's next request comes
/// well after the last response; under load the gaps are a fraction of this.
const INLINE_AFTER_IDLE: Duration = Duration::from_micros(100);

/// Requests that reach a model this soon after its last execution ended are arriving back to
/// back: the dynamic batcher lets them gather into batches instead of running each alone (see
/// `scheduler::dynamic`). A lone client's next request comes later than this, so it never queues.
/// A wider window makes light load queue too, in batches that stay small, for more CPU per
/// inference; this one lets a saturated core batch at little cost to light load.
const BACK_TO_BACK: Duration = Duration::from_micros(40);

impl InstancePool {
    pub fn new(instances: Vec<Box<dyn ModelInstance>>, stats: Arc<ModelStats>) -> Self {
        let available = Arc::new(Semaphore::new(instances.len()));
        let instances_count = instances.len();
        let mailboxes: Vec<_> = instances.iter().filter_map(|i| i.mailbox()).collect();
        let room = Arc::new(Notify::new());
        for mailbox in &mailboxes {
            mailbox.watch(Arc::clone(&room));
        }
        let alive = Arc::new(AtomicUsize::new(instances_count));
        let idle =
            Arc::new(Mutex::new(instances.into_iter().map(|instance| Pooled { instance, claim: None }).collect()));
        Self {
            idle,
            limiter: None,
            available,
            slots: Arc::new(AtomicUsize::new(instances_count)),
            alive,
            stats,
            epoch: Instant::now(),
            last_done_us: AtomicU64::new(0),
            last_took_us: AtomicU64::new(0),
            back_to_back: BACK_TO_BACK,
            gate: InlineGate::new(),
            max_queue: None,
            on_release: OnceLock::new(),
            mailboxes,
            room,
            fair: None,
        }
    }

    /// Requests waiting for a slot wait in a fair line per flow (the direct scheduler's; call
    /// after [`Self::with_quotas`], which may change the slots).
    pub fn with_fair_waiting(mut self) -> Self {
        let fair = FairWaiters::new(Arc::clone(&self.available));
        let _ = self.on_release.set(fair.hook(|permit, hook| InstanceSlot::new(permit, Some(hook))));
        self.fair = Some(fair);
        self
    }

    /// Makes every execution wait for its instance's rate-limiter resources; `claims` are the
    /// instances' claims, in the order the instances were given to [`Self::new`].
    pub fn with_rate_limits(mut self, limiter: Arc<RateLimiter>, claims: Vec<Arc<Claim>>) -> Self {
        if let Ok(mut idle) = self.idle.lock() {
            for (pooled, claim) in idle.iter_mut().zip(claims) {
                pooled.claim = Some(claim);
            }
        }
        self.limiter = Some(limiter);
        self
    }

    /// Applies the model's quotas (see [`super::Quotas`]): fewer execution slots than instances
    /// for `max_concurrent_executions`, a bound on waiting requests for `max_queue_size`.
    pub fn with_quotas(mut self, model: &str, quotas: super::Quotas) -> Self {
        let instances = self.available.available_permits();
        if let Some(max) = quotas.max_concurrent
            && max < instances
        {
            tracing::info!(model, instances, max, "max_concurrent_executions: fewer slots than instances");
            self.available = Arc::new(Semaphore::new(max));
            self.slots.store(max, Ordering::SeqCst);
        }
        self.max_queue = quotas.max_queue;
        self
    }

    /// Tests: how soon after an execution an arrival counts as load ([`BACK_TO_BACK`]).
    #[cfg(test)]
    pub(crate) fn with_back_to_back(mut self, window: Duration) -> Self {
        self.back_to_back = window;
        self
    }

    /// How long ago the model's last execution ended (`None`: it has not executed yet).
    fn since_last_execution(&self) -> Option<Duration> {
        let done = self.last_done_us.load(Ordering::Relaxed);
        (done != 0).then(|| self.epoch.elapsed().saturating_sub(Duration::from_micros(done)))
    }

    /// Whether requests are arriving back to back: the last execution ended less than
    /// [`BACK_TO_BACK`] plus half its own duration ago. After a long execution, answering it and
    /// parsing the next request take longer (cold caches, most likely), so with a fixed window a
    /// slow guest's requests would never gather into batches on a saturated core, while a lone
    /// client's still come too late to queue.
    pub fn under_load(&self) -> bool {
        let after_long = Duration::from_micros(self.last_took_us.load(Ordering::Relaxed) / 2);
        self.since_last_execution().is_some_and(|since| since < self.back_to_back + after_long)
    }

    pub fn stats(&self) -> &Arc<ModelStats> {
        &self.stats
    }

    /// Sets what happens each time a slot is given back (once; later calls change nothing and
    /// return false). Slots taken before it do not call it.
    pub fn on_release(&self, hook: ReleaseHook) -> bool {
        self.on_release.set(hook).is_ok()
    }

    /// An idle instance's slot, if one is free right now.
    pub fn try_acquire(&self) -> Option<InstanceSlot> {
        let permit = Arc::clone(&self.available).try_acquire_owned().ok()?;
        Some(InstanceSlot::new(permit, self.on_release.get().cloned()))
    }

    /// Whether every instance has been retired (after panics): no slot will ever be free again.
    pub fn is_closed(&self) -> bool {
        self.available.is_closed()
    }

    /// Waits for an idle instance's slot.
    pub fn acquire(&self) -> impl std::future::Future<Output = CoreResult<InstanceSlot>> + 'static {
        let available = Arc::clone(&self.available);
        let on_release = self.on_release.get().cloned();
        async move {
            match available.acquire_owned().await {
                Ok(permit) => Ok(InstanceSlot::new(permit, on_release)),
                Err(_) => Err(instances_gone()),
            }
        }
    }

    /// Runs `batch` `times` times on every instance in turn, outside the scheduler (warmup,
    /// before the version is served), handing each result to `check`. Blocking.
    pub fn execute_on_each(
        &self,
        batch: &[ExecRequest],
        times: usize,
        mut check: impl FnMut(BatchResults) -> CoreResult<()>,
    ) -> CoreResult<()> {
        let Ok(mut idle) = self.idle.lock() else {
            return Err(CoreError::internal("instance pool poisoned"));
        };
        for pooled in idle.iter_mut() {
            for _ in 0..times {
                let results = execute_on(pooled.instance.as_mut(), batch.to_vec())
                    .ok_or_else(|| CoreError::internal("model instance failed during execution"))?;
                check(results)?;
            }
        }
        Ok(())
    }

    /// Waits for an idle instance (counting the request as pending and its queue time meanwhile),
    /// then runs the batch on it.
    async fn execute_as(&self, batch: Vec<ExecRequest>, rows: usize, dispatch: Dispatch) -> BatchResults {
        if let Some(refused) = self.refuse_past_queue(&batch) {
            return refused;
        }
        let queued = Instant::now();
        let pending = PendingGuard::new(&self.stats);
        let principal = batch.first().and_then(|r| r.principal.as_ref());
        let slot = match &self.fair {
            Some(fair) if principal.is_some() || !fair.idle() => match fair.acquire(principal) {
                Ok(slot) => Ok(slot),
                Err(line) => line.await.map_err(|_| instances_gone()),
            },
            _ => self.acquire().await,
        };
        pending.release();
        match slot {
            Ok(slot) => {
                let waited = queued.elapsed();
                self.stats.record_queue(waited);
                if let Some(principal) = principal {
                    principal.record_queue(waited);
                }
                self.run_as(slot, batch, rows, dispatch).await
            }
            Err(e) => vec![Err(e); batch.len()],
        }
    }

    /// Runs one decoupled request and returns once it has ended, which, on an instance that
    /// adopts requests (see [`super::adopt`]), may be before its execution does: on an idle
    /// instance if one is free, else in the mailbox of a busy one with room, else on whichever
    /// comes first. Without mailboxes, [`Self::execute_one`].
    pub async fn execute_adoptable(self: &Arc<Self>, mut request: ExecRequest, rows: usize) -> CoreResult<()> {
        if self.mailboxes.is_empty() {
            return self.execute_one(request, rows).await.map(drop);
        }
        if with_room(&self.mailboxes).is_none()
            && let Some(refused) = self.refuse_past_queue(std::slice::from_ref(&request))
        {
            return only_result(refused).map(drop);
        }
        let (done, ended) = Done::channel();
        request.done = Some(done.clone());
        let sink = request.compute.clone();
        let queued = Instant::now();
        let pending = PendingGuard::new(&self.stats);
        let slot = loop {
            // Registered before looking, so room that opens in between still wakes this.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Some(slot) = self.try_acquire() {
                break Some((slot, request));
            }
            if let Some(mailbox) = with_room(&self.mailboxes) {
                match mailbox.offer(request) {
                    Ok(()) => break None,
                    Err(back) => request = back,
                }
            }
            tokio::select! {
                slot = self.acquire() => break Some((slot?, request)),
                () = room => {}
            }
        };
        pending.release();
        self.stats.record_queue(queued.elapsed());
        let started = Instant::now();
        let Some((slot, request)) = slot else {
            // Adopted: counted as an execution of its own once it ends well.
            let result =
                ended.await.unwrap_or_else(|_| Err(CoreError::internal("model instance failed during execution")));
            match &result {
                Ok(()) => {
                    self.stats.record_execution(rows, Duration::ZERO, started.elapsed(), Duration::ZERO);
                    self.stats.health.succeeded();
                }
                Err(e) if failed_in_instance(e) => self.stats.health.failed(&e.message),
                Err(_) => {}
            }
            if let Some(sink) = sink {
                sink.add(started.elapsed());
            }
            return result;
        };
        // The execution may go on with requests it adopts after this one has ended: it runs on a
        // task of its own, and this request's caller is answered when the request ends.
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            let result = only_result(pool.run_as(slot, vec![request], rows, Dispatch::Handed).await);
            done.finish(result.map(drop));
        });
        ended.await.unwrap_or_else(|_| Err(CoreError::internal("model instance failed during execution")))
    }

    /// The `max_queue_size` quota's refusals of `batch`, when every slot is taken and the queue
    /// is full.
    fn refuse_past_queue(&self, batch: &[ExecRequest]) -> Option<BatchResults> {
        let max = self.max_queue?;
        if self.available.available_permits() > 0 || self.stats.pending() < i64::try_from(max).unwrap_or(i64::MAX) {
            return None;
        }
        self.stats.usage.record_refusal(crate::stats::Quota::Queue);
        let refusal = |r: &ExecRequest| {
            let prefix = crate::error::request_id_prefix(r.id.as_deref());
            Err(CoreError::unavailable(format!(
                "{prefix}Exceeds maximum queue size (the model's max_queue_size quota is {max})"
            )))
        };
        Some(batch.iter().map(refusal).collect())
    }

    /// Runs one request alone on an idle instance; see [`Self::run`].
    pub async fn run_one(&self, slot: InstanceSlot, request: ExecRequest, rows: usize) -> CoreResult<Vec<Tensor>> {
        only_result(self.run_as(slot, vec![request], rows, Dispatch::Caller).await)
    }

    /// Waits for an idle instance and runs one request alone on it; see [`Self::execute`].
    pub async fn execute_one(&self, request: ExecRequest, rows: usize) -> CoreResult<Vec<Tensor>> {
        only_result(self.execute_as(vec![request], rows, Dispatch::Caller).await)
    }

    /// Runs a batch of `rows` inferences on an idle instance; `slot` is that instance's slot
    /// (from [`Self::acquire`]). A successful execution is recorded in the statistics.
    pub async fn run(&self, slot: InstanceSlot, batch: Vec<ExecRequest>, rows: usize) -> BatchResults {
        self.run_as(slot, batch, rows, Dispatch::Handed).await
    }

    async fn run_as(
        &self,
        slot: InstanceSlot,
        batch: Vec<ExecRequest>,
        rows: usize,
        dispatch: Dispatch,
    ) -> BatchResults {
        let count = batch.len();
        let sinks: Vec<_> = batch.iter().filter_map(|r| r.compute.clone()).collect();
        let started = Instant::now();
        let results = match self.run_on_instance(slot, batch, dispatch).await {
            Ok((results, executed, inline)) => {
                // Every request failing inside the instance (a trap, an instance that cannot
                // start again, a backend error) counts against the model's health; anything else
                // shows the instance works (see `stats::Health`).
                match results.first() {
                    Some(Err(first)) if results.iter().all(|r| r.as_ref().is_err_and(failed_in_instance)) => {
                        self.stats.health.failed(&first.message)
                    }
                    _ => self.stats.health.succeeded(),
                }
                self.gate.record(executed, inline);
                // The execution itself: not a rate limiter's wait or a hand-off before it.
                let executed_us = u64::try_from(executed.as_micros()).unwrap_or(u64::MAX);
                self.last_took_us.store(executed_us, Ordering::Relaxed);
                results
            }
            Err(e) => {
                // The instance could not be run (it panicked, say); a refusal or a cancellation
                // says nothing about it.
                if failed_in_instance(&e) {
                    self.stats.health.failed(&e.message);
                }
                vec![Err(e); count]
            }
        };
        let took = started.elapsed();
        let done_us = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
        self.last_done_us.store(done_us, Ordering::Relaxed);
        for sink in &sinks {
            sink.add(took);
        }
        if results.iter().all(Result::is_ok) {
            self.stats.record_execution(rows, Duration::ZERO, took, Duration::ZERO);
        }
        results
    }

    /// Where a batch for `instance` runs (see `crate::execution`): inline with no hand-off when
    /// the instance only computes and the gate is open; in place for a lone request whose
    /// caller may block, to an instance that [`ModelInstance::runs_inline`]; otherwise handed to
    /// a blocking thread, as every batch is with the fast paths off.
    fn placement(&self, instance: &dyn ModelInstance, dispatch: Dispatch, caller: Caller, fast: bool) -> Placement {
        if !fast {
            return Placement::Handed;
        }
        if instance.only_computes()
            && self.gate.open()
            && let Some(runtime) = crate::execution::multi_thread_runtime()
        {
            return Placement::Inline(runtime);
        }
        let in_place = matches!(dispatch, Dispatch::Caller)
            && caller.may_block()
            && self.since_last_execution().is_none_or(|idle_for| idle_for >= INLINE_AFTER_IDLE)
            && instance.runs_inline()
            && crate::execution::on_multi_thread_runtime();
        if in_place { Placement::InPlace } else { Placement::Handed }
    }

    /// Runs the batch on an idle instance: inline with no hand-off when the instance only
    /// computes and the gate is open; in place on the caller's thread (`block_in_place`) for a
    /// lone request to an instance that [`ModelInstance::runs_inline`]; otherwise on a blocking
    /// thread. Returns the results, what the execution took, and whether it ran with no hand-off.
    async fn run_on_instance(
        &self,
        slot: InstanceSlot,
        batch: Vec<ExecRequest>,
        dispatch: Dispatch,
    ) -> CoreResult<(BatchResults, Duration, bool)> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let Some(pooled) = pooled else {
            return Err(CoreError::internal("no idle model instance despite a free slot"));
        };
        let mut borrowed = Borrowed { pooled: Some(pooled), idle: Arc::clone(&self.idle) };
        // Rate limiting: the instance waits for its resources (and goes back to the idle list
        // if the caller leaves meanwhile, see `Borrowed`).
        let held = match (&self.limiter, borrowed.pooled.as_ref().and_then(|p| p.claim.clone())) {
            (Some(limiter), Some(claim)) => Some(limiter.acquire(&claim).await?),
            _ => None,
        };
        let Some(instance) = borrowed.pooled.as_ref().map(|p| &p.instance) else {
            return Err(CoreError::internal("no idle model instance despite a free slot"));
        };
        let caller = batch.first().map_or(Caller::Detached, |exec| exec.caller);
        let placement = self.placement(instance.as_ref(), dispatch, caller, crate::execution::fast_paths());
        let direct = matches!(placement, Placement::Inline(_));
        let alive = Arc::clone(&self.alive);
        let slots = Arc::clone(&self.slots);
        let available = Arc::clone(&self.available);
        // The work itself returns the instance and its slot, so a caller that goes away
        // mid-execution (client disconnect, BLS timeout) cannot lose the instance.
        // Each traced request's trace, by position (empty when none is traced).
        let traces: Vec<Option<Trace>> = if batch.iter().any(|r| r.trace.is_some()) {
            batch.iter().map(|r| r.trace.clone()).collect()
        } else {
            Vec::new()
        };
        let work = move || {
            trace_compute_start(&traces, &batch);
            let started = Instant::now();
            let executed = match borrowed.pooled.as_mut() {
                Some(pooled) => execute_on(pooled.instance.as_mut(), batch),
                None => None,
            };
            let took = started.elapsed();
            if let Some(results) = &executed {
                trace_compute_end(&traces, results);
            }
            drop(held);
            match executed {
                Some(results) => {
                    drop(borrowed);
                    drop(slot);
                    Some((results, took))
                }
                None => {
                    // The instance may be in an inconsistent state: retire it and its slot.
                    drop(borrowed.pooled.take());
                    tracing::error!("model instance panicked during execution and was retired");
                    let left = alive.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
                    // Closed before the slot goes: its release hook must see that nothing is left.
                    if left == 0 {
                        available.close();
                    }
                    // Fewer instances than permits now: this slot goes with the instance.
                    if left < slots.load(Ordering::SeqCst) {
                        slots.fetch_sub(1, Ordering::SeqCst);
                        slot.retire();
                    } else {
                        drop(slot);
                    }
                    None
                }
            }
        };
        let joined = match placement {
            Placement::Inline(runtime) => Ok(crate::execution::run_inline(runtime, work)),
            Placement::InPlace => Ok(tokio::task::block_in_place(work)),
            Placement::Handed => tokio::task::spawn_blocking(work).await,
        };
        match joined {
            Ok(Some((results, took))) => Ok((results, took, direct)),
            Ok(None) | Err(_) => Err(CoreError::internal("model instance failed during execution")),
        }
    }
}

/// Stamps the start of the execution on each traced request (the host hands inputs over before
/// it calls the backend, so their end is the same instant), with their inputs at level TENSORS.
fn trace_compute_start(traces: &[Option<Trace>], batch: &[ExecRequest]) {
    each_traced(traces, batch, |trace, request, ns| {
        trace.stamp_at(activity::COMPUTE_START, ns);
        trace.stamp_at(activity::COMPUTE_INPUT_END, ns);
        trace.record_tensors(activity::TENSOR_BACKEND_INPUT, &request.inputs);
    });
}

/// Stamps the end of the execution on each traced request, with its outputs at level TENSORS.
fn trace_compute_end(traces: &[Option<Trace>], results: &BatchResults) {
    each_traced(traces, results, |trace, result, ns| {
        trace.stamp_at(activity::COMPUTE_OUTPUT_START, ns);
        trace.stamp_at(activity::COMPUTE_END, ns);
        if let Ok(outputs) = result {
            trace.record_tensors(activity::TENSOR_BACKEND_OUTPUT, outputs);
        }
    });
}

/// Calls `each` with every traced request's trace, its item in `items` (its request, or its
/// result) and one instant for all of them; reads no clock when no request is traced.
fn each_traced<T>(traces: &[Option<Trace>], items: &[T], each: impl Fn(&Trace, &T, u64)) {
    if traces.is_empty() {
        return;
    }
    let ns = crate::trace::now_ns();
    for (trace, item) in traces.iter().zip(items).filter_map(|(t, i)| Some((t.as_ref()?, i))) {
        each(trace, item, ns);
    }
}

/// What a request gets once every instance of its model has been retired.
pub fn instances_gone() -> CoreError {
    CoreError::unavailable("no model instance is left (every instance panicked and was retired): reload the model")
}

/// An instance and the rate-limiter resources it needs to execute.
struct Pooled {
    instance: Box<dyn ModelInstance>,
    claim: Option<Arc<Claim>>,
}

/// An instance taken from the idle list for one execution: it goes back when this is dropped,
/// whether the execution ran or its caller left while it waited (for rate-limiter resources).
struct Borrowed {
    pooled: Option<Pooled>,
    idle: Arc<Mutex<Vec<Pooled>>>,
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if let Some(pooled) = self.pooled.take()
            && let Ok(mut idle) = self.idle.lock()
        {
            idle.push(pooled);
        }
    }
}

/// Where an execution runs ([`InstancePool::placement`]).
enum Placement {
    /// On this async runtime worker's thread, which it may hand over if the run goes long.
    Inline(tokio::runtime::Handle),
    /// On the caller's thread, its worker's other tasks moved elsewhere first.
    InPlace,
    /// On a blocking-pool thread.
    Handed,
}

/// Who runs a batch, which decides whether an instance that [`ModelInstance::runs_inline`] does.
#[derive(Clone, Copy)]
enum Dispatch {
    /// The request's own task, for one request (an idle instance, or no batcher): latency-bound
    /// when the instance has been idle a while ([`INLINE_AFTER_IDLE`]), so such an instance
    /// runs on this thread if the task may block ([`crate::execution::Caller::may_block`]: unary door
    /// calls), which saves the hand-off's two wake-ups.
    Caller,
    /// A batcher's task: handed to a blocking thread. Under load that is cheaper than inline,
    /// which moves the dispatching worker's core to another thread at every batch.
    Handed,
}

/// One batch on one instance. A panic gives `None` (the caller decides what happens to the
/// instance); otherwise exactly one result per request: a backend that answers too few results
/// fails the missing requests here, the one place that is checked.
fn execute_on(instance: &mut dyn ModelInstance, batch: Vec<ExecRequest>) -> Option<BatchResults> {
    let count = batch.len();
    let mut results = std::panic::catch_unwind(AssertUnwindSafe(|| instance.execute(batch))).ok()?;
    results.truncate(count);
    while results.len() < count {
        results.push(Err(CoreError::internal("instance returned too few results")));
    }
    Some(results)
}

/// An error that means the instance itself failed, not that it refused a request.
fn failed_in_instance(error: &CoreError) -> bool {
    matches!(error.kind, ErrorKind::Internal | ErrorKind::Unknown)
}

/// The result of a one-request batch ([`execute_on`] guarantees there is one).
fn only_result(mut results: BatchResults) -> CoreResult<Vec<Tensor>> {
    results.pop().unwrap_or_else(|| Err(CoreError::internal("instance returned no result")))
}

/// Counts a request as pending (waiting for an instance) until released or dropped, so a caller
/// that goes away while waiting does not leave the gauge high.
struct PendingGuard<'a> {
    stats: &'a ModelStats,
    counted: AtomicBool,
}

impl<'a> PendingGuard<'a> {
    fn new(stats: &'a ModelStats) -> Self {
        stats.pending_add(1);
        Self { stats, counted: AtomicBool::new(true) }
    }

    fn release(&self) {
        if self.counted.swap(false, Ordering::Relaxed) {
            self.stats.pending_add(-1);
        }
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
