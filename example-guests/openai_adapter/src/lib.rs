//! Tessera's OpenAI adapter: the sandboxed pre- and post-processing behind `/v1` for one model
//! (docs/openai.md, "Adapters"). A decoupled Tessera model that the served model's config names
//! (`openai_adapter`); the HTTP door sends it one request per `/v1` call and streams what it sends.
//!
//! Its version directory holds the served model's `tokenizer.json` (Hugging Face tokenizers) and
//! `tokenizer_config.json` (its `chat_template`, special tokens), read at `initialize` under the
//! `filesystem = read-only` grant. Its config's `task` parameter says what the model does:
//! - `generate`: chat templates rendered as `transformers`' `apply_chat_template` renders them
//!   ([`chat`]), then a generation loop over the model through BLS ([`generate`]): `input_ids`
//!   INT64 `[1, T]` in, `logits` FP32 `[1, V]` (the last position's) out;
//! - `embed`: the model through BLS ([`embed`]): `input_ids`, `attention_mask`, `token_type_ids`
//!   INT64 `[N, T]` in, `last_hidden_state` FP32 `[N, T, D]` out, then mean pooling over the
//!   attention mask and L2 normalisation (sentence-transformers' `Pooling` + `Normalize`).
//!
//! The protocol with the door: input `request` (BYTES `[1]`, the JSON of [`protocol::Call`]);
//! responses with `text_output` (BYTES `[1]`, the text since the last response),
//! `finish_reason` (BYTES `[1]`: empty until the last response) and `num_input_tokens` /
//! `num_output_tokens` (INT32 `[1]`, the counts so far); or one response with `embedding`
//! (FP32 `[N, D]`) and `num_input_tokens`. Errors it sends are
//! the call's: `invalid-arg` for what the caller asked wrong (the door answers 400).

mod chat;
mod embed;
mod generate;
mod protocol;
mod sampling;
mod threads;

use tessera_guest::{Error, InitializeArgs, Model, ModelConfig, Request, ResponseSender, Tensor, export_model};
use tokenizers::Tokenizer;

use self::chat::Template;
use self::protocol::{Call, Kind};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Task {
    Generate,
    Embed,
}

struct Adapter {
    task: Task,
    tokenizer: Tokenizer,
    template: Option<Template>,
    /// The tokens that end a generation (the tokenizer config's `eos_token`).
    eos: Vec<u32>,
}

/// Token ids a caller gave must be the model's: an id past its vocabulary would fail the model.
fn known_ids(tokenizer: &Tokenizer, ids: &[u32]) -> Result<(), Error> {
    let vocab = tokenizer.get_vocab_size(true) as u32;
    match ids.iter().find(|&&id| id >= vocab) {
        Some(bad) => Err(Error::invalid_arg(format!("token id {bad} is not in the model's vocabulary of {vocab}"))),
        None => Ok(()),
    }
}

fn read(name: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(format!("/model/{name}")).map_err(|e| {
        Error::unavailable(format!(
            "cannot read {name} from the adapter's version directory (is `filesystem` `read-only`?): {e}"
        ))
    })
}

impl Model for Adapter {
    fn initialize(args: InitializeArgs) -> Result<Self, Error> {
        let config = ModelConfig::of(&args)?;
        let task = match config.parameter("task") {
            Some("generate") => Task::Generate,
            Some("embed") => Task::Embed,
            other => {
                return Err(Error::invalid_arg(format!(
                    "parameter 'task' must be 'generate' or 'embed', not {other:?}"
                )));
            }
        };
        // One thread: a guest has no others (see `threads`).
        tokenizers::utils::parallelism::set_parallelism(false);
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| Error::invalid_arg(format!("tokenizer.json: {e}")))?;
        // The request decides lengths: no padding to a fixed size, no silent truncation.
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| Error::internal(format!("tokenizer.json: {e}")))?;
        let tokenizer_config: serde_json::Value = serde_json::from_slice(&read("tokenizer_config.json")?)
            .map_err(|e| Error::invalid_arg(format!("tokenizer_config.json: {e}")))?;
        let template = Template::from_config(&tokenizer_config)?;
        let eos = chat::special_token(&tokenizer_config, "eos_token")
            .and_then(|t| tokenizer.token_to_id(&t))
            .into_iter()
            .collect();
        Ok(Adapter { task, tokenizer, template, eos })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Vec<Result<Vec<Tensor>, Error>> {
        for request in &requests {
            let sender = request.sender();
            if let Err(e) = self.answer(request, &sender) {
                // A sender that failed already (the caller went away) cannot take the error.
                if sender.send_error(e.clone(), true).is_err() {
                    tessera_guest::verbose!("request {}: {} (its caller has gone)", request.id(), e.message);
                }
            }
        }
        Vec::new()
    }
}

impl Adapter {
    fn answer(&self, request: &Request, sender: &ResponseSender) -> Result<(), Error> {
        let text = request.input("request")?.as_strings()?;
        let [text] = text.as_slice() else {
            return Err(Error::invalid_arg("input 'request' must hold one JSON string"));
        };
        let call: Call = serde_json::from_str(text)
            .map_err(|e| Error::invalid_arg(format!("input 'request' is not an adapter call: {e}")))?;
        match (call.kind, self.task) {
            (Kind::Embedding, Task::Embed) => embed::run(&self.tokenizer, &call, sender),
            (Kind::Chat | Kind::Completion, Task::Generate) => {
                let prompt = match call.kind {
                    Kind::Chat => chat::render(self.template.as_ref(), &call)?,
                    _ => String::new(),
                };
                generate::run(self, &call, &prompt, request, sender)
            }
            (Kind::Embedding, Task::Generate) => {
                Err(Error::invalid_arg(format!("model '{}' generates text: it has no embeddings", call.model)))
            }
            (_, Task::Embed) => {
                Err(Error::invalid_arg(format!("model '{}' is an embedding model: it has no completions", call.model)))
            }
        }
    }
}

export_model!(Adapter);
