//! `POST /v1/chat/completions` bodies, read field by field as [`super::schema`] reads completions.
//! Messages are kept as role and text: a content given as parts is its text parts joined with a
//! newline (as vLLM joins them); any other part (an image, audio) is refused by name.

use serde_json::{Map, Value};

use super::error::{OpenAiError, OpenAiResult};
use super::schema::{
    Sampling, boolean, include_usage, integer, known_fields, model, object, present, sampling, string, wrong_type,
};

/// One message: who said it, and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub sampling: Sampling,
    pub n: u64,
    pub stream: bool,
    pub include_usage: bool,
    /// Parameters given that no model here honours (tools, logprobs, ...), by name.
    pub extras: Vec<&'static str>,
}

const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "presence_penalty",
    "reasoning_effort",
    "response_format",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
];

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool", "function"];

/// At most this many messages in one call: a bound on what one body makes the server hold.
const MAX_MESSAGES: usize = 4096;

fn content(index: usize, value: Option<&Value>) -> OpenAiResult<String> {
    let param = format!("messages.[{index}].content");
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, part.get("text").and_then(Value::as_str)) {
                    ("text", Some(text)) => texts.push(text),
                    ("text", None) => return Err(wrong_type(&param, "text parts with a 'text' string")),
                    _ => {
                        return Err(OpenAiError::invalid(
                            format!("only text content parts are supported, not '{}'", super::schema::bounded(kind)),
                            Some(&param),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(wrong_type(&param, "a string or a list of content parts")),
    }
}

fn messages(object: &Map<String, Value>) -> OpenAiResult<Vec<Message>> {
    let items = match present(object, "messages") {
        None => return Err(OpenAiError::invalid("Missing required parameter: 'messages'.", Some("messages"))),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(wrong_type("messages", "a list of messages")),
    };
    if items.is_empty() {
        return Err(OpenAiError::invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            Some("messages"),
        ));
    }
    if items.len() > MAX_MESSAGES {
        return Err(OpenAiError::invalid(
            format!("{} messages given: at most {MAX_MESSAGES} are allowed.", items.len()),
            Some("messages"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let item = item.as_object().ok_or_else(|| wrong_type(&format!("messages.[{i}]"), "an object"))?;
            let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
            if !ROLES.contains(&role) {
                return Err(OpenAiError::invalid(
                    format!(
                        "Invalid value: '{}'. Supported values are: {}.",
                        super::schema::bounded(role),
                        ROLES.join(", ")
                    ),
                    Some(&format!("messages.[{i}].role")),
                ));
            }
            Ok(Message { role: role.to_string(), content: content(i, item.get("content"))? })
        })
        .collect()
}

/// The parameters given that a model here cannot honour.
fn extras(object: &Map<String, Value>) -> Vec<&'static str> {
    let mut extras = Vec::new();
    let non_empty = |v: &Value| match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Bool(b) => *b,
        Value::Null => false,
        _ => true,
    };
    for field in ["tools", "functions", "logit_bias", "logprobs", "top_logprobs", "function_call"] {
        if present(object, field).is_some_and(non_empty) {
            extras.push(field);
        }
    }
    if present(object, "tool_choice").is_some_and(|v| v.as_str() != Some("none")) {
        extras.push("tool_choice");
    }
    if present(object, "response_format").is_some_and(|v| v.get("type").and_then(Value::as_str) != Some("text")) {
        extras.push("response_format");
    }
    if present(object, "modalities").is_some_and(|v| v.as_array().is_none_or(|m| m.iter().any(|m| m != "text"))) {
        extras.push("modalities");
    }
    extras
}

impl ChatRequest {
    pub fn parse(body: &[u8]) -> OpenAiResult<Self> {
        let object = object(body)?;
        known_fields(&object, CHAT_FIELDS)?;
        let stream = boolean(&object, "stream")?;
        let mut sampling = sampling(&object)?;
        // `max_completion_tokens` replaces the deprecated `max_tokens`, which stays a fallback.
        if let Some(n) = integer(&object, "max_completion_tokens", 0)? {
            sampling.max_tokens = Some(n as u64);
        }
        let _user = string(&object, "user")?;
        Ok(Self {
            model: model(&object)?,
            messages: messages(&object)?,
            sampling,
            n: integer(&object, "n", 1)?.map_or(1, |n| n as u64),
            stream,
            include_usage: include_usage(&object, stream)?,
            extras: extras(&object),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> OpenAiResult<ChatRequest> {
        ChatRequest::parse(body.as_bytes())
    }

    #[test]
    fn a_chat_reads_messages_and_their_text_parts() {
        let request = parse(
            r#"{"model": "m", "messages": [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                "max_tokens": 3, "max_completion_tokens": 5, "stream": true,
                "stream_options": {"include_usage": true}, "tool_choice": "none"}"#,
        )
        .expect("parses");
        assert_eq!(request.messages[1], Message { role: "user".into(), content: "a\nb".into() });
        assert_eq!(request.sampling.max_tokens, Some(5), "max_completion_tokens wins");
        assert!(request.stream && request.include_usage && request.extras.is_empty());
    }

    #[test]
    fn each_refusal_names_its_field() {
        let cases = [
            (r#"{"model": "m"}"#, "'messages'"),
            (r#"{"model": "m", "messages": []}"#, "empty array"),
            (r#"{"model": "m", "messages": [{"role": "robot", "content": "x"}]}"#, "Supported values"),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                "only text content parts",
            ),
            (r#"{"model": "m", "messages": [{"role": "user", "content": 3}]}"#, "messages.[0].content"),
            (r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "nope": 1}"#, "Unrecognized"),
        ];
        for (body, expected) in cases {
            let error = parse(body).expect_err(body);
            assert_eq!(error.status, 400, "{body}");
            assert!(error.message.contains(expected) || error.param.as_deref() == Some("messages.[0].content"));
        }
    }

    #[test]
    fn tools_and_logprobs_are_kept_by_name() {
        let request = parse(
            r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
                "tools": [{"type": "function"}], "response_format": {"type": "json_object"}}"#,
        )
        .expect("parses");
        assert_eq!(request.extras, vec!["tools", "logprobs", "response_format"]);
    }
}
