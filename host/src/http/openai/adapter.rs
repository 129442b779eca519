//! Models served through an adapter: a Tessera model (a sandboxed guest) that the served model's
//! config names in its `openai_adapter` parameter, which turns one OpenAI call into the model's
//! tensors and back (tokenizer, chat template, generation loop, pooling). The door sends it the
//! call as JSON in its `request` input and reads what it sends back: `text_output` deltas, then
//! `finish_reason` and the token counts; or `embedding`. docs/openai.md has the protocol.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::chat::Message;
use super::error::{OpenAiError, OpenAiResult};
use super::schema::{Prompt, Sampling};
use crate::frontend::{Frontend, ServedModel};
use crate::infer::InferRequest;
use crate::tensor::{DataType, Tensor, push_bytes_element};

/// The parameter of a served model's config that names its adapter.
pub const ADAPTER_PARAMETER: &str = "openai_adapter";
/// The parameter of a served model's config that gives its context length in tokens.
pub const CONTEXT_PARAMETER: &str = "context_length";

/// The adapter `model`'s config names, if it names one.
pub fn named(model: &ServedModel) -> Option<&str> {
    let name = model.config().parameters.get(ADAPTER_PARAMETER)?.string_value.trim();
    (!name.is_empty()).then_some(name)
}

/// The ready adapter of `model`, or why there is none.
pub fn of(frontend: &Frontend, model: &ServedModel, name: &str) -> OpenAiResult<ServedModel> {
    frontend.model(name, None).map_err(|_| {
        OpenAiError::model_not_found(
            model.name(),
            &format!("its adapter '{name}' (parameter openai_adapter) is not ready"),
        )
    })
}

/// What a call asks the adapter for.
pub enum Ask<'a> {
    Chat(&'a [Message]),
    Completion(&'a Prompt),
    Embedding(&'a [Prompt]),
}

fn text_value(prompt: &Prompt) -> Value {
    match prompt {
        Prompt::Text(text) => Value::from(text.as_str()),
        Prompt::Tokens(tokens) => json!(tokens),
    }
}

/// The `request` input of one call to `adapter` for `model`.
pub fn request(
    model: &ServedModel,
    adapter: &ServedModel,
    ask: Ask,
    sampling: Option<&Sampling>,
    stream: bool,
) -> OpenAiResult<InferRequest> {
    let mut call = Map::new();
    let kind = match ask {
        Ask::Chat(messages) => {
            let messages: Vec<Value> =
                messages.iter().map(|m| json!({ "role": m.role, "content": m.content })).collect();
            call.insert("messages".into(), Value::from(messages));
            "chat"
        }
        Ask::Completion(prompt) => {
            call.insert("prompt".into(), text_value(prompt));
            "completion"
        }
        Ask::Embedding(inputs) => {
            call.insert("input".into(), Value::from(inputs.iter().map(text_value).collect::<Vec<_>>()));
            "embedding"
        }
    };
    call.insert("kind".into(), Value::from(kind));
    call.insert("model".into(), Value::from(model.name()));
    if let Some(context) = context_length(model)? {
        call.insert("context_length".into(), Value::from(context));
    }
    if let Some(sampling) = sampling {
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                call.insert(key.to_string(), value);
            }
        };
        put("max_tokens", sampling.max_tokens.map(|n| Value::from(n.min(u64::from(u32::MAX)))));
        put("temperature", sampling.temperature.map(Value::from));
        put("top_p", sampling.top_p.map(Value::from));
        put("seed", sampling.seed.map(Value::from));
        put("stop", (!sampling.stop.is_empty()).then(|| json!(sampling.stop)));
    }
    call.insert("stream".into(), Value::from(stream));
    let mut data = Vec::new();
    push_bytes_element(&mut data, Value::Object(call).to_string().as_bytes())?;
    let shape = if adapter.max_batch_size() > 0 { vec![1, 1] } else { vec![1] };
    Ok(InferRequest {
        model_name: adapter.name().to_string(),
        model_version: Some(adapter.version()),
        inputs: vec![Tensor::unchecked("request", DataType::Bytes, shape, Bytes::from(data))],
        ..Default::default()
    })
}

/// The model's `context_length` parameter: a positive integer, or none.
fn context_length(model: &ServedModel) -> OpenAiResult<Option<u64>> {
    crate::config::positive_parameter(model.config(), CONTEXT_PARAMETER)
        .map_err(|e| OpenAiError::from(crate::error::CoreError::internal(format!("model '{}': {e}", model.name()))))
}

/// Refuses what an adapter cannot take: the parameters of the adapter protocol are the ones
/// above; penalties, echo and the rest are named.
pub fn refuse(model: &str, given: &[&str]) -> OpenAiResult<()> {
    match given.first() {
        None => Ok(()),
        Some(param) => Err(OpenAiError::invalid(
            format!("model '{model}' cannot honour '{param}': its adapter takes no such parameter"),
            Some(param),
        )),
    }
}

/// The sampling parameters an adapter has no way to take, if given.
pub fn unsupported(sampling: &Sampling) -> Vec<&'static str> {
    let mut given = Vec::new();
    if sampling.frequency_penalty.is_some_and(|p| p != 0.0) {
        given.push("frequency_penalty");
    }
    if sampling.presence_penalty.is_some_and(|p| p != 0.0) {
        given.push("presence_penalty");
    }
    given
}
