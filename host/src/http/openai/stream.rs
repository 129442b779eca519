//! A completion's or chat's answer from the model's responses: whole (one JSON object, the
//! responses' text joined) or as server-sent events (a chat's first chunk gives the role; one
//! chunk per response, `finish_reason` on the last, an optional `usage` chunk, then
//! `data: [DONE]`). The events start only once the first response is in: an error the model
//! answers at once (a prompt too long) is then an ordinary error with its status.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use super::convention::{count, text};
use super::error::{OpenAiError, OpenAiResult};
use crate::infer::InferResponse;
use crate::lifecycle::TrackedStream;

/// Which answer: a completion's choices hold `text`, a chat's a `message` (whole) or a `delta`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Completion,
    Chat,
}

/// What every chunk of one answer repeats.
pub struct Head {
    shape: Shape,
    id: String,
    created: u64,
    model: String,
    max_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    /// The reason the model gave (an adapter's `finish_reason`), if it gave one.
    reason: Option<String>,
}

impl Head {
    pub fn new(shape: Shape, model: &str, max_tokens: Option<u64>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let created = super::now();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let prefix = if shape == Shape::Chat { "chatcmpl" } else { "cmpl" };
        let id = format!("{prefix}-{created:x}{nanos:08x}{:06x}", NEXT.fetch_add(1, Ordering::Relaxed) & 0xff_ffff);
        let model = model.to_string();
        Self { shape, id, created, model, max_tokens, prompt_tokens: None, completion_tokens: None, reason: None }
    }

    /// Takes the token counts a response reports (the last report wins).
    fn counted(&mut self, response: &InferResponse) {
        self.prompt_tokens = count(response, "num_input_tokens").or(self.prompt_tokens);
        self.completion_tokens = count(response, "num_output_tokens").or(self.completion_tokens);
        if let Some(reason) = reason(response) {
            self.reason = Some(reason);
        }
    }

    /// The model's own reason if it gave one; else `length` when it produced the `max_tokens` it
    /// was allowed, else `stop`.
    fn finish_reason(&self) -> String {
        if let Some(reason) = &self.reason {
            return reason.clone();
        }
        match (self.max_tokens, self.completion_tokens) {
            (Some(max), Some(produced)) if produced >= max => "length".into(),
            _ => "stop".into(),
        }
    }

