//! How the gRPC door answers a [`CoreError`]: the code Triton's gRPC server gives its error code,
//! with the message. This is the only place that maps errors to gRPC; the `From` impl lets the
//! service methods use `?` on core results.

use tonic::{Code, Status};

use crate::error::{CoreError, ErrorKind};

/// The gRPC code for an error kind, as Triton's grpc_utils.cc `CodeToStatus` maps
/// `TRITONSERVER_Error_Code`.
pub fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::Unknown => Code::Unknown,
        ErrorKind::Internal => Code::Internal,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::InvalidArg => Code::InvalidArgument,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Unsupported => Code::Unimplemented,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::Cancelled => Code::Cancelled,
    }
}

pub fn status(error: CoreError) -> Status {
    Status::new(code(error.kind), crate::tenant::unmark(&error.message).into_owned())
}

impl From<CoreError> for Status {
    fn from(error: CoreError) -> Self {
        status(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_tritons_grpc_code() {
        let table = [
            (ErrorKind::Unknown, Code::Unknown),
            (ErrorKind::Internal, Code::Internal),
            (ErrorKind::NotFound, Code::NotFound),
            (ErrorKind::InvalidArg, Code::InvalidArgument),
            (ErrorKind::Unavailable, Code::Unavailable),
            (ErrorKind::Unsupported, Code::Unimplemented),
            (ErrorKind::AlreadyExists, Code::AlreadyExists),
            (ErrorKind::Cancelled, Code::Cancelled),
        ];
        for (kind, expected) in table {
            assert_eq!(code(kind), expected, "{kind:?}");
        }
    }

    #[test]
    fn a_status_carries_the_message_unchanged() {
        let converted: Status = CoreError::unavailable("model 'm' is not ready").into();
        assert_eq!(converted.code(), Code::Unavailable);
        assert_eq!(converted.message(), "model 'm' is not ready");
    }
}
