//! OpenAI's API on the HTTP door: `GET /v1/models`, `GET /v1/models/{model}`,
//! `POST /v1/completions`, `POST /v1/chat/completions` (a JSON answer, or server-sent events
//! ending `data: [DONE]`) and `POST /v1/embeddings`.
//!
//! Which models `/v1` serves ([`servable`]): a ready model whose config names a ready adapter
//! ([`adapter`]: a sandboxed guest with the model's tokenizer and chat template), or one that
//! speaks one of Triton's LLM tensor conventions ([`convention`], completions only: a chat needs
//! a template). `/v1/models` lists those and no others, so a client choosing from the list only
//! finds models it can call; any other model is 404 here, with the reason.
//!
//! A `/v1` request takes the v2 doors' path: the body limits and in-flight budget of
//! [`super::body::read`], the restricted-API check (category `openai`), forwarded headers,
//! `traceparent`, the access log line, and [`Frontend::infer_stream`]; a client that goes away
//! mid-stream drops the stream, which cancels the request. Errors have OpenAI's shape
//! ([`error`]).

mod adapter;
mod chat;
mod convention;
mod embeddings;
mod error;
mod schema;
mod stream;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use self::adapter::Ask;
use self::chat::ChatRequest;
use self::convention::{Convention, Generation};
use self::embeddings::EmbeddingRequest;
pub use self::error::OpenAiError;
use self::error::OpenAiResult;
use self::schema::{CompletionRequest, Prompt, Sampling};
use self::stream::{Head, Shape};
use super::caller::Requester;
use super::response::ok_json;
use super::{HttpState, body, forwarded_headers, traceparent};
use crate::frontend::{Frontend, ServedModel, add_forwarded};
use crate::infer::InferRequest;
use crate::tenant::Principal;
use crate::trace::{activity, stamp};

/// The `/v1` routes, added to the HTTP door's.
pub(super) fn routes(router: Router<HttpState>) -> Router<HttpState> {
    router
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(get_model))
        .route("/v1/completions", post(|s, c, r| call(s, c, r, Route::Completion)))
        .route("/v1/chat/completions", post(|s, c, r| call(s, c, r, Route::Chat)))
        .route("/v1/embeddings", post(|s, c, r| call(s, c, r, Route::Embedding)))
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How `/v1` reaches a model.
enum Reach {
    Adapter(ServedModel),
    Convention(Convention),
}

/// `model`, if `/v1` serves it: ready, with a ready adapter or speaking a convention.
/// A model `who` may not call is not there for it.
fn servable(frontend: &Frontend, who: Option<&Principal>, model: &str) -> OpenAiResult<(ServedModel, Reach)> {
    let not_found = || OpenAiError::model_not_found(model, "no such model is ready");
    if who.is_some_and(|p| !p.may_call(model)) {
        return Err(not_found());
    }
    let served = frontend.model(model, None).map_err(|_| not_found())?;
    if let Some(name) = adapter::named(&served) {
        let adapter = adapter::of(frontend, &served, name)?;
        return Ok((served, Reach::Adapter(adapter)));
    }
    let convention = convention::of(&served).ok_or_else(|| {
        OpenAiError::model_not_found(
            model,
            "it is ready, but names no openai_adapter, takes no text_input and gives no text_output",
        )
    })?;
    Ok((served, Reach::Convention(convention)))
}

/// OpenAI's model object. `created` is when it was listed: a Triton repository keeps no
/// creation time, and Triton's frontend answers the same.
fn model_object(name: &str) -> Value {
    json!({ "id": name, "object": "model", "created": now(), "owned_by": "tessera" })
}

async fn list_models(State(state): State<HttpState>, caller: Requester) -> Response {
    let who = caller.principal();
    let mut names: Vec<String> = state.frontend.repository_index(who, true).into_iter().map(|e| e.name).collect();
    names.dedup();
    let data: Vec<Value> = names
        .iter()
        .filter(|name| servable(&state.frontend, who, name).is_ok())
        .map(|name| model_object(name))
        .collect();
    ok_json(&json!({ "object": "list", "data": data }))
}

