//! Triton's dynamic batcher: requests queue, and when an instance is free a batch forms from the
//! head of the queue and runs on it. With the default config (no queue delay, no ordering to
//! keep) the queue sits under a lock and the batch starts on the thread that freed the instance
//! ([`SharedQueue`]); a queue delay or `preserve_ordering` puts the queue on a task of its own,
//! fed by a channel ([`BatcherTask`]). Both form batches by the same rules ([`Queues`]).
//!
//! Semantics follow Triton's `dynamic_batching` config:
//! - a batch holds requests whose summed batch size (dim 0) is at most `max_batch_size` and whose
//!   inputs agree on names, datatypes and every non-batch dimension (requests with different
//!   variable dims are never merged; ragged batching is not supported, so it never merges them);
//! - a batch is dispatched as soon as it reaches `max_batch_size` or one of the
//!   `preferred_batch_size`s, or when the oldest request has waited `max_queue_delay_microseconds`
//!   (0: dispatch whatever is queued as soon as an instance is free, so batches form only under load);
//! - `priority_levels` queues, highest priority (1) first; a request's `priority` parameter picks
//!   its level (0 or out of range: `default_priority_level`);
//! - queue policies per level: `max_queue_size` (a full queue rejects at once with UNAVAILABLE),
//!   `default_timeout_microseconds` and, when `allow_timeout_override`, the request's `timeout`
//!   parameter; a request that times out in the queue is rejected (`REJECT`) or moved behind the
//!   requests that have not timed out (`DELAY`);
//! - `preserve_ordering`: responses are released in the order the batches were formed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::compatible;
use super::pool::{InstancePool, InstanceSlot};
use crate::backend::ExecRequest;
use crate::config::pb::{ModelDynamicBatching, ModelQueuePolicy, model_queue_policy::TimeoutAction};
use crate::error::{CoreError, CoreResult};
use crate::infer::ParamValue;
use crate::stats::ModelStats;
use crate::tenant::{FlowKey, Shares, flow_of};
use crate::tensor::Tensor;

/// What a queued request gets back: its outputs.
type BatchReply = CoreResult<Vec<Tensor>>;

struct Pending {
    exec: ExecRequest,
    batch_size: usize,
    enqueued: Instant,
    deadline: Option<Instant>,
    /// Timed out under a DELAY policy: served after the requests that have not.
    delayed: bool,
    reply: oneshot::Sender<BatchReply>,
}

#[derive(Debug, Clone)]
struct QueuePolicy {
    reject_on_timeout: bool,
    default_timeout: Duration,
    allow_override: bool,
    max_queue_size: usize,
}

impl From<Option<&ModelQueuePolicy>> for QueuePolicy {
    fn from(policy: Option<&ModelQueuePolicy>) -> Self {
        match policy {
            None => Self {
                reject_on_timeout: true,
                default_timeout: Duration::ZERO,
                allow_override: false,
                max_queue_size: 0,
            },
            Some(p) => Self {
                reject_on_timeout: p.timeout_action != TimeoutAction::Delay as i32,
                default_timeout: Duration::from_micros(p.default_timeout_microseconds),
                allow_override: p.allow_timeout_override,
                max_queue_size: p.max_queue_size as usize,
            },
        }
    }
}

/// The batcher's settings, from the model config.
#[derive(Debug, Clone)]
pub struct BatcherConfig {
    max_batch_size: usize,
    preferred: Vec<usize>,
    max_delay: Duration,
    preserve_ordering: bool,
    levels: u64,
    default_level: u64,
    policies: BTreeMap<u64, QueuePolicy>,
}

