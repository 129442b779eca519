//! Metrics that models' own code defines (WIT interface `telemetry`, Triton's python-backend
//! `pb_utils.MetricFamily` API), rendered on `/metrics` after the server's.
//!
//! Tenancy: the server's names (`nv_`, `tessera_`) are refused, and every series carries labels
//! `model` and `version` that the host sets to the creating model's, so one model can never write
//! into another's series nor into the server's.
//!
//! Bounds (`--metrics-config custom_*`, [`CustomLimits`]): the bytes of a metric or label name, of
//! a label value and of a description, the buckets of a histogram, the live families and series
//! of a model, and the bytes its families and series add to `/metrics`. A request past one is
//! refused with a message naming the setting and counted in
//! `tessera_custom_metric_refused_total{model,reason}`. A model's bytes are what its series'
//! lines take (each value counted at [`VALUE_WIDTH`], the widest [`number`] writes) plus the HELP
//! and TYPE lines of each family it holds a handle on.
//!
//! Lifetime, as in Triton: a series lives while a guest holds a handle to it (the registry keeps
//! only weak references), and a family while a series or a guest handle holds it. So a model that
//! unloads takes its series with it, and a name it freed can be taken again with another kind.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

pub use super::custom_limits::{CustomLimits, Refused, SpanDrop};
use super::custom_limits::{ReasonCounts, quoted};
use super::exposition::{Histogram, escape_label_value, number};

/// TensorRT-LLM's KV-cache block metrics (label `kv_cache_block_type`: `tokens_per`, `used`,
/// `max`), which Triton's ORCA load report reads.
pub const KV_CACHE_FAMILY: &str = "nv_trt_llm_kv_cache_block_metrics";

/// The most bytes [`number`] writes for a value (`-2.2250738585072014e-308`).
pub const VALUE_WIDTH: usize = 24;

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

/// Every model's custom metric families, and the counts of what their guests were refused.
#[derive(Debug)]
pub struct CustomMetrics {
    families: Mutex<BTreeMap<String, Weak<Family>>>,
    /// Each model's handle on a family, by (model, family name).
    claims: Mutex<BTreeMap<(String, String), Weak<ModelFamily>>>,
    /// What each model holds.
    usage: Mutex<BTreeMap<String, Arc<Usage>>>,
    limits: CustomLimits,
    refused: Mutex<ReasonCounts<Refused>>,
    span_drops: Mutex<ReasonCounts<SpanDrop>>,
    /// Held while a family handle or a series is created, so that two cannot both pass a bound.
    creating: Mutex<()>,
}

/// What one model holds; the handles give theirs back when they go.
#[derive(Debug, Default)]
struct Usage {
    families: AtomicUsize,
    series: AtomicUsize,
    bytes: AtomicUsize,
}

/// A series' full label set: `model`, `version`, then the guest's, sorted.
type Labels = Vec<(String, String)>;

/// One metric name, shared by the models that use it.
#[derive(Debug)]
pub struct Family {
    name: String,
    description: String,
    kind: MetricKind,
    /// Series by their full label set (`model`, `version`, then the guest's, sorted).
    series: Mutex<BTreeMap<Labels, Weak<Series>>>,
}

/// One model's handle on a family: what a guest holds, and what its series hold.
#[derive(Debug)]
pub struct ModelFamily {
    family: Arc<Family>,
    model: String,
    usage: Arc<Usage>,
    /// The family's HELP and TYPE lines, charged to the model.
    bytes: usize,
}