    /// One choice: whole, or a chunk's.
    fn choice(&self, text: &str, finish: Option<String>, whole: bool) -> Value {
        match (self.shape, whole) {
            (Shape::Completion, _) => json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish }),
            (Shape::Chat, true) => json!({
                "index": 0, "message": { "role": "assistant", "content": text },
                "logprobs": null, "finish_reason": finish,
            }),
            (Shape::Chat, false) if text.is_empty() && finish.is_some() => {
                json!({ "index": 0, "delta": {}, "logprobs": null, "finish_reason": finish })
            }
            (Shape::Chat, false) => {
                json!({ "index": 0, "delta": { "content": text }, "logprobs": null, "finish_reason": finish })
            }
        }
    }

    /// `usage`, or null when the model reports no counts.
    fn usage(&self) -> Value {
        match (self.prompt_tokens, self.completion_tokens) {
            (Some(prompt), Some(completion)) => json!({
                "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            }),
            _ => Value::Null,
        }
    }

    /// The answer object (`chunk`: one event's) around `choices`.
    fn object(&self, choices: Value, chunk: bool) -> Value {
        let object = match (self.shape, chunk) {
            (Shape::Completion, _) => "text_completion",
            (Shape::Chat, false) => "chat.completion",
            (Shape::Chat, true) => "chat.completion.chunk",
        };
        let (id, created, model) = (&self.id, self.created, &self.model);
        json!({ "id": id, "object": object, "created": created, "model": model, "choices": choices })
    }
}

/// The `finish_reason` a response gives (an adapter's BYTES `finish_reason`), if any.
fn reason(response: &InferResponse) -> Option<String> {
    let output = response.outputs.iter().find(|t| t.name == "finish_reason")?;
    let element = crate::tensor::bytes_elements(&output.data).next()?;
    let reason = std::str::from_utf8(element).ok()?;
    // Only OpenAI's own words reach the client.
    ["stop", "length", "content_filter"].contains(&reason).then(|| reason.to_string())
}

/// Every response, then one answer: the text joined, `usage` from the model's counts.
pub async fn whole(mut head: Head, mut responses: TrackedStream) -> OpenAiResult<Value> {
    let mut joined = String::new();
    while let Some(response) = responses.recv().await {
        let response = response?;
        joined.push_str(&text(&response)?);
        head.counted(&response);
    }
    let finish = Some(head.finish_reason());
    let mut answer = head.object(json!([head.choice(&joined, finish, true)]), false);
    answer["usage"] = head.usage();
    Ok(answer)
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

const DONE: &str = "data: [DONE]\n\n";

struct Events {
    head: Head,
    /// The first response, taken before the events began.
    first: Option<InferResponse>,
    responses: TrackedStream,
    include_usage: bool,
    /// A chunk with `finish_reason` was sent.
    finished: bool,
    over: bool,
}

impl Events {
    /// One chunk's event around `choices` (`usage: null` in it when a usage chunk comes last).
    fn chunk_event(&self, choices: Value) -> Bytes {
        let mut chunk = self.head.object(choices, true);
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        event(&chunk)
    }

    fn chunk(&mut self, response: &InferResponse) -> OpenAiResult<Bytes> {
        self.head.counted(response);
        let finish = response.is_final.then(|| self.head.finish_reason());
        self.finished |= finish.is_some();
        Ok(self.chunk_event(json!([self.head.choice(&text(response)?, finish, false)])))
    }

    /// The next bytes to send; `None` after `[DONE]`.
    async fn next(&mut self) -> Option<Bytes> {
        if self.over {
            return None;
        }
        let response = match self.first.take() {
            Some(first) => {
                let mut bytes = Vec::new();
                if self.head.shape == Shape::Chat {
                    let role = json!([{ "index": 0, "delta": { "role": "assistant", "content": "" },
                        "logprobs": null, "finish_reason": null }]);
                    bytes.extend_from_slice(&self.chunk_event(role));
                }
                return Some(match self.chunk(&first) {
                    Ok(chunk) => {
                        bytes.extend_from_slice(&chunk);
                        Bytes::from(bytes)
                    }
                    Err(error) => self.fail(error),
                });
            }
            None => self.responses.recv().await,
        };
        let Some(response) = response else {
            self.over = true;
            let mut tail = Vec::new();
            if !self.finished {
                // The model ended its stream with a bare final flag: the finish goes on its own.
                let finish = Some(self.head.finish_reason());
                let choice = json!([self.head.choice("", finish, false)]);
                tail.extend_from_slice(&event(&self.head.object(choice, true)));
            }
            if self.include_usage {
                let mut last = self.head.object(json!([]), true);
                last["usage"] = self.head.usage();
                tail.extend_from_slice(&event(&last));
            }
            tail.extend_from_slice(DONE.as_bytes());
            return Some(Bytes::from(tail));
        };
        Some(match response.map_err(OpenAiError::from).and_then(|r| self.chunk(&r)) {
            Ok(chunk) => chunk,
            Err(error) => self.fail(error),
        })
    }

    /// The status was sent with the first byte: the error is the stream's last event.
    fn fail(&mut self, error: OpenAiError) -> Bytes {
        self.over = true;
        let mut tail = event(&error.body()).to_vec();
        tail.extend_from_slice(DONE.as_bytes());
        Bytes::from(tail)
    }
}

/// Server-sent events, one chunk per response as it comes, once the first has come: an error
/// before it is the call's answer, with its status.
pub async fn events(head: Head, mut responses: TrackedStream, include_usage: bool) -> OpenAiResult<Response> {
    let first = match responses.recv().await {
        Some(first) => Some(first?),
        None => None,
    };
    let events = Events { head, first, responses, include_usage, finished: false, over: false };
    let body = futures_util::stream::unfold(events, |mut events| async move {
        let bytes = events.next().await?;
        Some((Ok::<_, std::convert::Infallible>(bytes), events))
    });
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