impl BatcherConfig {
    pub fn new(max_batch_size: i32, config: &ModelDynamicBatching) -> Self {
        let levels = config.priority_levels;
        let default_level = if levels == 0 { 0 } else { config.default_priority_level.clamp(1, levels) };
        let default_policy = config.default_queue_policy.as_ref();
        let policies = (if levels == 0 { 0..=0 } else { 1..=levels })
            .map(|level| (level, QueuePolicy::from(config.priority_queue_policy.get(&level).or(default_policy))))
            .collect();
        let mut preferred: Vec<usize> =
            config.preferred_batch_size.iter().filter_map(|&p| usize::try_from(p).ok()).collect();
        preferred.sort_unstable();
        Self {
            max_batch_size: usize::try_from(max_batch_size).unwrap_or(1).max(1),
            preferred,
            max_delay: Duration::from_micros(config.max_queue_delay_microseconds),
            preserve_ordering: config.preserve_ordering,
            levels,
            default_level,
            policies,
        }
    }

    /// Whether batches need a task of their own: to wait on the queue delay's timer, or to hold
    /// a batch's responses until the earlier batch's are out (`preserve_ordering`).
    fn needs_task(&self) -> bool {
        !self.max_delay.is_zero() || self.preserve_ordering
    }

    /// Caps every level's queue at `max` requests (the `max_queue_size` quota): a policy's own
    /// smaller size stays.
    pub fn cap_queues(mut self, max: usize) -> Self {
        for policy in self.policies.values_mut() {
            if policy.max_queue_size == 0 || policy.max_queue_size > max {
                policy.max_queue_size = max;
            }
        }
        self
    }

    /// The queue level of a request: its `priority` parameter when valid, else the default.
    fn level_of(&self, exec: &ExecRequest) -> u64 {
        if self.levels == 0 {
            return 0;
        }
        match exec.parameters.get("priority") {
            Some(ParamValue::Int(p)) if *p >= 1 && (*p as u64) <= self.levels => *p as u64,
            _ => self.default_level,
        }
    }

    fn deadline_of(&self, policy: &QueuePolicy, exec: &ExecRequest, now: Instant) -> Option<Instant> {
        let requested = match exec.parameters.get("timeout") {
            Some(ParamValue::Int(us)) if policy.allow_override && *us > 0 => Some(Duration::from_micros(*us as u64)),
            _ => None,
        };
        let timeout = requested.unwrap_or(policy.default_timeout);
        (!timeout.is_zero()).then(|| now + timeout)
    }
}

/// Sleeps until `deadline` with sub-millisecond precision. tokio's timer wheel has millisecond
/// granularity, and `max_queue_delay_microseconds` is usually below a millisecond: the coarse part
/// waits on tokio's timer, the last stretch on a blocking-pool thread (`nanosleep`), which cannot
/// be cancelled but lasts at most 2 ms.
async fn sleep_until_precise(deadline: Instant) {
    let coarse = Duration::from_millis(2);
    if deadline.saturating_duration_since(Instant::now()) > coarse {
        tokio::time::sleep_until((deadline - coarse / 2).into()).await;
    }
    let rest = deadline.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

/// The handle a model keeps: requests go in through [`DynamicBatcher::submit`].
pub struct DynamicBatcher {
    queue: Queue,
    config: Arc<BatcherConfig>,
    stats: Arc<ModelStats>,
    pool: Arc<InstancePool>,
}

/// Where queued requests wait.
enum Queue {
    /// Under a lock; whoever frees an instance runs the next batch ([`SharedQueue`]).
    Shared(Arc<SharedQueue>),
    /// On a task of its own, fed by a channel: for `max_queue_delay_microseconds` (a timer to
    /// wait on) and `preserve_ordering` (batches whose replies wait for earlier ones).
    Task(mpsc::UnboundedSender<(u64, Pending)>),
}

/// Whether a batcher on this runtime should gather requests under load: on a runtime with one
/// worker thread, where the connections and the batches share the thread (a server given one
/// core, or one of the connection threads, `crate::execution::connection_threads`). An inline execution
/// has ended before the thread parses its next request, and without gathering every request ran
/// alone on a saturated core. On the shared runtime with several workers, requests that other
/// workers parse queue while the instance runs, so batches form by themselves, and gathering
/// only added queue time.
fn gathers_under_load() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|runtime| runtime.metrics().num_workers() == 1)
}

