//! Latency distributions per model version: Triton's `--metrics-config` histograms and summaries,
//! and Tessera's per-phase histograms.
//!
//! - `histogram_latencies=true` (off by default, as in Triton): `nv_inference_first_response_histogram_ms`,
//!   the time from a request's arrival to its first response, with Triton's default buckets or the
//!   ones `model_metrics { metric_control { ... histogram_options { buckets } } }` gives.
//! - `summary_latencies=true` (off by default, as in Triton): `nv_inference_{request,queue,
//!   compute_input,compute_infer,compute_output}_summary_us` and, for a model with the response
//!   cache, `nv_cache_{hit,miss}_summary_per_model`, with `summary_quantiles`. Quantiles cover a
//!   sliding window of `summary_max_age` seconds (Tessera's setting; 60 by default, what Triton's
//!   prometheus-cpp summaries use).
//! - `phase_histograms` (Tessera's, on by default): `tessera_inference_{request,queue,compute}_
//!   histogram_us`, fixed buckets, so that tail latency per phase can be had with PromQL's
//!   `histogram_quantile` across replicas (summaries cannot be aggregated).
//!
//! Everything here is recorded under the model's statistics lock that the counters already take,
//! so observing costs a bucket search and two additions: no extra lock, no atomics. Summaries
//! keep samples (a bounded reservoir per age bucket) and sort them only when scraped.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::custom_limits::CustomLimits;
use super::exposition::{Histogram, escape_label_value};
use crate::config::ModelConfig;
use crate::config::pb::model_metrics::metric_control::MetricOptions;

/// Triton's `first_response_histogram` default buckets, in milliseconds.
const FIRST_RESPONSE_BUCKETS_MS: [f64; 4] = [100.0, 500.0, 2000.0, 5000.0];
/// Buckets of the per-phase histograms, in microseconds: 25 µs to 10 s.
const PHASE_BUCKETS_US: [f64; 18] =
    [25.0, 50.0, 100.0, 250.0, 500.0, 1e3, 2.5e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 5e5, 1e6, 2.5e6, 5e6, 1e7];
/// Triton's default `summary_quantiles` (quantile, allowed error).
const DEFAULT_QUANTILES: [(f64, f64); 5] = [(0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001)];
/// Sub-windows a summary's window is made of; the oldest is dropped as a new one starts.
const AGE_BUCKETS: usize = 5;
/// Samples kept per sub-window; beyond it a uniform reservoir sample stands for them.
const SAMPLES_PER_AGE_BUCKET: usize = 2048;

pub const FIRST_RESPONSE_FAMILY: &str = "nv_inference_first_response_histogram_ms";

/// The server-wide `--metrics-config` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSettings {
    /// `counter_latencies`: the `nv_inference_*_duration_us` counters (default true).
    pub counter_latencies: bool,
    /// `histogram_latencies`: `nv_inference_first_response_histogram_ms` (default false).
    pub histogram_latencies: bool,
    /// `summary_latencies`: the `nv_*_summary_*` families (default false).
    pub summary_latencies: bool,
    /// `summary_quantiles`: (quantile, error) pairs. The error is accepted for Triton's syntax;
    /// quantiles here are exact over the samples kept.
    pub quantiles: Vec<(f64, f64)>,
    /// `summary_max_age`: seconds a summary's quantiles look back.
    pub summary_max_age: Duration,
    /// `phase_histograms`: the `tessera_inference_*_histogram_us` families (default true).
    pub phase_histograms: bool,
    /// `custom_*`: the bounds on a model's own metrics (see `stats::custom`).
    pub custom: CustomLimits,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            counter_latencies: true,
            histogram_latencies: false,
            summary_latencies: false,
            quantiles: DEFAULT_QUANTILES.to_vec(),
            summary_max_age: Duration::from_secs(60),
            phase_histograms: true,
            custom: CustomLimits::default(),
        }
    }
}

fn parse_flag(setting: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("--metrics-config {setting}={value}: expected true or false")),
    }
}

