//! Trace settings as Triton keeps them: global ones from `--trace-config` (and the deprecated
//! `--trace-*` flags), per-model ones from the trace-setting API that fall back to the global
//! value field by field, and sampling (`rate`, `count`) counted per settings holder.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{ExportSettings, FileSink, OtelIds, OtlpSink, Trace, TraceParent, TraceSink};
use crate::error::{CoreError, CoreResult};

/// What a trace records: timestamps, tensors, both, or nothing (OFF).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Level {
    pub timestamps: bool,
    pub tensors: bool,
}

impl Level {
    pub const OFF: Level = Level { timestamps: false, tensors: false };

    pub fn is_off(self) -> bool {
        !self.timestamps && !self.tensors
    }

    /// Triton's level list (`["OFF"]`, `["TIMESTAMPS"]`, `["TIMESTAMPS", "TENSORS"]`).
    pub fn names(self) -> Vec<String> {
        let mut names = Vec::new();
        if self.timestamps {
            names.push("TIMESTAMPS".to_string());
        }
        if self.tensors {
            names.push("TENSORS".to_string());
        }
        if names.is_empty() {
            names.push("OFF".to_string());
        }
        names
    }

    /// One `--trace-config level=` value, as Triton reads it (case-insensitive).
    fn add_flag(&mut self, value: &str) -> Result<bool, String> {
        match value.to_ascii_lowercase().as_str() {
            "off" | "false" => Ok(false),
            "timestamps" | "on" | "true" | "min" | "max" => {
                self.timestamps = true;
                Ok(true)
            }
            "tensors" => {
                self.tensors = true;
                Ok(true)
            }
            _ => Err(format!("invalid value for trace level option: {value}")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    #[default]
    Triton,
    OpenTelemetry,
}

impl TraceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceMode::Triton => "triton",
            TraceMode::OpenTelemetry => "opentelemetry",
        }
    }
}

/// The global settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceConfig {
    pub mode: TraceMode,
    pub level: Level,
    pub rate: u32,
    /// -1: no limit.
    pub count: i64,
    pub file: String,
    pub log_frequency: u32,
    /// OpenTelemetry mode's settings (`url`, `resource`, `bsp_*`), as given.
    pub opentelemetry: BTreeMap<String, String>,
    /// `guest_span_bytes` (Tessera's): what the guests' own spans may add to one client
    /// request's traces, counted as the trace file writes them; past it, spans, attributes and
    /// events are dropped. Not changed by the trace-setting API.
    pub guest_span_bytes: usize,
}

/// The default `guest_span_bytes`: 64 KiB.
pub const DEFAULT_GUEST_SPAN_BYTES: usize = 64 << 10;

impl Default for TraceConfig {
    fn default() -> Self {
        Self {
            mode: TraceMode::Triton,
            level: Level::OFF,
            rate: 1000,
            count: -1,
            file: String::new(),
            log_frequency: 0,
            opentelemetry: BTreeMap::new(),
            guest_span_bytes: DEFAULT_GUEST_SPAN_BYTES,
        }
    }
}

/// The deprecated flags Triton still takes (`--trace-file`, `--trace-level`, ...).
#[derive(Debug, Clone, Default)]
pub struct LegacyFlags {
    pub file: Option<String>,
    pub level: Vec<String>,
    pub rate: Option<String>,
    pub count: Option<String>,
    pub log_frequency: Option<String>,
}