impl DynamicBatcher {
    /// Starts the batcher for one model version (its task, when the config needs one). It ends
    /// when the model is dropped.
    pub fn start(config: BatcherConfig, pool: Arc<InstancePool>, model: String) -> Self {
        let stats = Arc::clone(pool.stats());
        let config = Arc::new(config);
        let queues = Queues::new(Arc::clone(&config), Arc::clone(&stats));
        let queue = if !config.needs_task() {
            let shared = Arc::new(SharedQueue {
                queues: Mutex::new(queues),
                pool: Arc::clone(&pool),
                model,
                fallback: tokio::runtime::Handle::try_current().ok(),
            });
            let weak = Arc::downgrade(&shared);
            let hooked = pool.on_release(Arc::new(move || {
                if let Some(shared) = weak.upgrade() {
                    shared.kick();
                }
            }));
            // One batcher per pool (the scheduler starts it once): a second hook would be lost.
            debug_assert!(hooked, "the pool already had a release hook");
            Queue::Shared(shared)
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            let task = BatcherTask {
                queues,
                pool: Arc::clone(&pool),
                model,
                last_batch_done: None,
                gather_under_load: gathers_under_load(),
            };
            tokio::spawn(task.run(rx));
            Queue::Task(tx)
        };
        Self { queue, config, stats, pool }
    }

    /// Queues one request (already validated; `batch_size` is its dim 0) at once, and returns
    /// the future of its outputs.
    pub fn submit(
        &self,
        exec: ExecRequest,
        batch_size: usize,
    ) -> impl std::future::Future<Output = BatchReply> + Send + 'static {
        // Fast path: with no queue delay, nothing queued and an idle instance, the batcher would
        // dispatch this request alone at once; running it here saves two task hand-offs. Only
        // on one worker, not under load: there an execution that runs inline has ended by the
        // time the next connection's request is parsed, so the instance always looked idle and
        // every request ran alone, with no batching on a saturated core.
        // A caller about to block its thread on the answer (a guest's BLS call) cannot let
        // others gather behind a yield: when an instance is idle it runs at once, as at low load
        // (else a guest's BLS calls in a loop paid the batcher's hand-offs and a thread wake-up
        // each).
        // Only the queue without a task has the fast path (and gathers): the task's configs wait
        // for a fuller batch or keep responses in order.
        let shared = matches!(self.queue, Queue::Shared(_));
        let gather = shared && gathers_under_load();
        let idle_instance = if shared
            && crate::execution::fast_paths()
            && self.stats.pending() == 0
            && (!gather || !self.pool.under_load() || exec.caller.waits_in_place())
        {
            self.pool.try_acquire()
        } else {
            None
        };
        if let Some(slot) = idle_instance {
            let pool = Arc::clone(&self.pool);
            let stats = Arc::clone(&self.stats);
            return futures_util::future::Either::Left(async move {
                stats.record_queue(Duration::ZERO);
                pool.run_one(slot, exec, batch_size).await
            });
        }
        let now = Instant::now();
        let level = self.config.level_of(&exec);
        let policy = self.config.policies.get(&level).cloned().unwrap_or_else(|| QueuePolicy::from(None));
        let deadline = self.config.deadline_of(&policy, &exec, now);
        let (reply, rx) = oneshot::channel();
        let pending = Pending { exec, batch_size, enqueued: now, deadline, delayed: false, reply };
        self.stats.pending_add(1);
        let sent = match &self.queue {
            Queue::Shared(shared) => {
                shared.enqueue(level, pending, gather);
                Ok(())
            }
            Queue::Task(tx) => tx.send((level, pending)).map_err(|_| {
                self.stats.pending_add(-1);
            }),
        };
        futures_util::future::Either::Right(async move {
            sent.map_err(|()| CoreError::unavailable("the model's scheduler has stopped (model unloading)"))?;
            rx.await.map_err(|_| CoreError::internal("the model's scheduler dropped the request"))?
        })
    }
}

