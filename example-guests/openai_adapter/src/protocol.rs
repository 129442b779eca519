//! What the door sends an adapter: one OpenAI call, already checked for shape and bounds, with
//! the served model's name and context length (docs/openai.md, "Adapter protocol").

use serde::Deserialize;

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Chat,
    Completion,
    Embedding,
}

/// A prompt or an embedding input: text, or token ids the caller tokenized.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Text {
    Text(String),
    Tokens(Vec<u32>),
}

#[derive(Deserialize, Debug)]
pub struct Message {
    pub role: String,
    pub content: String,
}

#[derive(Deserialize, Debug)]
pub struct Call {
    pub kind: Kind,
    /// The served model, which the adapter runs through BLS.
    pub model: String,
    /// Its context length, from its config (`context_length`), if it declares one.
    #[serde(default)]
    pub context_length: Option<u32>,
    #[serde(default)]
    pub messages: Vec<Message>,
    #[serde(default)]
    pub prompt: Option<Text>,
    #[serde(default)]
    pub input: Vec<Text>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub stream: bool,
}
