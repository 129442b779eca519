//! The model's own metrics on the server's `/metrics`, and spans of its own code in request
//! traces (WIT interface `telemetry`).
//!
//! ```ignore
//! use tessera_guest::telemetry::{MetricFamily, MetricKind, Span};
//!
//! let family = MetricFamily::new("requests_total", "Requests by route", MetricKind::Counter)?;
//! let metric = family.metric(&[("route", "a")], None)?;
//! metric.increment(1.0)?;
//!
//! let span = Span::start("tokenize");
//! span.set_attribute("tokens", ParamValue::Int(12));
//! span.end();
//! ```
//!
//! Metrics follow Triton's python-backend API (`pb_utils.MetricFamily`): a family is one metric
//! name (the same name and kind is the same family, another kind is refused), a [`Metric`] one
//! series of it. The host labels every series with the model's `model` and `version`, refuses
//! names that begin with `nv_` or `tessera_`, and caps the series a model may hold. A series
//! leaves `/metrics` when its last handle is dropped: keep the [`Metric`] in the model.

use crate::bindings::tessera::model::telemetry as wit;
use crate::{Error, ParamValue};

/// What a family counts.
pub use wit::MetricKind;

/// A metric family: one metric name on the server's `/metrics`.
pub struct MetricFamily(wit::MetricFamily);

/// One series of a [`MetricFamily`].
pub struct Metric(wit::Metric);

impl MetricFamily {
    /// The family `name` of `kind` (`description` is its HELP text).
    pub fn new(name: &str, description: &str, kind: MetricKind) -> Result<Self, Error> {
        wit::MetricFamily::create(name, description, kind).map(Self)
    }

    /// The series with `labels`; `buckets` (increasing upper bounds) for a histogram, and only
    /// for one.
    pub fn metric(&self, labels: &[(&str, &str)], buckets: Option<&[f64]>) -> Result<Metric, Error> {
        let labels: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.0.metric(&labels, buckets).map(Metric)
    }
}

impl Metric {
    /// Adds `value` (a counter by a value >= 0 only; a gauge by any).
    pub fn increment(&self, value: f64) -> Result<(), Error> {
        self.0.increment(value)
    }

    /// Sets a gauge.
    pub fn set(&self, value: f64) -> Result<(), Error> {
        self.0.set(value)
    }

    /// Adds an observation to a histogram.
    pub fn observe(&self, value: f64) -> Result<(), Error> {
        self.0.observe(value)
    }

    /// A counter's or gauge's value.
    pub fn value(&self) -> Result<f64, Error> {
        self.0.value()
    }
}

/// A span of the model's own code in the trace of the request it executes (for a batch, its
/// first traced request): a child of the model's compute span, or of another span
/// ([`Span::child`]). It records nothing when the request is not traced. It ends when
/// [`Span::end`] is called or it is dropped, and at the latest when `execute` returns.
pub struct Span(wit::Span);

impl Span {
    /// Opens a span under the model's compute span.
    pub fn start(name: &str) -> Self {
        Self(wit::Span::start(name, None))
    }

    /// Opens a span under this one.
    pub fn child(&self, name: &str) -> Self {
        Self(wit::Span::start(name, Some(&self.0)))
    }

    /// Whether the span is recorded: skip costly attributes when it is not.
    pub fn is_recording(&self) -> bool {
        self.0.is_recording()
    }

    pub fn set_attribute(&self, key: &str, value: ParamValue) {
        self.0.set_attribute(key, &value);
    }

    /// An event now, with attributes.
    pub fn add_event(&self, name: &str, attributes: &[(&str, ParamValue)]) {
        let attributes: Vec<(String, ParamValue)> =
            attributes.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        self.0.add_event(name, &attributes);
    }

    /// Ends the span now.
    pub fn end(self) {
        self.0.end();
    }
}
