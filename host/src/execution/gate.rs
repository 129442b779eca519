//! The inline gate: whether a model's executions are short enough to run on an async runtime
//! thread (see the module doc of [`crate::execution`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether a model's executions run on the calling task's own thread, decided by measuring them.
///
/// Handing an execution to a blocking thread and back costs two thread wake-ups: on this kind of
/// box tens of microseconds of CPU and of latency, more than a small ONNX model or a Rust guest
/// takes to run. So an instance that [`ModelInstance::only_computes`] runs its executions inline,
/// on the async runtime's thread, once the last [`FIRST_STREAK`] executions of its model each took
/// at most [`SHORT_EXECUTION`]. A runtime thread may be held that long (tokio's guidance is tens
/// to a hundred or so microseconds between awaits). On a connection thread (a one-worker
/// runtime, [`super::connection_threads`]) its other connections wait meanwhile; a Wasm guest that
/// runs on past a few ms hands them to another thread ([`super::hand_off_worker`]).
/// It is not lower because an execution handed off runs slower than the same execution inline
/// (a cold thread, caches the client just used): a bound near an interpreted guest's inline time
/// would keep it on hand-offs for good once a slow moment closed the gate, each request paying
/// the two wake-ups and the cold run. Wall time is what is measured (reading the
/// thread's CPU time costs a system call per reading); since a short execution on a busy box is
/// sometimes preempted midway, one a little longer ([`SHORT_EXECUTION`] to [`LONG_EXECUTION`])
/// only counts against the model when [`AMBIGUOUS_IN_A_ROW`] come in a row, while one past
/// [`LONG_EXECUTION`] (a guest looping to its time limit) closes the gate at once. After holding a
/// runtime thread long the model goes back to hand-offs and must show a streak twice as long as
/// before to run inline again.
///
/// The longer streak decays: each [`DECAY_FACTOR`] x `needed` short executions in a row halve it
/// again (down to [`FIRST_STREAK`]). Without that, a busy box ratchets every model shut: a short
/// inline run preempted for a scheduler slice (a few ms, now and then on a small box shared with
/// its clients) doubled the streak each time, and after a minute of load no model ran inline
/// again. A run longer than [`HELD_LONG`], which no preemption explains, turns the
/// decay off for the model for [`HELD_LONG_MEMORY`]: a guest that loops to its time limit holds a
/// runtime thread a logarithmic number of times per minute at most; one that stays under that
/// bound holds it at most once per [`DECAY_FACTOR`] x [`FIRST_STREAK`] short runs, for less than
/// [`HELD_LONG`].
pub struct InlineGate {
    /// Executions in a row no longer than [`SHORT_EXECUTION`].
    streak: AtomicU32,
    /// Executions in a row between [`SHORT_EXECUTION`] and [`LONG_EXECUTION`].
    ambiguous: AtomicU32,
    /// The streak that opens the gate.
    needed: AtomicU32,
    /// When an inline run last took longer than [`HELD_LONG`] (ms since `epoch`, 0: never):
    /// the needed streak does not decay for [`HELD_LONG_MEMORY`] after it.
    held_long_ms: AtomicU64,
    epoch: Instant,
}

const SHORT_EXECUTION: Duration = Duration::from_micros(500);
const LONG_EXECUTION: Duration = Duration::from_millis(2);
const AMBIGUOUS_IN_A_ROW: u32 = 4;
const FIRST_STREAK: u32 = 8;
const LONGEST_STREAK: u32 = 1 << 20;
const DECAY_FACTOR: u32 = 16;
const HELD_LONG: Duration = Duration::from_millis(50);
const HELD_LONG_MEMORY: Duration = Duration::from_secs(60);

impl InlineGate {
    pub fn new() -> Self {
        Self {
            streak: AtomicU32::new(0),
            ambiguous: AtomicU32::new(0),
            needed: AtomicU32::new(FIRST_STREAK),
            held_long_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Whether the model's executions run inline now.
    pub fn open(&self) -> bool {
        self.streak.load(Ordering::Relaxed) >= self.needed.load(Ordering::Relaxed)
    }

    fn held_long_recently(&self) -> bool {
        let at = self.held_long_ms.load(Ordering::Relaxed);
        at != 0 && self.epoch.elapsed().saturating_sub(Duration::from_millis(at)) < HELD_LONG_MEMORY
    }

    /// Counts one execution that took `took`, run inline or not.
    pub fn record(&self, took: Duration, inline: bool) {
        if took <= SHORT_EXECUTION {
            self.ambiguous.store(0, Ordering::Relaxed);
            let streak = self
                .streak
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
                .map_or(u32::MAX, |n| n + 1);
            let needed = self.needed.load(Ordering::Relaxed);
            if needed > FIRST_STREAK && streak >= needed.saturating_mul(DECAY_FACTOR) && !self.held_long_recently() {
                let halved = (needed / 2).max(FIRST_STREAK);
                // Compare-and-swap: a long run that doubled `needed` meanwhile is not undone, and
                // a streak it reset to 0 stays 0 (the gate stays closed).
                if self.needed.compare_exchange(needed, halved, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                    // Still open: the streak counts towards the next halving from here.
                    let _ =
                        self.streak.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| (s != 0).then_some(halved));
                }
            }
            return;
        }
        if took <= LONG_EXECUTION && self.ambiguous.fetch_add(1, Ordering::Relaxed) + 1 < AMBIGUOUS_IN_A_ROW {
            return;
        }
        self.ambiguous.store(0, Ordering::Relaxed);
        self.streak.store(0, Ordering::Relaxed);
        if inline {
            let _ =
                self.needed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some((n * 2).min(LONGEST_STREAK)));
            if took > HELD_LONG {
                let now_ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX).max(1);
                self.held_long_ms.store(now_ms, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
