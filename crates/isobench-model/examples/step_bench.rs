//! How long one decode step takes at batch 1, 8 and 32: the number that
//! bounds what batching can gain on this machine.
//!
//! ```text
//! cargo run --release --example step_bench -p isobench-model [-- MODEL_DIR [CONTEXT]]
//! ```
//!
//! For each batch size, every sequence is prefilled with CONTEXT (default
//! 128) pseudo-random tokens, then 3 warm-up and 16 timed decode steps run
//! over the whole batch. Prints the median ms per step (robust to other
//! processes stealing the CPU now and then), the decode tokens/s it implies
//! and the speed-up over batch 1. MODEL_DIR defaults to models/small-llama.

use std::path::PathBuf;
use std::time::Instant;

use isobench_model::{
    CausalLm, Device, KvCache, ModelError, ModelFolder, SeqStep, StepBatch, load_model,
};

const BLOCK_SIZE: usize = 16;
const WARM_UP_STEPS: usize = 3;
const TIMED_STEPS: usize = 16;

/// A batch of sequences in one cache, with contiguous blocks per sequence.
struct Batch {
    contexts: Vec<usize>,
    blocks_per_seq: usize,
}

impl Batch {
    /// A step in which each `(seq, new)` brings `new` tokens.
    fn step(&self, parts: &[(usize, usize)], token: u32) -> StepBatch {
        let mut batch = StepBatch::default();
        for &(seq, new) in parts {
            let cached = self.contexts[seq];
            let first_block = seq * self.blocks_per_seq;
            let table: Vec<u32> = (0..(cached + new).div_ceil(BLOCK_SIZE))
                .map(|b| (first_block + b) as u32)
                .collect();
            for position in cached..cached + new {
                batch
                    .token_ids
                    .push(token.wrapping_add(position as u32 * 7919) % 8000 + 5);
                batch.positions.push(position as u32);
                batch
                    .slot_mapping
                    .push((first_block * BLOCK_SIZE + position) as u32);
            }
            batch.seqs.push(SeqStep {
                num_new_tokens: new as u32,
                context_len: (cached + new) as u32,
                block_table: table,
            });
        }
        batch
    }
}

fn run(
    model: &mut dyn CausalLm,
    batch_size: usize,
    context: usize,
) -> Result<(f64, f64), ModelError> {
    let blocks_per_seq = (context + WARM_UP_STEPS + TIMED_STEPS).div_ceil(BLOCK_SIZE);
    let mut cache = KvCache::new(
        model.config(),
        batch_size * blocks_per_seq,
        BLOCK_SIZE,
        model.device(),
        model.dtype(),
    )?;
    let mut batch = Batch {
        contexts: vec![0; batch_size],
        blocks_per_seq,
    };
    let prefill_start = Instant::now();
    for seq in 0..batch_size {
        model.forward(&batch.step(&[(seq, context)], seq as u32), &mut cache)?;
        batch.contexts[seq] = context;
    }
    let prefill_tokens_per_s =
        (batch_size * context) as f64 / prefill_start.elapsed().as_secs_f64();

    let decode: Vec<(usize, usize)> = (0..batch_size).map(|seq| (seq, 1)).collect();
    let mut step_ms = Vec::with_capacity(TIMED_STEPS);
    for step in 0..WARM_UP_STEPS + TIMED_STEPS {
        let input = batch.step(&decode, step as u32);
        let start = Instant::now();
        model.forward(&input, &mut cache)?;
        if step >= WARM_UP_STEPS {
            step_ms.push(start.elapsed().as_secs_f64() * 1e3);
        }
        batch.contexts.iter_mut().for_each(|c| *c += 1);
    }
    step_ms.sort_by(f64::total_cmp);
    Ok((step_ms[TIMED_STEPS / 2], prefill_tokens_per_s))
}

fn main() -> Result<(), ModelError> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/small-llama")
    });
    let context: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let load_start = Instant::now();
    let folder = ModelFolder::open(&dir)?;
    let mut model = load_model(&folder, &Device::Cpu, None)?;
    println!(
        "{}: {:.1} M parameters, {:?}, loaded in {:.2} s; {} rayon threads; context {context} tokens",
        folder.name(),
        folder.config().num_parameters() as f64 / 1e6,
        model.dtype(),
        load_start.elapsed().as_secs_f64(),
        rayon::current_num_threads(),
    );
    println!("batch  ms/step  decode tok/s  speed-up  prefill tok/s");
    let mut single = None;
    for batch_size in [1, 8, 32] {
        let (ms, prefill) = run(model.as_mut(), batch_size, context)?;
        let tokens_per_s = batch_size as f64 * 1e3 / ms;
        let base = *single.get_or_insert(tokens_per_s);
        println!(
            "{batch_size:>5}  {ms:>7.2}  {tokens_per_s:>12.0}  {:>7.1}x  {prefill:>13.0}",
            tokens_per_s / base
        );
    }
    Ok(())
}
