//! Triton's GPU metrics from NVML (libnvidia-ml loaded at run time by nvml-wrapper):
//! `nv_gpu_utilization`, `nv_gpu_memory_total_bytes`, `nv_gpu_memory_used_bytes`,
//! `nv_gpu_power_usage`, `nv_gpu_power_limit` and `nv_energy_consumption`, each labelled with
//! `gpu_uuid`. Sampled every `--metrics-interval-ms`; absent where NVML or a GPU is missing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvml_wrapper::Nvml;

/// One GPU's latest sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    pub uuid: String,
    /// [0, 1].
    pub utilization: f64,
    pub memory_total: u64,
    pub memory_used: u64,
    /// Watts.
    pub power_usage: f64,
    pub power_limit: f64,
    /// Joules since the sampler started (Triton counts from server start).
    pub energy: f64,
}

pub struct GpuSampler {
    nvml: Nvml,
    /// Energy counter of each device when sampling began (millijoules).
    energy_start: Vec<Option<u64>>,
    readings: Mutex<Vec<GpuReading>>,
}

impl GpuSampler {
    /// Starts sampling when NVML loads and sees at least one GPU; `None` otherwise (and the
    /// scrape then has no GPU metric at all).
    pub fn start(interval: Duration) -> Option<Arc<Self>> {
        let nvml = match Nvml::init() {
            Ok(nvml) => nvml,
            Err(e) => {
                tracing::info!("GPU metrics unavailable: NVML did not load ({e})");
                return None;
            }
        };
        let count = nvml.device_count().unwrap_or(0);
        if count == 0 {
            tracing::info!("GPU metrics unavailable: NVML sees no GPU");
            return None;
        }
        let energy_start =
            (0..count).map(|i| nvml.device_by_index(i).ok().and_then(|d| d.total_energy_consumption().ok())).collect();
        let sampler = Arc::new(Self { nvml, energy_start, readings: Mutex::new(Vec::new()) });
        sampler.sample();
        let weak = Arc::downgrade(&sampler);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
            loop {
                ticker.tick().await;
                let Some(sampler) = weak.upgrade() else { return };
                // NVML queries take microseconds to a few milliseconds: off the async workers.
                let _ = tokio::task::spawn_blocking(move || sampler.sample()).await;
            }
        });
        Some(sampler)
    }

    fn sample(&self) {
        let mut readings = Vec::new();
        for (index, start) in self.energy_start.iter().enumerate() {
            let Ok(device) = self.nvml.device_by_index(index as u32) else { continue };
            let Ok(uuid) = device.uuid() else { continue };
            let memory = device.memory_info().ok();
            let energy = match (start, device.total_energy_consumption().ok()) {
                (Some(s), Some(now)) => now.saturating_sub(*s) as f64 / 1000.0,
                _ => 0.0,
            };
            readings.push(GpuReading {
                uuid,
                utilization: device.utilization_rates().map_or(0.0, |u| f64::from(u.gpu) / 100.0),
                memory_total: memory.as_ref().map_or(0, |m| m.total),
                memory_used: memory.as_ref().map_or(0, |m| m.used),
                power_usage: device.power_usage().map_or(0.0, |mw| f64::from(mw) / 1000.0),
                power_limit: device.enforced_power_limit().map_or(0.0, |mw| f64::from(mw) / 1000.0),
                energy,
            });
        }
        if let Ok(mut slot) = self.readings.lock() {
            *slot = readings;
        }
    }

    pub fn readings(&self) -> Vec<GpuReading> {
        self.readings.lock().map(|r| r.clone()).unwrap_or_default()
    }
}
