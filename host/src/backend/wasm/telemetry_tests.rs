use std::sync::Mutex;

use wit_telemetry::{HostMetric as _, HostMetricFamily as _, HostSpan as _};

use super::*;
use crate::backend::wasm::sandbox::AllowList;
use crate::backend::wasm::state::GuestTelemetry;
use crate::backend::wasm::test_support::{shared, state};
use crate::stats::custom::{CustomLimits, CustomMetrics};
use crate::trace::{FileSink, TraceRecord, TraceSink, test_trace, test_trace_with_guest_bytes};

#[derive(Default)]
struct Kept(Mutex<Vec<TraceRecord>>);

impl TraceSink for Kept {
    fn finish(&self, record: TraceRecord) {
        self.0.lock().unwrap().push(record);
    }
}

fn traced_state() -> (super::super::state::GuestState, Arc<Kept>) {
    let kept = Arc::new(Kept::default());
    let mut s = state(shared(AllowList::Nothing, None));
    s.bls.trace = Some(test_trace(kept.clone()));
    (s, kept)
}

#[test]
fn spans_nest_carry_attributes_and_events_and_reach_the_trace() {
    let (mut s, kept) = traced_state();
    let mut view = s.telemetry();
    let outer = view.start("preprocess".into(), None).unwrap();
    assert!(view.is_recording(Resource::new_borrow(outer.rep())).unwrap());
    let inner = view.start("tokenize".into(), Some(Resource::new_borrow(outer.rep()))).unwrap();
    view.set_attribute(Resource::new_borrow(inner.rep()), "tokens".into(), wit::ParamValue::Int(12)).unwrap();
    let attrs = vec![("cache".into(), wit::ParamValue::Bool(true))];
    view.add_event(Resource::new_borrow(inner.rep()), "lookup".into(), attrs).unwrap();
    view.end(Resource::new_borrow(inner.rep())).unwrap();
    // `outer` is left open: the call's end closes it.
    s.bls.spans.end_all();
    s.bls.trace = None;
    let mut view = s.telemetry();
    wit_telemetry::HostSpan::drop(&mut view, inner).unwrap();
    wit_telemetry::HostSpan::drop(&mut view, outer).unwrap();
    drop(s);
    let records = kept.0.lock().unwrap();
    let spans = &records[0].guest_spans;
    assert_eq!(spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["tokenize", "preprocess"]);
    let (inner, outer) = (&spans[0], &spans[1]);
    assert_eq!(inner.parent, Some(outer.span_id));
    assert_eq!(outer.parent, None, "a child of the model's compute span");
    assert_eq!(inner.attributes, vec![("tokens".to_string(), SpanValue::Int(12))]);
    assert_eq!(inner.events[0].name, "lookup");
    assert_eq!(inner.events[0].attributes, vec![("cache".to_string(), SpanValue::Bool(true))]);
    assert!(outer.start_ns <= inner.start_ns && inner.end_ns <= outer.end_ns);
}

#[test]
fn without_a_traced_request_a_span_records_nothing() {
    let mut s = state(shared(AllowList::Nothing, None));
    let mut view = s.telemetry();
    let span = view.start("idle".into(), None).unwrap();
    assert!(!view.is_recording(Resource::new_borrow(span.rep())).unwrap());
    view.set_attribute(Resource::new_borrow(span.rep()), "k".into(), wit::ParamValue::Int(1)).unwrap();
    view.end(Resource::new_borrow(span.rep())).unwrap();
    wit_telemetry::HostSpan::drop(&mut view, span).unwrap();
}

#[test]
fn what_a_span_keeps_is_bounded_and_the_rest_counted() {
    let (mut s, kept) = traced_state();
    let mut view = s.telemetry();
    let span = view.start("x".repeat(5000), None).unwrap();
    for i in 0..(SPAN_ITEMS + 3) {
        view.set_attribute(Resource::new_borrow(span.rep()), format!("k{i}"), wit::ParamValue::Int(1)).unwrap();
    }
    wit_telemetry::HostSpan::drop(&mut view, span).unwrap();
    s.bls.trace = None;
    drop(s);
    let records = kept.0.lock().unwrap();
    let span = &records[0].guest_spans[0];
    assert!(span.name.len() < 1200 && span.name.contains("more bytes cut"), "{}", span.name.len());
    assert_eq!(span.attributes.len(), SPAN_ITEMS + 1);
    assert_eq!(span.attributes.last().unwrap(), &("tessera.dropped".to_string(), SpanValue::Int(3)));
}

#[test]
fn metrics_without_a_registry_are_refused_with_a_message() {
    let mut s = state(shared(AllowList::Nothing, None));
    let mut view = s.telemetry();
    let e = view.create("m".into(), "".into(), wit_telemetry::MetricKind::Counter).unwrap().unwrap_err();
    assert_eq!(e.message, "custom metrics are not available here");
}

