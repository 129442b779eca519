use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;

use super::settings::{LegacyFlags, SettingAnswer, TraceMode};
use super::tensors::{data_text, general};
use super::*;
use crate::tensor::DataType;

/// Keeps the records it is handed.
#[derive(Default)]
struct Kept(Mutex<Vec<TraceRecord>>);

impl TraceSink for Kept {
    fn finish(&self, record: TraceRecord) {
        self.0.lock().unwrap().push(record);
    }
}

fn on(level: Level) -> (Trace, Arc<Kept>) {
    let kept = Arc::new(Kept::default());
    let sink: Arc<dyn TraceSink> = kept.clone();
    (Trace::new(0, level, None, Arc::new(AtomicU64::new(1)), sink, Arc::new(AtomicUsize::new(usize::MAX))), kept)
}

const TIMESTAMPS: Level = Level { timestamps: true, tensors: false };

#[test]
fn a_trace_reaches_the_sink_when_its_last_clone_goes_and_children_name_their_parent() {
    let (trace, kept) = on(TIMESTAMPS);
    trace.set_model("m", 3, Some("r1"));
    trace.stamp(activity::REQUEST_START);
    let child = trace.child();
    let held = trace.clone();
    drop(trace);
    assert!(kept.0.lock().unwrap().is_empty(), "handed over while a clone still held it");
    child.set_model("step", 1, None);
    drop(child);
    held.stamp(activity::REQUEST_END);
    drop(held);
    let records = kept.0.lock().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!((records[0].id, records[0].parent_id, records[0].model.clone()), (2, 1, Some(("step".into(), 1))));
    let parent = &records[1];
    assert_eq!((parent.id, parent.parent_id, parent.request_id.as_str()), (1, 0, "r1"));
    let names: Vec<_> = parent.timestamps.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, [activity::REQUEST_START, activity::REQUEST_END]);
    assert!(parent.timestamps[0].1 <= parent.timestamps[1].1);
}

#[test]
fn tensors_are_kept_only_at_level_tensors() {
    let tensor =
        Tensor::new("IN", DataType::Int32, vec![2], Bytes::from_static(&[1, 0, 0, 0, 255, 255, 255, 255])).unwrap();
    let (trace, kept) = on(TIMESTAMPS);
    trace.record_tensors(activity::TENSOR_QUEUE_INPUT, [&tensor]);
    drop(trace);
    assert!(kept.0.lock().unwrap()[0].tensors.is_empty());
    let (trace, kept) = on(Level { timestamps: false, tensors: true });
    trace.record_tensors(activity::TENSOR_QUEUE_INPUT, [&tensor]);
    trace.stamp(activity::REQUEST_START);
    drop(trace);
    let record = &kept.0.lock().unwrap()[0];
    assert!(record.timestamps.is_empty(), "timestamps kept at level TENSORS alone");
    assert_eq!(record.tensors.len(), 1);
    assert_eq!(data_text(&record.tensors[0].1), "1,-1");
}

