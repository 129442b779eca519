//! What the in-process benchmarks share.

use std::collections::HashMap;

/// CPU time of each thread of this process so far (ns by thread id), from
/// /proc/self/task/*/schedstat.
pub struct CpuSnapshot(HashMap<String, u64>);

impl CpuSnapshot {
    pub fn now() -> Self {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Self(HashMap::new()) };
        Self(
            tasks
                .flatten()
                .filter_map(|t| {
                    let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
                    let ns = stat.split_whitespace().next()?.parse::<u64>().ok()?;
                    Some((t.file_name().to_string_lossy().into_owned(), ns))
                })
                .collect(),
        )
    }

    /// CPU ns the process's threads used since this snapshot, thread by thread: a thread that
    /// exited meanwhile (an idle blocking thread) drops out instead of making the sum go
    /// backwards, which a difference of two process-wide sums did.
    pub fn elapsed_ns(&self) -> u64 {
        Self::now().0.iter().map(|(tid, ns)| ns.saturating_sub(self.0.get(tid).copied().unwrap_or(0))).sum()
    }
}
