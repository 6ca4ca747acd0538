//! One short prefill and one decode step before the first measured or
//! served one, so that what only the first step of a process pays is paid
//! at start: on a GPU, loading each kernel module at its first use (and
//! for modules shipped as PTX, such as candle's, the driver compiling
//! them: the warm-up took about 16 s for the 1B shape on an H200 whose
//! compile cache was empty, 0.2 s once it was filled, docs/performance.md),
//! cuBLAS's set-up, and the capture of the batch-1 CUDA graph; on the CPU,
//! the first touch of the weights' pages.
//!
//! [`capture_graphs`] then captures, on a GPU, the CUDA graph of every step
//! shape a server can ask for, so that no served step waits for a capture
//! (each one runs its step eagerly once, captures it and instantiates the
//! graph: tens of milliseconds, docs/performance.md).
//!
//! The steps write keys and values into the pool's first block(s). That
//! leaves nothing behind that a later step reads: a sequence given those
//! blocks writes its own tokens' rows before attending to them, and
//! attention reads only the positions below a sequence's context length.

use std::time::{Duration, Instant};

use crate::{CausalLm, GraphShape, KvCache, ModelError, SeqStep, StepBatch, greedy_tokens};

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
    let prompt = PROMPT_TOKENS.min(capacity(model, cache).saturating_sub(1));
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

/// Captures the CUDA graph of every shape of [`CausalLm::graph_shapes`]
/// that a step of at most `max_seqs` sequences and `max_tokens` tokens can
/// be padded to, and whose step fits `cache`, by running one such step in
/// its first blocks. Returns how many were captured and how long it took;
/// `None` when the model replays no graphs (the CPU, graphs off). A shape
/// left out is captured at the first step that needs it.
pub fn capture_graphs(
    model: &mut dyn CausalLm,
    cache: &mut KvCache,
    max_seqs: usize,
    max_tokens: usize,
) -> Result<Option<(usize, Duration)>, ModelError> {
    let Some(buckets) = model.graph_shapes() else {
        return Ok(None);
    };
    let capacity = capacity(model, cache);
    let prompt_rows: Vec<usize> = buckets.prompt_rows().collect();
    let vocab = model.config().vocab_size.max(1);
    let start = Instant::now();
    let mut captured = 0;
    for GraphShape {
        rows: seqs,
        tokens: new,
    } in buckets.all()
    {
        let rows = if new == seqs {
            &buckets.rows
        } else {
            &prompt_rows
        };
        let reachable = reachable((rows, &buckets.tokens), (seqs, new), max_seqs, max_tokens);
        if !reachable || new - seqs + 1 > capacity {
            continue;
        }
        greedy_tokens(&model.forward(&shape_step(cache.block_size(), vocab, seqs, new), cache)?)?;
        captured += 1;
    }
    Ok(Some((captured, start.elapsed())))
}

/// Whether a step of at most `max_seqs` sequences and `max_tokens` tokens
/// can be padded to the shape `(seqs, tokens)`, given the row buckets of
/// its kind (decode, or with prompt tokens: [`crate::GraphShapes::prompt_rows`])
/// and the token buckets: a decode shape by its rows alone (a decode step of `n`
/// sequences has `n` tokens, and a server takes at least as many tokens a
/// step as sequences), a shape with prompt tokens by both. A step's rows
/// can reach the bucket above its own when its padded tokens need a row.
fn reachable(
    (rows, tokens): (&[usize], &[usize]),
    (seqs, new): (usize, usize),
    max_seqs: usize,
    max_tokens: usize,
) -> bool {
    below(rows, seqs) <= max_seqs && (new == seqs || below(tokens, new) < max_tokens)
}

/// The largest of `buckets` below `bucket` (0 if none): a step padded up to
/// `bucket` has more than that.
fn below(buckets: &[usize], bucket: usize) -> usize {
    buckets
        .iter()
        .copied()
        .filter(|&b| b < bucket)
        .max()
        .unwrap_or(0)
}

/// The tokens one sequence can hold in `cache` (and the model's context).
fn capacity(model: &dyn CausalLm, cache: &KvCache) -> usize {
    (cache.num_blocks() * cache.block_size())
        .min(cache.max_blocks_per_seq() * cache.block_size())
        .min(model.config().max_position_embeddings)
}

/// A step of exactly `seqs` sequences and `tokens` tokens: one token each,
/// at position 0, but the last, which brings the rest; all in blocks 0, 1,
/// ... of the pool.
fn shape_step(block_size: usize, vocab: usize, seqs: usize, tokens: usize) -> StepBatch {
    let lengths = std::iter::repeat_n(1, seqs - 1).chain([tokens + 1 - seqs]);
    let mut batch = StepBatch::default();
    for new in lengths {
        let one = step(block_size, vocab, 0, new);
        batch.token_ids.extend(one.token_ids);
        batch.positions.extend(one.positions);
        batch.slot_mapping.extend(one.slot_mapping);
        batch.seqs.extend(one.seqs);
    }
    batch
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph_shapes::{GraphShape, GraphShapes};
    use crate::step::{StepLimits, validate};

    /// Each shape's step is a valid step that replays exactly that shape.
    #[test]
    fn a_shape_step_is_valid_and_needs_no_padding() {
        let shapes = GraphShapes {
            rows: vec![1, 2, 4, 8],
            tokens: vec![16, 32],
        };
        let limits = StepLimits {
            vocab_size: 100,
            max_position_embeddings: 64,
            num_blocks: 8,
            block_size: 4,
            table_width: 16,
        };
        for GraphShape { rows, tokens } in shapes.all() {
            let batch = shape_step(4, 100, rows, tokens);
            validate(&batch, limits).unwrap();
            assert_eq!((batch.seqs.len(), batch.token_ids.len()), (rows, tokens));
            let shape = shapes.of(rows, tokens, 64);
            assert_eq!(shape, Some(GraphShape { rows, tokens }));
        }
    }

    #[test]
    fn the_buckets_below_bound_what_a_server_can_reach() {
        let rows = [1, 2, 4, 8, 16];
        assert_eq!(below(&rows, 1), 0);
        assert_eq!(below(&rows, 16), 8);
        assert_eq!(below(&rows, 3), 2);
    }

    #[test]
    fn a_server_captures_the_shapes_its_steps_can_be_padded_to() {
        let decode: (&[usize], &[usize]) = (&[1, 2, 4, 8, 16], &[16, 32, 64]);
        let prompt: (&[usize], &[usize]) = (&[2, 3, 5, 9, 17], &[16, 32, 64]);
        // At most 6 sequences and 20 tokens a step.
        let reach_decode = |shape| reachable(decode, shape, 6, 20);
        let reach_prompt = |shape| reachable(prompt, shape, 6, 20);
        // 6 decoding sequences pad to 8 rows; a step with prompt tokens and
        // 5 or 6 sequences pads to 9 (with 5, a padded row is needed).
        assert!(reach_decode((8, 8)) && reach_prompt((9, 32)));
        assert!(!reach_decode((16, 16)) && !reach_prompt((17, 32)));
        // 20 tokens pad to 32, never to 64.
        assert!(reach_prompt((5, 32)) && !reach_prompt((5, 64)));
        // Decode shapes do not depend on the token limit: 10 sequences
        // decoding pad to 16 rows, though a token bucket of 12 lies between.
        let uneven: (&[usize], &[usize]) = (&[4, 8, 16], &[12, 32]);
        assert!(reachable(uneven, (16, 16), 10, 10));
        assert!(!reachable(uneven, (8, 32), 10, 10));
    }
}
