//! The one error type that crosses the core. It knows no wire protocol: each front door maps an
//! [`ErrorKind`] to its status exactly once (`http::error` to an HTTP status, `grpc::status` to a
//! gRPC code), so a given failure gets the same answer whichever way it came in.

use std::fmt;

/// Mirrors `TRITONSERVER_Error_Code`, which is what Triton's front doors map to HTTP/gRPC statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Unknown,
    Internal,
    NotFound,
    InvalidArg,
    Unavailable,
    Unsupported,
    AlreadyExists,
    Cancelled,
}

impl ErrorKind {
    /// Triton's name for the kind (`TRITONSERVER_ErrorCodeString`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unknown => "Unknown",
            ErrorKind::Internal => "Internal",
            ErrorKind::NotFound => "Not found",
            ErrorKind::InvalidArg => "Invalid argument",
            ErrorKind::Unavailable => "Unavailable",
            ErrorKind::Unsupported => "Unsupported",
            ErrorKind::AlreadyExists => "Already exists",
            ErrorKind::Cancelled => "Cancelled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CoreError {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl CoreError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// Triton's wording for a model name that the repository does not know.
    pub fn unknown_model(name: &str) -> Self {
        Self::not_found(format!("Request for unknown model: '{name}' is not found"))
    }
}

pub type CoreResult<T> = Result<T, CoreError>;

/// Triton's prefix for a request's errors: `[request id: <id>] `, with `<id_unknown>` for a
/// request without one.
pub fn request_id_prefix(id: Option<&str>) -> String {
    let id = id.filter(|id| !id.is_empty()).unwrap_or("<id_unknown>");
    format!("[request id: {id}] ")
}
