//! How a request executes: on which thread, and whether it may wait in place.
//!
//! The contract. A request is answered the same whichever path it takes; the paths differ only in
//! thread hand-offs, which on a small box cost more than a short model's work. The slow, always
//! correct path: the request queues, a batcher task forms a batch and a blocking-pool thread runs
//! it, then wakes the caller. The fast paths skip steps of that when it is safe:
//! - **Inline** ([`InlineGate`], [`run_inline`]): an instance that only computes runs on the
//!   async runtime's own thread once its model's executions have been measured short; a Wasm
//!   guest that runs on anyway hands the worker's other tasks to another thread
//!   ([`hand_off_worker`]).
//! - **In place**: a lone request to an instance that asks for it runs on its caller's thread
//!   (`block_in_place`) when the caller may block ([`Caller::may_block`]).
//! - **At once**: the dynamic batcher runs a request on an idle instance without queueing it when
//!   nothing waits (`scheduler::dynamic`), also under load for a caller whose thread waits for
//!   the answer ([`Caller::Thread`]), since nothing can gather behind it.
//! - **First poll in place** ([`wait_for`]): a guest's BLS call polls its future once on the
//!   guest's thread, where an inline callee finishes with no thread hop.
//! - **Connection threads** ([`connection_threads`]) and **repoll** ([`repoll`]): each
//!   connection stays on one one-worker runtime, and hyper's self-wakes are polled again at once
//!   instead of waking another worker.
//!
//! Why the request carries its [`Caller`]: whether a path is safe depends on who waits for the
//! answer, which only the code where the request enters knows (a door, a guest's BLS call, an
//! ensemble step); the pool and batcher read it from the request, not from the thread.
//!
//! [`set_fast_paths`]`(false)` (`tessera serve --no-fast-paths`) turns every one of them off, for
//! debugging: each request then takes the slow path. It is process-wide.

pub mod accept;
pub mod connection_threads;
mod gate;
pub mod repoll;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering};

pub use gate::InlineGate;
pub use worker::{blocking, hand_off_worker, multi_thread_runtime, on_multi_thread_runtime, run_inline, wait_for};

/// Who waits for a request's answer, and how: set where the request enters, read by the pool and
/// the dynamic batcher to decide whether the execution may run on the caller's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Caller {
    /// Nothing known, or a caller that must not be blocked: a stream, an asynchronous BLS call,
    /// an ensemble's steps (which run in parallel), the library API.
    #[default]
    Detached,
    /// A door's unary call: its task waits on nothing else, so the execution may block the
    /// task's thread.
    Task,
    /// A guest's synchronous BLS call: its thread blocks until the answer comes ([`wait_for`]).
    Thread,
}

impl Caller {
    /// Whether an execution may run in place on the caller's thread, blocking it.
    pub fn may_block(self) -> bool {
        self == Caller::Task
    }

    /// Whether the caller's thread waits for the answer, so that nothing can gather behind it.
    pub fn waits_in_place(self) -> bool {
        self == Caller::Thread
    }
}

static FAST_PATHS: AtomicBool = AtomicBool::new(true);

/// Whether the fast paths are on (the default; see the module doc).
pub fn fast_paths() -> bool {
    FAST_PATHS.load(Ordering::Relaxed)
}

/// Turns the fast paths on or off for the whole process (a debugging switch).
pub fn set_fast_paths(on: bool) {
    FAST_PATHS.store(on, Ordering::Relaxed);
}
