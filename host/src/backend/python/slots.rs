//! How many model.py builds run at once: `--python-guest-build-jobs`, or by default one per CPU,
//! fewer when the memory available at start holds fewer (a build takes 0.4-0.7 GB). A build
//! waits for a slot after its model's cache lookup, so cached models never wait; the server's
//! stop ends the wait.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// What one build is reckoned to take, for the default number of jobs.
const BUILD_MEMORY: u64 = 768 << 20;

/// A counting semaphore for blocking threads (builds run on tokio's blocking pool).
pub(super) struct BuildSlots {
    jobs: usize,
    running: Mutex<usize>,
    freed: Condvar,
}

/// One slot, given back when dropped.
pub(super) struct Slot<'a>(&'a BuildSlots);

impl BuildSlots {
    /// `jobs` slots; 0: [`default_jobs`].
    pub(super) fn new(jobs: usize) -> Self {
        let jobs = if jobs == 0 { default_jobs() } else { jobs };
        Self { jobs, running: Mutex::new(0), freed: Condvar::new() }
    }

    pub(super) fn jobs(&self) -> usize {
        self.jobs
    }

    /// Waits for a slot; `None` once `stop()` says to give up (checked every half second).
    pub(super) fn acquire(&self, stop: impl Fn() -> bool) -> Option<Slot<'_>> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if stop() {
                return None;
            }
            if *running < self.jobs {
                *running += 1;
                return Some(Slot(self));
            }
            running = self.freed.wait_timeout(running, Duration::from_millis(500)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        *running = running.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// One build per CPU, at most as many as the available memory holds, at least one.
pub(super) fn default_jobs() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let by_memory = available_memory().map_or(cpus, |bytes| usize::try_from(bytes / BUILD_MEMORY).unwrap_or(cpus));
    cpus.min(by_memory).max(1)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn at_most_jobs_hold_a_slot_at_once() {
        let slots = Arc::new(BuildSlots::new(2));
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        // Each holder waits for a second holder: two hold at once, and a third never does.
        let pair = Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (slots, now, peak) = (Arc::clone(&slots), Arc::clone(&now), Arc::clone(&peak));
                let pair = Arc::clone(&pair);
                std::thread::spawn(move || {
                    let _slot = slots.acquire(|| false).expect("slot");
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    pair.wait();
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().expect("thread"));
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_stop_ends_the_wait() {
        let slots = BuildSlots::new(1);
        let _held = slots.acquire(|| false).expect("first");
        assert!(slots.acquire(|| true).is_none());
        assert!(default_jobs() >= 1);
        assert_eq!(BuildSlots::new(0).jobs(), default_jobs());
    }
}
