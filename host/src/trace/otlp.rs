//! OpenTelemetry mode: finished traces become spans with Triton's structure, exported as OTLP/HTTP
//! protobuf by a batch span processor on a thread of its own. A request never waits on the
//! collector: a trace that finds the queue full is dropped and counted, as is a batch the
//! collector refuses or never answers.
//!
//! Spans, as Triton's (docs/user_guide/trace.md, "OpenTelemetry"): for a request from a client,
//! `InferRequest` (its parent is the `traceparent` the client sent, if any; events: the door's
//! activities), then the model's span named after the model (events `REQUEST_START`,
//! `QUEUE_START`, `REQUEST_END`; attributes `triton.model_name`, `triton.model_version`,
//! `triton.trace_id`, `triton.trace_parent_id`, `triton.request_id`), then `compute` (events
//! `COMPUTE_*`). A composing model's or a BLS call's trace has no `InferRequest`: its model span is
//! a child of its caller's model span.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prost::Message;

use super::{SpanValue, TraceRecord, TraceSink, activity};

/// How long one export may take (the OTLP exporter's default timeout).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The batch span processor's settings (`opentelemetry,bsp_*`), with OpenTelemetry's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    pub url: String,
    pub resource: Vec<(String, String)>,
    pub max_queue_size: usize,
    pub schedule_delay: Duration,
    pub max_export_batch_size: usize,
}

impl ExportSettings {
    /// From `--trace-config opentelemetry,<key>=<value>` settings; `resource` values are
    /// `<key>=<value>` pairs separated by commas when given more than once.
    pub fn from_config(settings: &BTreeMap<String, String>) -> Result<Self, String> {
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match settings.get(key) {
                None => Ok(std::env::var(format!("OTEL_{}", key.to_ascii_uppercase()))
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default)),
                Some(v) => v.parse().map_err(|_| format!("invalid value for opentelemetry,{key}: {v}")),
            }
        };
        let resource = settings
            .get("resource")
            .map(|all| all.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
            .unwrap_or_default();
        Ok(Self {
            url: settings.get("url").cloned().unwrap_or_else(|| "http://localhost:4318/v1/traces".into()),
            resource,
            max_queue_size: usize::try_from(number("bsp_max_queue_size", 2048)?).unwrap_or(2048).max(1),
            schedule_delay: Duration::from_millis(number("bsp_schedule_delay", 5000)?),
            max_export_batch_size: usize::try_from(number("bsp_max_export_batch_size", 512)?).unwrap_or(512).max(1),
        })
    }
}

/// What the exporter did: spans sent, and spans dropped (queue full, or the collector refused
/// or did not answer).
#[derive(Debug, Default)]
pub struct ExportCounts {
    pub exported: AtomicU64,
    pub dropped: AtomicU64,
}

pub struct OtlpSink {
    tx: Mutex<Option<SyncSender<TraceRecord>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    counts: Arc<ExportCounts>,
}

