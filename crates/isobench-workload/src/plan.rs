//! The contract between a workload and the load engine: one planned request.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which OpenAI-compatible endpoint the requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    /// `POST /v1/completions`
    #[default]
    Completions,
    /// `POST /v1/chat/completions`
    Chat,
}

/// The prompt of one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    /// Sent as `prompt` to completions, or as one user message to chat.
    Text(String),
    /// A conversation: (role, content) pairs, for chat (ShareGPT and chat workloads).
    Chat(Vec<(String, String)>),
}

/// How the prompt's token count was obtained, reported beside the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptTokens {
    /// Counted with the endpoint's tokenizer: exact.
    Tokenizer,
    /// The documented approximation used when no tokenizer is given.
    Approximate,
}

/// One request as the workload plans it. The load engine turns it into an
/// HTTP request without looking inside the workload.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRequest {
    /// 0-based sequence number in the plan; warm-up requests come first.
    pub index: u64,
    /// Warm-up requests are sent like any other but excluded from every figure.
    pub warmup: bool,
    /// When the arrival process means the request to be sent, from the start
    /// of the run. `None` in a closed loop: sent as soon as a slot is free.
    pub offset: Option<Duration>,
    pub prompt: Prompt,
    /// The prompt's length in tokens (see [`PromptTokens`] for how it was counted).
    pub input_tokens: u32,
    /// `max_tokens` to ask for (with `ignore_eos` the exact output length).
    pub max_tokens: u32,
}

/// The shape of the load a plan applies, for the engine and the report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadShape {
    /// Requests in flight at most: the closed loop's concurrency, or a cap
    /// on top of an open-loop rate. `None`: unbounded.
    pub max_concurrency: Option<usize>,
    /// Stop sending after this long (measured from the start of the run).
    pub duration: Option<Duration>,
    /// Requests to send, warm-ups excluded; `None` when only `duration` bounds the run.
    pub max_requests: Option<u64>,
    /// Warm-up requests at the head of the plan.
    pub warmup: u64,
    /// The mean rate the arrival process offers, in requests/s, when it has
    /// one (open loop); `None` for a closed loop.
    pub offered_rate: Option<f64>,
    /// How long a rate-driven process takes to reach its rate (zero without
    /// a ramp): a steady-state window starts after it.
    pub ramp_up: Duration,
    /// A human description, e.g. `poisson 20 req/s, cap 64` or `closed loop, 8 concurrent`.
    pub description: String,
}

/// What the engine replays: the planned requests, lazily, in send order
/// (non-decreasing offsets), and the shape of the load.
pub struct Plan {
    pub shape: LoadShape,
    pub prompt_tokens: PromptTokens,
    pub requests: Box<dyn Iterator<Item = PlannedRequest> + Send>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("shape", &self.shape)
            .field("prompt_tokens", &self.prompt_tokens)
            .finish_non_exhaustive()
    }
}
