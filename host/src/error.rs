//! The one error type that crosses the core: every front door maps it to its wire status exactly once
//! (HTTP status and gRPC code), so a given failure gets the same code whichever door it came through.

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

    /// HTTP status as Triton's HTTP server maps `TRITONSERVER_Error_Code`
    /// (http_server.cc `HttpCodeFromError`).
    pub fn http_status(&self) -> u16 {
        match self.kind {
            ErrorKind::Internal => 500,
            ErrorKind::NotFound => 404,
            ErrorKind::Unavailable => 503,
            ErrorKind::Unsupported => 501,
            ErrorKind::AlreadyExists => 409,
            ErrorKind::Unknown | ErrorKind::InvalidArg | ErrorKind::Cancelled => 400,
        }
    }
}

impl CoreError {
    /// gRPC status code as Triton's gRPC server maps `TRITONSERVER_Error_Code`
    /// (grpc_utils.cc `CodeToStatus`).
    pub fn grpc_code(&self) -> tonic::Code {
        match self.kind {
            ErrorKind::Unknown => tonic::Code::Unknown,
            ErrorKind::Internal => tonic::Code::Internal,
            ErrorKind::NotFound => tonic::Code::NotFound,
            ErrorKind::InvalidArg => tonic::Code::InvalidArgument,
            ErrorKind::Unavailable => tonic::Code::Unavailable,
            ErrorKind::Unsupported => tonic::Code::Unimplemented,
            ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorKind::Cancelled => tonic::Code::Cancelled,
        }
    }
}

impl From<CoreError> for tonic::Status {
    fn from(e: CoreError) -> Self {
        tonic::Status::new(e.grpc_code(), e.message)
    }
}

pub type CoreResult<T> = Result<T, CoreError>;
