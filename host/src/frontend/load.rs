//! The server's load as an ORCA load report reads it (`http/orca.rs` writes the header).

use std::sync::Arc;

use super::Frontend;
use crate::stats::custom::CustomMetrics;
use crate::stats::host::HostSampler;

/// The server's load, as an ORCA `endpoint-load-metrics` header reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// Host CPU and memory utilisation in [0, 1] (with `--allow-cpu-metrics`).
    pub cpu_utilization: Option<f64>,
    pub mem_utilization: Option<f64>,
    /// Requests waiting for an instance, over every model.
    pub pending_requests: i64,
    /// Triton's KV-cache figures, where a model reports `nv_trt_llm_kv_cache_block_metrics`:
    /// used blocks over the maximum, and the maximum times tokens per block.
    pub kv_cache: Option<(f64, f64)>,
}

impl Frontend {
    /// Where the load report reads host utilisation and models' own metrics from.
    pub fn with_load_sources(mut self, host: Option<Arc<HostSampler>>, custom: Arc<CustomMetrics>) -> Self {
        self.host = host;
        self.custom_metrics = Some(custom);
        self
    }

    /// The server's load now: what an ORCA `endpoint-load-metrics` header reports.
    pub fn load_report(&self) -> LoadReport {
        let memory = self.host.as_ref().map(|h| (h.memory_used(), h.memory_total()));
        LoadReport {
            cpu_utilization: self.host.as_ref().map(|h| h.cpu_utilization()),
            mem_utilization: memory.filter(|(_, total)| *total > 0).map(|(used, total)| used as f64 / total as f64),
            pending_requests: self.manager.ready_models().iter().map(|m| m.stats.pending()).sum(),
            kv_cache: self.custom_metrics.as_ref().and_then(|c| c.kv_cache()),
        }
    }
}
