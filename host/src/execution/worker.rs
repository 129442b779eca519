//! Running synchronous work from async code and the reverse, on the thread that asked: an
//! execution inline on a runtime worker, a guest's host call waiting for a future, a wait that
//! blocks its thread. What each may do is decided by the request ([`super::Caller`]) and the
//! pool; this file only knows about threads and runtimes.

use std::future::Future;
use std::sync::Arc;

/// Runs `wait`, which blocks its thread (a BLS call waiting for its model, a send waiting for a
/// slow reader), from code that may be running on an async runtime thread (an execution the pool
/// runs inline): tokio's `block_in_place` then moves that thread's other tasks elsewhere first.
/// On a blocking thread, or outside a runtime, it just runs `wait`.
pub fn blocking<R>(wait: impl FnOnce() -> R) -> R {
    if on_multi_thread_runtime() { tokio::task::block_in_place(wait) } else { wait() }
}

thread_local! {
    /// The runtime whose worker this thread holds while it runs an execution inline (see
    /// [`run_inline`]). A fact about the thread, not a policy: nothing about a request is kept
    /// here (that travels in the request, [`super::Caller`]).
    static INLINE_ON: std::cell::RefCell<Option<tokio::runtime::Handle>> = const { std::cell::RefCell::new(None) };
}

/// Runs an execution inline on a worker of `runtime` (this thread's, from
/// [`multi_thread_runtime`]): a long one may then hand the worker over ([`hand_off_worker`]).
/// Nested calls (a BLS callee running inline inside its caller's execution, where the current
/// runtime is the one its `wait_for` entered) keep the outermost runtime, whose worker the thread
/// holds.
pub fn run_inline<R>(runtime: tokio::runtime::Handle, work: impl FnOnce() -> R) -> R {
    struct Outermost;
    impl Drop for Outermost {
        fn drop(&mut self) {
            INLINE_ON.set(None);
        }
    }
    let _outermost = INLINE_ON.with_borrow(Option::is_none).then(|| {
        INLINE_ON.set(Some(runtime));
        Outermost
    });
    work()
}

/// Hands the async runtime worker this thread holds for an inline execution ([`run_inline`]) to
/// another thread, so the worker's other tasks go on while this thread stays in a long synchronous
/// run (a guest past its first epoch ticks, see `backend::wasm::instance`). On a one-worker runtime
/// (a connection thread) nothing else would serve that thread's connections meanwhile. Once the
/// worker is handed over, or on a thread that holds none (a blocking-pool thread), it does
/// nothing.
///
/// tokio's `block_in_place` takes the worker back when its closure returns if the new thread has
/// not picked it up yet, so the closure waits (at most [`HAND_OFF_WAIT`]) for a marker task
/// spawned on that runtime, which only a running worker can run.
pub fn hand_off_worker() {
    // Taken: after this the thread no longer holds the worker.
    let Some(runtime) = INLINE_ON.take() else { return };
    if !on_multi_thread_runtime() {
        return;
    }
    let taken = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let marker = Arc::clone(&taken);
    runtime.spawn(async move {
        if let Ok(mut done) = marker.0.lock() {
            *done = true;
        }
        marker.1.notify_one();
    });
    tokio::task::block_in_place(|| {
        let (done, changed) = &*taken;
        if let Ok(guard) = done.lock() {
            let _ = changed.wait_timeout_while(guard, HAND_OFF_WAIT, |done| !*done);
        }
    });
}

/// How long [`hand_off_worker`] waits for another thread to take the worker over.
const HAND_OFF_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether this thread belongs to a multi-thread tokio runtime: `block_in_place` panics on a
/// current-thread one, and only a multi-thread runtime has other workers to move tasks to.
pub fn on_multi_thread_runtime() -> bool {
    multi_thread_runtime().is_some()
}

/// The multi-thread tokio runtime this thread belongs to, if it does (see
/// [`on_multi_thread_runtime`]).
pub fn multi_thread_runtime() -> Option<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Runs `future` to its end from synchronous code (a guest's host call): polled once right here,
/// where a callee that runs inline (an idle instance, short executions) finishes with no thread
/// hop at all; only a future that has to wait is then blocked on, through [`blocking`]. With the
/// fast paths off ([`super::fast_paths`]) it is blocked on at once.
pub fn wait_for<F: Future>(runtime: &tokio::runtime::Handle, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    if super::fast_paths() {
        // Entered so that the first poll can reach the runtime's timers and I/O.
        let _entered = runtime.enter();
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
    blocking(|| runtime.block_on(future))
}
