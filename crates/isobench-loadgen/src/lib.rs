//! isobench's load engine: replays a workload's [`Plan`] against an
//! endpoint and records every request's timeline.
//!
//! - [`Backend`]: sends one request and fills its
//!   [`RequestRecord`](isobench_metrics::RequestRecord);
//!   [`HttpBackend`] speaks the OpenAI-compatible API (completions and chat,
//!   streamed or not, HTTP/1.1 or HTTP/2), and
//!   [`HttpBackend::preflight`] checks an endpoint before a run.
//! - [`run`]: the scheduler. A pacing thread dispatches each request at its
//!   planned instant (open loop, precise to well under a millisecond) or
//!   when a slot frees (closed loop, or a concurrency cap), workers on the
//!   tokio runtime send them and record into their own
//!   [`Recorder`](isobench_metrics::Recorder)s, merged once at the end.
//!   Stops at the plan's end, `max_requests`, `duration` or cancellation.
//! - A per-request JSONL log streamed to disk while the run goes, the
//!   run's per-request [`Samples`](isobench_metrics::Samples), and a live
//!   progress bar or plain lines ([`ProgressMode`]).
//! - [`scrape`]: the endpoint's Prometheus metrics read while a run goes
//!   (the server's queue, batch and KV cache; a GPU's energy).
//!
//! ```no_run
//! # async fn example(plan: isobench_workload::Plan) -> Result<(), isobench_loadgen::LoadgenError> {
//! use std::sync::Arc;
//! use isobench_loadgen::{HttpBackend, HttpBackendConfig, RunOptions, run};
//!
//! let backend = HttpBackend::new(HttpBackendConfig::new("http://127.0.0.1:8000", "my-model"))?;
//! backend.preflight().await?;
//! let outcome = run(plan, Arc::new(backend), RunOptions::default()).await?;
//! println!("{} completed, {} failed", outcome.counts().completed, outcome.counts().failed);
//! # Ok(()) }
//! ```

mod backend;
mod clock;
mod error;
mod openai;
mod preflight;
mod progress;
mod request_log;
mod run;
pub mod scrape;

pub use backend::{Backend, TokenCounter};
pub use clock::Clock;
pub use error::LoadgenError;
pub use openai::{HttpBackend, HttpBackendConfig};
pub use preflight::PreflightCheck;
pub use progress::{LiveGauge, ProgressMode};
pub use run::{RunOptions, RunOutcome, StopReason, run};