fn parse_quantiles(value: &str) -> Result<Vec<(f64, f64)>, String> {
    value
        .split(',')
        .map(|pair| {
            let (q, e) = pair.split_once(':').ok_or_else(|| {
                format!("--metrics-config summary_quantiles: '{pair}' has no ':' (expected <quantile>:<error>)")
            })?;
            let number = |s: &str| s.trim().parse::<f64>().ok().filter(|v| (0.0..=1.0).contains(v));
            match (number(q), number(e)) {
                (Some(q), Some(e)) => Ok((q, e)),
                _ => Err(format!("--metrics-config summary_quantiles: '{pair}' is not two numbers in [0, 1]")),
            }
        })
        .collect()
}

impl MetricsSettings {
    /// Parses `--metrics-config <setting>=<value>` entries. Unknown settings are ignored with a
    /// warning, as Triton ignores them; a known setting with a bad value is refused.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut settings = Self::default();
        for entry in entries {
            let Some((setting, value)) = entry.split_once('=').filter(|(s, v)| !s.is_empty() && !v.is_empty()) else {
                return Err(format!("--metrics-config option format is <setting>=<value>. Got {entry}"));
            };
            if setting.contains(',') {
                return Err(format!("--metrics-config option format is <setting>=<value>. Got {entry}"));
            }
            match setting {
                "counter_latencies" => settings.counter_latencies = parse_flag(setting, value)?,
                "histogram_latencies" => settings.histogram_latencies = parse_flag(setting, value)?,
                "summary_latencies" => settings.summary_latencies = parse_flag(setting, value)?,
                "phase_histograms" => settings.phase_histograms = parse_flag(setting, value)?,
                "summary_quantiles" => settings.quantiles = parse_quantiles(value)?,
                "summary_max_age" => {
                    let secs = value.parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0).ok_or_else(|| {
                        format!("--metrics-config summary_max_age={value}: expected a positive number of seconds")
                    })?;
                    settings.summary_max_age = Duration::from_secs_f64(secs);
                }
                _ => {
                    if !settings.custom.set(setting, value)? {
                        tracing::warn!("--metrics-config: unknown setting '{setting}' ignored");
                    }
                }
            }
        }
        Ok(settings)
    }
}

/// A Prometheus summary: cumulative count and sum, and quantiles over a sliding window made of
/// [`AGE_BUCKETS`] sub-windows (the oldest is cleared as time moves on).
#[derive(Debug, Clone)]
pub struct Summary {
    count: u64,
    sum: f64,
    windows: Vec<(Vec<f64>, u64)>,
    current: usize,
    started: Instant,
    width: Duration,
    rng: u64,
}

impl Summary {
    fn new(max_age: Duration) -> Self {
        Self {
            count: 0,
            sum: 0.0,
            windows: vec![(Vec::new(), 0); AGE_BUCKETS],
            current: 0,
            started: Instant::now(),
            width: (max_age / AGE_BUCKETS as u32).max(Duration::from_millis(1)),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn rotate(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed < self.width {
            return;
        }
        let steps = (elapsed.as_nanos() / self.width.as_nanos().max(1)) as usize;
        for _ in 0..steps.min(AGE_BUCKETS) {
            self.current = (self.current + 1) % AGE_BUCKETS;
            self.windows[self.current].0.clear();
            self.windows[self.current].1 = 0;
        }
        self.started += self.width * steps as u32;
    }

    fn observe(&mut self, value: f64, now: Instant) {
        self.count += 1;
        self.sum += value;
        self.rotate(now);
        let (samples, seen) = &mut self.windows[self.current];
        *seen += 1;
        if samples.len() < SAMPLES_PER_AGE_BUCKET {
            samples.push(value);
        } else {
            // xorshift64: a reservoir keeps each of the `seen` samples with equal chance.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let slot = (self.rng % *seen) as usize;
            if slot < SAMPLES_PER_AGE_BUCKET {
                samples[slot] = value;
            }
        }
    }

    /// The value at each quantile over the window; NaN when the window is empty.
    pub fn quantiles(&mut self, quantiles: &[(f64, f64)], now: Instant) -> Vec<f64> {
        self.rotate(now);
        let mut all: Vec<f64> = self.windows.iter().flat_map(|(s, _)| s.iter().copied()).collect();
        all.sort_by(f64::total_cmp);
        quantiles
            .iter()
            .map(|&(q, _)| {
                if all.is_empty() {
                    return f64::NAN;
                }
                let rank = (q * all.len() as f64).ceil() as usize;
                all[rank.clamp(1, all.len()) - 1]
            })
            .collect()
    }

    fn render(&mut self, out: &mut String, name: &str, labels: &str, quantiles: &[(f64, f64)], now: Instant) {
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        for (&(q, _), value) in quantiles.iter().zip(self.quantiles(quantiles, now)) {
            let value = if value.is_nan() { "NaN".to_string() } else { value.to_string() };
            let _ = writeln!(out, "{name}{{{labels},quantile=\"{q}\"}} {value}");
        }
    }
}

/// The phases with a Tessera histogram, and the summaries, in render order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Request,
    Queue,
    Compute,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Self::Request, Self::Queue, Self::Compute];

