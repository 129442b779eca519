//! The threads that run the doors' connections (HTTP and gRPC): a runtime of one worker per
//! thread, and each accepted connection stays on one of them for its whole life.
//!
//! Why: on tokio's shared work-stealing runtime a request's wake-ups cross workers (a batch's
//! replies wake connection tasks that other workers then steal; parked workers are unparked to
//! search for work), and each crossing costs a futex call and an inter-processor interrupt, which
//! on a small box costs more than a short request's work. With a connection pinned to a thread, its request is read,
//! executed (inline, when short) and answered on that thread, as on a one-worker server, while
//! the other threads serve other connections in parallel.
//!
//! Each thread is a multi-thread runtime with one worker, not a current-thread runtime, so the
//! scheduler's `block_in_place` (a guest blocking on a BLS call) still hands the thread's other
//! connections to a fresh thread instead of stalling them.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Handle, Runtime};

/// Where the doors run their connections.
pub enum ConnectionThreads {
    /// On the runtime that accepts them (the server's shared runtime).
    Shared,
    /// On dedicated threads, the least busy one for each new connection.
    Dedicated(Vec<Worker>),
}

pub struct Worker {
    runtime: Option<Runtime>,
    open: Arc<AtomicUsize>,
}

/// Counts a connection on its worker while it lives.
pub struct OpenConnection(Arc<AtomicUsize>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionThreads {
    /// `count` threads; 0 keeps connections on the accepting runtime.
    pub fn start(count: usize) -> io::Result<Self> {
        if count == 0 {
            return Ok(Self::Shared);
        }
        let workers = (0..count)
            .map(|i| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(format!("tessera-conn-{i}"))
                    .enable_all()
                    .build()?;
                Ok(Worker { runtime: Some(runtime), open: Arc::new(AtomicUsize::new(0)) })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Self::Dedicated(workers))
    }

    /// The thread a new connection runs on (`None`: the accepting runtime): its index, its
    /// runtime, and the connection's place in its count.
    pub fn pick(&self) -> Option<(usize, Handle, OpenConnection)> {
        let Self::Dedicated(workers) = self else { return None };
        let (index, worker) = workers.iter().enumerate().min_by_key(|(_, w)| w.open.load(Ordering::Relaxed))?;
        let runtime = worker.runtime.as_ref()?;
        worker.open.fetch_add(1, Ordering::Relaxed);
        Some((index, runtime.handle().clone(), OpenConnection(Arc::clone(&worker.open))))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Dropped from async code once every connection has ended: a plain drop would block.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_connections_go_to_the_least_busy_thread() {
        let threads = ConnectionThreads::start(2).expect("threads");
        let (first, _, a) = threads.pick().expect("a worker");
        let (second, _, b) = threads.pick().expect("a worker");
        assert_ne!(first, second, "the second connection went to the busy thread");
        drop(a);
        let (third, _, _c) = threads.pick().expect("a worker");
        assert_eq!(third, first, "a thread whose connection closed was not reused first");
        drop(b);
    }

    #[test]
    fn zero_threads_keep_connections_on_the_accepting_runtime() {
        assert!(ConnectionThreads::start(0).expect("shared").pick().is_none());
    }
}
