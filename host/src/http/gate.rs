//! The tenants gate (`--tenants`), in front of every HTTP route: identifies the caller (an API
//! key, or the client certificate of an HTTPS connection), checks its role for the API, admits an
//! inference call against its rate and cap, and records the [`Requester`] for the handlers.
//! Refusals say what was wrong, in OpenAI's shape on `/v1`.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::caller::{ConnInfo, Requester};
use super::openai::OpenAiError;
use super::response::error_json;
use crate::restricted::ApiCategory;
use crate::tenancy::{Admitted, AuthError, OpenApi, Presented, Tenants, retry_after_secs};

/// The gate of one request, before it is routed: `Ok` with the admission to hold until the
/// response body ends (inference calls) after recording the [`Requester`] in the request, or the
/// refusal to answer instead. Synchronous, and called by the connection's service itself
/// (`serve.rs`): no middleware stack, clone or box per request.
pub fn check<B>(
    tenants: &Tenants,
    conn: &ConnInfo,
    request: &mut http::Request<B>,
) -> Result<Option<Admitted>, Box<Response>> {
    let path = request.uri().path();
    // Open health is the server's; a model's readiness would tell who asks which models exist.
    if matches!(path, "/v2/health/live" | "/v2/health/ready") && tenants.is_open(OpenApi::Health) {
        return Ok(None);
    }
    let category = ApiCategory::of_http_path(path);
    let openai = category == Some(ApiCategory::OpenAi) || path.starts_with("/v1/");
    let presented = Presented {
        authorization: request.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes),
        certificate: conn.certificate.as_deref(),
        peer: conn.peer.map(|p| p.ip()),
    };
    let identity = tenants.identify(presented).map_err(|e| Box::new(unauthenticated(&e, openai)))?;
    if let Some(category) = category
        && let Err(denied) = identity.may_use(category)
    {
        return Err(Box::new(refusal(StatusCode::FORBIDDEN, &denied.0, openai, "permission_error")));
    }
    let admitted = match category {
        Some(ApiCategory::Inference | ApiCategory::OpenAi) => Some(identity.admit().map_err(|busy| {
            let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, &busy.message, openai, "rate_limit_error");
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(busy.retry_after)));
            Box::new(response)
        })?),
        _ => None,
    };
    let principal = Some(Arc::clone(&identity.tenant.principal));
    request.extensions_mut().insert(Requester { peer: conn.peer, identity: Some(identity), principal });
    Ok(admitted)
}

/// 401 (or 429 for an address throttled after many failures), saying what was missing.
fn unauthenticated(error: &AuthError, openai: bool) -> Response {
    let message = error.message();
    if let AuthError::Throttled(wait) = error {
        let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, &message, openai, "rate_limit_error");
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(*wait)));
        return response;
    }
    let mut response = refusal(StatusCode::UNAUTHORIZED, &message, openai, "authentication_error");
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn refusal(status: StatusCode, message: &str, openai: bool, kind: &'static str) -> Response {
    if openai {
        let error = OpenAiError { status, message: message.to_string(), kind, param: None, code: None };
        error.into_response()
    } else {
        error_json(status, message)
    }
}
