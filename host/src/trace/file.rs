//! Triton's trace file (`--trace-config triton,file=<path>`): one JSON array of small objects
//! per file, written by a thread of its own so requests never wait on the disk.
//!
//! With `log-frequency` 0, every trace goes to `<path>`, whose closing `]` is written when the
//! server stops (as Triton, the file is not valid JSON while the server runs). With
//! `log-frequency` N, every N traces go to a complete file of their own, `<path>.0`,
//! `<path>.1`, ...; the ones left at the stop go to the next.

use std::io::Write;
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

use super::tensors::{data_text, shape_text};
use super::{GuestSpan, SpanValue, TraceRecord, TraceSink, activity};

enum Message {
    Trace(Box<TraceRecord>),
    LogFrequency(u32),
    Close,
}

pub struct FileSink {
    tx: Mutex<Option<Sender<Message>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl FileSink {
    pub fn start(path: String, log_frequency: u32) -> Self {
        let (tx, rx) = channel();
        let writer = std::thread::Builder::new()
            .name("tessera-trace-file".into())
            .spawn(move || {
                let mut file = TraceFile { path, log_frequency, index: 0, batch: Vec::new(), open: None };
                while let Ok(message) = rx.recv() {
                    match message {
                        Message::Trace(record) => file.add(objects(&record)),
                        Message::LogFrequency(n) => file.log_frequency = n,
                        Message::Close => break,
                    }
                }
                file.close();
            })
            .ok();
        if writer.is_none() {
            tracing::error!("could not start the trace file's writer thread: traces will not be written");
        }
        Self { tx: Mutex::new(Some(tx)), writer: Mutex::new(writer) }
    }

    pub fn set_log_frequency(&self, log_frequency: u32) {
        self.send(Message::LogFrequency(log_frequency));
    }

    /// Writes what is buffered, closes the file and waits for the writer.
    pub fn close(&self) {
        self.send(Message::Close);
        drop(self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        if let Some(writer) = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = writer.join();
        }
    }

    fn send(&self, message: Message) {
        if let Some(tx) = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
            let _ = tx.send(message);
        }
    }
}

impl TraceSink for FileSink {
    fn finish(&self, record: TraceRecord) {
        self.send(Message::Trace(Box::new(record)));
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        self.close();
    }
}

struct TraceFile {
    path: String,
    log_frequency: u32,
    /// The next `<path>.<index>`.
    index: u32,
    /// Traces waiting for `log_frequency` of them.
    batch: Vec<String>,
    /// `<path>`, once its `[` is written (log frequency 0).
    open: Option<std::fs::File>,
}

impl TraceFile {
    fn add(&mut self, trace: String) {
        if trace.is_empty() {
            return;
        }
        if self.log_frequency == 0 {
            self.append(&trace);
            return;
        }
        self.batch.push(trace);
        if self.batch.len() >= self.log_frequency as usize {
            self.write_batch();
        }
    }

    fn append(&mut self, trace: &str) {
        let result = match &mut self.open {
            Some(file) => file.write_all(format!(",{trace}").as_bytes()),
            None => std::fs::File::create(&self.path).and_then(|mut file| {
                file.write_all(format!("[{trace}").as_bytes())?;
                self.open = Some(file);
                Ok(())
            }),
        };
        if let Err(e) = result {
            tracing::error!("failed to write the trace file {}: {e}", self.path);
        }
    }

    fn write_batch(&mut self) {
        let path = format!("{}.{}", self.path, self.index);
        self.index += 1;
        let text = format!("[{}]", self.batch.join(","));
        self.batch.clear();
        if let Err(e) = std::fs::write(&path, text) {
            tracing::error!("failed to write the trace file {path}: {e}");
        }
    }

    fn close(&mut self) {
        if !self.batch.is_empty() {
            self.write_batch();
        }
        if let Some(mut file) = self.open.take()
            && let Err(e) = file.write_all(b"]").and_then(|()| file.flush())
        {
            tracing::error!("failed to close the trace file {}: {e}", self.path);
        }
    }
}

/// A trace as Triton's file objects, comma-joined: the model's object just before its
/// REQUEST_START, one object per timestamp, one per tensor activity.
fn objects(record: &TraceRecord) -> String {
    let id = record.id;
    let mut out: Vec<String> = Vec::new();
    let mut model = record.model.as_ref().map(|(name, version)| {
        let mut object = format!("{{\"id\":{id},\"model_name\":{},\"model_version\":{version}", json(name));
        if !record.request_id.is_empty() {
            object.push_str(&format!(",\"request_id\":{}", json(&record.request_id)));
        }
        if record.parent_id != 0 {
            object.push_str(&format!(",\"parent_id\":{}", record.parent_id));
        }
        object.push('}');
        object
    });
    if !record.timestamps.iter().any(|(name, _)| *name == activity::REQUEST_START) {
        out.extend(model.take());
    }
    for (name, ns) in &record.timestamps {
        if *name == activity::REQUEST_START {
            out.extend(model.take());
        }
        out.push(format!("{{\"id\":{id},\"timestamps\":[{{\"name\":{},\"ns\":{ns}}}]}}", json(name)));
    }
    for (name, tensor) in &record.tensors {
        out.push(format!(
            "{{\"id\":{id},\"activity\":{},\"tensor\":{{\"name\":{},\"data\":{},\"shape\":{},\"dtype\":{}}}}}",
            json(name),
            json(&tensor.name),
            json(&data_text(tensor)),
            json(&shape_text(tensor)),
            json(tensor.datatype.as_str())
        ));
    }
    for span in &record.guest_spans {
        out.push(format!("{{\"id\":{id},\"span\":{}}}", guest_span(span)));
    }
    out.join(",")
}

/// A guest's span as a JSON object: Tessera's addition to Triton's file (Triton's trace summary
/// tool reads past objects it does not know).
fn guest_span(span: &GuestSpan) -> serde_json::Value {
    use serde_json::json;
    let hex = |id: &[u8; 8]| id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let attributes = |list: &[(String, SpanValue)]| -> serde_json::Map<String, serde_json::Value> {
        list.iter()
            .map(|(key, value)| {
                let value = match value {
                    SpanValue::Bool(b) => json!(b),
                    SpanValue::Int(i) => json!(i),
                    SpanValue::Double(d) => json!(d),
                    SpanValue::String(s) => json!(s),
                };
                (key.clone(), value)
            })
            .collect()
    };
    let mut object = json!({
        "name": span.name,
        "span_id": hex(&span.span_id),
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "attributes": attributes(&span.attributes),
        "events": span.events.iter().map(|e| json!({
            "name": e.name, "ns": e.ns, "attributes": attributes(&e.attributes),
        })).collect::<Vec<_>>(),
    });
    if let Some(parent) = &span.parent {
        object["parent_span_id"] = json!(hex(parent));
    }
    object
}

fn json(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}
