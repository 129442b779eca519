//! Chat templates, rendered as `transformers`' `apply_chat_template` renders them: Jinja with
//! `trim_blocks` and `lstrip_blocks`, the template's `raise_exception`, Python's string methods
//! (`.strip()`, `.startswith()`, ...), and the tokenizer config's special tokens as variables.

use minijinja::{Environment, Error as JinjaError, ErrorKind, Value, context};
use serde_json::Value as Json;
use tessera_guest::Error;

use crate::protocol::Call;

pub struct Template {
    env: Environment<'static>,
    /// The tokenizer config's special tokens (`bos_token`, `eos_token`, ...), as the template sees them.
    tokens: Vec<(String, String)>,
}

/// A special token of the tokenizer config: a string, or an added token's `{"content": ...}`.
pub fn special_token(config: &Json, key: &str) -> Option<String> {
    match config.get(key)? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

impl Template {
    /// The config's `chat_template`, if it has one (a model without one takes completions only).
    pub fn from_config(config: &Json) -> Result<Option<Template>, Error> {
        let Some(source) = config.get("chat_template").and_then(Json::as_str) else { return Ok(None) };
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::invalid_arg(format!("tokenizer_config.json: chat_template: {e}")))?;
        let tokens = ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]
            .iter()
            .filter_map(|key| special_token(config, key).map(|v| (key.to_string(), v)))
            .collect();
        Ok(Some(Template { env, tokens }))
    }
}

/// The prompt for a chat call: the messages through the template, with the generation prompt.
pub fn render(template: Option<&Template>, call: &Call) -> Result<String, Error> {
    let template = template.ok_or_else(|| {
        Error::invalid_arg(format!(
            "model '{}' has no chat template (its tokenizer_config.json has no chat_template): use /v1/completions",
            call.model
        ))
    })?;
    let messages: Vec<Value> =
        call.messages.iter().map(|m| context! { role => m.role.clone(), content => m.content.clone() }).collect();
    let mut vars: std::collections::BTreeMap<String, Value> =
        template.tokens.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect();
    vars.insert("messages".into(), Value::from(messages));
    vars.insert("add_generation_prompt".into(), Value::from(true));
    let chat = template.env.get_template("chat").map_err(|e| Error::internal(e.to_string()))?;
    chat.render(Value::from(vars)).map_err(|e| {
        let message = if e.kind() == ErrorKind::InvalidOperation {
            e.detail().unwrap_or("the chat template refused the messages").to_string()
        } else {
            format!("the chat template failed: {e}")
        };
        Error::invalid_arg(message)
    })
}
