//! Metrics that models' own code defines (WIT interface `telemetry`, Triton's python-backend
//! `pb_utils.MetricFamily` API), rendered on `/metrics` after the server's.
//!
//! Tenancy: the server's names (`nv_`, `tessera_`) are refused, and every series carries labels
//! `model` and `version` that the host sets to the creating model's, so one model can never write
//! into another's series nor into the server's. Each model may hold at most
//! `--metrics-config custom_series_per_model` live series; a series it asks for past that is
//! refused and counted (`tessera_custom_metric_series_refused_total{model}`).
//!
//! Lifetime, as in Triton: a series lives while a guest holds a handle to it (the registry keeps
//! only weak references), and a family while a series or a guest handle holds it. So a model that
//! unloads takes its series with it, and a name it freed can be taken again with another kind.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::latency::{Histogram, escape_label_value};

/// TensorRT-LLM's KV-cache block metrics (label `kv_cache_block_type`: `tokens_per`, `used`,
/// `max`), which Triton's ORCA load report reads.
pub const KV_CACHE_FAMILY: &str = "nv_trt_llm_kv_cache_block_metrics";

/// The series a model may hold unless `--metrics-config custom_series_per_model` says otherwise.
pub const DEFAULT_SERIES_PER_MODEL: usize = 1000;

/// Triton's metric kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }

    fn triton(self) -> &'static str {
        match self {
            Self::Counter => "TRITONSERVER_METRIC_KIND_COUNTER",
            Self::Gauge => "TRITONSERVER_METRIC_KIND_GAUGE",
            Self::Histogram => "TRITONSERVER_METRIC_KIND_HISTOGRAM",
        }
    }
}

/// Every model's custom metric families.
#[derive(Debug)]
pub struct CustomMetrics {
    families: Mutex<BTreeMap<String, Weak<Family>>>,
    series_per_model: usize,
    /// Series refused for the cap, by model.
    refused: Mutex<BTreeMap<String, u64>>,
    /// Held while a series is created.
    creating: Mutex<()>,
}

/// A series' full label set: `model`, `version`, then the guest's, sorted.
type Labels = Vec<(String, String)>;

/// One metric name.
#[derive(Debug)]
pub struct Family {
    name: String,
    description: String,
    kind: MetricKind,
    /// Series by their full label set (`model`, `version`, then the guest's, sorted).
    series: Mutex<BTreeMap<Labels, Weak<Series>>>,
}

/// One series of a family.
#[derive(Debug)]
pub struct Series {
    family: Arc<Family>,
    model: String,
    value: Mutex<Value>,
}

