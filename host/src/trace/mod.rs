//! Request tracing, as Triton's trace extension (docs/user_guide/trace.md): a sampled request
//! carries a [`Trace`] from the door where it enters through the model, the scheduler and the
//! instance, each layer stamping its activities on it; when the last holder lets go, the trace
//! is handed to the [`Tracer`]'s sink (Triton's JSON trace file, `file`).
//!
//! The trace travels in the request (`InferRequest::trace`, `ExecRequest::trace`), not in thread
//! state, so whoever handles the request stamps the right trace. A composing model of an
//! ensemble, or a model a guest calls through BLS, gets a child trace (`parent_id`), as Triton's
//! composing requests do.
//!
//! Timestamps are nanoseconds on one monotonic clock for the whole process, offset to the Unix
//! epoch at its start ([`now_ns`]): differences are exact, and the values read as wall time.

mod file;
mod otlp;
mod settings;
mod tensors;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use file::FileSink;
pub use otlp::{ExportSettings, OtlpSink};

pub use settings::{LegacyFlags, Level, SettingAnswer, TraceConfig, Tracer};

use crate::tensor::Tensor;

/// Nanoseconds since the Unix epoch, on a monotonic clock anchored once per process.
pub fn now_ns() -> u64 {
    static ANCHOR: LazyLock<(Instant, u64)> = LazyLock::new(|| {
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        (Instant::now(), u64::try_from(unix).unwrap_or(u64::MAX))
    });
    let (start, unix) = *ANCHOR;
    unix.saturating_add(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Where finished traces go.
pub trait TraceSink: Send + Sync {
    fn finish(&self, record: TraceRecord);
}

/// What one trace recorded: Triton's trace object for one request (one model).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceRecord {
    pub id: u64,
    /// 0 for a request from a client; the caller's trace for a composing model or a BLS call.
    pub parent_id: u64,
    /// The model and version that served it, and its request id; `None` until the request
    /// reached a model (a request refused before has no model).
    pub model: Option<(String, i64)>,
    pub request_id: String,
    /// Activity names and when they happened ([`now_ns`]), in the order stamped.
    pub timestamps: Vec<(&'static str, u64)>,
    /// At level TENSORS: the tensors seen at each tensor activity.
    pub tensors: Vec<(&'static str, Tensor)>,
    /// When the trace began and ended ([`now_ns`]): the `InferRequest` span's bounds.
    pub started_ns: u64,
    pub finished_ns: u64,
    /// In OpenTelemetry mode, the ids of the spans this trace becomes.
    pub otel: Option<OtelIds>,
    /// Spans the model's guest code opened (WIT interface `telemetry`), in the order they ended.
    pub guest_spans: Vec<GuestSpan>,
}

/// A span a guest opened in a request's trace: a child of the model's compute span, or of
/// another of its spans (`parent`).
#[derive(Debug, Clone, PartialEq)]
pub struct GuestSpan {
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(String, SpanValue)>,
    pub events: Vec<SpanEvent>,
}

/// An event a guest added to one of its spans.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub name: String,
    pub ns: u64,
    pub attributes: Vec<(String, SpanValue)>,
}

/// The value of a guest span's or event's attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanValue {
    Bool(bool),
    Int(i64),
    Double(f64),
    String(String),
}

/// The OpenTelemetry ids of one trace's spans (see `otlp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtelIds {
    pub trace_id: [u8; 16],
    /// The `InferRequest` span, for a request from a client; `None` for a composing model's or a
    /// BLS call's trace.
    pub root: Option<[u8; 8]>,
    pub model: [u8; 8],
    pub compute: [u8; 8],
    /// The parent of the root span (the client's `traceparent`), or of the model span for a
    /// child trace (its caller's model span).
    pub parent: Option<[u8; 8]>,
    /// W3C trace flags (1: sampled).
    pub flags: u8,
}