async fn get_model(State(state): State<HttpState>, Path(model): Path<String>, caller: Requester) -> Response {
    match servable(&state.frontend, caller.principal(), &model) {
        Ok(_) => ok_json(&model_object(&model)),
        Err(e) => e.into_response(),
    }
}

#[derive(Clone, Copy)]
enum Route {
    Completion,
    Chat,
    Embedding,
}

async fn call(State(state): State<HttpState>, caller: Requester, request: Request, route: Route) -> Response {
    let started = std::time::Instant::now();
    let mut model = String::new();
    let result = answer(&state, &caller, request, route, &mut model).await;
    let status = match &result {
        Ok(_) => "OK",
        Err(e) if e.status.is_client_error() => "Invalid argument",
        Err(_) => "Internal",
    };
    state.frontend.log_request("http", &model, None, None, status, started.elapsed(), &caller.audit());
    result.unwrap_or_else(IntoResponse::into_response)
}

/// What one call asks, read from its body.
enum Asked {
    Completion(CompletionRequest),
    Chat(ChatRequest),
    Embedding(EmbeddingRequest),
}

impl Asked {
    fn model(&self) -> &str {
        match self {
            Asked::Completion(r) => &r.model,
            Asked::Chat(r) => &r.model,
            Asked::Embedding(r) => &r.model,
        }
    }
}

fn one_choice(model: &str, n: u64) -> OpenAiResult<()> {
    if n == 1 {
        return Ok(());
    }
    Err(OpenAiError::invalid(
        format!("model '{model}' answers one choice per request: n must be 1, not {n}"),
        Some("n"),
    ))
}

/// The prompt of a completion: one, as text or tokens.
fn one_prompt<'a>(model: &str, prompts: &'a [Prompt]) -> OpenAiResult<&'a Prompt> {
    match prompts {
        [prompt] => Ok(prompt),
        prompts => Err(OpenAiError::invalid(
            format!("model '{model}' takes one prompt per request, not {}", prompts.len()),
            Some("prompt"),
        )),
    }
}

/// The request for a model reached through a convention: completions only.
fn convention_request(served: &ServedModel, convention: Convention, asked: &Asked) -> OpenAiResult<InferRequest> {
    let request = match asked {
        Asked::Completion(request) => request,
        Asked::Chat(_) => {
            return Err(OpenAiError::invalid(
                format!(
                    "model '{}' has no chat template: name an adapter (parameter openai_adapter) to chat with it, \
                     or use /v1/completions",
                    served.name()
                ),
                Some("model"),
            ));
        }
        Asked::Embedding(_) => {
            return Err(OpenAiError::invalid(
                format!("model '{}' generates text: it has no embeddings", served.name()),
                Some("model"),
            ));
        }
    };
    if let Some(extra) = request.extras.first() {
        return Err(OpenAiError::invalid(
            format!(
                "model '{}' cannot honour '{extra}' (it speaks a tensor convention that has no such input)",
                request.model
            ),
            Some(extra),
        ));
    }
    let prompt = match one_prompt(&request.model, &request.prompts)? {
        Prompt::Text(text) => text,
        Prompt::Tokens(_) => {
            return Err(OpenAiError::invalid(
                format!("model '{}' takes its prompt as text: a prompt of token ids needs a tokenizer", request.model),
                Some("prompt"),
            ));
        }
    };
    let generation = Generation { prompt, sampling: &request.sampling, stream: request.stream, echo: request.echo };
    convention::request(served, convention, &generation)
}

