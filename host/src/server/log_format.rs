//! The three log line formats of `--log-format` (switchable at run time through the logging
//! extension's `log_format`):
//! - `default`, Triton's: `I1128 06:35:22.123456 4242 repository.rs:210] "model loaded" model="m"`,
//!   the message JSON-escaped in quotes as Triton writes it, then the event's fields;
//! - `ISO8601`, Triton's other one: `2026-11-28T06:35:22Z I 4242 repository.rs:210] "..." ...`;
//! - `json`, one object per line with `time`, `level`, `pid`, `file`, `line`, the event's fields
//!   (`model`, `request_id`, ...) and `message`, so every line parses.
//!
//! Times are UTC, as Triton's.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LogFormat {
    Default = 0,
    Iso8601 = 1,
    Json = 2,
}

impl LogFormat {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "default" => Some(Self::Default),
            "ISO8601" => Some(Self::Iso8601),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Iso8601 => "ISO8601",
            Self::Json => "json",
        }
    }
}

/// The format in use, shared with the logging extension's applier.
#[derive(Clone)]
pub struct SharedFormat(Arc<AtomicU8>);

impl SharedFormat {
    pub fn new(format: LogFormat) -> Self {
        Self(Arc::new(AtomicU8::new(format as u8)))
    }

    pub fn set(&self, format: LogFormat) {
        self.0.store(format as u8, Ordering::Relaxed);
    }

    fn get(&self) -> LogFormat {
        match self.0.load(Ordering::Relaxed) {
            1 => LogFormat::Iso8601,
            2 => LogFormat::Json,
            _ => LogFormat::Default,
        }
    }
}

/// The event formatter installed by `logging::init`.
pub struct TritonLines(pub SharedFormat);

impl<S, N> FormatEvent<S, N> for TritonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        let file = metadata.file().map(|f| f.rsplit('/').next().unwrap_or(f)).unwrap_or("");
        let line = metadata.line().unwrap_or(0);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let (date, time) = civil(now.as_secs());
        let micros = now.subsec_micros();
        let pid = std::process::id();
        let message = json_string(&fields.message);
        match self.0.get() {
            LogFormat::Default => {
                let letter = level_letter(*metadata.level());
                let (_, month, day) = date;
                let (h, m, s) = time;
                write!(writer, "{letter}{month:02}{day:02} {h:02}:{m:02}:{s:02}.{micros:06} ")?;
                write!(writer, "{pid} {file}:{line}] {message}")?;
                write_fields(&mut writer, &fields.others)?;
            }
            LogFormat::Iso8601 => {
                let letter = level_letter(*metadata.level());
                let ((y, mo, d), (h, m, s)) = (date, time);
                write!(writer, "{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z ")?;
                write!(writer, "{letter} {pid} {file}:{line}] {message}")?;
                write_fields(&mut writer, &fields.others)?;
            }
            LogFormat::Json => {
                let ((y, mo, d), (h, m, s)) = (date, time);
                let mut object = serde_json::Map::new();
                let stamp = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{micros:06}Z");
                object.insert("time".into(), stamp.into());
                object.insert("level".into(), metadata.level().as_str().into());
                object.insert("pid".into(), pid.into());
                object.insert("file".into(), file.into());
                object.insert("line".into(), line.into());
                for (key, value) in fields.others {
                    object.insert(key, value);
                }
                object.insert("message".into(), fields.message.into());
                write!(writer, "{}", serde_json::Value::Object(object))?;
            }
        }
        writeln!(writer)
    }
}

fn level_letter(level: Level) -> char {
    match level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

fn write_fields(writer: &mut Writer<'_>, fields: &[(String, serde_json::Value)]) -> fmt::Result {
    for (key, value) in fields {
        write!(writer, " {key}={value}")?;
    }
    Ok(())
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

/// An event's message and its other fields (an empty string field is left out: a guest log line
/// outside a request has no request id).
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<(String, serde_json::Value)>,
}

impl Fields {
    fn add(&mut self, field: &Field, value: serde_json::Value) {
        self.others.push((field.name().to_string(), value));
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else if !value.is_empty() {
            self.add(field, value.into());
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.add(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.add(field, format!("{value:?}").into());
        }
    }
}

/// The UTC date and time of a Unix time in seconds (the proleptic Gregorian calendar).
fn civil(seconds: u64) -> ((i64, u32, u32), (u64, u64, u64)) {
    let days = i64::try_from(seconds / 86_400).unwrap_or(0);
    let rest = seconds % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    ((year, month, day), (rest / 3600, rest % 3600 / 60, rest % 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_times_read_as_utc_dates() {
        assert_eq!(civil(0), ((1970, 1, 1), (0, 0, 0)));
        assert_eq!(civil(951_782_400), ((2000, 2, 29), (0, 0, 0)));
        assert_eq!(civil(1_795_847_245), ((2026, 11, 28), (6, 27, 25)));
    }

    #[test]
    fn formats_read_as_their_flag_values() {
        for format in [LogFormat::Default, LogFormat::Iso8601, LogFormat::Json] {
            assert_eq!(LogFormat::parse(format.as_str()), Some(format));
        }
        assert_eq!(LogFormat::parse("xml"), None);
    }
}