/// The queues of one batcher: per flow (tenant, fairness id, or the one common flow; see
/// `crate::tenant`) a deque per priority level, and the rules that form a batch. The next request
/// comes from the flow the [`Shares`] pick; within a flow, highest priority first, then oldest.
struct Queues {
    config: Arc<BatcherConfig>,
    stats: Arc<ModelStats>,
    flows: BTreeMap<FlowKey, Levels>,
    shares: Shares,
}

type Levels = BTreeMap<u64, VecDeque<Pending>>;

impl Queues {
    fn new(config: Arc<BatcherConfig>, stats: Arc<ModelStats>) -> Self {
        Self { config, stats, flows: BTreeMap::new(), shares: Shares::default() }
    }

    fn queued(&self) -> usize {
        self.flows.values().flat_map(BTreeMap::values).map(VecDeque::len).sum()
    }

    fn enqueue(&mut self, level: u64, pending: Pending) {
        let max = self.config.policies.get(&level).map_or(0, |p| p.max_queue_size);
        if max > 0 {
            let at_level: usize = self.flows.values().filter_map(|f| f.get(&level)).map(VecDeque::len).sum();
            if at_level >= max {
                self.stats.pending_add(-1);
                self.stats.usage.record_refusal(crate::stats::Quota::Queue);
                let prefix = crate::error::request_id_prefix(pending.exec.id.as_deref());
                let message = format!("{prefix}Exceeds maximum queue size");
                let _ = pending.reply.send(Err(CoreError::unavailable(message)));
                return;
            }
        }
        let (flow, weight) = flow_of(pending.exec.principal.as_ref());
        self.shares.arrive(&flow, weight);
        let queue = self.flows.entry(flow).or_default().entry(level).or_default();
        // Requests delayed by their timeout (DELAY policy) stay behind every new arrival.
        let at = queue.iter().position(|p| p.delayed).unwrap_or(queue.len());
        queue.insert(at, pending);
    }

    /// Rejects or demotes requests whose queue timeout has passed.
    fn expire(&mut self, now: Instant) {
        let policies = &self.config.policies;
        let stats = &self.stats;
        for (flow, levels) in &mut self.flows {
            for (level, queue) in levels.iter_mut() {
                // Most queues have nothing due (no timeouts configured): leave them as they are.
                if !queue.iter().any(|p| p.deadline.is_some_and(|d| d <= now) && !p.delayed) {
                    continue;
                }
                let reject = policies.get(level).is_none_or(|p| p.reject_on_timeout);
                let mut kept = VecDeque::with_capacity(queue.len());
                let mut delayed = Vec::new();
                for mut p in queue.drain(..) {
                    match p.deadline {
                        Some(d) if d <= now && !p.delayed => {
                            if reject {
                                stats.pending_add(-1);
                                self.shares.left(flow);
                                let _ = p.reply.send(Err(CoreError::unavailable("Request timeout expired")));
                            } else {
                                p.delayed = true;
                                delayed.push(p);
                            }
                        }
                        _ => kept.push_back(p),
                    }
                }
                kept.extend(delayed);
                *queue = kept;
            }
        }
        self.flows.retain(|_, levels| levels.values().any(|q| !q.is_empty()));
    }

    /// The flow whose turn it is.
    fn head_flow(&self) -> Option<&FlowKey> {
        self.shares.next(self.flows.keys())
    }

    /// The next request to serve: from the flow whose turn it is, highest priority level first,
    /// oldest first within a level.
    fn head(&self) -> Option<&Pending> {
        self.flows.get(self.head_flow()?)?.values().find_map(VecDeque::front)
    }

    /// How many batch slots the requests compatible with the head would fill now (capped).
    fn ready_size(&self) -> usize {
        let Some(head) = self.head() else { return 0 };
        let mut total = 0;
        for p in self.flows.values().flat_map(BTreeMap::values).flatten() {
            if !compatible(&head.exec, &p.exec) {
                continue;
            }
            if total + p.batch_size > self.config.max_batch_size {
                break;
            }
            total += p.batch_size;
        }
        total
    }