impl TraceConfig {
    /// The settings from `--trace-config` values (`<setting>=<value>` or
    /// `<mode>,<setting>=<value>`) over the deprecated flags, which they override. Unknown
    /// settings are ignored, as Triton ignores them; a bad value is an error naming it.
    pub fn from_flags(configs: &[String], legacy: &LegacyFlags) -> Result<Self, String> {
        let mut config = Self::default();
        let bad = |option: &str, e: String| format!("Bad option: \"--trace-config {option}\".\n{e}");
        // The deprecated flags first, so that --trace-config given with them wins.
        let mut entries: Vec<(Option<String>, String, String)> = Vec::new();
        if let Some(file) = &legacy.file {
            entries.push((Some("triton".into()), "file".into(), file.clone()));
        }
        if let Some(rate) = &legacy.rate {
            entries.push((None, "rate".into(), rate.clone()));
        }
        if let Some(count) = &legacy.count {
            entries.push((None, "count".into(), count.clone()));
        }
        if let Some(frequency) = &legacy.log_frequency {
            entries.push((Some("triton".into()), "log-frequency".into(), frequency.clone()));
        }
        for option in configs {
            let (mode, rest) = match option.split_once(',') {
                Some(("", _)) => return Err(bad(option, "No trace mode specified".into())),
                Some((mode, rest)) if !mode.contains('=') => (Some(mode.to_ascii_lowercase()), rest),
                _ => (None, option.as_str()),
            };
            let Some((key, value)) = rest.split_once('=').filter(|(k, v)| !k.is_empty() && !v.is_empty()) else {
                return Err(bad(option, "expected <setting>=<value>".into()));
            };
            entries.push((mode, key.to_string(), value.to_string()));
        }
        // Levels add up, and OFF anywhere turns tracing off; --trace-config's replace the
        // deprecated flag's.
        let config_levels: Vec<&String> =
            entries.iter().filter(|(m, k, _)| m.is_none() && k == "level").map(|(_, _, v)| v).collect();
        let levels: Vec<&String> = if config_levels.is_empty() { legacy.level.iter().collect() } else { config_levels };
        if !levels.is_empty() {
            let mut level = Level::OFF;
            let mut off = false;
            for value in levels {
                off |= !level.add_flag(value).map_err(|e| bad(&format!("level={value}"), e))?;
            }
            config.level = if off { Level::OFF } else { level };
        }
        for (mode, key, value) in &entries {
            let option = format!("{}{key}={value}", mode.as_ref().map(|m| format!("{m},")).unwrap_or_default());
            match mode.as_deref() {
                None => match key.as_str() {
                    "mode" => {
                        config.mode = match value.to_ascii_lowercase().as_str() {
                            "triton" => TraceMode::Triton,
                            "opentelemetry" => TraceMode::OpenTelemetry,
                            _ => return Err(bad(&option, invalid_mode(value))),
                        }
                    }
                    "rate" => {
                        config.rate = value.parse().map_err(|_| bad(&option, format!("invalid rate: {value}")))?
                    }
                    "count" => {
                        config.count = value.parse().map_err(|_| bad(&option, format!("invalid count: {value}")))?;
                    }
                    "guest_span_bytes" => {
                        config.guest_span_bytes = value.parse().map_err(|_| {
                            bad(&option, format!("invalid guest_span_bytes: {value} (a number of bytes)"))
                        })?;
                    }
                    _ => {}
                },
                Some("triton") => match key.as_str() {
                    "file" => config.file = value.clone(),
                    "log-frequency" => {
                        config.log_frequency =
                            value.parse().map_err(|_| bad(&option, format!("invalid log-frequency: {value}")))?;
                    }
                    _ => {}
                },
                Some("opentelemetry") => {
                    config.opentelemetry.insert(key.clone(), value.clone());
                }
                Some(other) => return Err(bad(&option, invalid_mode(other))),
            }
        }
        Ok(config)
    }

    /// Why these settings cannot trace (Triton's `TraceSetting` validity), if they cannot.
    fn invalid(&self) -> Option<&'static str> {
        self.invalid_with(self.level, self.rate)
    }

    /// [`Self::invalid`] with a model's own level and rate.
    fn invalid_with(&self, level: Level, rate: u32) -> Option<&'static str> {
        if level.is_off() {
            Some("tracing is disabled")
        } else if rate == 0 {
            Some("sample rate must be non-zero")
        } else if self.mode == TraceMode::Triton && self.file.is_empty() {
            Some("trace file name is not given")
        } else {
            None
        }
    }
}

/// A model's own settings: each field set falls back to the global one when `None`.
#[derive(Debug, Clone, Default)]
struct Overrides {
    level: Option<Level>,
    rate: Option<u32>,
    count: Option<i64>,
    log_frequency: Option<u32>,
}

/// Which requests of one settings holder are sampled.
#[derive(Debug, Default)]
struct Sampler {
    seen: u64,
    /// Traces left under `count` (None: not counted yet, taken from the settings on first use).
    left: Option<i64>,
}

struct State {
    global: TraceConfig,
    global_sampler: Sampler,
    models: HashMap<String, (Overrides, Sampler)>,
}

/// The server's tracer: settings, sampling and the sink of finished traces.
pub struct Tracer {
    state: Mutex<State>,
    /// Whether any settings holder has a level other than OFF: when not, sampling takes no lock.
    on: AtomicBool,
    ids: Arc<AtomicU64>,
    sink: Option<Sink>,
}

/// Where finished traces go, by mode.
enum Sink {
    File(Arc<FileSink>),
    Otlp(Arc<OtlpSink>),
}

impl Sink {
    fn as_dyn(&self) -> Arc<dyn TraceSink> {
        match self {
            Sink::File(file) => Arc::clone(file) as Arc<dyn TraceSink>,
            Sink::Otlp(otlp) => Arc::clone(otlp) as Arc<dyn TraceSink>,
        }
    }
}

/// A value in a trace-settings answer.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingAnswer {
    Str(String),
    List(Vec<String>),
}

