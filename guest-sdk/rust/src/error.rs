//! Constructors for [`Error`], the contract's error record (a Triton error code and a message).

use crate::{Error, ErrorCode};

/// One constructor per error code: `name => Code;` makes `Error::name(message)`.
macro_rules! code_constructors {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(message: impl Into<String>) -> Error {
                Error::new(ErrorCode::$code, message)
            }
        )*
    };
}

impl Error {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    code_constructors! {
        /// `invalid-arg`: the request was wrong (missing input, bad shape or datatype, ...).
        /// HTTP 400, gRPC INVALID_ARGUMENT.
        invalid_arg => InvalidArg;
        /// `internal`: the model failed. HTTP 500, gRPC INTERNAL.
        internal => Internal;
        /// `not-found`. HTTP 404, gRPC NOT_FOUND.
        not_found => NotFound;
        /// `unsupported`. HTTP 400, gRPC UNIMPLEMENTED.
        unsupported => Unsupported;
        /// `unavailable`: try again later. HTTP 503, gRPC UNAVAILABLE.
        unavailable => Unavailable;
        /// `unknown`.
        unknown => Unknown;
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
