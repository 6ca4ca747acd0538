//! `POST /v1/completions`: a prompt in, generated text out.

use serde::{Deserialize, Serialize};

use crate::{FinishReason, SamplingParams, StreamOptions, Usage};

/// The `prompt` field: text, or token ids (one prompt), as OpenAI accepts.
/// Batched prompts (a list of texts) are accepted on the wire; servers may
/// reject them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: PromptInput,
    #[serde(flatten)]
    pub sampling: SamplingParams,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Any other body field, passed through untouched.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub finish_reason: Option<FinishReason>,
    #[serde(default)]
    pub logprobs: Option<serde_json::Value>,
}

/// A whole (non-streamed) response; `object` is `"text_completion"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One streamed chunk: the same shape as a response, with the text delta in
/// `choices[0].text`. The usage-only chunk has no choices.
pub type CompletionChunk = CompletionResponse;

/// `object` of completion responses and chunks.
pub const COMPLETION_OBJECT: &str = "text_completion";
