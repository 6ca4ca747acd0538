//! The statistics of a run, as [`Recorder::summarize`](crate::Recorder::summarize)
//! produces them: plain serde data, read by the report and by comparisons.
//!
//! Times are milliseconds (`*_ms`) or seconds (`*_s`, since the run's start);
//! rates are per second of the measured window. A latency metric without
//! samples is `None` (JSON `null`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{LatencyStats, SloResult};

/// Everything a run measured, warm-up excluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The measured window that the rates divide by, in seconds.
    pub window_s: f64,
    pub requests: RequestCounts,
    /// Failed and cancelled requests by [`ErrorKind::label`](crate::ErrorKind::label).
    pub errors: BTreeMap<String, u64>,
    pub tokens: TokenCounts,
    pub throughput: Throughput,
    pub sending: Sending,
    pub latency: Latencies,
    /// The aggregate check of each SLO, in the order given.
    pub slos: Vec<SloResult>,
    /// Latency samples that were out of the histograms' reach and clamped
    /// (zero in any realistic run; a warning when not).
    pub clamped_samples: u64,
}

/// How many requests ended which way. `measured = completed + failed + cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub measured: u64,
    pub completed: u64,
    /// Failed for any reason but cancellation (connect, timeout, HTTP status,
    /// stream cut, malformed event, server error, no content, wrong content
    /// type).
    pub failed: u64,
    /// Cut by Ctrl-C or the end of the run's duration: not the server's
    /// fault, so outside the goodput denominator.
    pub cancelled: u64,
    /// Warm-up requests, excluded from every other figure.
    pub warmup: u64,
    /// Measured requests sent a second time, on a new connection, because
    /// a reused keep-alive connection failed before any byte of the answer.
    /// Each is also counted once above, by its final outcome.
    #[serde(default)]
    pub retries: u64,
    /// Completed requests that met every SLO's per-request threshold;
    /// `None` when the run has no SLOs.
    pub good: Option<u64>,
}

/// Token counts of completed requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenCounts {
    pub input: u64,
    pub output: u64,
    /// Where the output counts came from, over all completed requests.
    pub output_source: OutputTokenSource,
    pub by_source: TokensBySource,
}

/// Which [`TokenSource`](crate::TokenSource) counted a run's output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputTokenSource {
    /// The server's `usage`, for every completed request.
    Usage,
    /// The workload's tokenizer, for every completed request.
    Tokenizer,
    /// One token per content event, for every completed request.
    Events,
    /// Different sources for different requests: see `by_source`.
    Mixed,
    /// No request completed.
    None,
}

/// Completed requests and their output tokens, per token source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TokensBySource {
    pub usage: SourceCount,
    pub tokenizer: SourceCount,
    pub events: SourceCount,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceCount {
    pub requests: u64,
    pub output_tokens: u64,
}

/// Rates over the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Output tokens of completed requests per second.
    pub output_tokens_per_s: f64,
    /// Input plus output tokens of completed requests per second.
    pub total_tokens_per_s: f64,
    /// Good requests per second; `None` without SLOs.
    pub goodput_requests_per_s: Option<f64>,
    /// Good requests over completed plus failed ones; `None` without SLOs
    /// or without such requests.
    pub good_fraction: Option<f64>,
}

/// When measured requests were scheduled, sent and finished, in seconds
/// since the run's start, and the send rates they imply. `None` without
/// measured requests; the rates need two requests and a non-zero span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sending {
    pub first_scheduled_s: Option<f64>,
    pub last_scheduled_s: Option<f64>,
    pub first_sent_s: Option<f64>,
    pub last_sent_s: Option<f64>,
    pub last_end_s: Option<f64>,
    /// `(measured - 1) / (last_sent - first_sent)`: how fast requests left.
    pub achieved_send_rate: Option<f64>,
    /// `(measured - 1) / (last_scheduled - first_scheduled)`: how fast the
    /// schedule asked them to leave.
    pub scheduled_send_rate: Option<f64>,
}

/// Every latency metric. `*_from_schedule` start the clock at the request's
/// scheduled time instead of its send (the coordinated-omission view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latencies {
    pub ttft: Option<LatencyStats>,
    pub ttft_from_schedule: Option<LatencyStats>,
    /// Every gap between consecutive content events (vLLM's ITL).
    pub itl_per_event: Option<LatencyStats>,
    /// Each event's gap split evenly over the tokens it carried.
    pub itl_per_token: Option<LatencyStats>,
    /// Completed requests with several content events whose per-token
    /// token counts were unknown: their gaps enter `itl_per_token` unsplit.
    pub itl_per_token_unsplit_requests: u64,
    pub tpot: Option<LatencyStats>,
    pub e2e: Option<LatencyStats>,
    pub e2e_from_schedule: Option<LatencyStats>,
    /// Sent minus scheduled, for every measured request (failed ones too).
    pub dispatch_lag: Option<LatencyStats>,
}
