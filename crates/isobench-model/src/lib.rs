//! isobench model: a Candle Llama-family causal LM (Llama 2/3, Mistral,
//! Qwen2) whose attention reads and writes a paged KV cache.
//!
//! CONTRACT (the server codes against it; the internals are being written):
//! the server owns the block allocator and decides which cache slots each
//! sequence uses; the model owns the cache storage and runs one step over a
//! [`StepBatch`] of sequences, each bringing its new tokens (a prompt chunk
//! or one decode token) and its block table.

mod batch;

pub use batch::{SeqStep, StepBatch};
