//! One short prefill and one decode step before the first measured or
//! served one, so that what only the first step of a process pays is paid
//! at start: on a GPU, loading each kernel module at its first use (and
//! for modules shipped as PTX, such as candle's, the driver compiling
//! them: the warm-up took about 16 s for the 1B shape on an H200 whose
//! compile cache was empty, 0.2 s once it was filled, docs/performance.md),
//! cuBLAS's set-up, and the capture of the batch-1 CUDA graph; on the CPU,
//! the first touch of the weights' pages.
//!
//! The steps write keys and values into the pool's first block(s). That
//! leaves nothing behind that a later step reads: a sequence given those
//! blocks writes its own tokens' rows before attending to them, and
//! attention reads only the positions below a sequence's context length.

use std::time::{Duration, Instant};

use crate::{CausalLm, KvCache, ModelError, SeqStep, StepBatch, greedy_tokens};

/// Prompt tokens of the warm-up prefill (fewer when the pool or the
/// model's context is smaller).
const PROMPT_TOKENS: usize = 16;

/// Runs a prefill of up to 16 tokens (`PROMPT_TOKENS`) and one decode step of
/// one sequence in `cache`'s first blocks, waits for both, and returns how
/// long they took; `None` when the pool or the model's context holds fewer
/// than two tokens, so there is nothing to run.
pub fn warm_up(
    model: &mut dyn CausalLm,
    cache: &mut KvCache,
) -> Result<Option<Duration>, ModelError> {
    let capacity = (cache.num_blocks() * cache.block_size())
        .min(cache.max_blocks_per_seq() * cache.block_size())
        .min(model.config().max_position_embeddings);
    let prompt = PROMPT_TOKENS.min(capacity.saturating_sub(1));
    if prompt == 0 {
        return Ok(None);
    }
    let vocab = model.config().vocab_size.max(1);
    let start = Instant::now();
    let prefill = step(cache.block_size(), vocab, 0, prompt);
    greedy_tokens(&model.forward(&prefill, cache)?)?;
    let decode = step(cache.block_size(), vocab, prompt, 1);
    greedy_tokens(&model.forward(&decode, cache)?)?;
    Ok(Some(start.elapsed()))
}

/// One sequence's step: `new` tokens at positions `first..first + new`,
/// in blocks 0, 1, ... of the pool.
fn step(block_size: usize, vocab: usize, first: usize, new: usize) -> StepBatch {
    let context = first + new;
    let positions: Vec<u32> = (first..context).map(|p| p as u32).collect();
    StepBatch {
        token_ids: positions.iter().map(|&p| p % vocab as u32).collect(),
        slot_mapping: positions.clone(),
        positions,
        seqs: vec![SeqStep {
            num_new_tokens: new as u32,
            context_len: context as u32,
            block_table: (0..context.div_ceil(block_size) as u32).collect(),
        }],
    }
}