#[test]
fn a_guests_series_is_labelled_with_its_model_and_leaves_with_its_handles() {
    let registry = CustomMetrics::new(CustomLimits::default());
    let mut guest = shared(AllowList::Nothing, None);
    Arc::get_mut(&mut guest).unwrap().telemetry =
        GuestTelemetry { metrics: Some(Arc::clone(&registry)), model_version: 4 };
    let mut s = state(guest);
    let mut view = s.telemetry();
    let family = view.create("hits".into(), "Hits".into(), wit_telemetry::MetricKind::Counter).unwrap().unwrap();
    let labels = vec![("route".to_string(), "a".to_string())];
    let metric = view.metric(Resource::new_borrow(family.rep()), labels, None).unwrap().unwrap();
    view.increment(Resource::new_borrow(metric.rep()), 2.0).unwrap().unwrap();
    let e = view.set(Resource::new_borrow(metric.rep()), 1.0).unwrap().unwrap_err();
    assert_eq!(e.code, wit::ErrorCode::InvalidArg);
    assert!(registry.render().contains("hits{model=\"guest\",version=\"4\",route=\"a\"} 2\n"));
    wit_telemetry::HostMetric::drop(&mut view, metric).unwrap();
    wit_telemetry::HostMetricFamily::drop(&mut view, family).unwrap();
    assert_eq!(registry.render(), "");
}

#[test]
fn a_requests_span_bytes_are_bounded_as_the_trace_file_writes_them_and_the_drops_counted() {
    let dir = std::env::temp_dir().join(format!("tessera-guest-span-bytes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    let sink = Arc::new(FileSink::start(path.display().to_string(), 0));
    let registry = CustomMetrics::new(CustomLimits::default());
    let mut guest = shared(AllowList::Nothing, None);
    Arc::get_mut(&mut guest).unwrap().telemetry =
        GuestTelemetry { metrics: Some(Arc::clone(&registry)), model_version: 1 };
    let mut s = state(guest);
    const BUDGET: usize = 8 << 10;
    s.bls.trace = Some(test_trace_with_guest_bytes(sink.clone(), BUDGET));
    let mut view = s.telemetry();
    // Strings that the trace file writes six bytes a character (`\u0001`), and plain ones.
    let escaped = || wit::ParamValue::String("\u{1}".repeat(1024));
    let mut spans = Vec::new();
    for i in 0..40 {
        let span = view.start(format!("span{i}"), None).unwrap();
        for j in 0..10 {
            view.set_attribute(Resource::new_borrow(span.rep()), format!("k{j}"), escaped()).unwrap();
        }
        let attributes = vec![("a".to_string(), wit::ParamValue::String("x".repeat(1024)))];
        view.add_event(Resource::new_borrow(span.rep()), "e".into(), attributes).unwrap();
        spans.push(span);
    }
    let late = view.start("late".into(), None).unwrap();
    assert!(!view.is_recording(Resource::new_borrow(late.rep())).unwrap(), "no bytes were left for a span");
    s.bls.spans.end_all();
    s.bls.trace = None;
    drop(s);
    sink.close();
    let written = std::fs::metadata(&path).unwrap().len() as usize;
    // The trace's own object ({"id":..,"model_name":..}) and the array's brackets are not the guest's.
    assert!(written <= BUDGET + 256, "{written} bytes written for a budget of {BUDGET}");
    let objects: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let spans: Vec<&serde_json::Value> = objects.as_array().unwrap().iter().filter_map(|o| o.get("span")).collect();
    assert!(!spans.is_empty() && spans.len() < 40, "{}", spans.len());
    // The first span kept one attribute of six kilobytes as written: counted as written, not
    // as the 1 KiB the guest sent.
    let first = spans[0]["attributes"].as_object().unwrap();
    assert_eq!(first.keys().filter(|k| k.starts_with('k')).count(), 1, "{first:?}");
    let text = registry.render();
    let line = "tessera_guest_span_items_dropped_total{model=\"guest\",reason=\"request_bytes\"} ";
    let dropped: u64 = text.lines().find_map(|l| l.strip_prefix(line)).unwrap().parse().unwrap();
    let in_spans: u64 = spans.iter().map(|s| s["attributes"]["tessera.dropped"].as_u64().unwrap_or(0)).sum();
    assert_eq!(dropped, in_spans + (41 - spans.len() as u64), "what the spans say they lost, and the spans lost");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spans_past_the_calls_bound_are_counted_too() {
    let registry = CustomMetrics::new(CustomLimits::default());
    let kept = Arc::new(Kept::default());
    let mut guest = shared(AllowList::Nothing, None);
    Arc::get_mut(&mut guest).unwrap().telemetry =
        GuestTelemetry { metrics: Some(Arc::clone(&registry)), model_version: 1 };
    let mut s = state(guest);
    s.bls.trace = Some(test_trace(kept.clone()));
    let mut view = s.telemetry();
    for _ in 0..SPANS_PER_CALL + 2 {
        let span = view.start("s".into(), None).unwrap();
        wit_telemetry::HostSpan::drop(&mut view, span).unwrap();
    }
    s.bls.spans.end_all();
    s.bls.trace = None;
    drop(s);
    assert_eq!(kept.0.lock().unwrap()[0].guest_spans.len(), SPANS_PER_CALL);
    assert!(
        registry
            .render()
            .contains("tessera_guest_span_items_dropped_total{model=\"guest\",reason=\"spans_per_call\"} 2\n")
    );
}
