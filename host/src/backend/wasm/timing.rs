//! How a Wasm model's executions are timed ([`ExecutionClock`]): a leaf the backend's files share.

use std::sync::OnceLock;

/// How a Wasm model's executions are timed for its CPU metric and quota.
///
/// Reading a thread's CPU clock is a system call, two per execution: for a guest answering in
/// microseconds that is measurable on the request path. So only a model with a CPU quota, which
/// needs the true figure, pays for it; the others are timed with the monotonic clock (vDSO),
/// which counts an execution's time on its thread, waits included: their
/// `tessera_model_cpu_duration_us` is an upper bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExecutionClock {
    /// The calling thread's CPU time: what an execution costs, without the time it spent
    /// waiting (on a BLS call, or preempted).
    ThreadCpu,
    /// Wall time on the monotonic clock.
    Wall,
}

impl ExecutionClock {
    pub(super) fn for_quota(max_cpu_per_second: Option<std::time::Duration>) -> Self {
        if max_cpu_per_second.is_some() { Self::ThreadCpu } else { Self::Wall }
    }

    /// The clock's reading; only differences between readings of one thread mean anything.
    pub(super) fn now(self) -> std::time::Duration {
        match self {
            Self::ThreadCpu => thread_cpu_time(),
            Self::Wall => {
                static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
                EPOCH.get_or_init(std::time::Instant::now).elapsed()
            }
        }
    }
}

fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}
