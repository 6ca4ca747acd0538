//! OpenAI-compatible wire types, shared by the isobench load generator (the
//! client), the embedded model server and the mock endpoint.
//!
//! - [`answer`]: writing an answer in either endpoint's shape (servers).
//! - [`auth`]: the constant-time `Authorization: Bearer` check (servers).
//! - [`completions`]: `POST /v1/completions` requests, responses and stream chunks.
//! - [`chat`]: `POST /v1/chat/completions` likewise.
//! - [`models`]: `GET /v1/models`.
//! - [`error`]: the OpenAI error body (`{"error": {"message", "type", ...}}`).
//! - [`sse`]: Server-Sent Events framing: an incremental decoder for clients
//!   and the `data: ...` encoding for servers.
//! - [`view`]: a borrowed, allocation-light view of one stream chunk of either
//!   endpoint, for the client's hot path.
//!
//! Requests keep unknown body fields in `extra` (flattened), so a client can
//! send vendor parameters and a server can see what it was sent.

pub mod answer;
pub mod auth;
pub mod chat;
pub mod completions;
pub mod error;
pub mod models;
pub mod sse;
pub mod view;

use serde::{Deserialize, Serialize};

pub use chat::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatContent, ChatDelta, ChatMessage,
};
pub use completions::{
    CompletionChoice, CompletionChunk, CompletionRequest, CompletionResponse, PromptInput,
};
pub use error::{ErrorBody, ErrorResponse};
pub use models::{ModelCard, ModelList};

/// Token accounting reported by a server (`usage` in responses and in the last
/// stream chunk when `stream_options.include_usage` is set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    #[serde(default)]
    pub total_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }
}

/// `stream_options` of a streaming request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Ask for a final chunk whose `usage` counts the whole request.
    #[serde(default)]
    pub include_usage: bool,
    /// vLLM extension: `usage` in every chunk, so a client can count tokens per event.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continuous_usage_stats: bool,
}

/// `stop`: one string or a list of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopSpec {
    One(String),
    Many(Vec<String>),
}

impl StopSpec {
    /// The stop strings, in order.
    pub fn strings(&self) -> Vec<&str> {
        match self {
            StopSpec::One(s) => vec![s.as_str()],
            StopSpec::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// Why a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the context length was reached.
    Length,
    /// Anything else a server may send (`tool_calls`, `content_filter`, ...).
    #[serde(other)]
    Other,
}

/// Sampling and length parameters common to both endpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// vLLM/TGI extension; `-1` or `0` mean "no limit".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSpec>,
    /// vLLM extension: keep generating past end-of-sequence until `max_tokens`,
    /// so a benchmark controls output length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Number of choices; isobench's server accepts only 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
}

/// Seconds since the Unix epoch, for the `created` field.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
