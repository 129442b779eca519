//! The tenants gate (`--tenants`), one layer in front of every HTTP route: identifies the
//! caller (an API key, or the client certificate of an HTTPS connection), checks its role for the
//! API, admits an inference call against its rate and cap, and records the [`Caller`] for the
//! handlers. Refusals say what was wrong, in OpenAI's shape on `/v1`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::caller::{Caller, ConnInfo};
use super::openai::OpenAiError;
use super::response::error_json;
use crate::limits::HoldingBody;
use crate::restricted::ApiCategory;
use crate::tenancy::{AuthError, OpenApi, Presented, Tenants, retry_after_secs};

/// The tenants layer: identifies the caller, checks its role for the API, admits an inference
/// call against its rate and cap, and records the [`Caller`] for the handlers. The admission is
/// held until the response body ends.
pub async fn gate(State(tenants): State<Arc<Tenants>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let category = ApiCategory::of_http_path(path);
    let openai = category == Some(ApiCategory::OpenAi) || path.starts_with("/v1/");
    let conn = request.extensions().get::<ConnInfo>().cloned().unwrap_or_default();
    // Open health is the server's; a model's readiness would tell who asks which models exist.
    if matches!(path, "/v2/health/live" | "/v2/health/ready") && tenants.is_open(OpenApi::Health) {
        return next.run(request).await;
    }
    let presented = Presented {
        authorization: request.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes),
        certificate: conn.certificate.as_deref(),
        peer: conn.peer.map(|p| p.ip()),
    };
    let identity = match tenants.identify(presented) {
        Ok(identity) => identity,
        Err(e) => return unauthenticated(&e, openai),
    };
    if let Some(category) = category
        && let Err(denied) = identity.may_use(category)
    {
        return refusal(StatusCode::FORBIDDEN, &denied.0, openai, "permission_error");
    }
    let admitted = match category {
        Some(ApiCategory::Inference | ApiCategory::OpenAi) => match identity.admit() {
            Ok(admitted) => Some(admitted),
            Err(busy) => {
                let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, &busy.message, openai, "rate_limit_error");
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(busy.retry_after)));
                return response;
            }
        },
        _ => None,
    };
    let principal = Some(Arc::clone(&identity.tenant.principal));
    request.extensions_mut().insert(Caller { peer: conn.peer, identity: Some(identity), principal });
    let response = next.run(request).await;
    match admitted {
        Some(admitted) => response.map(|body| axum::body::Body::new(HoldingBody::new(body, admitted))),
        None => response,
    }
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