impl OtelIds {
    /// Ids for a request from a client, under `remote` if it sent a `traceparent`.
    fn new(remote: Option<&TraceParent>) -> Self {
        let trace_id = match remote {
            Some(r) => r.trace_id,
            None => {
                let mut id = [0u8; 16];
                id[..8].copy_from_slice(&random_id());
                id[8..].copy_from_slice(&random_id());
                id
            }
        };
        Self {
            trace_id,
            root: Some(random_id()),
            model: random_id(),
            compute: random_id(),
            parent: remote.map(|r| r.span_id),
            flags: remote.map_or(1, |r| r.flags),
        }
    }

    /// Ids for a request this trace's model makes (an ensemble step, a BLS call).
    fn child(&self) -> Self {
        Self { root: None, model: random_id(), compute: random_id(), parent: Some(self.model), ..*self }
    }
}

/// A non-zero random span id.
pub fn random_id() -> [u8; 8] {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static KEYS: LazyLock<std::collections::hash_map::RandomState> =
        LazyLock::new(std::collections::hash_map::RandomState::new);
    let mut hasher = KEYS.build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u64(now_ns());
    hasher.finish().max(1).to_be_bytes()
}

/// A W3C `traceparent` a client sent (HTTP header or gRPC metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl TraceParent {
    /// `00-<32 hex>-<16 hex>-<2 hex>`; `None` when malformed or all-zero, as the W3C
    /// propagator ignores such a header.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        let hex = |text: &str, out: &mut [u8]| -> Option<()> {
            if text.len() != out.len() * 2 || !text.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
                return None;
            }
            for (i, byte) in out.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&text[i * 2..i * 2 + 2], 16).ok()?;
            }
            Some(())
        };
        let mut parent = Self { trace_id: [0; 16], span_id: [0; 8], flags: 0 };
        hex(trace, &mut parent.trace_id)?;
        hex(span, &mut parent.span_id)?;
        let mut flag = [0u8; 1];
        hex(flags, &mut flag)?;
        parent.flags = flag[0];
        let zero = parent.trace_id == [0; 16] || parent.span_id == [0; 8];
        (!zero).then_some(parent)
    }
}

/// A sampled request's trace. Clones share one record, handed to the sink when the last goes.
#[derive(Clone)]
pub struct Trace(Arc<Inner>);

struct Inner {
    id: u64,
    parent_id: u64,
    level: Level,
    otel: Option<OtelIds>,
    ids: Arc<AtomicU64>,
    sink: Arc<dyn TraceSink>,
    record: Mutex<TraceRecord>,
    /// Bytes the guests' own spans may still add, shared by the trace and its children (one
    /// client request): `--trace-config guest_span_bytes`.
    guest_bytes: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("id", &self.0.id).field("parent_id", &self.0.parent_id).finish()
    }
}

impl Trace {
    fn new(
        parent_id: u64,
        level: Level,
        otel: Option<OtelIds>,
        ids: Arc<AtomicU64>,
        sink: Arc<dyn TraceSink>,
        guest_bytes: Arc<AtomicUsize>,
    ) -> Self {
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let record = TraceRecord { id, parent_id, started_ns: now_ns(), otel, ..Default::default() };
        Self(Arc::new(Inner { id, parent_id, level, otel, ids, sink, record: Mutex::new(record), guest_bytes }))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    pub fn parent_id(&self) -> u64 {
        self.0.parent_id
    }

    /// A trace for a request this one's handler makes (a composing model's, a BLS call's).
    pub fn child(&self) -> Trace {
        let otel = self.0.otel.as_ref().map(OtelIds::child);
        let (ids, sink, guest_bytes) =
            (Arc::clone(&self.0.ids), Arc::clone(&self.0.sink), Arc::clone(&self.0.guest_bytes));
        Trace::new(self.0.id, self.0.level, otel, ids, sink, guest_bytes)
    }

    /// Records `activity` now.
    pub fn stamp(&self, activity: &'static str) {
        self.stamp_at(activity, now_ns());
    }

    /// Records `activity` at `ns` ([`now_ns`]).
    pub fn stamp_at(&self, activity: &'static str, ns: u64) {
        if self.0.level.timestamps {
            self.with_record(|r| r.timestamps.push((activity, ns)));
        }
    }

    /// The model (and version) that serves the request, and the request's id.
    pub fn set_model(&self, name: &str, version: i64, request_id: Option<&str>) {
        self.with_record(|r| {
            r.model = Some((name.to_string(), version));
            r.request_id = request_id.unwrap_or_default().to_string();
        });
    }

    /// Whether tensors are recorded (level TENSORS).
    pub fn tensors(&self) -> bool {
        self.0.level.tensors
    }

    /// Records `tensors` at `activity` (TENSOR_QUEUE_INPUT, TENSOR_BACKEND_INPUT,
    /// TENSOR_BACKEND_OUTPUT), when the level asks for tensors. The bytes are shared, not copied.
    pub fn record_tensors<'a>(&self, activity: &'static str, tensors: impl IntoIterator<Item = &'a Tensor>) {
        if self.0.level.tensors {
            self.with_record(|r| r.tensors.extend(tensors.into_iter().map(|t| (activity, t.clone()))));
        }
    }

