use super::*;

/// An instance that stays inside execute until `target` executions overlap (or `patience`
/// passes), counting how many run at once.
struct GatedInstance {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    target: usize,
    patience: Duration,
}

impl ModelInstance for GatedInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let deadline = Instant::now() + self.patience;
        while self.peak.load(Ordering::SeqCst) < self.target && Instant::now() < deadline {
            std::thread::yield_now();
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        batch.into_iter().map(|_| Ok(Vec::new())).collect()
    }
}

async fn peak_concurrency(instances: usize, requests: usize, target: usize, patience_ms: u64) -> usize {
    let (pool, peak) = gated_pool(instances, target, Duration::from_millis(patience_ms));
    let pool = Arc::new(pool);
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed).await })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().iter().all(Result::is_ok));
    }
    assert_eq!(pool.stats().snapshot().execution_count, requests as u64);
    peak.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_run_concurrently_but_never_twice_at_once() {
    // Two instances, two requests that wait for each other: they overlap.
    assert_eq!(peak_concurrency(2, 2, 2, 5000).await, 2);
    // One instance, three requests that would wait for an overlap: it never comes.
    assert_eq!(peak_concurrency(1, 3, 2, 200).await, 1);
}

struct ShortInstance;

impl ModelInstance for ShortInstance {
    fn execute(&mut self, _batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        vec![Ok(Vec::new())]
    }
}

#[tokio::test]
async fn missing_results_fail_their_requests_and_the_execution_is_not_counted() {
    let pool = InstancePool::new(vec![Box::new(ShortInstance)], Arc::default());
    let results = pool.execute_as(vec![ExecRequest::default(), ExecRequest::default()], 2, Dispatch::Handed).await;
    assert!(results[0].is_ok());
    assert_eq!(results[1].as_ref().err().map(|e| e.message.as_str()), Some("instance returned too few results"));
    assert_eq!(pool.stats().snapshot().execution_count, 0);
}

struct SleepyInstance(Duration);

impl ModelInstance for SleepyInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        std::thread::sleep(self.0);
        batch.into_iter().map(|_| Ok(Vec::new())).collect()
    }
}

/// After a long execution, arrivals count as load for longer: handing back its answer and
/// parsing the next request take longer after it too (an interpreted guest's execution against
/// a small ONNX model's).
#[tokio::test]
async fn a_long_execution_widens_the_back_to_back_window() {
    let pool = InstancePool::new(vec![Box::new(SleepyInstance(Duration::from_millis(200)))], Arc::default())
        .with_back_to_back(Duration::ZERO);
    assert!(!pool.under_load(), "a pool that has not executed is not under load");
    pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed).await;
    assert!(pool.under_load(), "a 200 ms execution left no window");
}

struct PanickingInstance;

impl ModelInstance for PanickingInstance {
    fn execute(&mut self, _batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        panic!("backend bug")
    }
}

#[tokio::test]
async fn a_panicking_instance_is_retired_and_later_requests_fail_cleanly() {
    let pool = InstancePool::new(vec![Box::new(PanickingInstance)], Arc::default());
    let first = pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed).await;
    assert!(first[0].as_ref().is_err_and(|e| e.message.contains("failed during execution")));
    let second = pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed).await;
    assert!(second[0].as_ref().is_err_and(|e| e.message.contains("no model instance is left")));
}

#[tokio::test]
async fn with_a_concurrency_quota_panics_retire_instances_and_then_fail_cleanly() {
    let instances: Vec<Box<dyn ModelInstance>> = (0..3).map(|_| Box::new(PanickingInstance) as _).collect();
    let quotas = super::super::Quotas { max_concurrent: Some(1), max_queue: None };
    let pool = InstancePool::new(instances, Arc::default()).with_quotas("m", quotas);
    for _ in 0..3 {
        let r = pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed).await;
        assert!(r[0].as_ref().is_err_and(|e| e.message.contains("failed during execution")), "{r:?}");
    }
    // Three instances, one permit: the permit outlived the first two panics, not the third.
    let after = tokio::time::timeout(
        Duration::from_secs(5),
        pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed),
    )
    .await
    .expect("a request after every instance panicked must fail, not wait");
    assert!(after[0].as_ref().is_err_and(|e| e.message.contains("no model instance is left")));
}

