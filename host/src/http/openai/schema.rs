//! The `/v1` request bodies, read field by field so that each refusal names its field as OpenAI
//! does: an unknown field is "Unrecognized request argument supplied", a value of the wrong type
//! or out of range names the parameter.

use serde_json::{Map, Value};

use super::error::{OpenAiError, OpenAiResult};

/// What a completion's text is generated from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

/// The sampling parameters common to completions and chat.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sampling {
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Vec<String>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub model: String,
    /// One prompt per choice list; OpenAI's `prompt` may be a list of them.
    pub prompts: Vec<Prompt>,
    pub sampling: Sampling,
    pub n: u64,
    pub stream: bool,
    pub include_usage: bool,
    pub echo: bool,
    /// Parameters given that a model may be unable to honour, by name (`best_of`, `logprobs`,
    /// `logit_bias`, `suffix`): the model's path refuses those it cannot.
    pub extras: Vec<&'static str>,
}

const COMPLETION_FIELDS: &[&str] = &[
    "model",
    "prompt",
    "best_of",
    "echo",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "suffix",
    "temperature",
    "top_p",
    "user",
];

/// The body as a JSON object, in OpenAI's words when it is not one.
pub fn object(body: &[u8]) -> OpenAiResult<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(OpenAiError::invalid("The request body must be a JSON object.", None)),
        Err(e) => Err(OpenAiError::invalid(
            format!(
                "We could not parse the JSON body of your request ({e}). (HINT: This likely means you aren't using \
                 your HTTP library correctly. The OpenAI API expects a JSON payload.)"
            ),
            None,
        )),
    }
}

pub(super) fn known_fields(object: &Map<String, Value>, known: &[&str]) -> OpenAiResult<()> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        // The name is the caller's own text: bounded, as every echo of it is.
        Some(key) => {
            Err(OpenAiError::invalid(format!("Unrecognized request argument supplied: {}", bounded(key)), None))
        }
        None => Ok(()),
    }
}

/// At most 64 characters of a caller's string, for a message.
pub fn bounded(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

pub(super) fn wrong_type(field: &str, expected: &str) -> OpenAiError {
    OpenAiError::invalid(format!("Invalid type for '{field}': expected {expected}."), Some(field))
}

pub(super) fn present<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    object.get(field).filter(|v| !v.is_null())
}

pub(super) fn number(object: &Map<String, Value>, field: &str, range: (f64, f64)) -> OpenAiResult<Option<f64>> {
    let Some(value) = present(object, field) else { return Ok(None) };
    let n = value.as_f64().ok_or_else(|| wrong_type(field, "a number"))?;
    if n < range.0 || n > range.1 {
        return Err(OpenAiError::invalid(
            format!("{n} is out of range for '{field}': it must be between {} and {}.", range.0, range.1),
            Some(field),
        ));
    }
    Ok(Some(n))
}

pub(super) fn integer(object: &Map<String, Value>, field: &str, min: i64) -> OpenAiResult<Option<i64>> {
    let Some(value) = present(object, field) else { return Ok(None) };
    let n = value.as_i64().ok_or_else(|| wrong_type(field, "an integer"))?;
    if n < min {
        return Err(OpenAiError::invalid(format!("{n} is less than the minimum of {min} - '{field}'"), Some(field)));
    }
    Ok(Some(n))
}

pub(super) fn boolean(object: &Map<String, Value>, field: &str) -> OpenAiResult<bool> {
    match present(object, field) {
        None => Ok(false),
        Some(value) => value.as_bool().ok_or_else(|| wrong_type(field, "a boolean")),
    }
}

pub(super) fn string<'a>(object: &'a Map<String, Value>, field: &str) -> OpenAiResult<Option<&'a str>> {
    match present(object, field) {
        None => Ok(None),
        Some(value) => value.as_str().map(Some).ok_or_else(|| wrong_type(field, "a string")),
    }
}

pub(super) fn model(object: &Map<String, Value>) -> OpenAiResult<String> {
    match string(object, "model")? {
        Some(model) if !model.is_empty() => Ok(model.to_string()),
        _ => Err(OpenAiError::invalid("you must provide a model parameter", Some("model"))),
    }
}

/// `stop`: a string or a list of at most 4.
pub(super) fn stop(object: &Map<String, Value>) -> OpenAiResult<Vec<String>> {
    let stops = match present(object, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str().map(str::to_owned).ok_or_else(|| wrong_type("stop", "a string or a list of strings"))
            })
            .collect::<OpenAiResult<_>>()?,
        Some(_) => return Err(wrong_type("stop", "a string or a list of strings")),
    };
    if stops.len() > 4 {
        return Err(OpenAiError::invalid(
            format!("{} stop sequences given: at most 4 are allowed.", stops.len()),
            Some("stop"),
        ));
    }
    Ok(stops)
}

pub(super) fn sampling(object: &Map<String, Value>) -> OpenAiResult<Sampling> {
    Ok(Sampling {
        max_tokens: integer(object, "max_tokens", 0)?.map(|n| n as u64),
        temperature: number(object, "temperature", (0.0, 2.0))?,
        top_p: number(object, "top_p", (0.0, 1.0))?,
        seed: integer(object, "seed", i64::MIN)?,
        stop: stop(object)?,
        frequency_penalty: number(object, "frequency_penalty", (-2.0, 2.0))?,
        presence_penalty: number(object, "presence_penalty", (-2.0, 2.0))?,
    })
}

