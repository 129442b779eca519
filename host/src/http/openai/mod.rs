//! OpenAI's API on the HTTP door: `GET /v1/models`, `GET /v1/models/{model}` and
//! `POST /v1/completions` (a JSON answer, or server-sent events ending `data: [DONE]`).
//!
//! Which models `/v1` serves ([`servable`]): a ready model that speaks one of Triton's LLM tensor
//! conventions ([`convention`]). `/v1/models` lists those and no others, so a client choosing
//! from the list only finds models it can call; any other model is 404 here, with the reason.
//!
//! A `/v1` request takes the v2 doors' path: the body limits and in-flight budget of
//! [`super::body::read`], the restricted-API check (category `openai`), forwarded headers,
//! `traceparent`, the access log line, and [`Frontend::infer_stream`]; a client that goes away
//! mid-stream drops the stream, which cancels the request. Errors have OpenAI's shape
//! ([`error`]).

mod convention;
mod error;
mod schema;
mod stream;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use self::convention::{Convention, Generation};
pub use self::error::OpenAiError;
use self::error::OpenAiResult;
use self::schema::{CompletionRequest, Prompt};
use super::response::ok_json;
use super::{HttpState, body, forwarded_headers, traceparent};
use crate::frontend::{Frontend, ServedModel, add_forwarded};
use crate::trace::{activity, stamp};

/// The `/v1` routes, added to the HTTP door's.
pub(super) fn routes(router: Router<HttpState>) -> Router<HttpState> {
    router
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(get_model))
        .route("/v1/completions", post(completions))
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `model`, if `/v1` serves it: ready, and speaking a convention.
fn servable(frontend: &Frontend, model: &str) -> OpenAiResult<(ServedModel, Convention)> {
    let served =
        frontend.model(model, None).map_err(|_| OpenAiError::model_not_found(model, "no such model is ready"))?;
    let convention = convention::of(&served).ok_or_else(|| {
        OpenAiError::model_not_found(model, "it is ready, but takes no text_input and gives no text_output")
    })?;
    Ok((served, convention))
}

/// OpenAI's model object. `created` is when it was listed: a Triton repository keeps no
/// creation time, and Triton's frontend answers the same.
fn model_object(name: &str) -> Value {
    json!({ "id": name, "object": "model", "created": now(), "owned_by": "tessera" })
}

async fn list_models(State(state): State<HttpState>) -> Response {
    let mut names: Vec<String> = state.frontend.repository_index(true).into_iter().map(|e| e.name).collect();
    names.dedup();
    let data: Vec<Value> =
        names.iter().filter(|name| servable(&state.frontend, name).is_ok()).map(|name| model_object(name)).collect();
    ok_json(&json!({ "object": "list", "data": data }))
}

async fn get_model(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    match servable(&state.frontend, &model) {
        Ok(_) => ok_json(&model_object(&model)),
        Err(e) => e.into_response(),
    }
}

async fn completions(State(state): State<HttpState>, request: Request) -> Response {
    let started = std::time::Instant::now();
    let mut model = String::new();
    let result = completion(&state, request, &mut model).await;
    let status = match &result {
        Ok(_) => "OK",
        Err(e) if e.status.is_client_error() => "Invalid argument",
        Err(_) => "Internal",
    };
    state.frontend.log_request("http", &model, None, None, status, started.elapsed());
    result.unwrap_or_else(IntoResponse::into_response)
}

/// One completion; `model` gets the model's name once the body is read, for the access line.
async fn completion(state: &HttpState, request: Request, model: &mut String) -> OpenAiResult<Response> {
    let (parts, body) = request.into_parts();
    let (body, _reservation) = body::read(&parts.headers, body, state.max_input_size, &state.body_budget).await?;
    let request = CompletionRequest::parse(&body)?;
    model.clone_from(&request.model);
    let (served, convention) = servable(&state.frontend, &request.model)?;
    if request.n != 1 {
        return Err(OpenAiError::invalid(
            format!("model '{}' answers one choice per request: n must be 1, not {}", request.model, request.n),
            Some("n"),
        ));
    }
    if let Some(extra) = request.extras.first() {
        return Err(OpenAiError::invalid(
            format!(
                "model '{}' cannot honour '{extra}' (it speaks a tensor convention that has no such input)",
                request.model
            ),
            Some(extra),
        ));
    }
    let prompt = match request.prompts.as_slice() {
        [Prompt::Text(text)] => text,
        [Prompt::Tokens(_)] => {
            return Err(OpenAiError::invalid(
                format!("model '{}' takes its prompt as text: a prompt of token ids needs a tokenizer", request.model),
                Some("prompt"),
            ));
        }
        prompts => {
            return Err(OpenAiError::invalid(
                format!("model '{}' takes one prompt per request, not {}", request.model, prompts.len()),
                Some("prompt"),
            ));
        }
    };
    let generation = Generation { prompt, sampling: &request.sampling, stream: request.stream, echo: request.echo };
    let mut infer = convention::request(&served, convention, &generation)?;
    add_forwarded(&mut infer, &forwarded_headers(state, &parts.headers)?);
    let trace = state.frontend.trace(&request.model, traceparent(&parts.headers));
    stamp(&trace, activity::HTTP_RECV_END);
    infer.trace = trace.clone();
    let responses = state.frontend.infer_stream(&served, infer).await?;
    let head = stream::Head::new("cmpl", "text_completion", &request.model, request.sampling.max_tokens);
    let response = if request.stream {
        stream::completion_events(head, responses, request.include_usage)
    } else {
        ok_json(&stream::completion_whole(head, responses).await?)
    };
    stamp(&trace, activity::HTTP_SEND_START);
    stamp(&trace, activity::HTTP_SEND_END);
    Ok(response)
}