    pub fn family(self) -> &'static str {
        match self {
            Self::Request => "tessera_inference_request_histogram_us",
            Self::Queue => "tessera_inference_queue_histogram_us",
            Self::Compute => "tessera_inference_compute_histogram_us",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Self::Request => "Histogram of end-to-end inference request duration in microseconds",
            Self::Queue => "Histogram of inference queuing duration in microseconds",
            Self::Compute => "Histogram of model execution duration (input, infer and output) in microseconds",
        }
    }
}

/// Triton's summary families, in the order of [`Latency::summaries`].
pub const SUMMARY_FAMILIES: [(&str, &str); 7] = [
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
    ("nv_cache_hit_summary_per_model", "Summary of cache hit counts/durations per model, in microseconds."),
    ("nv_cache_miss_summary_per_model", "Summary of cache miss counts/durations per model, in microseconds."),
];
const REQUEST: usize = 0;
const QUEUE: usize = 1;
const CACHE_HIT: usize = 5;
const CACHE_MISS: usize = 6;

fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

/// One model version's latency distributions (what its settings turned on).
#[derive(Debug, Clone, Default)]
pub struct Latency {
    first_response: Option<Histogram>,
    phases: Option<[Histogram; 3]>,
    /// Indexed as [`SUMMARY_FAMILIES`]; `None` for a family this model does not report.
    summaries: Option<[Option<Summary>; 7]>,
    quantiles: Vec<(f64, f64)>,
}

/// The buckets `model_metrics` gives `family` in this model's config, if any.
fn configured_buckets(config: &ModelConfig, family: &str) -> Result<Option<Vec<f64>>, String> {
    let Some(metrics) = &config.model_metrics else { return Ok(None) };
    for control in &metrics.metric_control {
        let name = control.metric_identifier.as_ref().map_or("", |m| m.family.as_str());
        if name != family {
            continue;
        }
        let Some(MetricOptions::HistogramOptions(options)) = &control.metric_options else { continue };
        let buckets = options.buckets.clone();
        if buckets.is_empty()
            || buckets.iter().any(|b| !b.is_finite())
            || buckets.windows(2).any(|pair| pair[0] >= pair[1])
        {
            return Err(format!("model_metrics: the buckets of '{family}' must be finite and increasing"));
        }
        return Ok(Some(buckets));
    }
    Ok(None)
}

impl Latency {
    /// What `settings` and the model's `model_metrics` ask this model to record. An unknown
    /// family in `model_metrics` is warned about and ignored, as Triton does.
    pub fn new(settings: &MetricsSettings, config: &ModelConfig, cached: bool) -> Result<Self, String> {
        let customizable: Vec<&str> =
            std::iter::once(FIRST_RESPONSE_FAMILY).chain(Phase::ALL.map(Phase::family)).collect();
        for control in config.model_metrics.iter().flat_map(|m| &m.metric_control) {
            let family = control.metric_identifier.as_ref().map_or("", |m| m.family.as_str());
            if !customizable.contains(&family) {
                tracing::warn!(
                    model = config.name.as_str(),
                    "Metric family '{family}' in 'metric_identifier' is not a customizable metric"
                );
            }
        }
        let first_response = if settings.histogram_latencies {
            let buckets = configured_buckets(config, FIRST_RESPONSE_FAMILY)?;
            Some(Histogram::new(buckets.unwrap_or_else(|| FIRST_RESPONSE_BUCKETS_MS.to_vec())))
        } else {
            None
        };
        let phases = if settings.phase_histograms {
            let histogram = |phase: Phase| -> Result<Histogram, String> {
                Ok(Histogram::new(
                    configured_buckets(config, phase.family())?.unwrap_or_else(|| PHASE_BUCKETS_US.to_vec()),
                ))
            };
            Some([histogram(Phase::Request)?, histogram(Phase::Queue)?, histogram(Phase::Compute)?])
        } else {
            None
        };
        let summaries = settings.summary_latencies.then(|| {
            std::array::from_fn(|i| {
                // As Triton: no request summary for a cached model (a hit's time would mislead),
                // cache summaries only for one.
                let reported = match i {
                    REQUEST => !cached,
                    CACHE_HIT | CACHE_MISS => cached,
                    _ => true,
                };
                reported.then(|| Summary::new(settings.summary_max_age))
            })
        });
        Ok(Self { first_response, phases, summaries, quantiles: settings.quantiles.clone() })
    }

