//! [`ModelPath`], the `{model}` and optional `{version}` segments of the model routes, so each
//! `/v2/models/{model}/X` and `/v2/models/{model}/versions/{version}/X` pair has one handler.

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::HttpError;
use crate::error::{CoreError, CoreResult};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPath {
    pub model: String,
    /// `Ok(None)` on an unversioned route (or an empty segment): the newest ready version. A
    /// segment that is not a version is Triton's 404 (its router matches no such path). It is
    /// kept rather than rejected because readiness and statistics answer it their own way.
    pub version: CoreResult<Option<i64>>,
}

/// The `{version}` path segment: a non-negative integer.
pub fn parse_version(version: &str) -> CoreResult<Option<i64>> {
    // Triton's router takes only digits; all digits but too large fails its `stol`.
    if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) && version.parse::<i64>().is_err() {
        return Err(CoreError::invalid_arg(crate::infer::version_error(version)));
    }
    crate::infer::parse_version(version, || CoreError::not_found("Not Found"))
}

impl<S: Send + Sync> FromRequestParts<S> for ModelPath {
    /// axum's own answer when a segment does not percent-decode to UTF-8.
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // The router's own decoded segments, read in place (no map of them is built per request).
        let params = RawPathParams::from_request_parts(parts, state).await.map_err(|rejection| match rejection {
            // The answer axum's `Path` gives (with its "Invalid URL: " prefix), as before.
            RawPathParamsRejection::InvalidUtf8InPathParam(e) => {
                (e.status(), format!("Invalid URL: {}", e.body_text())).into_response()
            }
            other => other.into_response(),
        })?;
        let (mut model, mut version) = (None, Ok(None));
        for (key, value) in &params {
            match key {
                "model" => model = Some(value.to_owned()),
                "version" => version = parse_version(value),
                _ => {}
            }
        }
        let model = model
            .ok_or_else(|| HttpError::from(CoreError::internal("a model route without a {model} segment")))
            .map_err(IntoResponse::into_response)?;
        // A model the caller's tenant may not call is looked up as one that does not exist.
        let principal = parts.extensions.get::<super::caller::Requester>().and_then(|c| c.principal.as_deref());
        if let std::borrow::Cow::Owned(hidden) = crate::tenant::visible_name(principal, &model) {
            return Ok(Self { model: hidden, version });
        }
        Ok(Self { model, version })
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    // tower's Service trait (re-exported by tonic; tower itself is no direct dependency).
    use tonic::codegen::Service;

    use super::*;

    async fn get_path(uri: &str) -> (StatusCode, String) {
        let echo = |path: ModelPath| async move { format!("{} {:?}", path.model, path.version.map_err(|e| e.message)) };
        let mut router: Router =
            Router::new().route("/m/{model}", get(echo)).route("/m/{model}/v/{version}", get(echo));
        let request = Request::get(uri).body(Body::empty()).unwrap();
        let response = router.call(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn versioned_and_unversioned_routes() {
        assert_eq!(get_path("/m/add_sub").await, (StatusCode::OK, "add_sub Ok(None)".into()));
        assert_eq!(get_path("/m/add%20sub/v/3").await, (StatusCode::OK, "add sub Ok(Some(3))".into()));
        assert_eq!(get_path("/m/a/v/0").await, (StatusCode::OK, "a Ok(Some(0))".into()));
    }

    #[tokio::test]
    async fn a_bad_version_is_kept_as_tritons_not_found() {
        // ("99999999999999999999", all digits but past i64, is Triton's stol error: tests/test_triton_errors.py.)
        for bad in ["x", "-1", "1.5"] {
            let (status, body) = get_path(&format!("/m/a/v/{bad}")).await;
            assert_eq!(status, StatusCode::OK, "the handler decides: {body}");
            assert_eq!(body, "a Err(\"Not Found\")", "{bad}");
        }
        assert_eq!(parse_version("x").unwrap_err().kind, crate::error::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn a_segment_that_is_not_utf8_is_axums_rejection() {
        let (status, body) = get_path("/m/%FF").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body, "Invalid URL: Invalid UTF-8 in `model`");
    }
}