/// `stream_options` (only with `stream`): whether a last chunk carries `usage`.
pub(super) fn include_usage(object: &Map<String, Value>, stream: bool) -> OpenAiResult<bool> {
    let Some(options) = present(object, "stream_options") else { return Ok(false) };
    if !stream {
        return Err(OpenAiError::invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            Some("stream_options"),
        ));
    }
    let options = options.as_object().ok_or_else(|| wrong_type("stream_options", "an object"))?;
    known_fields(options, &["include_usage"])?;
    boolean(options, "include_usage")
}

pub(super) fn token_list(items: &[Value]) -> Option<Vec<u32>> {
    items.iter().map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok())).collect()
}

/// `prompt`: a string, a list of strings, a list of tokens, or a list of token lists.
fn prompts(object: &Map<String, Value>) -> OpenAiResult<Vec<Prompt>> {
    let expected = "a string, a list of strings, a list of tokens or a list of token lists";
    let prompts = match present(object, "prompt") {
        None => return Err(OpenAiError::invalid("Missing required parameter: 'prompt'.", Some("prompt"))),
        Some(Value::String(text)) => vec![Prompt::Text(text.clone())],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) && !items.is_empty() => {
            items.iter().filter_map(Value::as_str).map(|s| Prompt::Text(s.to_string())).collect()
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_array) && !items.is_empty() => items
            .iter()
            .map(|item| {
                let tokens =
                    item.as_array().and_then(|t| token_list(t)).ok_or_else(|| wrong_type("prompt", expected))?;
                Ok(Prompt::Tokens(tokens))
            })
            .collect::<OpenAiResult<_>>()?,
        Some(Value::Array(items)) => {
            vec![Prompt::Tokens(token_list(items).ok_or_else(|| wrong_type("prompt", expected))?)]
        }
        Some(_) => return Err(wrong_type("prompt", expected)),
    };
    Ok(prompts)
}

impl CompletionRequest {
    pub fn parse(body: &[u8]) -> OpenAiResult<Self> {
        let object = object(body)?;
        known_fields(&object, COMPLETION_FIELDS)?;
        let stream = boolean(&object, "stream")?;
        let mut extras = Vec::new();
        for (field, default) in [("best_of", Value::from(1)), ("logprobs", Value::from(0)), ("suffix", Value::from(""))]
        {
            if present(&object, field).is_some_and(|v| *v != default) {
                extras.push(field);
            }
        }
        if present(&object, "logit_bias").is_some_and(|v| v.as_object().is_none_or(|m| !m.is_empty())) {
            extras.push("logit_bias");
        }
        let _user = string(&object, "user")?;
        Ok(Self {
            model: model(&object)?,
            prompts: prompts(&object)?,
            sampling: sampling(&object)?,
            n: integer(&object, "n", 1)?.map_or(1, |n| n as u64),
            stream,
            include_usage: include_usage(&object, stream)?,
            echo: boolean(&object, "echo")?,
            extras,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> OpenAiResult<CompletionRequest> {
        CompletionRequest::parse(body.as_bytes())
    }

    #[test]
    fn a_completion_reads_every_field_it_names() {
        let request = parse(
            r#"{"model": "m", "prompt": "hi", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 7,
                "stop": "\n", "stream": true, "stream_options": {"include_usage": true}, "user": "u"}"#,
        )
        .expect("parses");
        assert_eq!(request.model, "m");
        assert_eq!(request.prompts, vec![Prompt::Text("hi".into())]);
        assert_eq!(request.sampling.max_tokens, Some(5));
        assert_eq!(request.sampling.stop, vec!["\n".to_string()]);
        assert!(request.stream && request.include_usage && request.extras.is_empty());
        let tokens = parse(r#"{"model": "m", "prompt": [[1, 2], [3]]}"#).expect("token lists");
        assert_eq!(tokens.prompts, vec![Prompt::Tokens(vec![1, 2]), Prompt::Tokens(vec![3])]);
    }

    #[test]
    fn each_refusal_names_its_field_in_openai_words() {
        let cases = [
            (r#"{"model": "m", "prompt": "x", "frobnicate": 1}"#, "Unrecognized request argument supplied: frobnicate"),
            (r#"{"model": "m", "prompt": "x", "temperature": 3}"#, "'temperature'"),
            (r#"{"model": "m", "prompt": "x", "max_tokens": "many"}"#, "'max_tokens'"),
            (r#"{"model": "m", "prompt": "x", "stream_options": {"include_usage": true}}"#, "'stream'"),
            (r#"{"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}"#, "at most 4"),
            (r#"{"prompt": "x"}"#, "you must provide a model parameter"),
            (r#"{"model": "m"}"#, "'prompt'"),
            (r#"{"model": "m", "prompt": [1, "a"]}"#, "'prompt'"),
            (r#"{"model": "m", "prompt": "x", "n": 0}"#, "'n'"),
            (r#"{"model": "#, "could not parse the JSON body"),
            ("[1]", "must be a JSON object"),
        ];
        for (body, expected) in cases {
            let error = parse(body).expect_err(body);
            assert_eq!(error.status, 400, "{body}");
            assert!(error.message.contains(expected), "{body}: {}", error.message);
        }
    }

    #[test]
    fn parameters_a_model_may_not_honour_are_kept_by_name() {
        let request = parse(r#"{"model": "m", "prompt": "x", "best_of": 2, "logprobs": 0, "logit_bias": {"1": 2}}"#)
            .expect("parses");
        assert_eq!(request.extras, vec!["best_of", "logit_bias"]);
    }

    #[test]
    fn a_long_unknown_field_is_not_echoed_whole() {
        let body = format!(r#"{{"model": "m", "prompt": "x", "{}": 1}}"#, "k".repeat(10_000));
        let error = parse(&body).expect_err("unknown");
        assert!(error.message.len() < 200, "{}", error.message.len());
    }
}