    /// Whether the requests ready now would fill a batch the config calls full.
    fn full(&self) -> bool {
        let size = self.ready_size();
        size >= self.config.max_batch_size || self.config.preferred.contains(&size)
    }

    /// Takes the head and then, flow by flow in the order of their shares, compatible requests,
    /// up to the largest preferred size that can be filled (or max_batch_size).
    fn take_batch(&mut self) -> Vec<Pending> {
        let available = self.ready_size();
        let target = self.config.preferred.iter().rev().copied().find(|&p| p <= available).unwrap_or(available).max(1);
        let Some(flow) = self.head_flow().cloned() else { return Vec::new() };
        let Some(head) = self.take_from(&flow, |_| true) else { return Vec::new() };
        let mut total = head.batch_size;
        let mut batch = vec![head];
        while total < target {
            let fits = |p: &Pending| compatible(&batch[0].exec, &p.exec) && total + p.batch_size <= target;
            let candidates: Vec<&FlowKey> =
                self.flows.iter().filter(|(_, levels)| levels.values().flatten().any(fits)).map(|(f, _)| f).collect();
            let Some(flow) = self.shares.next(candidates).cloned() else { break };
            let Some(p) = self.take_from(&flow, fits) else { break };
            total += p.batch_size;
            batch.push(p);
        }
        batch
    }

    /// Takes the first request of `flow` (in level order) that `fits`, charging the flow for it.
    fn take_from(&mut self, flow: &FlowKey, fits: impl Fn(&Pending) -> bool) -> Option<Pending> {
        let levels = self.flows.get_mut(flow)?;
        let taken = levels.values_mut().find_map(|queue| {
            let at = queue.iter().position(&fits)?;
            queue.remove(at)
        })?;
        if levels.values().all(VecDeque::is_empty) {
            self.flows.remove(flow);
        }
        self.shares.served(flow, taken.batch_size);
        Some(taken)
    }

    /// Answers every queued request with `error`.
    fn fail_all(&mut self, error: &CoreError) {
        for p in std::mem::take(&mut self.flows).into_values().flat_map(BTreeMap::into_values).flatten() {
            self.fail(p, error);
        }
        self.shares = Shares::default();
    }

    /// Answers one request that was counted as pending with `error`.
    fn fail(&self, p: Pending, error: &CoreError) {
        self.stats.pending_add(-1);
        let _ = p.reply.send(Err(error.clone()));
    }
}

/// Runs one batch on the instance whose slot is `slot` and answers its requests; the answers
/// wait for `wait_for` first (the previous batch's, under `preserve_ordering`).
async fn run_batch(
    pool: &InstancePool,
    model: &str,
    slot: InstanceSlot,
    batch: Vec<Pending>,
    wait_for: Option<oneshot::Receiver<()>>,
) {
    let stats = pool.stats();
    let started = Instant::now();
    let total: usize = batch.iter().map(|p| p.batch_size).sum();
    let mut execs = Vec::with_capacity(batch.len());
    let mut replies = Vec::with_capacity(batch.len());
    stats.pending_add(-(batch.len() as i64));
    for p in batch {
        let waited = started.saturating_duration_since(p.enqueued);
        stats.record_queue(waited);
        if let Some(principal) = &p.exec.principal {
            principal.record_queue(waited);
        }
        execs.push(p.exec);
        replies.push(p.reply);
    }
    let results = pool.run(slot, execs, total).await;
    tracing::trace!(model, requests = replies.len(), batch_size = total, "executed a batch");
    if let Some(previous) = wait_for {
        let _ = previous.await;
    }
    for (reply, outputs) in replies.into_iter().zip(results) {
        let _ = reply.send(outputs);
    }
}

