//! The process logger for `tessera serve`: a tracing subscriber whose filter sits behind a reload
//! handle, so the logging extension (`/v2/logging`, gRPC LogSettings) changes levels at run time.

use std::collections::BTreeMap;

use tracing_subscriber::EnvFilter;

pub use super::log_format::LogFormat;
use super::log_format::{SharedFormat, TritonLines};
use crate::frontend::{LogApplier, SettingValue};

/// Triton's log switches, as given on the command line.
#[derive(Debug, Clone, Copy)]
pub struct LogFlags {
    pub verbose: u32,
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    /// `--log-format`.
    pub format: LogFormat,
}

impl LogFlags {
    fn level(self) -> &'static str {
        if self.verbose > 0 {
            "debug"
        } else if self.info {
            "info"
        } else if self.warning {
            "warn"
        } else if self.error {
            "error"
        } else {
            "off"
        }
    }

    /// The logging extension's view of these flags.
    pub fn settings(self) -> BTreeMap<String, SettingValue> {
        BTreeMap::from([
            ("log_info".to_string(), SettingValue::Bool(self.info)),
            ("log_warning".to_string(), SettingValue::Bool(self.warning)),
            ("log_error".to_string(), SettingValue::Bool(self.error)),
            ("log_verbose_level".to_string(), SettingValue::Uint(self.verbose)),
            ("log_format".to_string(), SettingValue::Str(self.format.as_str().to_string())),
        ])
    }
}

/// The log filter for a level; ONNX Runtime's own chatter stays at warnings.
fn filter_for(level: &str) -> EnvFilter {
    EnvFilter::new(format!("{level},ort=warn"))
}

type FilterHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Installs the logger and returns what applies later log-setting updates to it. RUST_LOG, when
/// set, wins over the flags and over later updates.
pub fn init(flags: LogFlags) -> LogApplier {
    use tracing_subscriber::prelude::*;
    let (filter, from_env) = match EnvFilter::try_from_default_env() {
        Ok(f) => (f, true),
        Err(_) => (filter_for(flags.level()), false),
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let format = SharedFormat::new(flags.format);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(TritonLines(format.clone()));
    let installed = tracing_subscriber::registry().with(filter).with(fmt).try_init().is_ok();
    applier((installed && !from_env).then_some(handle), format)
}

fn applier(handle: Option<FilterHandle>, format: SharedFormat) -> LogApplier {
    Box::new(move |settings| {
        if let Some(SettingValue::Str(text)) = settings.get("log_format")
            && let Some(chosen) = LogFormat::parse(text)
        {
            format.set(chosen);
        }
        let flag = |key: &str| matches!(settings.get(key), Some(SettingValue::Bool(true)));
        let verbose = match settings.get("log_verbose_level") {
            Some(SettingValue::Uint(v)) => *v,
            _ => 0,
        };
        let flags = LogFlags {
            verbose,
            info: flag("log_info"),
            warning: flag("log_warning"),
            error: flag("log_error"),
            format: LogFormat::Default,
        };
        if let Some(handle) = &handle {
            let _ = handle.reload(filter_for(flags.level()));
        }
    })
}