/// The request for a model reached through its adapter.
fn adapter_request(served: &ServedModel, adapter: &ServedModel, asked: &Asked) -> OpenAiResult<InferRequest> {
    let name = served.name();
    let (ask, sampling, stream): (Ask, Option<&Sampling>, bool) = match asked {
        Asked::Completion(r) => {
            let mut extras = r.extras.clone();
            if r.echo {
                extras.push("echo");
            }
            extras.extend(adapter::unsupported(&r.sampling));
            adapter::refuse(name, &extras)?;
            (Ask::Completion(one_prompt(name, &r.prompts)?), Some(&r.sampling), r.stream)
        }
        Asked::Chat(r) => {
            let mut extras = r.extras.clone();
            extras.extend(adapter::unsupported(&r.sampling));
            adapter::refuse(name, &extras)?;
            (Ask::Chat(&r.messages), Some(&r.sampling), r.stream)
        }
        Asked::Embedding(r) => (Ask::Embedding(&r.inputs), None, false),
    };
    adapter::request(served, adapter, ask, sampling, stream)
}

/// One call; `model` gets the model's name once the body is read, for the access line.
async fn answer(
    state: &HttpState,
    caller: &Requester,
    request: Request,
    route: Route,
    model: &mut String,
) -> OpenAiResult<Response> {
    let (parts, body) = request.into_parts();
    // The model is named in the body: the trace starts when it is known, with the time reading began.
    let receiving = crate::trace::now_ns();
    let (body, _reservation) = body::read(&parts.headers, body, state.max_input_size, &state.body_budget).await?;
    let asked = match route {
        Route::Completion => Asked::Completion(CompletionRequest::parse(&body)?),
        Route::Chat => Asked::Chat(ChatRequest::parse(&body)?),
        Route::Embedding => Asked::Embedding(EmbeddingRequest::parse(&body)?),
    };
    model.push_str(asked.model());
    let (served, reach) = servable(&state.frontend, caller.principal(), asked.model())?;
    let (stream, include_usage, max_tokens, shape) = match &asked {
        Asked::Completion(r) => {
            one_choice(&r.model, r.n)?;
            (r.stream, r.include_usage, r.sampling.max_tokens, Shape::Completion)
        }
        Asked::Chat(r) => {
            one_choice(&r.model, r.n)?;
            (r.stream, r.include_usage, r.sampling.max_tokens, Shape::Chat)
        }
        Asked::Embedding(_) => (false, false, None, Shape::Completion),
    };
    let (target, mut infer) = match &reach {
        Reach::Adapter(adapter) => (adapter, adapter_request(&served, adapter, &asked)?),
        Reach::Convention(convention) => (&served, convention_request(&served, *convention, &asked)?),
    };
    add_forwarded(&mut infer, &forwarded_headers(state, &parts.headers)?);
    // The adapter runs as the caller's tenant: its calls reach only what the tenant may call.
    infer.principal = caller.principal.clone();
    // The call's trace is the served model's; through an adapter, the adapter's request is its
    // child, and the adapter's calls of the model that child's.
    let trace = state.frontend.trace(served.name(), traceparent(&parts.headers));
    if let Some(trace) = &trace {
        trace.stamp_at(activity::HTTP_RECV_START, receiving);
    }
    stamp(&trace, activity::HTTP_RECV_END);
    infer.trace = match &reach {
        Reach::Adapter(_) => trace.as_ref().map(|root| {
            root.set_model(served.name(), served.version(), None);
            root.child()
        }),
        Reach::Convention(_) => trace.clone(),
    };
    let mut responses = state.frontend.infer_stream(target, infer).await?;
    let response = match &asked {
        Asked::Embedding(request) => {
            let mut last = None;
            while let Some(response) = responses.recv().await {
                last = Some(response?);
            }
            let last = last
                .ok_or_else(|| OpenAiError::from(crate::error::CoreError::internal("the adapter sent no embedding")))?;
            ok_json(&embeddings::answer(request, &last)?)
        }
        _ if stream => stream::events(Head::new(shape, asked.model(), max_tokens), responses, include_usage).await?,
        _ => ok_json(&stream::whole(Head::new(shape, asked.model(), max_tokens), responses).await?),
    };
    stamp(&trace, activity::HTTP_SEND_START);
    stamp(&trace, activity::HTTP_SEND_END);
    Ok(response)
}
