//! What the Prometheus exposition format asks of every family, the server's and the models' own:
//! histograms rendered with cumulative buckets, numbers and label values as it reads them.

use std::fmt::Write as _;

/// A Prometheus histogram: cumulative buckets are computed when rendered.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// Per bucket (not cumulative), plus one for +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub(super) fn new(bounds: Vec<f64>) -> Self {
        let counts = vec![0; bounds.len() + 1];
        Self { bounds, counts, sum: 0.0, count: 0 }
    }

    pub(super) fn observe(&mut self, value: f64) {
        let bucket = self.bounds.partition_point(|&b| b < value);
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }

    pub(super) fn bounds(&self) -> &[f64] {
        &self.bounds
    }

    pub(super) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}", number(*bound));
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", number(self.sum));
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// A sample value or bucket bound as the exposition format reads it, in at most 24 bytes:
/// Rust's shortest decimal, or its exponent form where that is longer (`1e300`, not 301 digits);
/// `+Inf`, `-Inf`, `NaN`.
pub(super) fn number(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let plain = value.to_string();
    if plain.len() <= 24 { plain } else { format!("{value:e}") }
}

/// A label value as the exposition format writes it: backslash, double quote and newline escaped.
pub(super) fn escape_label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