#[derive(Debug)]
enum Value {
    Scalar(f64),
    Histogram(Histogram),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `name` is a valid Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`), or with
/// `label` a valid label name (no `:`, no leading `__`).
fn valid_name(name: &str, label: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (!label && c == ':'));
    first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (!label && c == ':'))
        && !(label && name.starts_with("__"))
}

impl CustomMetrics {
    pub fn new(series_per_model: usize) -> Arc<Self> {
        Arc::new(Self {
            families: Mutex::default(),
            series_per_model,
            refused: Mutex::default(),
            creating: Mutex::default(),
        })
    }

    /// The family `name`: an existing one of the same kind (its first description stays), or a
    /// new one.
    pub fn family(&self, name: &str, description: &str, kind: MetricKind) -> Result<Arc<Family>, String> {
        if !valid_name(name, false) {
            return Err(format!("Error when creating MetricFamily: '{name}' is not a valid metric name"));
        }
        // TensorRT-LLM's KV-cache family is the one `nv_` name a model may report: Triton's ORCA
        // load report reads it (`Frontend::load_report`).
        if (name.starts_with("nv_") && name != KV_CACHE_FAMILY) || name.starts_with("tessera_") {
            return Err(format!(
                "Error when creating MetricFamily: '{name}': names beginning with 'nv_' or 'tessera_' are the server's"
            ));
        }
        let mut families = lock(&self.families);
        if let Some(family) = families.get(name).and_then(Weak::upgrade) {
            if family.kind != kind {
                return Err(format!(
                    "Error when creating MetricFamily: a metric family named '{name}' already exists with kind {}",
                    family.kind.triton()
                ));
            }
            return Ok(family);
        }
        let family = Arc::new(Family {
            name: name.to_string(),
            description: description.to_string(),
            kind,
            series: Mutex::default(),
        });
        families.insert(name.to_string(), Arc::downgrade(&family));
        families.retain(|_, f| f.strong_count() > 0);
        Ok(family)
    }

    /// The series of `family` with `labels`, for version `version` of `model`.
    pub fn series(
        &self,
        family: &Arc<Family>,
        model: &str,
        version: i64,
        labels: Vec<(String, String)>,
        buckets: Option<Vec<f64>>,
    ) -> Result<Arc<Series>, String> {
        let fail = |why: String| Err(format!("Error when creating Metric: {why}"));
        let value = match (family.kind, buckets) {
            (MetricKind::Histogram, None) => return Err("Failed to create metric. Missing required buckets.".into()),
            (MetricKind::Histogram, Some(b)) => {
                if b.is_empty() || b.iter().any(|v| !v.is_finite()) || b.windows(2).any(|p| p[0] >= p[1]) {
                    return fail("buckets must be finite and increasing".into());
                }
                Value::Histogram(Histogram::new(b))
            }
            (_, Some(_)) => return Err("Failed to create metric. Unexpected buckets found.".into()),
            (_, None) => Value::Scalar(0.0),
        };
        let version = version.to_string();
        let mut key = vec![("model".to_string(), model.to_string()), ("version".to_string(), version)];
        for (name, value) in labels {
            if !valid_name(&name, true) {
                return fail(format!("'{name}' is not a valid label name"));
            }
            if let Some((_, own)) = key[..2].iter().find(|(k, _)| *k == name) {
                if *own != value {
                    return fail(format!(
                        "label '{name}' is set by the server to the model's own ('{own}'), not '{value}'"
                    ));
                }
                continue;
            }
            if key[2..].iter().any(|(k, _)| *k == name) {
                return fail(format!("label '{name}' is given twice"));
            }
            key.push((name, value));
        }
        key[2..].sort();
        if let Some(existing) = lock(&family.series).get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        // One creation at a time, so that two cannot both pass the cap.
        let _creating = lock(&self.creating);
        if let Some(existing) = lock(&family.series).get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        if self.live_series(model) >= self.series_per_model {
            *lock(&self.refused).entry(model.to_string()).or_default() += 1;
            return fail(format!(
                "model '{model}' already has {} metric series, the most the server allows a model \
                 (--metrics-config custom_series_per_model)",
                self.series_per_model
            ));
        }
        let created =
            Arc::new(Series { family: Arc::clone(family), model: model.to_string(), value: Mutex::new(value) });
        let mut series = lock(&family.series);
        series.retain(|_, s| s.strong_count() > 0);
        series.insert(key, Arc::downgrade(&created));
        Ok(created)
    }

    /// The live series of `model`, in every family.
    fn live_series(&self, model: &str) -> usize {
        let families: Vec<Arc<Family>> = lock(&self.families).values().filter_map(Weak::upgrade).collect();
        families
            .iter()
            .map(|family| lock(&family.series).values().filter_map(Weak::upgrade).filter(|s| s.model == model).count())
            .sum()
    }

    /// KV-cache utilisation (used blocks over the maximum) and token capacity (the maximum times
    /// tokens per block), summed over the models that report [`KV_CACHE_FAMILY`]; `None` unless
    /// all three block types are reported, as in Triton.
    pub fn kv_cache(&self) -> Option<(f64, f64)> {
        let family = lock(&self.families).get(KV_CACHE_FAMILY).and_then(Weak::upgrade)?;
        let (mut tokens_per, mut used, mut max) = (None, None::<f64>, None::<f64>);
        for (labels, series) in lock(&family.series).iter() {
            let Some(series) = series.upgrade() else { continue };
            let Value::Scalar(value) = *lock(&series.value) else { continue };
            match labels.iter().find(|(k, _)| k == "kv_cache_block_type").map(|(_, v)| v.as_str()) {
                Some("tokens_per") => tokens_per = Some(value),
                Some("used") => used = Some(used.unwrap_or(0.0) + value),
                Some("max") => max = Some(max.unwrap_or(0.0) + value),
                _ => {}
            }
        }
        let (tokens_per, used, max) = (tokens_per?, used?, max?);
        Some((if max > 0.0 { used / max } else { 0.0 }, max * tokens_per))
    }

    /// Every family with a live series, in Prometheus' text format, then the refusals.
    pub fn render(&self) -> String {
        let families: Vec<Arc<Family>> = lock(&self.families).values().filter_map(Weak::upgrade).collect();
        let mut out = String::new();
        for family in families {
            let live: Vec<(Labels, Arc<Series>)> = lock(&family.series)
                .iter()
                .filter_map(|(labels, series)| Some((labels.clone(), series.upgrade()?)))
                .collect();
            if live.is_empty() {
                continue;
            }
            let help = family.description.replace('\\', "\\\\").replace('\n', "\\n");
            let _ = writeln!(out, "# HELP {} {help}\n# TYPE {} {}", family.name, family.name, family.kind.as_str());
            for (labels, series) in live {
                let text = labels_text(&labels);
                match &*lock(&series.value) {
                    Value::Scalar(v) => {
                        let _ = writeln!(out, "{}{{{text}}} {v}", family.name);
                    }
                    Value::Histogram(h) => h.render(&mut out, &family.name, &text),
                }
            }
        }
        let refused = lock(&self.refused);
        if !refused.is_empty() {
            out.push_str(
                "# HELP tessera_custom_metric_series_refused_total Custom metric series refused because the model \
                 held as many as it may\n# TYPE tessera_custom_metric_series_refused_total counter\n",
            );
            for (model, count) in refused.iter() {
                let labels = labels_text(&[("model".to_string(), model.clone())]);
                let _ = writeln!(out, "tessera_custom_metric_series_refused_total{{{labels}}} {count}");
            }
        }
        out
    }
}

fn labels_text(labels: &[(String, String)]) -> String {
    labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v))).collect::<Vec<_>>().join(",")
}

impl Series {
    /// Counter (by `value >= 0`) and gauge.
    pub fn increment(&self, value: f64) -> Result<(), String> {
        let kind = self.family.kind;
        let fail = |why: &str| Err(format!("Failed to increment metric value: {} {why}", kind.triton()));
        match (&mut *lock(&self.value), kind) {
            (Value::Scalar(_), MetricKind::Counter) if value.is_nan() || value < 0.0 => {
                fail("can only be incremented monotonically by non-negative values.")
            }
            (Value::Scalar(v), _) => {
                *v += value;
                Ok(())
            }
            (Value::Histogram(_), _) => fail("does not support Increment"),
        }
    }

    /// Gauge only.
    pub fn set(&self, value: f64) -> Result<(), String> {
        match (&mut *lock(&self.value), self.family.kind) {
            (Value::Scalar(v), MetricKind::Gauge) => {
                *v = value;
                Ok(())
            }
            (_, kind) => Err(format!("Failed to set metric value: {} does not support Set", kind.triton())),
        }
    }

    /// Histogram only.
    pub fn observe(&self, value: f64) -> Result<(), String> {
        match &mut *lock(&self.value) {
            Value::Histogram(h) => {
                h.observe(value);
                Ok(())
            }
            Value::Scalar(_) => {
                Err(format!("Failed to observe metric value: {} does not support Observe", self.family.kind.triton()))
            }
        }
    }

    /// Counter and gauge.
    pub fn value(&self) -> Result<f64, String> {
        match &*lock(&self.value) {
            Value::Scalar(v) => Ok(*v),
            Value::Histogram(_) => {
                Err(format!("Failed to get metric value: {} does not support Value", MetricKind::Histogram.triton()))
            }
        }
    }
}

#[cfg(test)]
#[path = "custom_tests.rs"]
mod tests;
