//! Prometheus metrics on `--metrics-port` (`GET /metrics`), with Triton's metric names and labels.
//!
//! Per-model numbers are not kept twice: each scrape reads the same [`ModelStats`] the statistics
//! extension reports, sets them on a fresh `metrics-exporter-prometheus` recorder and renders it.
//! So `/metrics` and `/v2/models/stats` always agree, and a model that is unloaded simply
//! disappears from the next scrape. CPU utilisation and memory come from /proc, sampled every
//! `--metrics-interval-ms`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics::{Unit, counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::gpu::metrics::{GpuReading, GpuSampler};
use crate::model::LoadedModel;
use crate::repository::ModelManager;
use crate::stats::host::HostSampler;
use crate::stats::latency;
use crate::stats::{FailureReason, ModelStats, Quota, SandboxUsage, TrapKind};

#[derive(Clone)]
pub struct MetricsState {
    pub manager: Arc<ModelManager>,
    /// `None` with `--allow-cpu-metrics=false`.
    pub host: Option<Arc<HostSampler>>,
    /// `None` with `--allow-gpu-metrics=false` or where there is no GPU.
    pub gpu: Option<Arc<GpuSampler>>,
    /// For the OpenTelemetry exporter's counts.
    pub tracer: Arc<crate::trace::Tracer>,
    /// Metrics the models' own code defines.
    pub custom: Arc<crate::stats::custom::CustomMetrics>,
    /// `--tenants`: the tenants' series, and who may scrape when the file does not leave
    /// `/metrics` open.
    pub tenants: Option<Arc<crate::tenancy::Tenants>>,
}

pub fn router(state: MetricsState) -> Router {
    Router::new().route("/metrics", get(scrape)).fallback(|| async { StatusCode::NOT_FOUND }).with_state(state)
}

/// A scrape without a key with the `metrics` role, when the tenants file does not leave
/// `/metrics` open: 401 or 403 with why.
fn refused_scrape(tenants: &crate::tenancy::Tenants, headers: &axum::http::HeaderMap) -> Option<Response> {
    use crate::tenancy::{OpenApi, Presented};
    if tenants.is_open(OpenApi::Metrics) {
        return None;
    }
    let presented = Presented {
        authorization: headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes),
        ..Default::default()
    };
    let refusal = match tenants.identify(presented) {
        Ok(identity) => (StatusCode::FORBIDDEN, identity.may_scrape().err()?.0),
        Err(e) => (StatusCode::UNAUTHORIZED, e.message()),
    };
    Some(refusal.into_response())
}

async fn scrape(State(state): State<MetricsState>, headers: axum::http::HeaderMap) -> Response {
    if let Some(refused) = state.tenants.as_deref().and_then(|t| refused_scrape(t, &headers)) {
        return refused;
    }
    let mut response = exposition(&state).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    response
}

/// What `/metrics` answers: the Prometheus text exposition of everything the server measures.
pub fn exposition(state: &MetricsState) -> String {
    let gpus = state.gpu.as_ref().map(|g| g.readings()).unwrap_or_default();
    let counter_latencies = state.manager.metrics_settings().counter_latencies;
    let mut body = render(&state.manager.ready_models(), counter_latencies, state.host.as_deref(), &gpus);
    body.push_str(&state.custom.render());
    body.push_str(&crate::backend::disk_cache::render());
    if let Some(tenants) = &state.tenants {
        body.push_str(&tenants.render_metrics());
    }
    if let Some((exported, dropped)) = state.tracer.export_counts() {
        body.push_str(&trace_export_metrics(exported, dropped));
    }
    body
}

/// The OpenTelemetry exporter's spans, sent and dropped (queue full, collector down or refusing).
fn trace_export_metrics(exported: u64, dropped: u64) -> String {
    format!(
        "# HELP tessera_trace_spans_exported_total Spans the OpenTelemetry exporter sent\n\
         # TYPE tessera_trace_spans_exported_total counter\n\
         tessera_trace_spans_exported_total {exported}\n\
         # HELP tessera_trace_spans_dropped_total Spans the OpenTelemetry exporter dropped: its queue was full, or the \
         collector refused or did not answer\n\
         # TYPE tessera_trace_spans_dropped_total counter\n\
         tessera_trace_spans_dropped_total {dropped}\n"
    )
}

fn micros(ns: u64) -> u64 {
    ns / 1_000
}

