use axum::http::{Method, Request as HttpRequest};
// tower's Service trait (re-exported by tonic; tower itself is no direct dependency).
use tonic::codegen::Service;

use super::*;

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

/// Sends one request to a router over an empty repository.
async fn call(method: Method, uri: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let state = HttpState {
        frontend: Arc::new(Frontend::for_tests()),
        restrictions: Arc::default(),
        max_input_size: 1 << 20,
        body_budget: crate::limits::RequestBudget::new(1 << 24),
    };
    let mut request = HttpRequest::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router(state).call(request.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    Answer { status: parts.status, headers: parts.headers, body: String::from_utf8_lossy(&body).into_owned() }
}

fn error_body(message: &str) -> String {
    json!({ "error": message }).to_string()
}

#[tokio::test]
async fn a_segment_that_is_not_a_version_is_answered_per_route() {
    let not_found = error_body("Not Found");
    let cases = [
        (Method::GET, "", StatusCode::NOT_FOUND, not_found.clone()),
        (Method::GET, "/config", StatusCode::NOT_FOUND, not_found.clone()),
        (Method::POST, "/infer", StatusCode::NOT_FOUND, not_found.clone()),
        (Method::POST, "/generate", StatusCode::NOT_FOUND, not_found.clone()),
        (Method::POST, "/generate_stream", StatusCode::NOT_FOUND, not_found),
        (Method::GET, "/ready", StatusCode::BAD_REQUEST, error_body("Model version not ready")),
        (
            Method::GET,
            "/stats",
            StatusCode::BAD_REQUEST,
            error_body("requested model version is not available for model 'm'"),
        ),
    ];
    for (method, suffix, status, body) in cases {
        let answer = call(method, &format!("/v2/models/m/versions/x{suffix}"), &[], "{}").await;
        assert_eq!((answer.status, answer.body), (status, body), "{suffix}");
        assert_eq!(answer.headers[header::CONTENT_TYPE], "application/json", "{suffix}");
    }
}

#[tokio::test]
async fn versioned_and_unversioned_routes_share_their_handler() {
    let unknown = error_body("Request for unknown model: 'm' is not found");
    for uri in ["/v2/models/m", "/v2/models/m/versions/1", "/v2/models/m/config", "/v2/models/m/versions/1/config"] {
        let answer = call(Method::GET, uri, &[], "").await;
        assert_eq!((answer.status, answer.body), (StatusCode::NOT_FOUND, unknown.clone()), "{uri}");
    }
    for uri in ["/v2/models/m/ready", "/v2/models/m/versions/1/ready"] {
        assert_eq!(call(Method::GET, uri, &[], "").await.status, StatusCode::BAD_REQUEST, "{uri}");
    }
    let stats = call(Method::GET, "/v2/models/m/stats", &[], "").await;
    assert_eq!(stats.body, error_body("requested model 'm' is not available"));
    let stats = call(Method::GET, "/v2/models/m/versions/1/stats", &[], "").await;
    assert_eq!(stats.body, error_body("requested model version is not available for model 'm'"));
}

#[tokio::test]
async fn infer_reports_an_unknown_model_before_a_bad_body() {
    for uri in ["/v2/models/m/infer", "/v2/models/m/versions/2/infer"] {
        let answer = call(Method::POST, uri, &[], "{not json").await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{uri}: {}", answer.body);
        assert!(answer.body.contains("Request for unknown model: 'm'"), "{uri}: {}", answer.body);
    }
}

#[tokio::test]
async fn only_infer_advertises_encodings_after_an_unsupported_one() {
    let br = [("content-encoding", "br")];
    // Infer looks the model up first, as Triton does (the encoding answer itself, with its
    // Accept-Encoding header, is tested against a real model in tests/test_http_errors.py).
    let infer = call(Method::POST, "/v2/models/m/infer", &br, "{}").await;
    assert_eq!(infer.status, StatusCode::NOT_FOUND);
    let generate = call(Method::POST, "/v2/models/m/generate", &br, "{}").await;
    assert_eq!(generate.status, StatusCode::NOT_IMPLEMENTED);
    assert!(generate.headers.get(header::ACCEPT_ENCODING).is_none());
}

#[tokio::test]
async fn fallbacks_health_and_repository() {
    let missing = call(Method::GET, "/v2/nothing", &[], "").await;
    assert_eq!((missing.status, missing.body), (StatusCode::NOT_FOUND, error_body("Not Found")));
    let wrong_method = call(Method::POST, "/v2/health/live", &[], "").await;
    assert_eq!(
        (wrong_method.status, wrong_method.body),
        (StatusCode::METHOD_NOT_ALLOWED, error_body("Method Not Allowed"))
    );
    for uri in ["/v2/health/live", "/v2/health/ready"] {
        let answer = call(Method::GET, uri, &[], "").await;
        assert_eq!((answer.status, answer.body.as_str()), (StatusCode::OK, ""), "{uri}");
    }
    let index = call(Method::POST, "/v2/repository/index", &[], "").await;
    assert_eq!((index.status, index.body.as_str()), (StatusCode::OK, "[]"));
    let malformed = call(Method::POST, "/v2/repository/index", &[], "{").await;
    assert_eq!(malformed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(malformed.body.contains("failed to parse the request JSON buffer"), "{}", malformed.body);
    let malformed = call(Method::POST, "/v2/systemsharedmemory/region/r/register", &[], "{").await;
    assert_eq!(
        (malformed.status, malformed.body),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            error_body("failed to parse the request JSON buffer: Missing a name for object member. at 1")
        )
    );
}