impl Drop for ModelFamily {
    fn drop(&mut self) {
        self.usage.families.fetch_sub(1, Ordering::Relaxed);
        self.usage.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// One series of a family.
#[derive(Debug)]
pub struct Series {
    family: Arc<ModelFamily>,
    value: Mutex<Value>,
    /// Its lines on `/metrics`, charged to the model.
    bytes: usize,
}

impl Drop for Series {
    fn drop(&mut self) {
        self.family.usage.series.fetch_sub(1, Ordering::Relaxed);
        self.family.usage.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
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

/// A family's HELP and TYPE lines.
fn header(name: &str, description: &str, kind: MetricKind) -> String {
    let help = description.replace('\\', "\\\\").replace('\n', "\\n");
    format!("# HELP {name} {help}\n# TYPE {name} {}\n", kind.as_str())
}

/// The bytes a series' lines take on `/metrics`, each value at [`VALUE_WIDTH`].
fn series_bytes(name: &str, labels: &str, value: &Value) -> usize {
    let line = |suffix: &str, extra: usize| name.len() + suffix.len() + labels.len() + extra + 4 + VALUE_WIDTH;
    match value {
        Value::Scalar(_) => line("", 0),
        Value::Histogram(h) => {
            let buckets: usize =
                h.bounds().iter().chain([&f64::INFINITY]).map(|b| line("_bucket", number(*b).len() + 6)).sum();
            buckets + line("_sum", 0) + line("_count", 0)
        }
    }
}

impl CustomMetrics {
    pub fn new(limits: CustomLimits) -> Arc<Self> {
        Arc::new(Self {
            families: Mutex::default(),
            claims: Mutex::default(),
            usage: Mutex::default(),
            limits,
            refused: Mutex::default(),
            span_drops: Mutex::default(),
            creating: Mutex::default(),
        })
    }

    /// Counts the refusal and words it: `what` failed because of `reason`.
    fn refuse<T>(&self, model: &str, reason: Refused, what: &str, why: String) -> Result<T, String> {
        lock(&self.refused).add(model, reason, 1);
        Err(format!("{what}: {why} (--metrics-config {})", reason.setting()))
    }

    /// Counts `n` items of span data a guest of `model` had dropped.
    pub fn count_span_drop(&self, model: &str, reason: SpanDrop, n: u64) {
        if n > 0 {
            lock(&self.span_drops).add(model, reason, n);
        }
    }

    fn usage(&self, model: &str) -> Arc<Usage> {
        Arc::clone(lock(&self.usage).entry(model.to_string()).or_default())
    }

    /// `model`'s handle on the family `name`: an existing one of the same kind (its first
    /// description stays), or a new one.
    pub fn family(
        &self,
        model: &str,
        name: &str,
        description: &str,
        kind: MetricKind,
    ) -> Result<Arc<ModelFamily>, String> {
        const WHAT: &str = "Error when creating MetricFamily";
        let limits = &self.limits;
        if name.len() > limits.name_bytes {
            let why = format!("the name {} is longer than {} bytes", quoted(name), limits.name_bytes);
            return self.refuse(model, Refused::NameBytes, WHAT, why);
        }
        if !valid_name(name, false) {
            return Err(format!("{WHAT}: '{name}' is not a valid metric name"));
        }
        // TensorRT-LLM's KV-cache family is the one `nv_` name a model may report: Triton's ORCA
        // load report reads it (`Frontend::load_report`).
        if (name.starts_with("nv_") && name != KV_CACHE_FAMILY) || name.starts_with("tessera_") {
            return Err(format!("{WHAT}: '{name}': names beginning with 'nv_' or 'tessera_' are the server's"));
        }
        if description.len() > limits.description_bytes {
            let why = format!("the description of '{name}' is longer than {} bytes", limits.description_bytes);
            return self.refuse(model, Refused::DescriptionBytes, WHAT, why);
        }
        let _creating = lock(&self.creating);
        let key = (model.to_string(), name.to_string());
        if let Some(claim) = lock(&self.claims).get(&key).and_then(Weak::upgrade) {
            if claim.family.kind != kind {
                return Err(already_exists(name, claim.family.kind));
            }
            return Ok(claim);
        }
        let family = {
            let mut families = lock(&self.families);
            match families.get(name).and_then(Weak::upgrade) {
                Some(family) if family.kind != kind => return Err(already_exists(name, family.kind)),
                Some(family) => family,
                None => {
                    let family = Arc::new(Family {
                        name: name.to_string(),
                        description: description.to_string(),
                        kind,
                        series: Mutex::default(),
                    });
                    families.retain(|_, f| f.strong_count() > 0);
                    families.insert(name.to_string(), Arc::downgrade(&family));
                    family
                }
            }
        };
        let usage = self.usage(model);
        if usage.families.load(Ordering::Relaxed) >= limits.families_per_model {
            let why = format!("model '{model}' already holds {} metric families", limits.families_per_model);
            return self.refuse(model, Refused::Families, WHAT, why);
        }
        let bytes = header(&family.name, &family.description, kind).len();
        if usage.bytes.load(Ordering::Relaxed) + bytes > limits.bytes_per_model {
            return self.refuse(model, Refused::ModelBytes, WHAT, bytes_why(model, limits.bytes_per_model));
        }
        usage.families.fetch_add(1, Ordering::Relaxed);
        usage.bytes.fetch_add(bytes, Ordering::Relaxed);
        let claim = Arc::new(ModelFamily { family, model: model.to_string(), usage, bytes });
        let mut claims = lock(&self.claims);
        claims.retain(|_, c| c.strong_count() > 0);
        claims.insert(key, Arc::downgrade(&claim));
        Ok(claim)
    }

    /// The series of `family` with `labels`, for version `version` of the family handle's model.
    pub fn series(
        &self,
        family: &Arc<ModelFamily>,
        version: i64,
        labels: Vec<(String, String)>,
        buckets: Option<Vec<f64>>,
    ) -> Result<Arc<Series>, String> {
        const WHAT: &str = "Error when creating Metric";
        let fail = |why: String| Err(format!("{WHAT}: {why}"));
        let (model, limits) = (family.model.as_str(), &self.limits);
        let kind = family.family.kind;
        let value = match (kind, buckets) {
            (MetricKind::Histogram, None) => return Err("Failed to create metric. Missing required buckets.".into()),
            (MetricKind::Histogram, Some(b)) => {
                if b.len() > limits.buckets_per_histogram {
                    let why = format!("{} buckets, more than {}", b.len(), limits.buckets_per_histogram);
                    return self.refuse(model, Refused::Buckets, WHAT, why);
                }
                if b.is_empty() || b.iter().any(|v| !v.is_finite()) || b.windows(2).any(|p| p[0] >= p[1]) {
                    return fail("buckets must be finite and increasing".into());
                }
                Value::Histogram(Histogram::new(b))
            }
            (_, Some(_)) => return Err("Failed to create metric. Unexpected buckets found.".into()),
            (_, None) => Value::Scalar(0.0),
        };
        for (name, value) in &labels {
            if name.len() > limits.name_bytes {
                let why = format!("the label name {} is longer than {} bytes", quoted(name), limits.name_bytes);
                return self.refuse(model, Refused::NameBytes, WHAT, why);
            }
            if value.len() > limits.label_value_bytes {
                let why = format!("the value of label '{name}' is longer than {} bytes", limits.label_value_bytes);
                return self.refuse(model, Refused::LabelValueBytes, WHAT, why);
            }
        }
        let version = version.to_string();
        let mut key = vec![("model".to_string(), model.to_string()), ("version".to_string(), version)];
        for (name, value) in labels {
            if !valid_name(&name, true) {
                return fail(format!("'{name}' is not a valid label name"));
            }
            if let Some((_, own)) = key[..2].iter().find(|(k, _)| *k == name) {
                if *own != value {
                    return fail(format!(
                        "label '{name}' is set by the server to the model's own ('{own}'), not {}",
                        quoted(&value)
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
        let shared = &family.family;
        if let Some(existing) = lock(&shared.series).get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let _creating = lock(&self.creating);
        if let Some(existing) = lock(&shared.series).get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let usage = &family.usage;
        if usage.series.load(Ordering::Relaxed) >= limits.series_per_model {
            let why = format!("model '{model}' already has {} metric series", limits.series_per_model);
            return self.refuse(model, Refused::Series, WHAT, why);
        }
        let bytes = series_bytes(&shared.name, &labels_text(&key), &value);
        if usage.bytes.load(Ordering::Relaxed) + bytes > limits.bytes_per_model {
            return self.refuse(model, Refused::ModelBytes, WHAT, bytes_why(model, limits.bytes_per_model));
        }
        usage.series.fetch_add(1, Ordering::Relaxed);
        usage.bytes.fetch_add(bytes, Ordering::Relaxed);
        let created = Arc::new(Series { family: Arc::clone(family), value: Mutex::new(value), bytes });
        let mut series = lock(&shared.series);
        series.retain(|_, s| s.strong_count() > 0);
        series.insert(key, Arc::downgrade(&created));
        Ok(created)
    }

    /// The bytes `model`'s families and series add to `/metrics`, as charged against
    /// `custom_bytes_per_model`.
    #[cfg(test)]
    fn model_bytes(&self, model: &str) -> usize {
        lock(&self.usage).get(model).map_or(0, |u| u.bytes.load(Ordering::Relaxed))
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

    /// Every family with a live series, in Prometheus' text format, then the refusals and the
    /// guests' dropped span data.
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
            out.push_str(&header(&family.name, &family.description, family.kind));
            for (labels, series) in live {
                let text = labels_text(&labels);
                match &*lock(&series.value) {
                    Value::Scalar(v) => {
                        let _ = writeln!(out, "{}{{{text}}} {}", family.name, number(*v));
                    }
                    Value::Histogram(h) => h.render(&mut out, &family.name, &text),
                }
            }
        }
        lock(&self.refused).render(
            &mut out,
            "tessera_custom_metric_refused_total",
            "Custom metric families and series refused because they would pass a bound of --metrics-config \
             (reason: the bound)",
            Refused::as_str,
        );
        lock(&self.span_drops).render(
            &mut out,
            "tessera_guest_span_items_dropped_total",
            "Spans, attributes and events of guests' own spans dropped because they would pass a bound \
             (reason: the bound)",
            SpanDrop::as_str,
        );
        out
    }

    #[cfg(test)]
    fn refusals(&self, model: &str, reason: Refused) -> u64 {
        lock(&self.refused).get(model, reason)
    }
}

fn already_exists(name: &str, kind: MetricKind) -> String {
    format!(
        "Error when creating MetricFamily: a metric family named '{name}' already exists with kind {}",
        kind.triton()
    )
}

fn bytes_why(model: &str, limit: usize) -> String {
    format!("model '{model}' would add more than {limit} bytes to /metrics")
}

fn labels_text(labels: &[(String, String)]) -> String {
    labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v))).collect::<Vec<_>>().join(",")
}

impl Series {
    /// Counter (by `value >= 0`) and gauge.
    pub fn increment(&self, value: f64) -> Result<(), String> {
        let kind = self.family.family.kind;
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
        match (&mut *lock(&self.value), self.family.family.kind) {
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
            Value::Scalar(_) => Err(format!(
                "Failed to observe metric value: {} does not support Observe",
                self.family.family.kind.triton()
            )),
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

#[cfg(test)]
#[path = "custom_bounds_tests.rs"]
mod bounds_tests;