impl Tracer {
    /// The tracer of `config`; an OpenTelemetry export setting that does not read is an error.
    pub fn new(config: TraceConfig) -> Result<Arc<Self>, String> {
        let sink = match config.mode {
            TraceMode::Triton => (!config.file.is_empty())
                .then(|| Sink::File(Arc::new(FileSink::start(config.file.clone(), config.log_frequency)))),
            TraceMode::OpenTelemetry => {
                Some(Sink::Otlp(Arc::new(OtlpSink::start(ExportSettings::from_config(&config.opentelemetry)?))))
            }
        };
        let on = !config.level.is_off();
        Ok(Arc::new(Self {
            state: Mutex::new(State { global: config, global_sampler: Sampler::default(), models: HashMap::new() }),
            on: AtomicBool::new(on),
            ids: Arc::new(AtomicU64::new(1)),
            sink,
        }))
    }

    /// A tracer that traces nothing (the default settings).
    pub fn off() -> Arc<Self> {
        Self::new(TraceConfig::default()).unwrap_or_else(|_| unreachable!("the default settings read"))
    }

    /// Spans exported and dropped so far, in OpenTelemetry mode.
    pub fn export_counts(&self) -> Option<(u64, u64)> {
        match &self.sink {
            Some(Sink::Otlp(otlp)) => {
                Some((otlp.counts().exported.load(Ordering::Relaxed), otlp.counts().dropped.load(Ordering::Relaxed)))
            }
            _ => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A trace for a request to `model`, if its settings sample it. In OpenTelemetry mode a
    /// request that carries a valid W3C `traceparent` is always traced (under it), as in Triton.
    pub fn sample(&self, model: &str, traceparent: Option<&str>) -> Option<Trace> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let sink = self.sink.as_ref()?.as_dyn();
        let mut state = self.lock();
        let State { global, global_sampler, models } = &mut *state;
        let (overrides, sampler) = match models.get_mut(model) {
            Some((overrides, sampler)) => (Some(&*overrides), sampler),
            None => (None, global_sampler),
        };
        let level = overrides.and_then(|o| o.level).unwrap_or(global.level);
        let rate = overrides.and_then(|o| o.rate).unwrap_or(global.rate);
        if global.invalid_with(level, rate).is_some() {
            return None;
        }
        let otel = global.mode == TraceMode::OpenTelemetry;
        let guest_bytes = || Arc::new(AtomicUsize::new(global.guest_span_bytes));
        if let Some(remote) = traceparent.filter(|_| otel).and_then(TraceParent::parse) {
            let ids = Some(OtelIds::new(Some(&remote)));
            return Some(Trace::new(0, level, ids, Arc::clone(&self.ids), sink, guest_bytes()));
        }
        sampler.seen += 1;
        if sampler.seen % u64::from(rate) != 0 {
            return None;
        }
        let left = sampler.left.get_or_insert(overrides.and_then(|o| o.count).unwrap_or(global.count));
        match *left {
            0 => return None,
            n if n > 0 => *left -= 1,
            _ => {}
        }
        let ids = otel.then(|| OtelIds::new(None));
        Some(Trace::new(0, level, ids, Arc::clone(&self.ids), sink, guest_bytes()))
    }

    /// The settings of `model`, or the global ones, as the trace-setting API answers them.
    pub fn settings(&self, model: Option<&str>) -> BTreeMap<String, SettingAnswer> {
        let state = self.lock();
        let config = match model.and_then(|m| state.models.get(m)) {
            Some((overrides, _)) => effective(&state.global, overrides),
            None => state.global.clone(),
        };
        answer(&config)
    }

    /// Applies a trace-setting update (`None` value: back to the default, or for a model to
    /// the global value), as Triton: the whole update or nothing.
    pub fn update(
        &self,
        model: Option<&str>,
        updates: BTreeMap<String, Option<Vec<String>>>,
    ) -> CoreResult<BTreeMap<String, SettingAnswer>> {
        let mut state = self.lock();
        let mut overrides = match model {
            Some(m) => state.models.get(m).map(|(o, _)| o.clone()).unwrap_or_default(),
            None => Overrides::default(),
        };
        let mut global = state.global.clone();
        for (key, values) in &updates {
            let text = || values.as_ref().and_then(|v| v.first()).cloned().unwrap_or_default();
            match key.as_str() {
                "trace_file" => {
                    return Err(CoreError::unsupported(
                        "trace file location can not be updated through network protocol",
                    ));
                }
                "trace_level" => {
                    let level = match values {
                        None => None,
                        Some(levels) => {
                            if levels.iter().any(|l| l == "OFF") && levels.len() > 1 {
                                return Err(CoreError::invalid_arg("Expect only one trace level 'OFF' is specified"));
                            }
                            let mut level = Level::OFF;
                            for l in levels {
                                match l.as_str() {
                                    "TIMESTAMPS" => level.timestamps = true,
                                    "TENSORS" => level.tensors = true,
                                    _ => {}
                                }
                            }
                            Some(level)
                        }
                    };
                    match model {
                        Some(_) => overrides.level = level,
                        None => global.level = level.unwrap_or(Level::OFF),
                    }
                }
                "trace_rate" | "log_frequency" => {
                    let parsed = match values {
                        None => None,
                        Some(_) => Some(text().parse::<u32>().map_err(|_| {
                            CoreError::invalid_arg(format!("Unable to parse '{key}', got: {}", text()))
                        })?),
                    };
                    match (key.as_str(), model) {
                        ("trace_rate", Some(_)) => overrides.rate = parsed,
                        ("trace_rate", None) => global.rate = parsed.unwrap_or(1000),
                        (_, Some(_)) => overrides.log_frequency = parsed,
                        (_, None) => global.log_frequency = parsed.unwrap_or(0),
                    }
                }
                "trace_count" => {
                    let parsed = match values {
                        None => None,
                        Some(_) => {
                            let n = text().parse::<i64>().map_err(|_| {
                                CoreError::invalid_arg(format!("Unable to parse 'trace_count', got: {}", text()))
                            })?;
                            if n < -1 {
                                return Err(CoreError::invalid_arg(format!(
                                    "Unable to parse 'trace_count'. Expecting value >= -1, got: {}",
                                    text()
                                )));
                            }
                            Some(n)
                        }
                    };
                    match model {
                        Some(_) => overrides.count = parsed,
                        None => global.count = parsed.unwrap_or(-1),
                    }
                }
                // The mode is the server's; the API cannot change it (as in Triton).
                _ => {}
            }
        }
        let effective_config = match model {
            Some(_) => effective(&global, &overrides),
            None => global.clone(),
        };
        if !effective_config.level.is_off()
            && let Some(reason) = effective_config.invalid()
        {
            return Err(CoreError::invalid_arg(format!("Attempting to set invalid trace setting :{reason}")));
        }
        let count_changed = updates.contains_key("trace_count");
        match model {
            Some(m) => {
                let entry = state.models.entry(m.to_string()).or_default();
                entry.0 = overrides;
                if count_changed {
                    entry.1.left = None;
                }
            }
            None => {
                state.global = global;
                if count_changed {
                    state.global_sampler.left = None;
                }
            }
        }
        if let Some(Sink::File(file)) = &self.sink {
            file.set_log_frequency(state.global.log_frequency);
        }
        let on = !state.global.level.is_off()
            || state.models.values().any(|(o, _)| !effective(&state.global, o).level.is_off());
        self.on.store(on, Ordering::Relaxed);
        Ok(answer(&effective_config))
    }

    /// Writes what the sink still holds and closes the trace file (Triton does at exit).
    pub fn close(&self) {
        match &self.sink {
            Some(Sink::File(file)) => file.close(),
            Some(Sink::Otlp(otlp)) => otlp.close(),
            None => {}
        }
    }
}

fn invalid_mode(mode: &str) -> String {
    format!("invalid value for trace mode option: {mode}. Available options are \"triton\" and \"opentelemetry\"")
}

fn effective(global: &TraceConfig, overrides: &Overrides) -> TraceConfig {
    TraceConfig {
        level: overrides.level.unwrap_or(global.level),
        rate: overrides.rate.unwrap_or(global.rate),
        count: overrides.count.unwrap_or(global.count),
        log_frequency: overrides.log_frequency.unwrap_or(global.log_frequency),
        ..global.clone()
    }
}

fn answer(config: &TraceConfig) -> BTreeMap<String, SettingAnswer> {
    let mut out = BTreeMap::from([
        ("trace_level".to_string(), SettingAnswer::List(config.level.names())),
        ("trace_rate".to_string(), SettingAnswer::Str(config.rate.to_string())),
        ("trace_count".to_string(), SettingAnswer::Str(config.count.to_string())),
        ("trace_mode".to_string(), SettingAnswer::Str(config.mode.as_str().to_string())),
    ]);
    match config.mode {
        TraceMode::Triton => {
            out.insert("log_frequency".into(), SettingAnswer::Str(config.log_frequency.to_string()));
            out.insert("trace_file".into(), SettingAnswer::Str(config.file.clone()));
        }
        TraceMode::OpenTelemetry => {
            for (key, value) in &config.opentelemetry {
                out.insert(key.clone(), SettingAnswer::Str(value.clone()));
            }
        }
    }
    out
}