    /// Takes `bytes` of what the guests' spans may still add to this request's traces; false,
    /// taking nothing, when fewer are left.
    pub fn take_guest_bytes(&self, bytes: usize) -> bool {
        self.0.guest_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(bytes)).is_ok()
    }

    /// Adds a span the model's guest code opened and has ended.
    pub fn add_guest_span(&self, span: GuestSpan) {
        self.with_record(|r| r.guest_spans.push(span));
    }

    fn with_record(&self, change: impl FnOnce(&mut TraceRecord)) {
        let mut record = self.0.record.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut record);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mut record = std::mem::take(self.record.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner));
        record.finished_ns = now_ns();
        self.sink.finish(record);
    }
}

/// A trace at level TIMESTAMPS that goes to `sink`, for other modules' tests.
#[cfg(test)]
pub(crate) fn test_trace(sink: Arc<dyn TraceSink>) -> Trace {
    test_trace_with_guest_bytes(sink, usize::MAX)
}

/// [`test_trace`] whose guests' spans may add `guest_bytes`.
#[cfg(test)]
pub(crate) fn test_trace_with_guest_bytes(sink: Arc<dyn TraceSink>, guest_bytes: usize) -> Trace {
    let level = Level { timestamps: true, tensors: false };
    Trace::new(0, level, None, Arc::new(AtomicU64::new(1)), sink, Arc::new(AtomicUsize::new(guest_bytes)))
}

/// Stamps `activity` now on `trace`, when the request is traced.
pub fn stamp(trace: &Option<Trace>, activity: &'static str) {
    if let Some(trace) = trace {
        trace.stamp(activity);
    }
}

/// Triton's activity names.
pub mod activity {
    pub const HTTP_RECV_START: &str = "HTTP_RECV_START";
    pub const HTTP_RECV_END: &str = "HTTP_RECV_END";
    pub const HTTP_SEND_START: &str = "HTTP_SEND_START";
    pub const HTTP_SEND_END: &str = "HTTP_SEND_END";
    pub const GRPC_WAITREAD_START: &str = "GRPC_WAITREAD_START";
    pub const GRPC_WAITREAD_END: &str = "GRPC_WAITREAD_END";
    pub const GRPC_SEND_START: &str = "GRPC_SEND_START";
    pub const GRPC_SEND_END: &str = "GRPC_SEND_END";
    pub const INFER_RESPONSE_COMPLETE: &str = "INFER_RESPONSE_COMPLETE";
    pub const REQUEST_START: &str = "REQUEST_START";
    pub const QUEUE_START: &str = "QUEUE_START";
    pub const COMPUTE_START: &str = "COMPUTE_START";
    pub const COMPUTE_INPUT_END: &str = "COMPUTE_INPUT_END";
    pub const COMPUTE_OUTPUT_START: &str = "COMPUTE_OUTPUT_START";
    pub const COMPUTE_END: &str = "COMPUTE_END";
    pub const REQUEST_END: &str = "REQUEST_END";
    pub const TENSOR_QUEUE_INPUT: &str = "TENSOR_QUEUE_INPUT";
    pub const TENSOR_BACKEND_INPUT: &str = "TENSOR_BACKEND_INPUT";
    pub const TENSOR_BACKEND_OUTPUT: &str = "TENSOR_BACKEND_OUTPUT";
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
