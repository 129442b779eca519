//! WIT interface `telemetry`: a guest's own metrics (kept in the server's [`CustomMetrics`]) and
//! its own spans in the trace of the request it serves.
//!
//! A guest's span data is bounded (attributes and events per span, spans per `execute` call,
//! bytes per string): past a bound, what is added is dropped, and the span says how much in its
//! attribute `tessera.dropped`. Tracing is the operator's, and a guest must not grow it at will.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use wasmtime::component::{HasData, Resource};

use super::bindings::tessera::model::telemetry as wit_telemetry;
use super::state::{BlsCalls, GuestShared, Handles, cut_text, table_error};
use super::wit;
use crate::error::CoreError;
use crate::stats::custom::{CustomMetrics, Family, MetricKind, Series};
use crate::trace::{GuestSpan, SpanEvent, SpanValue, Trace, now_ns, random_id};

/// Attributes, and events, one span keeps.
const SPAN_ITEMS: usize = 128;
/// Spans one `execute` call may open that are recorded.
const SPANS_PER_CALL: usize = 256;
/// Bytes of one name or string value a span keeps.
const SPAN_TEXT_BYTES: usize = 1024;

/// What the guest's telemetry needs that every store of its model shares.
#[derive(Default)]
pub(super) struct GuestTelemetry {
    /// The server's custom metrics; `None` where there are none (an auto-complete instance).
    pub(super) metrics: Option<Arc<CustomMetrics>>,
    pub(super) model_version: i64,
}

/// A metric family resource.
pub struct HostMetricFamily(Arc<Family>);

/// A metric (series) resource.
pub struct HostMetric(Arc<Series>);

/// A span resource: `None` once ended, or from the start when its request is not traced.
pub struct HostSpan(Arc<Mutex<Option<OpenSpan>>>);

/// A span being recorded, and the trace it goes to when it ends.
pub(super) struct OpenSpan {
    trace: Trace,
    span: GuestSpan,
    dropped: i64,
}

impl OpenSpan {
    fn end(mut self) {
        self.span.end_ns = now_ns();
        if self.dropped > 0 {
            self.span.attributes.push(("tessera.dropped".into(), SpanValue::Int(self.dropped)));
        }
        self.trace.add_guest_span(self.span);
    }
}

/// The spans the current `execute` call opened (to end those still open when it returns).
#[derive(Default)]
pub(super) struct CallSpans {
    open: Vec<Weak<Mutex<Option<OpenSpan>>>>,
    opened: usize,
}

impl CallSpans {
    /// Ends every span still open; the next call starts with none.
    pub(super) fn end_all(&mut self) {
        for span in self.open.drain(..).filter_map(|s| s.upgrade()) {
            if let Some(open) = span.lock().unwrap_or_else(PoisonError::into_inner).take() {
                open.end();
            }
        }
        self.opened = 0;
    }
}

/// What WIT interface `telemetry` works on.
pub struct TelemetryView<'a> {
    pub(super) handles: &'a mut Handles,
    pub(super) bls: &'a mut BlsCalls,
    pub(super) shared: &'a GuestShared,
}

/// [`HasData`] for interface `telemetry`: its `add_to_linker` gets a [`TelemetryView`].
pub struct TelemetryCalls;

impl HasData for TelemetryCalls {
    type Data<'a> = TelemetryView<'a>;
}

fn refused(message: String) -> wit::Error {
    wit::Error { code: wit::ErrorCode::InvalidArg, message }
}

fn text(value: String) -> String {
    cut_text(value, SPAN_TEXT_BYTES, "span strings keep")
}

fn span_value(value: wit::ParamValue) -> SpanValue {
    match value {
        wit::ParamValue::Bool(b) => SpanValue::Bool(b),
        wit::ParamValue::Int(i) => SpanValue::Int(i),
        wit::ParamValue::Double(d) => SpanValue::Double(d),
        wit::ParamValue::String(s) => SpanValue::String(text(s)),
    }
}

impl TelemetryView<'_> {
    fn open_span(&self, span: &Resource<HostSpan>) -> wasmtime::Result<Arc<Mutex<Option<OpenSpan>>>> {
        Ok(Arc::clone(&self.handles.table.get(span).map_err(table_error)?.0))
    }

    /// Runs `f` on the span if it is still being recorded.
    fn with_span(&self, span: &Resource<HostSpan>, f: impl FnOnce(&mut OpenSpan)) -> wasmtime::Result<()> {
        let span = self.open_span(span)?;
        if let Some(open) = span.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            f(open);
        }
        Ok(())
    }
}

impl wit_telemetry::Host for TelemetryView<'_> {}