fn gated_pool(instances: usize, target: usize, patience: Duration) -> (InstancePool, Arc<AtomicUsize>) {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let instances = (0..instances)
        .map(|_| {
            let instance = GatedInstance { running: running.clone(), peak: peak.clone(), target, patience };
            Box::new(instance) as Box<dyn ModelInstance>
        })
        .collect();
    (InstancePool::new(instances, Arc::default()), peak)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrency_quota_caps_executions_below_the_instance_count() {
    let (pool, peak) = gated_pool(4, 4, Duration::from_millis(100));
    let quotas = super::super::Quotas { max_concurrent: Some(2), max_queue: None };
    let pool = Arc::new(pool.with_quotas("m", quotas));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.execute_as(vec![ExecRequest::default()], 1, Dispatch::Handed).await })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().iter().all(Result::is_ok), "a capped request waits, it is not refused");
    }
    assert_eq!(peak.load(Ordering::SeqCst), 2, "4 instances, at most 2 executing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_queue_quota_refuses_what_would_wait_beyond_it() {
    // One instance that holds its execution until the test lets it go (peak 2 never comes).
    let (pool, _) = gated_pool(1, 2, Duration::from_millis(300));
    let quotas = super::super::Quotas { max_concurrent: None, max_queue: Some(1) };
    let pool = Arc::new(pool.with_quotas("m", quotas));
    let call = |pool: Arc<InstancePool>| {
        tokio::spawn(async move {
            let request = ExecRequest { id: Some("r".into()), ..ExecRequest::default() };
            pool.execute_as(vec![request], 1, Dispatch::Handed).await
        })
    };
    let executing = call(pool.clone());
    // Executing: its slot taken and no longer counted as waiting for one (it is counted
    // between the two, and a second request then would be refused).
    while pool.available.available_permits() > 0 || pool.stats().pending() > 0 {
        tokio::task::yield_now().await;
    }
    let queued = call(pool.clone());
    while pool.stats().pending() < 1 {
        tokio::task::yield_now().await;
    }
    let refused = call(pool.clone()).await.unwrap();
    let message = refused[0].as_ref().err().map(|e| (e.kind, e.message.clone()));
    assert_eq!(
        message,
        Some((
            crate::error::ErrorKind::Unavailable,
            "[request id: r] Exceeds maximum queue size (the model's max_queue_size quota is 1)".to_string()
        ))
    );
    assert_eq!(pool.stats().usage.refusals(crate::stats::Quota::Queue), 1);
    assert!(executing.await.unwrap()[0].is_ok());
    assert!(queued.await.unwrap()[0].is_ok(), "the one request within the quota waits and runs");
}

/// An instance that asks to run in place ([`ModelInstance::runs_inline`]) or only computes.
struct Placed {
    in_place: bool,
    computes: bool,
}

impl ModelInstance for Placed {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        batch.into_iter().map(|_| Ok(Vec::new())).collect()
    }
    fn runs_inline(&self) -> bool {
        self.in_place
    }
    fn only_computes(&self) -> bool {
        self.computes
    }
}

fn placed(pool: &InstancePool, instance: &Placed, dispatch: Dispatch, caller: Caller, fast: bool) -> &'static str {
    match pool.placement(instance, dispatch, caller, fast) {
        Placement::Inline(_) => "inline",
        Placement::InPlace => "in place",
        Placement::Handed => "handed",
    }
}

/// The request's caller decides whether its execution may block the caller's thread, and the
/// fast-path switch sends every execution to a blocking thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_request_caller_and_the_switch_decide_where_an_execution_runs() {
    let pool = InstancePool::new(Vec::new(), Arc::default());
    let in_place = Placed { in_place: true, computes: false };
    assert_eq!(placed(&pool, &in_place, Dispatch::Caller, Caller::Task, true), "in place");
    assert_eq!(placed(&pool, &in_place, Dispatch::Caller, Caller::Detached, true), "handed", "a stream was blocked");
    assert_eq!(placed(&pool, &in_place, Dispatch::Caller, Caller::Thread, true), "handed");
    assert_eq!(placed(&pool, &in_place, Dispatch::Handed, Caller::Task, true), "handed", "a batcher ran in place");
    assert_eq!(placed(&pool, &in_place, Dispatch::Caller, Caller::Task, false), "handed", "the switch was ignored");

    let computes = Placed { in_place: false, computes: true };
    assert_eq!(placed(&pool, &computes, Dispatch::Handed, Caller::Detached, true), "handed", "the gate opened alone");
    for _ in 0..64 {
        pool.gate.record(Duration::ZERO, false);
    }
    for caller in [Caller::Detached, Caller::Task, Caller::Thread] {
        assert_eq!(placed(&pool, &computes, Dispatch::Handed, caller, true), "inline");
        assert_eq!(placed(&pool, &computes, Dispatch::Handed, caller, false), "handed", "the switch was ignored");
    }
}
