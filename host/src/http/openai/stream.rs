//! A completion's answer from the model's responses: whole (one JSON object, the responses' text
//! joined) or as server-sent events (one chunk per response, `finish_reason` on the last, an
//! optional `usage` chunk, then `data: [DONE]`).

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

/// What every chunk of one answer repeats.
pub struct Head {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    max_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl Head {
    pub fn new(prefix: &str, object: &'static str, model: &str, max_tokens: Option<u64>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let created = super::now();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let id = format!("{prefix}-{created:x}{nanos:08x}{:06x}", NEXT.fetch_add(1, Ordering::Relaxed) & 0xff_ffff);
        Self { id, object, created, model: model.to_string(), max_tokens, prompt_tokens: None, completion_tokens: None }
    }

    /// Takes the token counts a response reports (the last report wins).
    fn counted(&mut self, response: &InferResponse) {
        self.prompt_tokens = count(response, "num_input_tokens").or(self.prompt_tokens);
        self.completion_tokens = count(response, "num_output_tokens").or(self.completion_tokens);
    }

    /// `length` when the model produced the `max_tokens` it was allowed, else `stop`.
    fn finish_reason(&self) -> &'static str {
        match (self.max_tokens, self.completion_tokens) {
            (Some(max), Some(produced)) if produced >= max => "length",
            _ => "stop",
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

    fn object(&self, choices: Value) -> Value {
        let (id, object, created, model) = (&self.id, self.object, self.created, &self.model);
        json!({ "id": id, "object": object, "created": created, "model": model, "choices": choices })
    }
}

/// Every response, then one answer: the text joined, `usage` from the model's counts.
pub async fn completion_whole(mut head: Head, mut responses: TrackedStream) -> OpenAiResult<Value> {
    let mut joined = String::new();
    while let Some(response) = responses.recv().await {
        let response = response?;
        joined.push_str(&text(&response)?);
        head.counted(&response);
    }
    let choice = json!([{ "index": 0, "text": joined, "logprobs": null, "finish_reason": head.finish_reason() }]);
    let mut answer = head.object(choice);
    answer["usage"] = head.usage();
    Ok(answer)
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

const DONE: &str = "data: [DONE]\n\n";

struct Events {
    head: Head,
    responses: TrackedStream,
    include_usage: bool,
    /// A chunk with `finish_reason` was sent.
    finished: bool,
    over: bool,
}

impl Events {
    /// The next bytes to send; `None` after `[DONE]`.
    async fn next(&mut self) -> Option<Bytes> {
        if self.over {
            return None;
        }
        let Some(response) = self.responses.recv().await else {
            self.over = true;
            let mut tail = Vec::new();
            if !self.finished {
                // The model ended its stream with a bare final flag: the finish goes on its own.
                let choice =
                    json!([{ "index": 0, "text": "", "logprobs": null, "finish_reason": self.head.finish_reason() }]);
                tail.extend_from_slice(&event(&self.head.object(choice)));
            }
            if self.include_usage {
                let mut last = self.head.object(json!([]));
                last["usage"] = self.head.usage();
                tail.extend_from_slice(&event(&last));
            }
            tail.extend_from_slice(DONE.as_bytes());
            return Some(Bytes::from(tail));
        };
        let chunk = response.map_err(OpenAiError::from).and_then(|response| {
            self.head.counted(&response);
            let finish = response.is_final.then(|| self.head.finish_reason());
            self.finished |= finish.is_some();
            let choice = json!([{ "index": 0, "text": text(&response)?, "logprobs": null, "finish_reason": finish }]);
            let mut chunk = self.head.object(choice);
            if self.include_usage {
                chunk["usage"] = Value::Null;
            }
            Ok(chunk)
        });
        Some(match chunk {
            Ok(chunk) => event(&chunk),
            // The status was sent with the first byte: the error is the stream's last event.
            Err(error) => {
                self.over = true;
                let mut tail = event(&error.body()).to_vec();
                tail.extend_from_slice(DONE.as_bytes());
                Bytes::from(tail)
            }
        })
    }
}

/// Server-sent events, one chunk per response as it comes.
pub fn completion_events(head: Head, responses: TrackedStream, include_usage: bool) -> Response {
    let events = Events { head, responses, include_usage, finished: false, over: false };
    let body = futures_util::stream::unfold(events, |mut events| async move {
        let bytes = events.next().await?;
        Some((Ok::<_, std::convert::Infallible>(bytes), events))
    });
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
