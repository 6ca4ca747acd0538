//! The start-up step ([`isobench_model::warm_up`]) on models/tiny-llama:
//! it runs real steps through the pool (it writes the first slots), it
//! fits the pool it is given, and a sequence that later gets the blocks it
//! wrote sees exactly what it would in a fresh pool.

mod common;

use common::{load, repo_path};
use isobench_model::{CausalLm, KvCache, ModelFolder, SeqStep, StepBatch, capture_graphs, warm_up};

fn tiny() -> Box<dyn CausalLm> {
    load(
        &ModelFolder::open(repo_path("models/tiny-llama")).expect("models/tiny-llama opens"),
        None,
    )
}

fn pool(model: &dyn CausalLm, num_blocks: usize, block_size: usize) -> KvCache {
    KvCache::new(
        model.config(),
        num_blocks,
        block_size,
        model.device(),
        model.dtype(),
    )
    .expect("pool")
}

/// The logits of a 6-token prompt in blocks 0 and 1 (block size 4): the
/// blocks the warm-up writes.
fn prompt_logits(model: &mut dyn CausalLm, cache: &mut KvCache) -> Vec<f32> {
    let batch = StepBatch {
        token_ids: vec![7, 3, 9, 1, 4, 2],
        positions: (0..6).collect(),
        slot_mapping: (0..6).collect(),
        seqs: vec![SeqStep {
            num_new_tokens: 6,
            context_len: 6,
            block_table: vec![0, 1],
        }],
    };
    logits_of(model, cache, &batch)
}

/// The logits of one token at position 1 that attends to slot 0 without
/// writing it: they depend on what the pool holds there.
fn logits_over_slot_0(model: &mut dyn CausalLm, cache: &mut KvCache) -> Vec<f32> {
    let batch = StepBatch {
        token_ids: vec![5],
        positions: vec![1],
        slot_mapping: vec![1],
        seqs: vec![SeqStep {
            num_new_tokens: 1,
            context_len: 2,
            block_table: vec![0],
        }],
    };
    logits_of(model, cache, &batch)
}

fn logits_of(model: &mut dyn CausalLm, cache: &mut KvCache, batch: &StepBatch) -> Vec<f32> {
    let logits = model.forward(batch, cache).expect("step");
    logits.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

#[test]
fn the_warm_up_writes_the_pool_through_real_steps() {
    let mut model = tiny();
    let mut fresh = pool(model.as_ref(), 8, 4);
    let untouched = logits_over_slot_0(model.as_mut(), &mut fresh);
    let mut warmed = pool(model.as_ref(), 8, 4);
    warm_up(model.as_mut(), &mut warmed).expect("warm-up runs");
    assert_ne!(logits_over_slot_0(model.as_mut(), &mut warmed), untouched);
}

#[test]
fn a_sequence_in_the_warmed_blocks_sees_what_it_would_in_a_fresh_pool() {
    let mut model = tiny();
    let mut fresh = pool(model.as_ref(), 8, 4);
    let expected = prompt_logits(model.as_mut(), &mut fresh);

    let mut warmed = pool(model.as_ref(), 8, 4);
    let took = warm_up(model.as_mut(), &mut warmed).expect("warm-up runs");
    assert!(
        took.is_some(),
        "a pool of 32 tokens has room for the warm-up"
    );
    assert_eq!(prompt_logits(model.as_mut(), &mut warmed), expected);
}

#[test]
fn warm_up_fits_a_small_pool_and_skips_one_without_room() {
    let mut model = tiny();
    // Room for 3 tokens: a 2-token prompt and its decode step.
    let mut small = pool(model.as_ref(), 1, 3);
    assert!(warm_up(model.as_mut(), &mut small).unwrap().is_some());
    let mut one_token = pool(model.as_ref(), 1, 1);
    assert_eq!(warm_up(model.as_mut(), &mut one_token).unwrap(), None);
}

#[test]
fn a_cpu_model_has_no_graphs_to_capture() {
    let mut model = tiny();
    assert!(model.graph_shapes().is_none());
    let mut cache = pool(model.as_ref(), 8, 4);
    assert_eq!(
        capture_graphs(model.as_mut(), &mut cache, 64, 512).unwrap(),
        None
    );
}