impl wit_telemetry::HostMetricFamily for TelemetryView<'_> {
    fn create(
        &mut self,
        name: String,
        description: String,
        kind: wit_telemetry::MetricKind,
    ) -> wasmtime::Result<Result<Resource<HostMetricFamily>, wit::Error>> {
        let Some(metrics) = &self.shared.telemetry.metrics else {
            let e = CoreError::unsupported("custom metrics are not available here");
            return Ok(Err(super::convert::wit_error(e)));
        };
        let kind = match kind {
            wit_telemetry::MetricKind::Counter => MetricKind::Counter,
            wit_telemetry::MetricKind::Gauge => MetricKind::Gauge,
            wit_telemetry::MetricKind::Histogram => MetricKind::Histogram,
        };
        match metrics.family(&name, &description, kind) {
            Ok(family) => Ok(Ok(self.handles.table.push(HostMetricFamily(family)).map_err(table_error)?)),
            Err(e) => Ok(Err(refused(e))),
        }
    }

    fn metric(
        &mut self,
        family: Resource<HostMetricFamily>,
        labels: Vec<(String, String)>,
        buckets: Option<Vec<f64>>,
    ) -> wasmtime::Result<Result<Resource<HostMetric>, wit::Error>> {
        let family = Arc::clone(&self.handles.table.get(&family).map_err(table_error)?.0);
        let Some(metrics) = &self.shared.telemetry.metrics else {
            return Ok(Err(refused("custom metrics are not available here".into())));
        };
        let version = self.shared.telemetry.model_version;
        match metrics.series(&family, &self.shared.model_name, version, labels, buckets) {
            Ok(series) => Ok(Ok(self.handles.table.push(HostMetric(series)).map_err(table_error)?)),
            Err(e) => Ok(Err(refused(e))),
        }
    }

    fn drop(&mut self, family: Resource<HostMetricFamily>) -> wasmtime::Result<()> {
        self.handles.table.delete(family).map_err(table_error)?;
        Ok(())
    }
}

impl wit_telemetry::HostMetric for TelemetryView<'_> {
    fn increment(&mut self, metric: Resource<HostMetric>, value: f64) -> wasmtime::Result<Result<(), wit::Error>> {
        Ok(self.handles.table.get(&metric).map_err(table_error)?.0.increment(value).map_err(refused))
    }

    fn set(&mut self, metric: Resource<HostMetric>, value: f64) -> wasmtime::Result<Result<(), wit::Error>> {
        Ok(self.handles.table.get(&metric).map_err(table_error)?.0.set(value).map_err(refused))
    }

    fn observe(&mut self, metric: Resource<HostMetric>, value: f64) -> wasmtime::Result<Result<(), wit::Error>> {
        Ok(self.handles.table.get(&metric).map_err(table_error)?.0.observe(value).map_err(refused))
    }

    fn value(&mut self, metric: Resource<HostMetric>) -> wasmtime::Result<Result<f64, wit::Error>> {
        Ok(self.handles.table.get(&metric).map_err(table_error)?.0.value().map_err(refused))
    }

    fn drop(&mut self, metric: Resource<HostMetric>) -> wasmtime::Result<()> {
        self.handles.table.delete(metric).map_err(table_error)?;
        Ok(())
    }
}

impl wit_telemetry::HostSpan for TelemetryView<'_> {
    fn start(&mut self, name: String, parent: Option<Resource<HostSpan>>) -> wasmtime::Result<Resource<HostSpan>> {
        let parent = match &parent {
            Some(p) => {
                self.open_span(p)?.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|o| o.span.span_id)
            }
            None => None,
        };
        let spans = &mut self.bls.spans;
        let open = match &self.bls.trace {
            Some(trace) if spans.opened < SPANS_PER_CALL => {
                spans.opened += 1;
                let span = GuestSpan {
                    span_id: random_id(),
                    parent,
                    name: text(name),
                    start_ns: now_ns(),
                    end_ns: 0,
                    attributes: Vec::new(),
                    events: Vec::new(),
                };
                Some(OpenSpan { trace: trace.clone(), span, dropped: 0 })
            }
            _ => None,
        };
        let recording = open.is_some();
        let span = Arc::new(Mutex::new(open));
        if recording {
            spans.open.push(Arc::downgrade(&span));
        }
        self.handles.table.push(HostSpan(span)).map_err(table_error)
    }

    fn is_recording(&mut self, span: Resource<HostSpan>) -> wasmtime::Result<bool> {
        Ok(self.open_span(&span)?.lock().unwrap_or_else(PoisonError::into_inner).is_some())
    }

    fn set_attribute(&mut self, span: Resource<HostSpan>, key: String, value: wit::ParamValue) -> wasmtime::Result<()> {
        self.with_span(&span, |open| {
            if open.span.attributes.len() < SPAN_ITEMS {
                open.span.attributes.push((text(key), span_value(value)));
            } else {
                open.dropped += 1;
            }
        })
    }

    fn add_event(
        &mut self,
        span: Resource<HostSpan>,
        name: String,
        attributes: Vec<(String, wit::ParamValue)>,
    ) -> wasmtime::Result<()> {
        self.with_span(&span, |open| {
            if open.span.events.len() >= SPAN_ITEMS {
                open.dropped += 1;
                return;
            }
            let kept = attributes.len().min(SPAN_ITEMS);
            open.dropped += (attributes.len() - kept) as i64;
            let attributes = attributes.into_iter().take(kept).map(|(k, v)| (text(k), span_value(v))).collect();
            open.span.events.push(SpanEvent { name: text(name), ns: now_ns(), attributes });
        })
    }

    fn end(&mut self, span: Resource<HostSpan>) -> wasmtime::Result<()> {
        let span = self.open_span(&span)?;
        let open = span.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(open) = open {
            open.end();
        }
        Ok(())
    }

    fn drop(&mut self, span: Resource<HostSpan>) -> wasmtime::Result<()> {
        let HostSpan(span) = self.handles.table.delete(span).map_err(table_error)?;
        let open = span.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(open) = open {
            open.end();
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "telemetry_tests.rs"]
mod tests;
