//! Constructors for [`Error`], the contract's error record (a Triton error code and a message).

use crate::{Error, ErrorCode};

impl Error {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    /// `invalid-arg`: the request was wrong (missing input, bad shape or datatype, ...).
    /// HTTP 400, gRPC INVALID_ARGUMENT.
    pub fn invalid_arg(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::InvalidArg, message)
    }

    /// `internal`: the model failed. HTTP 500, gRPC INTERNAL.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Internal, message)
    }

    /// `not-found`. HTTP 404, gRPC NOT_FOUND.
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::NotFound, message)
    }

    /// `unsupported`. HTTP 400, gRPC UNIMPLEMENTED.
    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Unsupported, message)
    }

    /// `unavailable`: try again later. HTTP 503, gRPC UNAVAILABLE.
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Unavailable, message)
    }

    /// `unknown`.
    pub fn unknown(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Unknown, message)
    }

    /// The same error with `context: ` put in front of its message (its code is kept).
    pub fn context(mut self, context: impl AsRef<str>) -> Error {
        self.message = format!("{}: {}", context.as_ref(), self.message);
        self
    }
}

impl ErrorCode {
    /// The code's name in the contract (`invalid-arg`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unknown => "unknown",
            ErrorCode::Internal => "internal",
            ErrorCode::NotFound => "not-found",
            ErrorCode::InvalidArg => "invalid-arg",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::AlreadyExists => "already-exists",
            ErrorCode::Cancelled => "cancelled",
        }
    }
}
