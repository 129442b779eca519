//! The host's CPU utilisation and memory, sampled from /proc every `--metrics-interval-ms`: for
//! `nv_cpu_*` on `/metrics` and the ORCA load report (`endpoint-load-metrics`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Host CPU and memory, refreshed by a background task.
#[derive(Debug, Default)]
pub struct HostSampler {
    /// Utilisation in [0, 1] as f64 bits.
    cpu_utilization: AtomicU64,
    memory_total: AtomicU64,
    memory_used: AtomicU64,
}

#[derive(Clone, Copy)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

fn read_cpu_times() -> Option<CpuTimes> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    let total: u64 = values.iter().take(8).sum();
    Some(CpuTimes { busy: total.saturating_sub(idle), total })
}

fn read_memory() -> Option<(u64, u64)> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some((total, total.saturating_sub(available)))
}

impl HostSampler {
    /// Starts sampling every `interval`; the task lives as long as the returned sampler.
    pub fn start(interval: Duration) -> Arc<Self> {
        let sampler = Arc::new(Self::default());
        sampler.sample_memory();
        let weak = Arc::downgrade(&sampler);
        tokio::spawn(async move {
            let mut previous = read_cpu_times();
            let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
            loop {
                ticker.tick().await;
                let Some(sampler) = weak.upgrade() else { return };
                let now = read_cpu_times();
                if let (Some(a), Some(b)) = (previous, now) {
                    let total = b.total.saturating_sub(a.total);
                    if total > 0 {
                        let utilization = b.busy.saturating_sub(a.busy) as f64 / total as f64;
                        sampler.cpu_utilization.store(utilization.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
                    }
                }
                previous = now;
                sampler.sample_memory();
            }
        });
        sampler
    }

    fn sample_memory(&self) {
        if let Some((total, used)) = read_memory() {
            self.memory_total.store(total, Ordering::Relaxed);
            self.memory_used.store(used, Ordering::Relaxed);
        }
    }
}

impl HostSampler {
    /// Utilisation of all CPUs over the last interval, in [0, 1].
    pub fn cpu_utilization(&self) -> f64 {
        f64::from_bits(self.cpu_utilization.load(Ordering::Relaxed))
    }

    pub fn memory_total(&self) -> u64 {
        self.memory_total.load(Ordering::Relaxed)
    }

    pub fn memory_used(&self) -> u64 {
        self.memory_used.load(Ordering::Relaxed)
    }
}
