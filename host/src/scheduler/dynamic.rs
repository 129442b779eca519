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
/// waits on tokio's timer, the last stretch on a blocking-pool thread (`nanosleep`, ~50-100 µs
/// precision), which cannot be cancelled but lasts at most 2 ms.
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
/// core, or one of the connection threads, `crate::connection_threads`). An inline execution
/// has ended before the thread parses its next request, and without gathering every request ran
/// alone (one core saturated at concurrency 64: 1.2 requests per execution, 6.7 with it). On the
/// shared runtime with several workers, requests that other workers parse queue while the
/// instance runs, so batches form by themselves (16-core box, 4 workers, concurrency 64: 7.5
/// requests per execution without gathering), and gathering only added queue time: at
/// concurrency 16 add_sub_rust's server-side time rose from 105-125 to 116-160 µs, and
/// closed-loop throughput fell in seven of eight runs (docs/benchmarks.md).
fn gathers_under_load() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|runtime| runtime.metrics().num_workers() == 1)
}

impl DynamicBatcher {
    /// Starts the batcher for one model version (its task, when the config needs one). It ends
    /// when the model is dropped.
    pub fn start(config: BatcherConfig, pool: Arc<InstancePool>, model: String) -> Self {
        let stats = Arc::clone(pool.stats());
        let config = Arc::new(config);
        let queues = Queues { config: Arc::clone(&config), stats: Arc::clone(&stats), levels: BTreeMap::new() };
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
        // dispatch this request alone at once; running it here saves two task hand-offs
        // (measured: ~40 µs of p50 at concurrency 1). On one worker, not under load: an
        // execution that runs inline has ended by the time the next connection's request is
        // parsed, so the instance always looked idle and every request ran alone (one core
        // saturated at concurrency 64: 1.00 request per execution, 38 µs of CPU per inference
        // for the ONNX add_sub; queued, 7.8 and 20 µs).
        // A caller about to block its thread on the answer (a guest's BLS call) cannot let
        // others gather behind a yield: when an instance is idle it runs at once, as at low load
        // (else a guest's BLS calls in a loop paid the batcher's hand-offs and a thread wake-up
        // each: in-process, bls_add_sub took 64 µs a request instead of 13).
        // Only the queue without a task has the fast path (and gathers): the task's configs wait
        // for a fuller batch or keep responses in order.
        let shared = matches!(self.queue, Queue::Shared(_));
        let gather = shared && gathers_under_load();
        let idle_instance = if shared
            && self.stats.pending() == 0
            && (!gather || !self.pool.under_load() || crate::infer::caller_waits_in_place())
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

/// The queues of one batcher, a deque per priority level, and the rules that form a batch.
struct Queues {
    config: Arc<BatcherConfig>,
    stats: Arc<ModelStats>,
    levels: BTreeMap<u64, VecDeque<Pending>>,
}

impl Queues {
    fn queued(&self) -> usize {
        self.levels.values().map(VecDeque::len).sum()
    }

    fn enqueue(&mut self, level: u64, pending: Pending) {
        let max = self.config.policies.get(&level).map_or(0, |p| p.max_queue_size);
        let queue = self.levels.entry(level).or_default();
        if max > 0 && queue.len() >= max {
            self.stats.pending_add(-1);
            self.stats.usage.record_refusal(crate::stats::Quota::Queue);
            let prefix = crate::error::request_id_prefix(pending.exec.id.as_deref());
            let message = format!("{prefix}Exceeds maximum queue size");
            let _ = pending.reply.send(Err(CoreError::unavailable(message)));
            return;
        }
        // Requests delayed by their timeout (DELAY policy) stay behind every new arrival.
        let at = queue.iter().position(|p| p.delayed).unwrap_or(queue.len());
        queue.insert(at, pending);
    }

    /// Rejects or demotes requests whose queue timeout has passed.
    fn expire(&mut self, now: Instant) {
        let policies = &self.config.policies;
        let stats = &self.stats;
        for (level, queue) in &mut self.levels {
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

    /// The next request to serve: highest priority level first, oldest first within a level.
    fn head(&self) -> Option<&Pending> {
        self.levels.values().find_map(VecDeque::front)
    }

    /// How many batch slots the requests compatible with the head would fill now (capped).
    fn ready_size(&self) -> usize {
        let Some(head) = self.head() else { return 0 };
        let mut total = 0;
        for p in self.levels.values().flatten() {
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

    /// Takes the head and the compatible requests after it, in priority order, up to the largest
    /// preferred size that can be filled (or max_batch_size).
    fn take_batch(&mut self) -> Vec<Pending> {
        let available = self.ready_size();
        let target = self.config.preferred.iter().rev().copied().find(|&p| p <= available).unwrap_or(available).max(1);
        let Some(head_level) = self.levels.iter().find(|(_, q)| !q.is_empty()).map(|(l, _)| *l) else {
            return Vec::new();
        };
        let Some(head) = self.levels.get_mut(&head_level).and_then(VecDeque::pop_front) else { return Vec::new() };
        let mut total = head.batch_size;
        let mut batch = vec![head];
        for queue in self.levels.values_mut() {
            let mut i = 0;
            while i < queue.len() && total < target {
                let fits =
                    queue.get(i).is_some_and(|p| compatible(&batch[0].exec, &p.exec) && total + p.batch_size <= target);
                if fits && let Some(p) = queue.remove(i) {
                    total += p.batch_size;
                    batch.push(p);
                    continue;
                }
                i += 1;
            }
        }
        batch
    }

    /// Answers every queued request with `error`.
    fn fail_all(&mut self, error: &CoreError) {
        for p in std::mem::take(&mut self.levels).into_values().flatten() {
            self.fail(p, error);
        }
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
        stats.record_queue(started.saturating_duration_since(p.enqueued));
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
/// third busy thread next to the connection threads. Measured against the task (issue 15, tenth
/// round in docs/benchmarks.md): on the 2-core VM at concurrency 16 the same or slightly less CPU
/// per inference and 20 % less server-side time; on one saturated core, the ONNX add_sub 17 %
/// more throughput at concurrency 16. On four device cores (four connection threads) the Rust
/// guest gained at concurrency 64 but the ONNX add_sub lost 4-17 % at concurrency 16, with more
/// CPU per inference at the same batch sizes: not explained yet (suspects: four threads on this
/// one lock, and executions moving between threads).
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
            // a scheduler round; skipping passes after such a one measured the same at
            // concurrency 4 on the 2-core VM and lost a third of the batching on a saturated
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
mod tests {
    use std::sync::{Condvar, Mutex};

    use bytes::Bytes;

    use super::*;
    use crate::backend::ModelInstance;
    use crate::tensor::DataType;

    type Gate = Arc<(Mutex<bool>, Condvar)>;

    /// Echoes every request's inputs and records the batches it ran (the ids of their requests).
    /// While the gate is closed it blocks, so a test decides when the queue drains.
    struct EchoInstance {
        batches: Arc<Mutex<Vec<Vec<String>>>>,
        gate: Gate,
        entered: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl ModelInstance for EchoInstance {
        fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
            self.entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (open, cv) = &*self.gate;
            let mut guard = open.lock().unwrap();
            while !*guard {
                guard = cv.wait(guard).unwrap();
            }
            drop(guard);
            self.batches.lock().unwrap().push(batch.iter().map(|r| r.id.clone().unwrap_or_default()).collect());
            batch.into_iter().map(|r| Ok(r.inputs)).collect()
        }
    }

    struct Harness {
        batcher: DynamicBatcher,
        batches: Arc<Mutex<Vec<Vec<String>>>>,
        gate: Gate,
        stats: Arc<ModelStats>,
        entered: Arc<std::sync::atomic::AtomicUsize>,
    }

    type Reply = tokio::task::JoinHandle<BatchReply>;

    impl Harness {
        fn new(max_batch_size: i32, config: ModelDynamicBatching) -> Self {
            Self::with_pool(max_batch_size, config, |pool| pool)
        }

        /// With every arrival counting as back to back once something has executed.
        fn always_under_load(max_batch_size: i32) -> Self {
            Self::with_pool(max_batch_size, ModelDynamicBatching::default(), |pool| {
                pool.with_back_to_back(Duration::from_secs(3600))
            })
        }

        fn with_pool(
            max_batch_size: i32,
            config: ModelDynamicBatching,
            pool: impl FnOnce(InstancePool) -> InstancePool,
        ) -> Self {
            let batches = Arc::new(Mutex::new(Vec::new()));
            let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
            let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let instance =
                EchoInstance { batches: Arc::clone(&batches), gate: Arc::clone(&gate), entered: Arc::clone(&entered) };
            let stats = Arc::new(ModelStats::default());
            let pool = Arc::new(pool(InstancePool::new(vec![Box::new(instance)], Arc::clone(&stats))));
            let batcher = DynamicBatcher::start(BatcherConfig::new(max_batch_size, &config), pool, "m".into());
            Self { batcher, batches, gate, stats, entered }
        }

        fn open(&self) {
            *self.gate.0.lock().unwrap() = true;
            self.gate.1.notify_all();
        }

        /// Submits a [1, cols] UINT8 request filled with `fill`.
        fn submit(&self, id: &str, fill: u8, cols: i64, params: &[(&str, i64)]) -> Reply {
            tokio::spawn(self.batcher.submit(request(id, fill, cols, params), 1))
        }

        fn batches(&self) -> Vec<Vec<String>> {
            self.batches.lock().unwrap().clone()
        }

        /// Waits until the (only) instance is inside execute, held by the closed gate. Requests
        /// submitted after this queue up: `submit` puts them in the channel before returning,
        /// and the batcher drains the channel when the instance frees up.
        async fn until_blocked(&self) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.entered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "the first request never reached the instance");
                tokio::task::yield_now().await;
            }
        }
    }

    /// A [1, cols] UINT8 request filled with `fill`, asking for its input back as output "x".
    fn request(id: &str, fill: u8, cols: i64, params: &[(&str, i64)]) -> ExecRequest {
        let tensor = Tensor::new("x", DataType::Uint8, vec![1, cols], Bytes::from(vec![fill; cols as usize])).unwrap();
        ExecRequest {
            id: Some(id.to_string()),
            inputs: vec![tensor],
            outputs: vec!["x".into()],
            parameters: params.iter().map(|(k, v)| (k.to_string(), ParamValue::Int(*v))).collect(),
            ..Default::default()
        }
    }

    async fn outputs(reply: Reply) -> CoreResult<Vec<Tensor>> {
        reply.await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_requests_run_as_one_batch_and_get_their_own_rows() {
        let h = Harness::new(8, ModelDynamicBatching::default());
        let first = h.submit("blocker", 9, 2, &[]);
        h.until_blocked().await;
        let rest: Vec<Reply> = (0..5u8).map(|i| h.submit(&format!("r{i}"), i, 2, &[])).collect();
        h.open();
        for (i, reply) in rest.into_iter().enumerate() {
            let out = outputs(reply).await.unwrap();
            assert_eq!(&out[0].data[..], &[i as u8; 2], "each request gets its own rows back");
        }
        outputs(first).await.unwrap();
        let batches = h.batches();
        assert_eq!(batches, vec![vec!["blocker".to_string()], (0..5).map(|i| format!("r{i}")).collect()]);
        let stats = h.stats.snapshot();
        assert_eq!((stats.execution_count, stats.inference_count), (2, 6));
        assert!(stats.batches.contains_key(&5) && stats.batches.contains_key(&1));
        assert_eq!(stats.queue.count, 6);
    }

    /// Under load, requests that arrive back to back run as one batch. On one worker, as on a
    /// saturated core: the first request's send wakes the batcher ahead of the other tasks whose
    /// requests are ready, and an inline execution has ended before the next request arrives,
    /// so before this every request ran alone (the first on the fast path, each later one as
    /// soon as the batcher saw it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn requests_arriving_back_to_back_gather_into_one_batch() {
        let h = Harness::always_under_load(8);
        h.open();
        outputs(h.submit("first", 0, 1, &[])).await.unwrap();
        assert_eq!(h.batches(), vec![vec!["first"]], "a lone request runs at once");
        // Eight connections' requests, each submitted by a task of its own. The tasks are
        // spawned from a task on the one worker, so they queue on it and nothing else runs them:
        // the last one spawned runs first (the worker's LIFO slot) and its send wakes the batcher
        // into that slot, ahead of the other seven.
        let batcher = Arc::new(h.batcher);
        let spawner = tokio::spawn(async move {
            (0..8u8)
                .map(|i| {
                    let batcher = Arc::clone(&batcher);
                    tokio::spawn(async move { batcher.submit(request(&format!("c{i}"), i, 1, &[]), 1).await })
                })
                .collect::<Vec<_>>()
        });
        let tasks = spawner.await.unwrap();
        for (i, task) in tasks.into_iter().enumerate() {
            let out = task.await.unwrap().unwrap();
            assert_eq!(&out[0].data[..], &[i as u8], "each request gets its own row back");
        }
        let mut batches = h.batches.lock().unwrap().clone();
        assert_eq!(batches.len(), 2, "the eight requests ran as one batch: {batches:?}");
        batches[1].sort();
        assert_eq!(batches[1], (0..8).map(|i| format!("c{i}")).collect::<Vec<_>>());
    }

    /// A caller that waits in place for its answer (a guest's BLS call, `infer::wait_for`) keeps
    /// the fast path under load: it blocks its thread, so nothing can gather behind a yield, and
    /// the batcher's hand-offs would only add a thread wake-up per call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_caller_waiting_in_place_keeps_the_fast_path_under_load() {
        let h = Harness::always_under_load(8);
        h.open();
        let batcher = Arc::new(h.batcher);
        let runtime = tokio::runtime::Handle::current();
        let caller = tokio::task::spawn_blocking(move || {
            for i in 0..4u8 {
                let exec = request(&format!("s{i}"), i, 1, &[]);
                crate::infer::wait_for(&runtime, async { batcher.submit(exec, 1).await }).unwrap();
            }
        });
        caller.await.unwrap();
        assert_eq!(h.batches.lock().unwrap().len(), 4);
        let stats = h.stats.snapshot();
        // The fast path records no queue time; the batcher's queue records each request's wait.
        assert_eq!((stats.queue.count, stats.queue.ns), (4, 0), "a request went through the batcher's queue");
    }

    /// With several workers, requests under load keep the fast path: batches form by themselves
    /// there (requests other workers parse queue while the instance runs), and gathering would
    /// only add queue time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_several_workers_requests_under_load_keep_the_fast_path() {
        let h = Harness::always_under_load(8);
        h.open();
        for i in 0..4u8 {
            let out = h.batcher.submit(request(&format!("s{i}"), i, 1, &[]), 1).await.unwrap();
            assert_eq!(&out[0].data[..], &[i]);
        }
        assert_eq!(h.batches().len(), 4);
        let stats = h.stats.snapshot();
        assert_eq!((stats.queue.count, stats.queue.ns), (4, 0), "a request went through the batcher's queue");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn max_batch_size_preferred_sizes_and_shapes_bound_batches() {
        let config = ModelDynamicBatching { preferred_batch_size: vec![2], ..Default::default() };
        let h = Harness::new(3, config);
        let first = h.submit("blocker", 0, 2, &[]);
        h.until_blocked().await;
        // Five [1,2] requests and one [1,3] (different non-batch dims: never merged with them).
        let mut replies: Vec<Reply> = (0..5u8).map(|i| h.submit(&format!("a{i}"), i, 2, &[])).collect();
        replies.push(h.submit("wide", 7, 3, &[]));
        h.open();
        for reply in replies {
            outputs(reply).await.unwrap();
        }
        outputs(first).await.unwrap();
        let batches = h.batches();
        // preferred size 2 wins over filling max_batch_size 3 while enough requests wait
        assert_eq!(batches[1], vec!["a0", "a1"]);
        assert_eq!(batches[2], vec!["a2", "a3"]);
        assert!(batches.iter().all(|b| b.len() <= 3));
        assert!(batches.iter().any(|b| b == &vec!["wide".to_string()]), "{batches:?}");
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn max_queue_delay_waits_for_a_fuller_batch() {
        let config = ModelDynamicBatching {
            max_queue_delay_microseconds: 200_000,
            preferred_batch_size: vec![4],
            ..Default::default()
        };
        let h = Harness::new(8, config);
        h.open();
        let replies: Vec<Reply> = (0..4u8).map(|i| h.submit(&format!("d{i}"), i, 1, &[])).collect();
        for reply in replies {
            outputs(reply).await.unwrap();
        }
        assert_eq!(
            h.batches(),
            vec![vec!["d0", "d1", "d2", "d3"]],
            "the preferred size dispatches before the delay ends"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_queue_rejects_at_once() {
        let policy = ModelQueuePolicy { max_queue_size: 2, ..Default::default() };
        let config = ModelDynamicBatching { default_queue_policy: Some(policy), ..Default::default() };
        let h = Harness::new(1, config);
        let first = h.submit("blocker", 0, 1, &[]);
        h.until_blocked().await;
        let queued: Vec<Reply> = (0..2u8).map(|i| h.submit(&format!("q{i}"), i, 1, &[])).collect();
        let rejected = outputs(h.submit("over", 9, 1, &[])).await.unwrap_err();
        assert_eq!(rejected.message, "[request id: over] Exceeds maximum queue size");
        assert_eq!(rejected.kind, crate::error::ErrorKind::Unavailable);
        h.open();
        for reply in queued {
            outputs(reply).await.unwrap();
        }
        outputs(first).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn higher_priority_runs_first() {
        let config = ModelDynamicBatching { priority_levels: 3, default_priority_level: 3, ..Default::default() };
        let h = Harness::new(1, config);
        let first = h.submit("blocker", 0, 1, &[]);
        h.until_blocked().await;
        let low = h.submit("low", 1, 1, &[]);
        let mid = h.submit("mid", 2, 1, &[("priority", 2)]);
        let high = h.submit("high", 3, 1, &[("priority", 1)]);
        let bad = h.submit("default", 4, 1, &[("priority", 99)]);
        h.open();
        for reply in [first, low, mid, high, bad] {
            outputs(reply).await.unwrap();
        }
        let order: Vec<String> = h.batches().into_iter().flatten().collect();
        assert_eq!(order, vec!["blocker", "high", "mid", "low", "default"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn preserve_ordering_holds_later_batches_back() {
        // Two instances: the first is gated shut, the second runs at once.
        for preserve in [false, true] {
            let batches = Arc::new(Mutex::new(Vec::new()));
            let shut: Gate = Arc::new((Mutex::new(false), Condvar::new()));
            let open: Gate = Arc::new((Mutex::new(true), Condvar::new()));
            let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            // The pool pops instances from the end: the gated one is taken first.
            let instances: Vec<Box<dyn ModelInstance>> = vec![
                Box::new(EchoInstance {
                    batches: Arc::clone(&batches),
                    gate: Arc::clone(&open),
                    entered: Arc::new(Default::default()),
                }),
                Box::new(EchoInstance {
                    batches: Arc::clone(&batches),
                    gate: Arc::clone(&shut),
                    entered: Arc::clone(&entered),
                }),
            ];
            let pool = Arc::new(InstancePool::new(instances, Arc::default()));
            let config = ModelDynamicBatching { preserve_ordering: preserve, ..Default::default() };
            let batcher = DynamicBatcher::start(BatcherConfig::new(1, &config), pool, "m".into());
            let submit = |id: &str| {
                let tensor = Tensor::new("x", DataType::Uint8, vec![1, 1], Bytes::from_static(&[1])).unwrap();
                let exec = ExecRequest {
                    id: Some(id.into()),
                    inputs: vec![tensor],
                    outputs: vec!["x".into()],
                    ..Default::default()
                };
                tokio::spawn(batcher.submit(exec, 1))
            };
            let first = submit("first");
            let deadline = Instant::now() + Duration::from_secs(10);
            while entered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline);
                tokio::task::yield_now().await;
            }
            let second = submit("second");
            // The second batch runs on the free instance right away.
            while batches.lock().unwrap().is_empty() {
                assert!(Instant::now() < deadline);
                tokio::task::yield_now().await;
            }
            let second_done = tokio::time::timeout(Duration::from_millis(100), second).await;
            if preserve {
                assert!(second_done.is_err(), "with preserve_ordering the second response waits for the first");
            } else {
                assert!(second_done.is_ok(), "without preserve_ordering the second response is not held back");
            }
            *shut.0.lock().unwrap() = true;
            shut.1.notify_all();
            outputs(first).await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queue_timeouts_reject_or_delay() {
        let reject = ModelQueuePolicy {
            default_timeout_microseconds: 20_000,
            allow_timeout_override: true,
            ..Default::default()
        };
        let h = Harness::new(1, ModelDynamicBatching { default_queue_policy: Some(reject), ..Default::default() });
        let first = h.submit("blocker", 0, 1, &[]);
        h.until_blocked().await;
        let expires = h.submit("expires", 1, 1, &[]);
        let patient = h.submit("patient", 2, 1, &[("timeout", 10_000_000)]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        h.open();
        assert_eq!(outputs(expires).await.unwrap_err().message, "Request timeout expired");
        outputs(patient).await.unwrap();
        outputs(first).await.unwrap();

        let delay = ModelQueuePolicy {
            timeout_action: TimeoutAction::Delay as i32,
            default_timeout_microseconds: 20_000,
            allow_timeout_override: true,
            ..Default::default()
        };
        let h = Harness::new(1, ModelDynamicBatching { default_queue_policy: Some(delay), ..Default::default() });
        let first = h.submit("blocker", 0, 1, &[]);
        h.until_blocked().await;
        let late = h.submit("late", 1, 1, &[]);
        let on_time = h.submit("on_time", 2, 1, &[("timeout", 10_000_000)]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        h.open();
        for reply in [first, late, on_time] {
            outputs(reply).await.unwrap();
        }
        let order: Vec<String> = h.batches().into_iter().flatten().collect();
        assert_eq!(order, vec!["blocker", "on_time", "late"], "a timed-out request waits behind the others");
    }

    /// Echoes its inputs, computing only: it runs inline once its gate opens, on a blocking
    /// thread before (and after a slow, preempted run closes the gate).
    struct InlineEcho;

    impl ModelInstance for InlineEcho {
        fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
            batch.into_iter().map(|r| Ok(r.inputs)).collect()
        }

        fn only_computes(&self) -> bool {
            true
        }
    }

    /// The queue without a task (the default config): many callers on several threads and two
    /// instances; slots come back on workers and on blocking threads, and every request is
    /// answered with its own rows, none left waiting and nothing counted as pending after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 3)]
    async fn without_a_batcher_task_every_caller_is_answered() {
        let stats = Arc::new(ModelStats::default());
        let instances: Vec<Box<dyn ModelInstance>> = vec![Box::new(InlineEcho), Box::new(InlineEcho)];
        let pool = Arc::new(InstancePool::new(instances, Arc::clone(&stats)));
        let config = BatcherConfig::new(8, &ModelDynamicBatching::default());
        let batcher = Arc::new(DynamicBatcher::start(config, pool, "m".into()));
        assert!(matches!(batcher.queue, Queue::Shared(_)), "the default config queues without a task");
        let callers: Vec<_> = (0..24u8)
            .map(|caller| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move {
                    for i in 0..100u8 {
                        let fill = caller.wrapping_mul(100).wrapping_add(i);
                        let out = batcher.submit(request("r", fill, 3, &[]), 1).await.unwrap();
                        assert_eq!(&out[0].data[..], &[fill; 3], "a caller got someone else's rows");
                    }
                })
            })
            .collect();
        for caller in callers {
            tokio::time::timeout(Duration::from_secs(30), caller).await.expect("a request was left waiting").unwrap();
        }
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.inference_count, 2400);
        assert!(snapshot.execution_count < 2400, "no request ever shared a batch");
        assert_eq!(stats.pending(), 0);
    }

    /// A server shutting down with requests queued: the instance's slot comes back after the
    /// runtime stopped, whose `spawn` drops the next batch at once, and that batch's slot calls
    /// the hook again. The queued requests are answered instead of the hook recursing until the
    /// stack overflows (which aborts the test process).
    #[test]
    fn a_slot_coming_back_after_the_runtime_stopped_answers_the_queue() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
        let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let instance = EchoInstance { batches: Arc::default(), gate: Arc::clone(&gate), entered: Arc::clone(&entered) };
        let stats = Arc::new(ModelStats::default());
        let pool = Arc::new(InstancePool::new(vec![Box::new(instance)], Arc::clone(&stats)));
        let batcher = runtime.block_on(async {
            let batcher =
                DynamicBatcher::start(BatcherConfig::new(4, &ModelDynamicBatching::default()), pool, "m".into());
            tokio::spawn(batcher.submit(request("blocker", 0, 1, &[]), 1));
            while entered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            for i in 0..2u8 {
                tokio::spawn(batcher.submit(request(&format!("q{i}"), i, 1, &[]), 1));
            }
            batcher
        });
        assert_eq!(stats.pending(), 2);
        runtime.shutdown_background();
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        let deadline = Instant::now() + Duration::from_secs(10);
        while stats.pending() != 0 {
            assert!(Instant::now() < deadline, "the queued requests were never answered");
            std::thread::yield_now();
        }
        drop(batcher);
    }

    struct PanickingInstance;

    impl ModelInstance for PanickingInstance {
        fn execute(&mut self, _batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
            panic!("backend bug")
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_instances_left_requests_fail_and_nothing_stays_pending() {
        let stats = Arc::new(ModelStats::default());
        let pool = Arc::new(InstancePool::new(vec![Box::new(PanickingInstance)], Arc::clone(&stats)));
        let batcher = DynamicBatcher::start(BatcherConfig::new(4, &ModelDynamicBatching::default()), pool, "m".into());
        let exec = || {
            let tensor = Tensor::new("x", DataType::Uint8, vec![1, 1], Bytes::from_static(&[1])).unwrap();
            ExecRequest { inputs: vec![tensor], outputs: vec!["x".into()], ..Default::default() }
        };
        let first = batcher.submit(exec(), 1).await.unwrap_err();
        assert!(first.message.contains("failed during execution"), "{}", first.message);
        for _ in 0..3 {
            let later = batcher.submit(exec(), 1).await.unwrap_err();
            assert!(later.message.contains("no model instance is left"), "{}", later.message);
        }
        assert_eq!(stats.pending(), 0);
    }
}
