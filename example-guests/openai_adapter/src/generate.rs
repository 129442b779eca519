//! The generation loop: the prompt's tokens, then one BLS call of the model per new token, the
//! text decoded incrementally, stop strings and the end-of-sequence token ending it.
//!
//! Streaming sends the text each token adds, holding back what could still become a stop string
//! or an incomplete UTF-8 character, so a client never sees part of a stop string. A caller that
//! goes away ends the loop at the next token (the send fails, or `is_cancelled`).

use tessera_guest::{Error, Request, ResponseSender, Tensor, TensorsExt, infer};

use crate::Adapter;
use crate::protocol::{Call, Kind, Text};
use crate::sampling::{Rng, pick};

/// `/v1/completions`' default `max_tokens` (OpenAI's); a chat call runs to the context's end.
const COMPLETION_MAX_TOKENS: u32 = 16;

/// The context check: OpenAI's message, naming both counts.
pub fn check_context(call: &Call, prompt: usize, completion: Option<u32>) -> Result<(), Error> {
    let Some(context) = call.context_length else { return Ok(()) };
    let requested = prompt + completion.unwrap_or(0) as usize;
    if requested <= context as usize && prompt < context as usize {
        return Ok(());
    }
    let what = if call.kind == Kind::Chat { "messages" } else { "prompt" };
    Err(Error::invalid_arg(match completion {
        Some(n) => format!(
            "This model's maximum context length is {context} tokens. However, you requested {requested} tokens \
             ({prompt} in the {what}, {n} in the completion). Please reduce the length of the {what} or completion."
        ),
        None => format!(
            "This model's maximum context length is {context} tokens. However, your {what} resulted in {prompt} \
             tokens. Please reduce the length of the {what}."
        ),
    }))
}

fn tensor1(name: &str, text: &str) -> Result<Tensor, Error> {
    Tensor::from_strings(name, &[1], &[text])
}

/// Where the text that is safe to send ends: before a trailing incomplete character and before
/// any tail that begins a stop string.
fn safe_end(text: &str, stop: &[String]) -> usize {
    let mut end = text.len();
    if text.ends_with('\u{FFFD}') {
        end -= '\u{FFFD}'.len_utf8();
    }
    // The longest start of a stop string that the text ends with (a `str`, so a char boundary).
    let mut hold = 0;
    for s in stop {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                hold = hold.max(i);
            }
        }
    }
    end.min(text.len() - hold)
}

pub fn run(
    adapter: &Adapter,
    call: &Call,
    chat_prompt: &str,
    request: &Request,
    sender: &ResponseSender,
) -> Result<(), Error> {
    let prompt: Vec<u32> = match (call.kind, &call.prompt) {
        (Kind::Chat, _) => encode(adapter, chat_prompt)?,
        (_, Some(Text::Text(text))) => encode(adapter, text)?,
        (_, Some(Text::Tokens(ids))) => ids.clone(),
        (_, None) => return Err(Error::invalid_arg("a completion needs a prompt")),
    };
    crate::known_ids(&adapter.tokenizer, &prompt)?;
    let max_tokens = match (call.max_tokens, call.kind) {
        (Some(n), _) => Some(n),
        (None, Kind::Completion) => Some(COMPLETION_MAX_TOKENS),
        (None, _) => None,
    };
    check_context(call, prompt.len(), call.max_tokens)?;
    let limit = match (max_tokens, call.context_length) {
        (Some(n), Some(c)) => n.min(c.saturating_sub(prompt.len() as u32)),
        (Some(n), None) => n,
        (None, Some(c)) => c.saturating_sub(prompt.len() as u32),
        (None, None) => 4096,
    };
    let temperature = call.temperature.unwrap_or(1.0);
    let top_p = call.top_p.unwrap_or(1.0);
    let mut rng = call.seed.map_or_else(Rng::unseeded, |s| Rng::new(s as u64));

    let mut ids: Vec<i64> = prompt.iter().map(|&t| i64::from(t)).collect();
    let mut generated: Vec<u32> = Vec::new();
    let mut sent = 0; // bytes of the text sent so far
    let mut text = String::new();
    let mut finish = "length";
    while (generated.len() as u32) < limit {
        if request.is_cancelled() {
            gone(request, generated.len());
            return Ok(());
        }
        let input = Tensor::from_i64("input_ids", &[1, ids.len() as i64], &ids)?;
        let logits = infer(&call.model, &[&input], &["logits"])?.take_named("logits")?.as_f32()?;
        let token = pick(&logits, temperature, top_p, &mut rng) as u32;
        generated.push(token);
        if adapter.eos.contains(&token) {
            finish = "stop";
            break;
        }
        ids.push(i64::from(token));
        text = adapter.tokenizer.decode(&generated, true).map_err(|e| Error::internal(e.to_string()))?;
        if let Some(at) = call.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            text.truncate(at);
            finish = "stop";
            break;
        }
        if call.stream {
            let end = safe_end(&text, &call.stop);
            if end > sent {
                let chunk = response(&text[sent..end], "", prompt.len(), generated.len())?;
                if let Err(e) = sender.send(chunk, false) {
                    if sender.is_cancelled() {
                        gone(request, generated.len());
                        return Ok(());
                    }
                    return Err(e);
                }
                sent = end;
            }
        }
    }
    let rest = if call.stream { text.get(sent..).unwrap_or_default() } else { &text };
    sender.send(response(rest, finish, prompt.len(), generated.len())?, true)
}

/// One response: every output, as a model's every response holds them; `finish` is empty until
/// the last, and the counts are those so far.
fn response(text: &str, finish: &str, prompt: usize, generated: usize) -> Result<Vec<Tensor>, Error> {
    Ok(vec![
        tensor1("text_output", text)?,
        tensor1("finish_reason", finish)?,
        Tensor::from_i32("num_input_tokens", &[1], &[prompt as i32])?,
        Tensor::from_i32("num_output_tokens", &[1], &[generated as i32])?,
    ])
}

/// The caller has gone: the generation stops here, and says so.
fn gone(request: &Request, tokens: usize) {
    tessera_guest::info!("request {}: its caller has gone; stopped after {tokens} tokens", request.id());
}

fn encode(adapter: &Adapter, text: &str) -> Result<Vec<u32>, Error> {
    let encoding = adapter.tokenizer.encode(text, false).map_err(|e| Error::invalid_arg(format!("tokenizing: {e}")))?;
    Ok(encoding.get_ids().to_vec())
}
