//! `isobench mock`: a synthetic OpenAI-compatible endpoint whose latency,
//! output length, chunking, errors and concurrency limit are configurable
//! distributions, for testing and benchmarking the load generator (and
//! for users to check their own harness).
//!
//! It serves `POST /v1/completions` and `POST /v1/chat/completions`
//! (streamed SSE with `stream_options.include_usage`, or whole), `GET
//! /v1/models` and `GET /health`. Injected delays are kept by a dedicated
//! timer thread to within a few microseconds ([`timer`]), so measured
//! latencies can be compared with the injected ones.
//!
//! ```no_run
//! # async fn example() -> Result<(), isobench_mock::MockError> {
//! use isobench_mock::{MockConfig, MockServer};
//!
//! let config = MockConfig {
//!     ttft: "fixed:20".parse().unwrap(),
//!     itl: "normal:5,1".parse().unwrap(),
//!     ..MockConfig::default()
//! };
//! let mock = MockServer::start(config, "127.0.0.1:0".parse().unwrap()).await?;
//! println!("serving on {}", mock.url());
//! mock.shutdown().await;
//! # Ok(()) }
//! ```

mod config;
mod error;
mod generate;
mod server;
mod slots;
mod timer;

pub use config::{API_KEY_ENV, DEFAULT_OUTPUT_TOKENS, MockConfig};
pub use error::MockError;
pub use server::{MockHandle, MockServer, MockStats, WrittenAnswer};
