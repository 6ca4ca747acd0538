//! Test helpers: paths to the shipped model folders and fixtures, a toy
//! block allocator that hands out blocks in a scrambled order (so block
//! tables are never the identity), and a relative-error measure.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use isobench_model::{
    CausalLm, DType, Device, KvCache, ModelFolder, SeqStep, StepBatch, load_model,
};

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn load(folder: &ModelFolder, dtype: Option<DType>) -> Box<dyn CausalLm> {
    load_model(folder, &Device::Cpu, dtype).expect("model loads")
}

/// `max |a - b| / max |b|` over a logits row: the error relative to the
/// row's largest reference logit.
pub fn relative_error(actual: &[f32], expected: &[f32]) -> f32 {
    assert_eq!(actual.len(), expected.len());
    let scale = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = actual
        .iter()
        .zip(expected)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

/// Deterministic pseudo-random token ids below `vocab` (an LCG).
pub fn token_ids(seed: u64, len: usize, vocab: usize) -> Vec<u32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % vocab as u64) as u32
        })
        .collect()
}

/// A cache plus a free list that gives blocks out in a scrambled order.
pub struct Pool {
    pub cache: KvCache,
    free: Vec<u32>,
}

impl Pool {
    pub fn new(model: &dyn CausalLm, num_blocks: usize, block_size: usize) -> Self {
        let cache = KvCache::new(
            model.config(),
            num_blocks,
            block_size,
            model.device(),
            model.dtype(),
        )
        .expect("cache");
        // Popped from the end: odd blocks in descending order, then even ones.
        let blocks = 0..num_blocks as u32;
        let free = blocks
            .clone()
            .filter(|b| b % 2 == 0)
            .chain(blocks.filter(|b| b % 2 == 1))
            .collect();
        Self { cache, free }
    }
}

/// One test sequence: every token it will ever see, and how many are cached.
#[derive(Debug, Clone)]
pub struct Seq {
    pub tokens: Vec<u32>,
    pub cached: usize,
    pub blocks: Vec<u32>,
}

impl Seq {
    pub fn new(tokens: Vec<u32>) -> Self {
        Self {
            tokens,
            cached: 0,
            blocks: Vec::new(),
        }
    }
}

/// Runs one step in which each `(seq, n)` brings its next `n` tokens;
/// returns the logits rows, one per sequence, in order.
pub fn step(
    model: &mut dyn CausalLm,
    pool: &mut Pool,
    parts: &mut [(&mut Seq, usize)],
) -> Vec<Vec<f32>> {
    let block_size = pool.cache.block_size();
    let mut batch = StepBatch::default();
    for (seq, n) in parts.iter_mut() {
        let n = *n;
        let context = seq.cached + n;
        while seq.blocks.len() * block_size < context {
            seq.blocks
                .push(pool.free.pop().expect("test pool is large enough"));
        }
        for position in seq.cached..context {
            batch.token_ids.push(seq.tokens[position]);
            batch.positions.push(position as u32);
            let block = seq.blocks[position / block_size] as usize;
            batch
                .slot_mapping
                .push((block * block_size + position % block_size) as u32);
        }
        batch.seqs.push(SeqStep {
            num_new_tokens: n as u32,
            context_len: context as u32,
            block_table: seq.blocks.clone(),
        });
    }
    let logits = model.forward(&batch, &mut pool.cache).expect("forward");
    assert_eq!(logits.dims(), &[parts.len(), model.config().vocab_size]);
    assert_eq!(logits.dtype(), DType::F32);
    for (seq, n) in parts.iter_mut() {
        seq.cached += *n;
    }
    logits.to_vec2::<f32>().expect("logits")
}

/// The logits after `tokens`, recomputed from scratch: one prefill in a
/// fresh cache.
pub fn recompute(model: &mut dyn CausalLm, tokens: &[u32], block_size: usize) -> Vec<f32> {
    let blocks = tokens.len().div_ceil(block_size) * 2 + 1;
    let mut pool = Pool::new(model, blocks, block_size);
    let mut seq = Seq::new(tokens.to_vec());
    step(model, &mut pool, &mut [(&mut seq, tokens.len())]).remove(0)
}
