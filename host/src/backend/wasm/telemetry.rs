//! WIT interface `telemetry`: a guest's own metrics (kept in the server's [`CustomMetrics`]) and
//! its own spans in the trace of the request it serves.
//!
//! A guest's span data is bounded (attributes and events per span, spans per `execute` call,
//! bytes per string, and the bytes all its spans add to one client request's traces,
//! `--trace-config guest_span_bytes`): past a bound, what is added is dropped, the span says how
//! much in its attribute `tessera.dropped`, and `/metrics` counts it
//! (`tessera_guest_span_items_dropped_total{model,reason}`). Tracing is the operator's, and a
//! guest must not grow it at will.

use std::sync::{Arc, Mutex, PoisonError};

use wasmtime::component::{HasData, Resource};

use super::bindings::tessera::model::telemetry as wit_telemetry;
use super::bindings::wit;
use super::resources::{HostMetric, HostMetricFamily, HostSpan, OpenSpan};
use super::state::{BlsCalls, GuestShared, GuestState, Handles, cut_text, table_error};
use crate::error::CoreError;
use crate::stats::custom::{MetricKind, SpanDrop};
use crate::trace::{GuestSpan, SpanEvent, SpanValue, now_ns, random_id};

/// Attributes, and events, one span keeps.
const SPAN_ITEMS: usize = 128;
/// Spans one `execute` call may open that are recorded.
const SPANS_PER_CALL: usize = 256;
/// Bytes of one name or string value a span keeps.
const SPAN_TEXT_BYTES: usize = 1024;
/// What a span takes in Triton's trace file beside its name, attributes and events: the trace
/// id, span ids, times, keys and punctuation, and its `tessera.dropped` attribute.
const SPAN_BYTES: usize = 240;
/// What an event takes beside its name and attributes.
const EVENT_BYTES: usize = 56;
/// What an attribute takes beside its key and value (`:` and `,`).
const ATTRIBUTE_BYTES: usize = 2;
/// The most a number takes.
const NUMBER_BYTES: usize = 24;

impl GuestState {
    /// The view interface `telemetry` works on.
    pub(super) fn telemetry(&mut self) -> TelemetryView<'_> {
        TelemetryView { handles: &mut self.handles, bls: &mut self.bls, shared: &self.shared }
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

/// The bytes `text` takes as a JSON string.
fn json_bytes(text: &str) -> usize {
    2 + text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// The bytes an attribute takes in the trace file.
fn attribute_bytes(key: &str, value: &SpanValue) -> usize {
    let value = match value {
        SpanValue::String(s) => json_bytes(s),
        SpanValue::Bool(_) | SpanValue::Int(_) | SpanValue::Double(_) => NUMBER_BYTES,
    };
    json_bytes(key) + value + ATTRIBUTE_BYTES
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

    /// Runs `f` on the span if it is still being recorded, and counts the items it dropped,
    /// by why.
    fn with_span(
        &self,
        span: &Resource<HostSpan>,
        f: impl FnOnce(&mut OpenSpan) -> Vec<(SpanDrop, u64)>,
    ) -> wasmtime::Result<()> {
        let span = self.open_span(span)?;
        let dropped = span.lock().unwrap_or_else(PoisonError::into_inner).as_mut().map(f).unwrap_or_default();
        for (reason, n) in dropped {
            self.count_dropped(reason, n);
        }
        Ok(())
    }

    fn count_dropped(&self, reason: SpanDrop, n: u64) {
        if let Some(metrics) = &self.shared.telemetry.metrics {
            metrics.count_span_drop(&self.shared.model_name, reason, n);
        }
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
        match metrics.family(&self.shared.model_name, &name, &description, kind) {
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
        match metrics.series(&family, version, labels, buckets) {
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
        let mut dropped = None;
        let open = match &self.bls.trace {
            Some(_) if spans.opened >= SPANS_PER_CALL => {
                dropped = Some(SpanDrop::SpansPerCall);
                None
            }
            Some(trace) => {
                let name = text(name);
                if trace.take_guest_bytes(SPAN_BYTES + json_bytes(&name)) {
                    spans.opened += 1;
                    let span = GuestSpan {
                        span_id: random_id(),
                        parent,
                        name,
                        start_ns: now_ns(),
                        end_ns: 0,
                        attributes: Vec::new(),
                        events: Vec::new(),
                    };
                    Some(OpenSpan { trace: trace.clone(), span, dropped: 0 })
                } else {
                    dropped = Some(SpanDrop::RequestBytes);
                    None
                }
            }
            None => None,
        };
        if let Some(reason) = dropped {
            self.count_dropped(reason, 1);
        }
        let recording = open.is_some();
        let span = Arc::new(Mutex::new(open));
        if recording {
            self.bls.spans.open.push(Arc::downgrade(&span));
        }
        self.handles.table.push(HostSpan(span)).map_err(table_error)
    }

    fn is_recording(&mut self, span: Resource<HostSpan>) -> wasmtime::Result<bool> {
        Ok(self.open_span(&span)?.lock().unwrap_or_else(PoisonError::into_inner).is_some())
    }

    fn set_attribute(&mut self, span: Resource<HostSpan>, key: String, value: wit::ParamValue) -> wasmtime::Result<()> {
        self.with_span(&span, |open| {
            if open.span.attributes.len() >= SPAN_ITEMS {
                open.dropped += 1;
                return vec![(SpanDrop::SpanItems, 1)];
            }
            let (key, value) = (text(key), span_value(value));
            if !open.trace.take_guest_bytes(attribute_bytes(&key, &value)) {
                open.dropped += 1;
                return vec![(SpanDrop::RequestBytes, 1)];
            }
            open.span.attributes.push((key, value));
            Vec::new()
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
                return vec![(SpanDrop::SpanItems, 1)];
            }
            let name = text(name);
            if !open.trace.take_guest_bytes(EVENT_BYTES + json_bytes(&name)) {
                open.dropped += 1;
                return vec![(SpanDrop::RequestBytes, 1)];
            }
            let over = attributes.len().saturating_sub(SPAN_ITEMS) as u64;
            let mut out_of_bytes = 0;
            let mut kept = Vec::new();
            for (key, value) in attributes.into_iter().take(SPAN_ITEMS) {
                let (key, value) = (text(key), span_value(value));
                if open.trace.take_guest_bytes(attribute_bytes(&key, &value)) {
                    kept.push((key, value));
                } else {
                    out_of_bytes += 1;
                }
            }
            open.dropped += (over + out_of_bytes) as i64;
            open.span.events.push(SpanEvent { name, ns: now_ns(), attributes: kept });
            vec![(SpanDrop::SpanItems, over), (SpanDrop::RequestBytes, out_of_bytes)]
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
