//! The response shapes the HTTP door sends, in one place.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// `value` as the body, with `Content-Type: application/json`.
pub fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub fn ok_json(value: &Value) -> Response {
    json_response(StatusCode::OK, value)
}

/// `{"error": message}`, the body Triton sends with an error status.
pub fn error_json(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({ "error": message }))
}

/// 200 with an empty body: Triton's answer to a call that succeeds with nothing to report.
pub fn empty_ok() -> Response {
    StatusCode::OK.into_response()
}
