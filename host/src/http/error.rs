//! How the HTTP door answers a [`CoreError`]: the status Triton's HTTP server gives its error code
//! and a JSON body `{"error": "<message>"}`. This is the only place that maps errors to HTTP.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::response::error_json;
use crate::error::{CoreError, ErrorKind};

/// The HTTP status for an error kind, as Triton's http_server.cc `HttpCodeFromError` maps
/// `TRITONSERVER_Error_Code`.
pub fn status_code(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        // Triton answers ALREADY_EXISTS (a region registered twice) with 400.
        ErrorKind::AlreadyExists => StatusCode::BAD_REQUEST,
        ErrorKind::Unknown | ErrorKind::InvalidArg | ErrorKind::Cancelled => StatusCode::BAD_REQUEST,
    }
}

/// A handler's error: a [`CoreError`] answered with [`status_code`] and a JSON body. Handlers
/// return `Result<Response, HttpError>` and use `?` on core results.
#[derive(Debug)]
pub struct HttpError {
    error: CoreError,
    /// An `Accept-Encoding` header to send along (infer's answer to an unsupported encoding).
    accept_encoding: Option<&'static str>,
}

impl HttpError {
    /// Sends `Accept-Encoding: encodings` with the error, saying which encodings would work.
    pub fn with_accept_encoding(mut self, encodings: &'static str) -> Self {
        self.accept_encoding = Some(encodings);
        self
    }
}

impl From<CoreError> for HttpError {
    fn from(error: CoreError) -> Self {
        Self { error, accept_encoding: None }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let message = crate::tenant::unmark(&self.error.message);
        let mut response = error_json(status_code(self.error.kind), &message);
        if let Some(encodings) = self.accept_encoding {
            response.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static(encodings));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_tritons_http_status() {
        let table = [
            (ErrorKind::Unknown, 400),
            (ErrorKind::Internal, 500),
            (ErrorKind::NotFound, 404),
            (ErrorKind::InvalidArg, 400),
            (ErrorKind::Unavailable, 503),
            (ErrorKind::Unsupported, 501),
            (ErrorKind::AlreadyExists, 400),
            (ErrorKind::Cancelled, 400),
        ];
        for (kind, status) in table {
            assert_eq!(status_code(kind).as_u16(), status, "{kind:?}");
        }
    }

    #[tokio::test]
    async fn errors_are_json_with_the_mapped_status() {
        let response = HttpError::from(CoreError::not_found("no such model")).into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert!(response.headers().get(header::ACCEPT_ENCODING).is_none());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_eq!(&body[..], br#"{"error":"no such model"}"#);

        let response =
            HttpError::from(CoreError::unsupported("br")).with_accept_encoding("gzip, deflate").into_response();
        assert_eq!(response.status(), StatusCode::NOT_IMPLEMENTED);
        assert_eq!(response.headers()[header::ACCEPT_ENCODING], "gzip, deflate");
    }
}
