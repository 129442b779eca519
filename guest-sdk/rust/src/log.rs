//! Logging to the host's log (it tags each line with the model name and instance).
//!
//! Use the functions, or the macros at the crate root: `tessera_guest::info!("loaded {n} words")`.

use crate::bindings::tessera::model::host;

/// Log levels, from the most to the least important.
pub use crate::bindings::tessera::model::host::LogLevel;

/// Writes a message at the given level.
pub fn log(level: LogLevel, message: &str) {
    host::log(level, message);
}

/// Writes an error message.
pub fn error(message: &str) {
    host::log(LogLevel::Error, message);
}

/// Writes a warning.
pub fn warn(message: &str) {
    host::log(LogLevel::Warn, message);
}

/// Writes an informational message.
pub fn info(message: &str) {
    host::log(LogLevel::Info, message);
}

/// Writes a verbose (debug) message.
pub fn verbose(message: &str) {
    host::log(LogLevel::Verbose, message);
}

/// Logs a formatted error message: `error!("bad input {name}")`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::log($crate::LogLevel::Error, &::std::format!($($arg)+)) };
}

/// Logs a formatted warning: `warn!("slow path for {n} items")`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::log($crate::LogLevel::Warn, &::std::format!($($arg)+)) };
}

/// Logs a formatted informational message: `info!("loaded {n} words")`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::log($crate::LogLevel::Info, &::std::format!($($arg)+)) };
}

/// Logs a formatted verbose message: `verbose!("batch of {n}")`.
#[macro_export]
macro_rules! verbose {
    ($($arg:tt)+) => { $crate::log::log($crate::LogLevel::Verbose, &::std::format!($($arg)+)) };
}
