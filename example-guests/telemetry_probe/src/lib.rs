//! A test guest for the Rust SDK's telemetry (tests/test_guest_telemetry.py); the same probe is
//! written with every SDK (tests/guests/telemetry_*). Per request: `probe_requests_total` +1,
//! 2.5 observed in `probe_value` (buckets 1, 10, 100), and a span `rust-work` (attribute `lang`)
//! with a child `rust-inner` that has an event `step`. `OUTPUT0` is `INPUT0` (no copy).

use tessera_guest::telemetry::{Metric, MetricFamily, MetricKind, Span};
use tessera_guest::{Error, InitializeArgs, Model, ParamValue, Request, Tensor, export_model};

struct Probe {
    requests: Metric,
    values: Metric,
    // The families outlive nothing here, but keeping them shows they may be dropped or kept.
    _families: (MetricFamily, MetricFamily),
}

impl Model for Probe {
    fn initialize(_args: InitializeArgs) -> Result<Self, Error> {
        let counter = MetricFamily::new("probe_requests_total", "Requests the probe saw", MetricKind::Counter)?;
        let histogram = MetricFamily::new("probe_value", "Values the probe observed", MetricKind::Histogram)?;
        let requests = counter.metric(&[("lang", "rust")], None)?;
        let values = histogram.metric(&[("lang", "rust")], Some(&[1.0, 10.0, 100.0]))?;
        Ok(Probe { requests, values, _families: (counter, histogram) })
    }

    fn execute_request(&mut self, request: &Request) -> Result<Vec<Tensor>, Error> {
        let span = Span::start("rust-work");
        span.set_attribute("lang", ParamValue::String("rust".into()));
        let inner = span.child("rust-inner");
        inner.add_event("step", &[("n", ParamValue::Int(1))]);
        inner.end();
        self.requests.increment(1.0)?;
        self.values.observe(2.5)?;
        let output = request.input("INPUT0")?.with_name("OUTPUT0");
        span.end();
        Ok(vec![output])
    }
}

export_model!(Probe);
