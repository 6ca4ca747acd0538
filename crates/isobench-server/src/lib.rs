//! isobench-server: the embedded model server. An OpenAI-compatible HTTP
//! API in front of one engine thread that runs a Candle causal LM
//! ([`isobench_model`]) over a paged KV cache, with static, dynamic or
//! continuous batching.
//!
//! ```no_run
//! use isobench_server::{BatchingConfig, Server, ServerConfig};
//!
//! # async fn run() -> Result<(), isobench_server::ServerError> {
//! let mut config = ServerConfig::new("models/tiny-llama");
//! config.port = 0; // any free port
//! config.batching = BatchingConfig::Static {
//!     max_batch_size: 8,
//!     max_num_batched_tokens: 8192,
//! };
//! let server = Server::start(config).await?;
//! println!("OpenAI API at {}/v1, model {}", server.url(), server.model_name());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! How a request flows:
//! - `listen` accepts connections (capped, with header, body and idle
//!   timeouts from `limits`) and drains them at shutdown; `http` reads
//!   the body and checks its type and the API key; `validate` turns the
//!   request into a `ValidRequest` (prompt tokenized, through the
//!   `chat_template` for chat, parameters in range, `max_tokens` fitting
//!   the context and the pool) or a 400/404.
//! - `engine` queues it (429 when `--max-waiting` requests already wait)
//!   for the engine thread, which owns the model, the KV cache and the
//!   `scheduler` state. Each step the `policy` admits waiting requests,
//!   the scheduler plans decode tokens and prefill chunks over the
//!   `blocks` pool (preempting the newest sequence when it runs out), the
//!   model runs, the `sampler` picks tokens, and text goes back through
//!   the `stop`-string matcher on the request's event channel, held in
//!   the `outbox` until the next step is launched on a GPU.
//! - `respond` turns those events into a JSON body or an SSE stream;
//!   `metrics` feeds `GET /metrics`, with the GPU's memory and energy
//!   (`gpu`, sampled from NVML in builds with the `cuda` feature).
//!
//! `load` opens the device (`--device cpu|cuda|cuda:N`), loads the model
//! with its options (dtype, CUDA graphs) and allocates the KV pool on the
//! model's device, sized by `--kv-blocks`, `--kv-memory` or, on CUDA,
//! `--gpu-memory-fraction` of the free memory (docs/gpu.md).
//!
//! Configuration: [`ServerConfig`] (validated) and [`ServerArgs`] (the clap
//! flags of `isobench serve`, with the engine's [`EngineArgs`] and
//! [`BatchingArgs`]) in [`config`], which also holds every documented
//! default; errors are one [`ServerError`] (`error`).

mod blocks;
mod chat_template;
pub mod config;
mod engine;
mod error;
mod gpu;
mod http;
mod limits;
mod listen;
mod load;
mod metrics;
#[cfg(feature = "cuda")]
mod nvml;
mod outbox;
mod policy;
mod respond;
mod sampler;
mod scheduler;
mod server;
mod step_logits;
mod stop;
mod validate;

pub use config::{
    BatchingArgs, BatchingConfig, BatchingKind, ByteSize, DTypeArg, EngineArgs, KvPoolSize,
    ServerArgs, ServerConfig, Toggle,
};
pub use error::ServerError;
pub use limits::ConnectionLimits;
pub use server::{Server, ServerHandle, ServerStats};