/// The queue of a batcher with no queue delay and no ordering to keep (the default
/// `dynamic_batching { }`): no task of its own. Requests queue under a lock, and the next batch
/// starts where an instance's slot comes back ([`InstanceSlot`]'s release hook): on the thread
/// whose execution just ended, or where a request queued while a slot was free. A batcher task
/// had to be woken for each batch, from the thread that queued the first request or freed the
/// instance: a futex call and an inter-processor interrupt when that task's thread slept, and a
/// third busy thread next to the connection threads. On a small box that cost more than the
/// lock; on four cores one model measured slower at concurrency 16, not explained yet (suspects:
/// four threads on this one lock, and executions moving between threads).
///
/// No request is left behind: a request is queued and a slot tried under the lock, and a
/// released slot's hook takes the lock after the slot is free, so either the request finds the
/// slot free or the hook finds the request.
struct SharedQueue {
    queues: Mutex<Queues>,
    pool: Arc<InstancePool>,
    model: String,
    /// Where batches start when the releasing thread has no runtime (none does in practice: an
    /// execution runs on a runtime thread or one of its blocking threads).
    fallback: Option<tokio::runtime::Handle>,
}

thread_local! {
    /// Set while this thread hands a batch to a runtime (`SharedQueue::start_next`).
    static STARTING_BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl SharedQueue {
    /// The queues, also after a panic elsewhere under the lock: nothing there leaves them
    /// inconsistent (each method finishes its change before it can panic), and a poisoned queue
    /// that refused every caller would leave the requests in it unanswered.
    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enqueue(self: &Arc<Self>, level: u64, pending: Pending, gather: bool) {
        let mut queues = self.lock();
        queues.enqueue(level, pending);
        self.start_next(queues, gather);
    }

    /// A slot came back: the next batch starts if requests wait and a slot is free.
    fn kick(self: &Arc<Self>) {
        self.start_next(self.lock(), gathers_under_load());
    }

    fn start_next(self: &Arc<Self>, mut queues: std::sync::MutexGuard<'_, Queues>, gather: bool) {
        if queues.queued() == 0 {
            return;
        }
        // Re-entered from inside `spawn` below: the runtime is shutting down and dropped the
        // batch at once, whose slot called the hook again. Spawning again would recurse until
        // the stack overflows; the queued requests are answered instead.
        if STARTING_BATCH.get() {
            queues.fail_all(&CoreError::unavailable("the model's scheduler has stopped (server shutting down)"));
            return;
        }
        match self.pool.try_acquire() {
            Some(slot) => {
                drop(queues);
                let batch = Arc::clone(self).drain(slot, gather);
                match tokio::runtime::Handle::try_current().ok().or_else(|| self.fallback.clone()) {
                    Some(runtime) => {
                        STARTING_BATCH.set(true);
                        drop(runtime.spawn(batch));
                        STARTING_BATCH.set(false);
                    }
                    None => {
                        self.lock().fail_all(&CoreError::internal("no async runtime to run the model's batches on"));
                        // The batch and its slot drop here; the hook finds the queue empty.
                    }
                }
            }
            None if self.pool.is_closed() => queues.fail_all(&super::pool::instances_gone()),
            // Every slot is busy: the first to come back starts the next batch.
            None => {}
        }
    }

    /// Forms one batch from the queue and runs it on `slot`'s instance. When the slot comes back
    /// the hook starts the next one.
    async fn drain(self: Arc<Self>, slot: InstanceSlot, gather: bool) {
        // Under load on one worker, one scheduler pass first for the requests already on their
        // way: the thread's other connections that are readable parse and queue theirs (see
        // `BatcherTask::run`, step 2b).
        if gather && self.pool.under_load() && !self.lock().full() {
            tokio::task::yield_now().await;
        }
        let batch = {
            let mut queues = self.lock();
            queues.expire(Instant::now());
            queues.take_batch()
        };
        if batch.is_empty() {
            return; // everything timed out; the slot goes back
        }
        run_batch(&self.pool, &self.model, slot, batch, None).await;
    }
}

/// The batcher's task, for configs with a queue delay or ordering to keep.
struct BatcherTask {
    queues: Queues,
    pool: Arc<InstancePool>,
    model: String,
    /// Completion of the previous batch, for `preserve_ordering`.
    last_batch_done: Option<oneshot::Receiver<()>>,
    /// See [`gathers_under_load`].
    gather_under_load: bool,
}

impl BatcherTask {
    /// No instance is left (every one panicked and was retired): answers every queued and
    /// later request with `error` until the model is dropped, keeping the pending count right.
    async fn fail_all(mut self, error: CoreError, mut rx: mpsc::UnboundedReceiver<(u64, Pending)>) {
        self.queues.fail_all(&error);
        while let Some((_, p)) = rx.recv().await {
            self.queues.fail(p, &error);
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<(u64, Pending)>) {
        let config = Arc::clone(&self.queues.config);
        loop {
            // 1. Something to do.
            while self.queues.queued() == 0 {
                match rx.recv().await {
                    Some((level, p)) => self.queues.enqueue(level, p),
                    None => return,
                }
            }
            // 2. A free instance; keep queueing (and rejecting on a full queue) meanwhile.
            let slot = loop {
                tokio::select! {
                    biased;
                    slot = self.pool.acquire() => break slot,
                    item = rx.recv() => match item {
                        Some((level, p)) => self.queues.enqueue(level, p),
                        None => return,
                    },
                }
            };
            let slot = match slot {
                Ok(slot) => slot,
                Err(e) => return self.fail_all(e, rx).await,
            };
            while let Ok((level, p)) = rx.try_recv() {
                self.queues.enqueue(level, p);
            }
            // 2b. On one worker, under load with no queue delay, one scheduler pass for the
            // requests already on their way: a request's send woke this task into its worker's
            // next slot, ahead of the connections that are readable too. `yield_now` runs after
            // the worker's other ready tasks and an I/O poll, so those parse and queue their
            // requests first. A pass that finds nobody (a busy box that is not saturated) costs
            // a scheduler round; skipping passes after such a one lost batching on a saturated
            // core, so every pass is taken.
            if self.gather_under_load && config.max_delay.is_zero() && !self.queues.full() && self.pool.under_load() {
                tokio::task::yield_now().await;
                while let Ok((level, p)) = rx.try_recv() {
                    self.queues.enqueue(level, p);
                }
            }
            // 3. Wait (at most max_queue_delay from the oldest request) for a fuller batch.
            self.queues.expire(Instant::now());
            if let Some(oldest) = self.queues.head().map(|p| p.enqueued) {
                let deadline = oldest + config.max_delay;
                if !self.queues.full() && Instant::now() < deadline {
                    let timer = sleep_until_precise(deadline);
                    tokio::pin!(timer);
                    while !self.queues.full() && Instant::now() < deadline {
                        tokio::select! {
                            item = rx.recv() => match item {
                                Some((level, p)) => self.queues.enqueue(level, p),
                                None => break,
                            },
                            () = &mut timer => break,
                        }
                    }
                }
            }
            self.queues.expire(Instant::now());
            let batch = self.queues.take_batch();
            if batch.is_empty() {
                continue; // everything timed out; the slot goes back
            }
            self.dispatch(slot, batch);
        }
    }

    fn dispatch(&mut self, slot: InstanceSlot, batch: Vec<Pending>) {
        let pool = Arc::clone(&self.pool);
        let model = self.model.clone();
        let wait_for = if self.queues.config.preserve_ordering { self.last_batch_done.take() } else { None };
        let (done_tx, done_rx) = oneshot::channel();
        if self.queues.config.preserve_ordering {
            self.last_batch_done = Some(done_rx);
        }
        tokio::spawn(async move {
            run_batch(&pool, &model, slot, batch, wait_for).await;
            let _ = done_tx.send(());
        });
    }
}

#[cfg(test)]
#[path = "dynamic_tests.rs"]
mod tests;