impl OtlpSink {
    pub fn start(settings: ExportSettings) -> Self {
        let (tx, rx) = sync_channel::<TraceRecord>(settings.max_queue_size);
        let counts = Arc::new(ExportCounts::default());
        let exporter_counts = Arc::clone(&counts);
        let thread = std::thread::Builder::new()
            .name("tessera-otlp".into())
            .spawn(move || {
                let mut batch: Vec<TraceRecord> = Vec::new();
                let mut spans = 0;
                let mut next_export = Instant::now() + settings.schedule_delay;
                loop {
                    let wait = next_export.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(wait) {
                        Ok(record) => {
                            spans += span_count(&record);
                            batch.push(record);
                            if spans < settings.max_export_batch_size {
                                continue;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    export(&settings, std::mem::take(&mut batch), &exporter_counts);
                    spans = 0;
                    next_export = Instant::now() + settings.schedule_delay;
                }
                export(&settings, batch, &exporter_counts);
            })
            .ok();
        if thread.is_none() {
            tracing::error!("could not start the OpenTelemetry exporter thread: traces will not be exported");
        }
        Self { tx: Mutex::new(Some(tx)), thread: Mutex::new(thread), counts }
    }

    pub fn counts(&self) -> &ExportCounts {
        &self.counts
    }

    /// Exports what is queued and stops the exporter.
    pub fn close(&self) {
        drop(self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        if let Some(thread) = self.thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = thread.join();
        }
    }
}

impl TraceSink for OtlpSink {
    fn finish(&self, record: TraceRecord) {
        let spans = span_count(&record) as u64;
        let tx = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let sent = match tx.as_ref() {
            Some(tx) => tx.try_send(record),
            None => Err(TrySendError::Disconnected(record)),
        };
        if sent.is_err() {
            self.counts.dropped.fetch_add(spans, Ordering::Relaxed);
        }
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.close();
    }
}

fn span_count(record: &TraceRecord) -> usize {
    usize::from(record.otel.is_some_and(|ids| ids.root.is_some()))
        + 1
        + usize::from(record.timestamps.iter().any(|(n, _)| *n == activity::COMPUTE_START))
        + record.guest_spans.len()
}

fn export(settings: &ExportSettings, batch: Vec<TraceRecord>, counts: &ExportCounts) {
    if batch.is_empty() {
        return;
    }
    let spans: Vec<pb::Span> = batch.iter().flat_map(spans_of).collect();
    let count = spans.len() as u64;
    let mut resource = vec![kv("service.name", pb::Value::String("tessera".into()))];
    for (key, value) in &settings.resource {
        resource.retain(|attribute| &attribute.key != key);
        resource.push(kv(key, pb::Value::String(value.clone())));
    }
    let request = pb::ExportTraceServiceRequest {
        resource_spans: vec![pb::ResourceSpans {
            resource: Some(pb::Resource { attributes: resource }),
            scope_spans: vec![pb::ScopeSpans {
                scope: Some(pb::InstrumentationScope {
                    name: "tessera".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                spans,
            }],
        }],
    };
    match post(&settings.url, &request.encode_to_vec()) {
        Ok(()) => {
            counts.exported.fetch_add(count, Ordering::Relaxed);
        }
        Err(e) => {
            let before = counts.dropped.fetch_add(count, Ordering::Relaxed);
            // Once, then every 1,000 dropped spans: a dead collector must not flood the log.
            if before == 0 || before / 1000 != (before + count) / 1000 {
                tracing::warn!("OpenTelemetry export to {} failed ({e}); {count} spans dropped", settings.url);
            }
        }
    }
}

/// The spans of one trace.
fn spans_of(record: &TraceRecord) -> Vec<pb::Span> {
    let Some(ids) = record.otel else { return Vec::new() };
    let at = |name: &str| record.timestamps.iter().find(|(n, _)| *n == name).map(|(_, ns)| *ns);
    let events = |names: &[&str]| -> Vec<pb::Event> {
        record
            .timestamps
            .iter()
            .filter(|(n, _)| names.contains(n))
            .map(|(name, ns)| pb::Event { time_unix_nano: *ns, name: (*name).to_string(), attributes: Vec::new() })
            .collect()
    };
    let span = |span_id: [u8; 8], parent: Option<[u8; 8]>, name: String, start: u64, end: u64| pb::Span {
        trace_id: ids.trace_id.to_vec(),
        span_id: span_id.to_vec(),
        parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
        flags: u32::from(ids.flags),
        name,
        kind: 2, // SERVER, as Triton's
        start_time_unix_nano: start,
        end_time_unix_nano: end.max(start),
        ..Default::default()
    };
    let model_events = [activity::REQUEST_START, activity::QUEUE_START, activity::REQUEST_END];
    let compute_events =
        [activity::COMPUTE_START, activity::COMPUTE_INPUT_END, activity::COMPUTE_OUTPUT_START, activity::COMPUTE_END];
    let mut spans = Vec::new();
    let model_parent = match ids.root {
        Some(root) => {
            let door: Vec<&str> = record
                .timestamps
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| !model_events.contains(n) && !compute_events.contains(n))
                .collect();
            let mut root_span = span(root, ids.parent, "InferRequest".into(), record.started_ns, record.finished_ns);
            root_span.events = events(&door);
            spans.push(root_span);
            Some(root)
        }
        None => ids.parent,
    };
    let (name, version) = record.model.clone().unwrap_or_else(|| ("unknown".into(), 0));
    let start = at(activity::REQUEST_START).unwrap_or(record.started_ns);
    let end = at(activity::REQUEST_END).unwrap_or(record.finished_ns);
    let mut model_span = span(ids.model, model_parent, name.clone(), start, end);
    model_span.events = events(&model_events);
    model_span.attributes = vec![
        kv("triton.model_name", pb::Value::String(name)),
        kv("triton.model_version", pb::Value::Int(version)),
        kv("triton.trace_id", pb::Value::Int(i64::try_from(record.id).unwrap_or(i64::MAX))),
        kv("triton.trace_parent_id", pb::Value::Int(i64::try_from(record.parent_id).unwrap_or(i64::MAX))),
    ];
    if !record.request_id.is_empty() {
        model_span.attributes.push(kv("triton.request_id", pb::Value::String(record.request_id.clone())));
    }
    spans.push(model_span);
    if let Some(compute_start) = at(activity::COMPUTE_START) {
        let compute_end = at(activity::COMPUTE_END).unwrap_or(end);
        let mut compute = span(ids.compute, Some(ids.model), "compute".into(), compute_start, compute_end);
        compute.events = events(&compute_events);
        spans.push(compute);
    }
    for guest in &record.guest_spans {
        let parent = guest.parent.unwrap_or(ids.compute);
        let mut child = span(guest.span_id, Some(parent), guest.name.clone(), guest.start_ns, guest.end_ns);
        child.kind = 1; // INTERNAL: the guest's own code
        child.attributes = guest.attributes.iter().map(|(k, v)| kv(k, value(v))).collect();
        child.events = guest
            .events
            .iter()
            .map(|e| pb::Event {
                time_unix_nano: e.ns,
                name: e.name.clone(),
                attributes: e.attributes.iter().map(|(k, v)| kv(k, value(v))).collect(),
            })
            .collect();
        spans.push(child);
    }
    spans
}

fn value(value: &SpanValue) -> pb::Value {
    match value {
        SpanValue::Bool(b) => pb::Value::Bool(*b),
        SpanValue::Int(i) => pb::Value::Int(*i),
        SpanValue::Double(d) => pb::Value::Double(*d),
        SpanValue::String(s) => pb::Value::String(s.clone()),
    }
}

fn kv(key: &str, value: pb::Value) -> pb::KeyValue {
    pb::KeyValue { key: key.to_string(), value: Some(pb::AnyValue { value: Some(value) }) }
}

/// POSTs `body` to an `http://host:port/path` URL (the scheme may be left out, as Triton's
/// tests do), over HTTP/1.1; a 2xx answer is success.
fn post(url: &str, body: &[u8]) -> Result<(), String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if rest.starts_with("https://") {
        return Err("https is not supported; use an http:// collector URL".into());
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/v1/traces"),
    };
    let address = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot resolve {authority}"))?;
    let mut stream = TcpStream::connect_timeout(&address, EXPORT_TIMEOUT).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(EXPORT_TIMEOUT)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(EXPORT_TIMEOUT)).map_err(|e| e.to_string())?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).map_err(|e| e.to_string())?;
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).map_err(|e| e.to_string())?;
    match &status[9..10] {
        b"2" => Ok(()),
        _ => Err(format!("the collector answered {}", String::from_utf8_lossy(&status[9..12]))),
    }
}

/// The OTLP messages this exporter sends (opentelemetry-proto's trace, common, resource and
/// collector protos), with only the fields it sets.
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(message, repeated, tag = "11")]
        pub events: Vec<Event>,
        #[prost(fixed32, tag = "16")]
        pub flags: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(fixed64, tag = "1")]
        pub time_unix_nano: u64,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "Value", tags = "1, 2, 3, 4")]
        pub value: Option<Value>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        String(String),
        #[prost(bool, tag = "2")]
        Bool(bool),
        #[prost(int64, tag = "3")]
        Int(i64),
        #[prost(double, tag = "4")]
        Double(f64),
    }
}
