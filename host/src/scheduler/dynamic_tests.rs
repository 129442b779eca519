use std::sync::{Condvar, Mutex};

use bytes::Bytes;

use super::*;
use crate::backend::ModelInstance;
use crate::execution::Caller;
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

/// A caller that waits in place for its answer (a guest's BLS call, `Caller::Thread`) keeps
/// the fast path under load: it blocks its thread, so nothing can gather behind a yield, and
/// the batcher's hand-offs would only add a thread wake-up per call. The request says so, not
/// the thread: the same calls from the same thread marked `Detached` go through the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_caller_waiting_in_place_keeps_the_fast_path_under_load() {
    for (caller, queued) in [(Caller::Thread, false), (Caller::Detached, true)] {
        let h = Harness::always_under_load(8);
        h.open();
        let batcher = Arc::new(h.batcher);
        let runtime = tokio::runtime::Handle::current();
        let calls = tokio::task::spawn_blocking(move || {
            for i in 0..4u8 {
                let exec = ExecRequest { caller, ..request(&format!("s{i}"), i, 1, &[]) };
                let out = crate::execution::wait_for(&runtime, async { batcher.submit(exec, 1).await }).unwrap();
                assert_eq!(&out[0].data[..], &[i]);
            }
        });
        calls.await.unwrap();
        assert_eq!(h.batches.lock().unwrap().len(), 4);
        let stats = h.stats.snapshot();
        // The fast path records no queue time; the batcher's queue records each request's wait.
        assert_eq!(stats.queue.count, 4);
        assert_eq!(stats.queue.ns > 0, queued, "{caller:?}: queued {}", stats.queue.ns > 0);
    }
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
    assert_eq!(h.batches(), vec![vec!["d0", "d1", "d2", "d3"]], "the preferred size dispatches before the delay ends");
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
    let reject =
        ModelQueuePolicy { default_timeout_microseconds: 20_000, allow_timeout_override: true, ..Default::default() };
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
        let batcher = DynamicBatcher::start(BatcherConfig::new(4, &ModelDynamicBatching::default()), pool, "m".into());
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