#[test]
fn values_print_as_cpp_streams_print_them() {
    let cases = [
        (0.1, "0.1"),
        (1.0, "1"),
        (-2.5, "-2.5"),
        (100000.0, "100000"),
        (1234567.0, "1.23457e+06"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (1.23456789, "1.23457"),
        (0.0, "0"),
    ];
    for (value, text) in cases {
        assert_eq!(general(value), text, "{value}");
    }
    let strings = Tensor::new("S", DataType::Bytes, vec![2], Bytes::from_static(b"\x02\0\0\0hi\x01\0\0\0x")).unwrap();
    assert_eq!(data_text(&strings), "\"hi\",\"x\"");
    let flags = Tensor::new("B", DataType::Bool, vec![2], Bytes::from_static(&[1, 0])).unwrap();
    assert_eq!(data_text(&flags), "1,0");
}

fn config(flags: &[&str]) -> TraceConfig {
    TraceConfig::from_flags(&flags.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &LegacyFlags::default()).unwrap()
}

#[test]
fn trace_config_flags_read_as_triton_reads_them() {
    let c = config(&["triton,file=/tmp/t.json", "level=TIMESTAMPS", "level=tensors", "rate=1", "count=5"]);
    assert_eq!(
        (c.file.as_str(), c.level, c.rate, c.count),
        ("/tmp/t.json", Level { timestamps: true, tensors: true }, 1, 5)
    );
    assert_eq!(config(&["level=TIMESTAMPS", "level=OFF"]).level, Level::OFF, "OFF anywhere turns tracing off");
    assert_eq!(
        config(&["mode=opentelemetry", "opentelemetry,url=localhost:4318/v1/traces"]).mode,
        TraceMode::OpenTelemetry
    );
    assert_eq!(config(&["unknown_setting=1"]), TraceConfig::default(), "unknown settings are ignored");
    let bad = |flag: &str| TraceConfig::from_flags(&[flag.to_string()], &LegacyFlags::default()).unwrap_err();
    assert!(bad("mode=jaeger").contains("invalid value for trace mode option: jaeger"), "{}", bad("mode=jaeger"));
    assert!(bad(",file=x").contains("No trace mode specified"));
    assert!(bad("rate=fast").starts_with("Bad option: \"--trace-config rate=fast\""));
    let legacy =
        LegacyFlags { file: Some("/tmp/old.json".into()), level: vec!["TIMESTAMPS".into()], ..Default::default() };
    let c = TraceConfig::from_flags(&["level=OFF".into()], &legacy).unwrap();
    assert_eq!((c.file.as_str(), c.level), ("/tmp/old.json", Level::OFF), "--trace-config overrides the old flag");
}

fn tracer_with_file(dir: &std::path::Path, flags: &[&str]) -> Arc<Tracer> {
    let file = format!("triton,file={}", dir.join("trace.json").display());
    let mut all = vec![file.as_str()];
    all.extend_from_slice(flags);
    Tracer::new(config(&all)).unwrap()
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-trace-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn sampling_takes_every_rate_th_request_until_count_runs_out() {
    let dir = temp_dir("sampling");
    let tracer = tracer_with_file(&dir, &["level=TIMESTAMPS", "rate=2", "count=2"]);
    let sampled: Vec<bool> = (0..8).map(|_| tracer.sample("m", None).is_some()).collect();
    assert_eq!(sampled, [false, true, false, true, false, false, false, false]);
    let off = Tracer::new(config(&["level=TIMESTAMPS"])).unwrap();
    assert!(off.sample("m", None).is_none(), "triton mode without a file traced");
    tracer.close();
    let _ = std::fs::remove_dir_all(&dir);
}

fn update(tracer: &Tracer, model: Option<&str>, pairs: &[(&str, Option<&[&str]>)]) -> CoreResultMap {
    let updates: BTreeMap<String, Option<Vec<String>>> =
        pairs.iter().map(|(k, v)| (k.to_string(), v.map(|v| v.iter().map(|s| s.to_string()).collect()))).collect();
    tracer.update(model, updates).map_err(|e| e.message)
}

type CoreResultMap = Result<BTreeMap<String, SettingAnswer>, String>;

#[test]
fn model_settings_fall_back_to_the_global_ones_field_by_field() {
    let dir = temp_dir("settings");
    let tracer = tracer_with_file(&dir, &[]);
    let level = |answer: &BTreeMap<String, SettingAnswer>| answer["trace_level"].clone();
    update(&tracer, Some("m"), &[("trace_level", Some(&["TIMESTAMPS"])), ("trace_rate", Some(&["1"]))]).unwrap();
    assert!(tracer.sample("m", None).is_some(), "the model's own level and rate");
    assert!(tracer.sample("other", None).is_none(), "another model took m's settings");
    let global = update(&tracer, None, &[("trace_count", Some(&["7"]))]).unwrap();
    assert_eq!(level(&global), SettingAnswer::List(vec!["OFF".into()]));
    let m = tracer.settings(Some("m"));
    assert_eq!(m["trace_count"], SettingAnswer::Str("7".into()), "an unset model field follows the global one");
    assert_eq!(m["trace_rate"], SettingAnswer::Str("1".into()));
    let cleared = update(&tracer, Some("m"), &[("trace_level", None)]).unwrap();
    assert_eq!(level(&cleared), SettingAnswer::List(vec!["OFF".into()]), "null gives the field back to the global");
    assert!(tracer.sample("m", None).is_none());
    assert_eq!(
        update(&tracer, None, &[("trace_file", Some(&["x"]))]).unwrap_err(),
        "trace file location can not be updated through network protocol"
    );
    assert_eq!(
        update(&tracer, None, &[("trace_level", Some(&["OFF", "TIMESTAMPS"]))]).unwrap_err(),
        "Expect only one trace level 'OFF' is specified"
    );
    assert_eq!(
        update(&tracer, None, &[("trace_rate", Some(&["0"])), ("trace_level", Some(&["TIMESTAMPS"]))]).unwrap_err(),
        "Attempting to set invalid trace setting :sample rate must be non-zero"
    );
    tracer.close();
    let no_file = Tracer::off();
    assert_eq!(
        update(&no_file, None, &[("trace_level", Some(&["TIMESTAMPS"]))]).unwrap_err(),
        "Attempting to set invalid trace setting :trace file name is not given"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_file_is_one_array_closed_at_the_stop_or_one_per_log_frequency_traces() {
    let dir = temp_dir("file");
    let tracer = tracer_with_file(&dir, &["level=TIMESTAMPS", "rate=1"]);
    for i in 0..3 {
        let trace = tracer.sample("m", None).unwrap();
        trace.set_model("m", 1, (i == 0).then_some("first"));
        trace.stamp(activity::REQUEST_START);
        trace.stamp(activity::REQUEST_END);
    }
    tracer.close();
    let objects = read_json(&dir.join("trace.json"));
    let objects = objects.as_array().unwrap();
    assert_eq!(objects.len(), 9, "{objects:?}");
    assert_eq!(objects[0], serde_json::json!({"id": 1, "model_name": "m", "model_version": 1, "request_id": "first"}));
    assert_eq!(objects[1]["timestamps"][0]["name"], "REQUEST_START");

    let dir = temp_dir("frequency");
    let tracer = tracer_with_file(&dir, &["level=TIMESTAMPS", "rate=1", "triton,log-frequency=2"]);
    for _ in 0..3 {
        tracer.sample("m", None).unwrap().stamp(activity::REQUEST_START);
    }
    tracer.close();
    assert_eq!(read_json(&dir.join("trace.json.0")).as_array().unwrap().len(), 2);
    assert_eq!(read_json(&dir.join("trace.json.1")).as_array().unwrap().len(), 1, "the rest, at the stop");
    assert!(!dir.join("trace.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_traceparent_reads_as_the_w3c_propagator_reads_it() {
    let parent = TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    assert_eq!(parent.trace_id[..2], [0x0a, 0xf7]);
    assert_eq!(parent.span_id[7], 0x31);
    assert_eq!(parent.flags, 1);
    for bad in [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
    ] {
        assert!(TraceParent::parse(bad).is_none(), "{bad:?} was taken");
    }
}

#[test]
fn a_child_trace_keeps_the_trace_id_and_hangs_under_its_callers_model_span() {
    let remote = TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    let top = OtelIds::new(Some(&remote));
    assert_eq!((top.trace_id, top.parent), (remote.trace_id, Some(remote.span_id)));
    assert!(top.root.is_some());
    let child = top.child();
    assert_eq!((child.trace_id, child.root, child.parent), (top.trace_id, None, Some(top.model)));
    assert_ne!(child.model, top.model);
    let fresh = OtelIds::new(None);
    assert_ne!(fresh.trace_id, [0; 16]);
    assert_eq!(fresh.parent, None);
}

#[test]
fn guests_span_bytes_are_one_budget_per_client_request_shared_with_its_children() {
    assert_eq!(TraceConfig::default().guest_span_bytes, 64 << 10);
    assert_eq!(config(&["guest_span_bytes=100"]).guest_span_bytes, 100);
    let bad = TraceConfig::from_flags(&["guest_span_bytes=lots".into()], &LegacyFlags::default()).unwrap_err();
    assert!(bad.contains("invalid guest_span_bytes: lots"), "{bad}");
    let dir = temp_dir("guest-bytes");
    let tracer = tracer_with_file(&dir, &["level=TIMESTAMPS", "rate=1", "guest_span_bytes=100"]);
    let trace = tracer.sample("m", None).unwrap();
    let child = trace.child();
    assert!(trace.take_guest_bytes(60));
    assert!(!child.take_guest_bytes(41), "a BLS call's or composing model's trace shares its request's bytes");
    assert!(child.take_guest_bytes(40));
    assert!(!trace.take_guest_bytes(1));
    let next = tracer.sample("m", None).unwrap();
    assert!(next.take_guest_bytes(100), "every request has its own");
    drop((trace, child, next));
    tracer.close();
    let _ = std::fs::remove_dir_all(&dir);
}