/// What a sandboxed model used and was refused (`stats::SandboxUsage`).
fn sandbox_metrics(usage: &SandboxUsage, labels: &[(&'static str, String)]) {
    counter!("tessera_model_cpu_duration_us", labels).absolute(micros(usage.cpu_ns.load(Ordering::Relaxed)));
    gauge!("tessera_model_memory_bytes", labels).set(usage.memory_bytes.load(Ordering::Relaxed).max(0) as f64);
    gauge!("tessera_model_instances_live", labels).set(usage.instances_live.load(Ordering::Relaxed).max(0) as f64);
    for kind in TrapKind::ALL {
        let mut with_kind = labels.to_vec();
        with_kind.push(("kind", kind.as_str().to_string()));
        counter!("tessera_model_traps_total", &with_kind).absolute(usage.traps(kind));
    }
    for quota in Quota::ALL {
        let mut with_quota = labels.to_vec();
        with_quota.push(("quota", quota.as_str().to_string()));
        counter!("tessera_model_quota_refusals_total", &with_quota).absolute(usage.refusals(quota));
    }
}

/// Renders the Prometheus text exposition for these model versions (with the latency counters
/// unless `counter_latencies` is off), the host and the GPUs.
pub fn render(
    models: &[Arc<LoadedModel>],
    counter_latencies: bool,
    host: Option<&HostSampler>,
    gpus: &[GpuReading],
) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        describe_counter!("nv_inference_request_success", "Number of successful inference requests, all batch sizes");
        describe_counter!("nv_inference_request_failure", "Number of failed inference requests, all batch sizes");
        describe_counter!("nv_inference_count", "Number of inferences performed (does not include cached requests)");
        describe_counter!(
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)"
        );
        describe_counter!(
            "nv_inference_request_duration_us",
            Unit::Microseconds,
            "Cumulative inference request duration in microseconds (includes cached requests)"
        );
        describe_counter!(
            "nv_inference_queue_duration_us",
            Unit::Microseconds,
            "Cumulative inference queuing duration in microseconds (includes cached requests)"
        );
        describe_counter!(
            "nv_inference_compute_input_duration_us",
            Unit::Microseconds,
            "Cumulative compute input duration in microseconds (does not include cached requests)"
        );
        describe_counter!(
            "nv_inference_compute_infer_duration_us",
            Unit::Microseconds,
            "Cumulative compute inference duration in microseconds (does not include cached requests)"
        );
        describe_counter!(
            "nv_inference_compute_output_duration_us",
            Unit::Microseconds,
            "Cumulative inference compute output duration in microseconds (does not include cached requests)"
        );
        describe_gauge!(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model."
        );
        describe_counter!("nv_cache_num_hits_per_model", "Number of cache hits per model");
        describe_counter!("nv_cache_num_misses_per_model", "Number of cache misses per model");
        describe_counter!(
            "nv_cache_hit_duration_per_model",
            Unit::Microseconds,
            "Total cache hit duration per model, in microseconds"
        );
        describe_counter!(
            "nv_cache_miss_duration_per_model",
            Unit::Microseconds,
            "Total cache miss (insertion) duration per model, in microseconds"
        );
        describe_counter!(
            "tessera_model_cpu_duration_us",
            Unit::Microseconds,
            "CPU time the model's sandboxed executions used, in microseconds (thread CPU time)"
        );
        describe_gauge!(
            "tessera_model_memory_bytes",
            Unit::Bytes,
            "Linear memory of the model's live WebAssembly instances, in bytes"
        );
        describe_gauge!("tessera_model_instances_live", "The model's WebAssembly instances that hold a live store");
        describe_counter!("tessera_model_traps_total", "Executions of the model that trapped, by kind");
        describe_counter!("tessera_model_quota_refusals_total", "Requests refused by one of the model's quotas");
        for model in models {
            let s = model.stats.snapshot();
            let labels = [("model", model.name.clone()), ("version", model.version.to_string())];
            counter!("nv_inference_request_success", &labels).absolute(s.success.count);
            for reason in FailureReason::ALL {
                let mut with_reason = labels.to_vec();
                with_reason.push(("reason", reason.as_str().to_string()));
                counter!("nv_inference_request_failure", &with_reason)
                    .absolute(s.failures.get(&reason).copied().unwrap_or(0));
            }
            counter!("nv_inference_count", &labels).absolute(s.inference_count);
            counter!("nv_inference_exec_count", &labels).absolute(s.execution_count);
            if counter_latencies {
                counter!("nv_inference_request_duration_us", &labels).absolute(micros(s.success.ns + s.fail.ns));
                counter!("nv_inference_queue_duration_us", &labels).absolute(micros(s.queue.ns));
                counter!("nv_inference_compute_input_duration_us", &labels).absolute(micros(s.compute_input.ns));
                counter!("nv_inference_compute_infer_duration_us", &labels).absolute(micros(s.compute_infer.ns));
                counter!("nv_inference_compute_output_duration_us", &labels).absolute(micros(s.compute_output.ns));
            }
            gauge!("nv_inference_pending_request_count", &labels).set(model.stats.pending() as f64);
            // sandboxed models: Wasm guests, and model.py models (built into guests)
            if matches!(model.platform, "wasm" | "python") {
                sandbox_metrics(&model.stats.usage, &labels);
            }
            if model.response_cache_enabled() {
                counter!("nv_cache_num_hits_per_model", &labels).absolute(s.cache_hit.count);
                counter!("nv_cache_num_misses_per_model", &labels).absolute(s.cache_miss.count);
                counter!("nv_cache_hit_duration_per_model", &labels).absolute(micros(s.cache_hit.ns));
                counter!("nv_cache_miss_duration_per_model", &labels).absolute(micros(s.cache_miss.ns));
            }
        }
        if let Some(host) = host {
            describe_gauge!("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]");
            describe_gauge!("nv_cpu_memory_total_bytes", Unit::Bytes, "CPU total memory (RAM), in bytes");
            describe_gauge!("nv_cpu_memory_used_bytes", Unit::Bytes, "CPU used memory (RAM), in bytes");
            gauge!("nv_cpu_utilization").set(host.cpu_utilization());
            gauge!("nv_cpu_memory_total_bytes").set(host.memory_total() as f64);
            gauge!("nv_cpu_memory_used_bytes").set(host.memory_used() as f64);
        }
        if !gpus.is_empty() {
            describe_gauge!("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)");
            describe_gauge!("nv_gpu_memory_total_bytes", Unit::Bytes, "GPU total memory, in bytes");
            describe_gauge!("nv_gpu_memory_used_bytes", Unit::Bytes, "GPU used memory, in bytes");
            describe_gauge!("nv_gpu_power_usage", "GPU power usage in watts");
            describe_gauge!("nv_gpu_power_limit", "GPU power management limit in watts");
            describe_counter!(
                "nv_energy_consumption",
                "GPU energy consumption in joules since the Triton Server started"
            );
        }
        for gpu in gpus {
            let labels = [("gpu_uuid", gpu.uuid.clone())];
            gauge!("nv_gpu_utilization", &labels).set(gpu.utilization);
            gauge!("nv_gpu_memory_total_bytes", &labels).set(gpu.memory_total as f64);
            gauge!("nv_gpu_memory_used_bytes", &labels).set(gpu.memory_used as f64);
            gauge!("nv_gpu_power_usage", &labels).set(gpu.power_usage);
            gauge!("nv_gpu_power_limit", &labels).set(gpu.power_limit);
            // Whole joules: the metrics crate's counters are integers.
            counter!("nv_energy_consumption", &labels).absolute(gpu.energy as u64);
        }
    });
    let mut text = handle.render();
    let labelled: Vec<(String, &ModelStats)> =
        models.iter().map(|m| (latency::model_labels(&m.name, m.version), &*m.stats)).collect();
    text.push_str(&latency::render(&labelled));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_metrics_carry_triton_names_and_the_gpu_uuid() {
        let none = render(&[], true, None, &[]);
        assert!(!none.contains("nv_gpu") && !none.contains("nv_energy"), "{none}");
        let reading = GpuReading {
            uuid: "GPU-1234".into(),
            utilization: 0.5,
            memory_total: 80,
            memory_used: 20,
            power_usage: 70.5,
            power_limit: 700.0,
            energy: 12.9,
        };
        let text = render(&[], true, None, &[reading]);
        for line in [
            r#"nv_gpu_utilization{gpu_uuid="GPU-1234"} 0.5"#,
            r#"nv_gpu_memory_total_bytes{gpu_uuid="GPU-1234"} 80"#,
            r#"nv_gpu_memory_used_bytes{gpu_uuid="GPU-1234"} 20"#,
            r#"nv_gpu_power_usage{gpu_uuid="GPU-1234"} 70.5"#,
            r#"nv_gpu_power_limit{gpu_uuid="GPU-1234"} 700"#,
            r#"nv_energy_consumption{gpu_uuid="GPU-1234"} 12"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
