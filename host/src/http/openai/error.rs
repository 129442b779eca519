//! OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`, with the status OpenAI
//! answers, made in one place for every `/v1` route.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::super::response::json_response;
use crate::error::{CoreError, ErrorKind};

#[derive(Debug)]
pub struct OpenAiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error` for the caller's mistakes, `server_error` else.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

pub type OpenAiResult<T> = Result<T, OpenAiError>;

impl OpenAiError {
    /// 400: the request cannot be served as it is; `param` names the field at fault.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// 404 for a model that is not served over `/v1`, in OpenAI's words, with why.
    pub fn model_not_found(model: &str, why: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist or you do not have access to it ({why})."),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    pub fn not_found(path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("Invalid URL ({path})"),
            kind: "invalid_request_error",
            param: None,
            code: None,
        }
    }

    /// 401 for a call without the header `--http-restricted-api openai:...` asks for, as
    /// Triton's OpenAI frontend answers its restricted APIs.
    pub fn restricted(header: &str) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: format!("This API is restricted, expecting header '{header}' with valid value"),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_auth"),
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({ "error": { "message": self.message, "type": self.kind, "param": self.param, "code": self.code } })
    }
}

/// The server's own errors: the caller's (bad input) stay 400, a model that is not there 404, an
/// overloaded or stopping server 503, anything else 500.
impl From<CoreError> for OpenAiError {
    fn from(error: CoreError) -> Self {
        let (status, kind) = match error.kind {
            ErrorKind::InvalidArg | ErrorKind::Unsupported | ErrorKind::AlreadyExists => {
                (StatusCode::BAD_REQUEST, "invalid_request_error")
            }
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "invalid_request_error"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "server_error"),
            ErrorKind::Cancelled => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            ErrorKind::Internal | ErrorKind::Unknown => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        };
        Self { status, message: crate::tenant::unmark(&error.message).into_owned(), kind, param: None, code: None }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        json_response(self.status, &self.body())
    }
}
