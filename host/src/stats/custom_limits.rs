//! The byte and count bounds on what a model's own telemetry may put on `/metrics`
//! (`--metrics-config custom_*`), why a guest's request was refused, and the counters of those
//! refusals and of the span data the host dropped.
//!
//! Every bound is checked before anything is stored, so a refused request costs the server
//! nothing but its counter; the message names the setting that refused it and never echoes the
//! oversized text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The bounds on one model's custom metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomLimits {
    /// `custom_series_per_model`: live series.
    pub series_per_model: usize,
    /// `custom_families_per_model`: live families (metric names) the model holds a handle on.
    pub families_per_model: usize,
    /// `custom_name_bytes`: bytes of a metric name or a label name.
    pub name_bytes: usize,
    /// `custom_label_value_bytes`: bytes of one label value.
    pub label_value_bytes: usize,
    /// `custom_description_bytes`: bytes of a family's description (its HELP text).
    pub description_bytes: usize,
    /// `custom_buckets_per_histogram`: bucket bounds of one histogram series.
    pub buckets_per_histogram: usize,
    /// `custom_bytes_per_model`: bytes the model's families and series add to `/metrics`.
    pub bytes_per_model: usize,
}

impl Default for CustomLimits {
    fn default() -> Self {
        Self {
            series_per_model: 1000,
            families_per_model: 100,
            name_bytes: 128,
            label_value_bytes: 1024,
            description_bytes: 4096,
            buckets_per_histogram: 64,
            bytes_per_model: 1 << 20,
        }
    }
}

impl CustomLimits {
    /// Applies one `--metrics-config <setting>=<value>`; `Ok(false)` when the setting is not one
    /// of these.
    pub fn set(&mut self, setting: &str, value: &str) -> Result<bool, String> {
        let field = match setting {
            "custom_series_per_model" => &mut self.series_per_model,
            "custom_families_per_model" => &mut self.families_per_model,
            "custom_name_bytes" => &mut self.name_bytes,
            "custom_label_value_bytes" => &mut self.label_value_bytes,
            "custom_description_bytes" => &mut self.description_bytes,
            "custom_buckets_per_histogram" => &mut self.buckets_per_histogram,
            "custom_bytes_per_model" => &mut self.bytes_per_model,
            _ => return Ok(false),
        };
        *field = value
            .parse()
            .map_err(|_| format!("--metrics-config {setting}={value}: expected a whole number (0 or more)"))?;
        Ok(true)
    }
}

/// Why a model's request was refused: the bound it would have passed (label `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refused {
    Series,
    Families,
    NameBytes,
    LabelValueBytes,
    DescriptionBytes,
    Buckets,
    ModelBytes,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Series => "series",
            Self::Families => "families",
            Self::NameBytes => "name_bytes",
            Self::LabelValueBytes => "label_value_bytes",
            Self::DescriptionBytes => "description_bytes",
            Self::Buckets => "buckets",
            Self::ModelBytes => "model_bytes",
        }
    }

    /// The `--metrics-config` setting that refused.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Series => "custom_series_per_model",
            Self::Families => "custom_families_per_model",
            Self::NameBytes => "custom_name_bytes",
            Self::LabelValueBytes => "custom_label_value_bytes",
            Self::DescriptionBytes => "custom_description_bytes",
            Self::Buckets => "custom_buckets_per_histogram",
            Self::ModelBytes => "custom_bytes_per_model",
        }
    }
}

/// Why a guest's span data was dropped (label `reason` of `tessera_guest_span_items_dropped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SpanDrop {
    /// The request's trace had no span bytes left (`--trace-config guest_span_bytes`).
    RequestBytes,
    /// The span already held as many attributes, or events, as one may.
    SpanItems,
    /// The `execute` call had opened as many recorded spans as one may.
    SpansPerCall,
}

impl SpanDrop {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestBytes => "request_bytes",
            Self::SpanItems => "span_items",
            Self::SpansPerCall => "spans_per_call",
        }
    }
}

/// `text` for a message: itself when short, else its first bytes and its length.
pub(super) fn quoted(text: &str) -> String {
    const SHOWN: usize = 64;
    if text.len() <= SHOWN {
        format!("'{text}'")
    } else {
        format!("'{}...' ({} bytes)", &text[..text.floor_char_boundary(SHOWN)], text.len())
    }
}

/// Counts by model and reason, rendered as one counter family.
#[derive(Debug)]
pub(super) struct ReasonCounts<R>(BTreeMap<(String, R), u64>);

impl<R> Default for ReasonCounts<R> {
    fn default() -> Self {
        Self(BTreeMap::new())
    }
}

impl<R: Ord + Copy> ReasonCounts<R> {
    pub(super) fn add(&mut self, model: &str, reason: R, n: u64) {
        *self.0.entry((model.to_string(), reason)).or_default() += n;
    }

    #[cfg(test)]
    pub(super) fn get(&self, model: &str, reason: R) -> u64 {
        self.0.get(&(model.to_string(), reason)).copied().unwrap_or(0)
    }

    pub(super) fn render(&self, out: &mut String, name: &str, help: &str, reason_str: impl Fn(R) -> &'static str) {
        if self.0.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for ((model, reason), count) in &self.0 {
            let model = super::exposition::escape_label_value(model);
            let _ = writeln!(out, "{name}{{model=\"{model}\",reason=\"{}\"}} {count}", reason_str(*reason));
        }
    }
}