    fn summary(&mut self, index: usize, took: Duration, now: Instant) {
        if let Some(Some(summary)) = self.summaries.as_mut().map(|s| &mut s[index]) {
            summary.observe(micros(took), now);
        }
    }

    /// Now, for the summaries' windows; read only when there are summaries.
    fn now(&self) -> Option<Instant> {
        self.summaries.is_some().then(Instant::now)
    }

    pub fn record_request(&mut self, total: Duration) {
        if let Some(phases) = &mut self.phases {
            phases[Phase::Request as usize].observe(micros(total));
        }
        if let Some(now) = self.now() {
            self.summary(REQUEST, total, now);
        }
    }

    pub fn record_first_response(&mut self, after: Duration) {
        if let Some(histogram) = &mut self.first_response {
            histogram.observe(after.as_nanos() as f64 / 1e6);
        }
    }

    pub fn record_queue(&mut self, waited: Duration) {
        if let Some(phases) = &mut self.phases {
            phases[Phase::Queue as usize].observe(micros(waited));
        }
        if let Some(now) = self.now() {
            self.summary(QUEUE, waited, now);
        }
    }

    pub fn record_execution(&mut self, input: Duration, infer: Duration, output: Duration) {
        if let Some(phases) = &mut self.phases {
            phases[Phase::Compute as usize].observe(micros(input + infer + output));
        }
        if let Some(now) = self.now() {
            for (index, took) in [(2, input), (3, infer), (4, output)] {
                self.summary(index, took, now);
            }
        }
    }

    pub fn record_cache(&mut self, hit: bool, took: Duration) {
        if let Some(now) = self.now() {
            self.summary(if hit { CACHE_HIT } else { CACHE_MISS }, took, now);
        }
    }
}

/// Prometheus label text for a model version: `model="..",version=".."`, escaped.
pub fn model_labels(name: &str, version: i64) -> String {
    format!("model=\"{}\",version=\"{version}\"", escape_label_value(name))
}

/// Renders every latency family for `models` (each with its [`model_labels`]): each family's HELP
/// and TYPE once, then its series, as the exposition format asks.
pub fn render(models: &[(String, &super::ModelStats)]) -> String {
    let mut out = String::new();
    let now = Instant::now();
    let mut family = |name: &str, help: &str, kind: &str, series: &mut dyn FnMut(&mut String, &str, &mut Latency)| {
        let mut body = String::new();
        for (labels, stats) in models {
            stats.with_latency(|latency| series(&mut body, labels, latency));
        }
        if !body.is_empty() {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            out.push_str(&body);
        }
    };
    family(
        FIRST_RESPONSE_FAMILY,
        "Duration from request to first response in milliseconds",
        "histogram",
        &mut |out, labels, latency| {
            if let Some(h) = &latency.first_response {
                h.render(out, FIRST_RESPONSE_FAMILY, labels);
            }
        },
    );
    for phase in Phase::ALL {
        family(phase.family(), phase.help(), "histogram", &mut |out, labels, latency| {
            if let Some(phases) = &latency.phases {
                phases[phase as usize].render(out, phase.family(), labels);
            }
        });
    }
    for (index, (name, help)) in SUMMARY_FAMILIES.iter().enumerate() {
        family(name, help, "summary", &mut |out, labels, latency| {
            let quantiles = latency.quantiles.clone();
            if let Some(Some(summary)) = latency.summaries.as_mut().map(|s| &mut s[index]) {
                summary.render(out, name, labels, &quantiles, now);
            }
        });
    }
    out
}

#[cfg(test)]
#[path = "latency_tests.rs"]
mod tests;
