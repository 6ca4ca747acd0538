//! Paged attention against full recomputation, on models/tiny-llama
//! (seeded weights): sequences of different lengths batched into one step,
//! prefill chunks mixed with decodes, grouped and multi-query attention,
//! half-precision caches, and the errors a scheduler bug would cause.

mod common;

use common::{Pool, Seq, load, recompute, relative_error, repo_path, step, token_ids};
use isobench_model::{CausalLm, DType, KvCache, ModelFolder, SeqStep, StepBatch};

const BLOCK_SIZE: usize = 4;

fn tiny() -> ModelFolder {
    ModelFolder::open(repo_path("models/tiny-llama")).expect("models/tiny-llama opens")
}

/// A copy of tiny-llama whose config.json is edited by `edit`.
fn tiny_variant(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, ModelFolder) {
    let dir = tempfile::tempdir().unwrap();
    let source = repo_path("models/tiny-llama");
    for file in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        std::fs::copy(source.join(file), dir.path().join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap())
            .unwrap();
    edit(&mut config);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let folder = ModelFolder::open(dir.path()).unwrap();
    (dir, folder)
}

/// Four sequences that start at different steps, prefill in chunks of
/// different sizes and then decode, all sharing steps; after every step each
/// sequence's logits must equal a from-scratch prefill of its tokens so far.
fn mixed_steps_match_recompute(model: &mut dyn CausalLm, tolerance: f32) {
    let vocab = model.config().vocab_size;
    // (prompt length, prefill chunk, first step, tokens decoded)
    let plan = [(13, 5, 0, 6), (3, 3, 0, 8), (21, 8, 2, 3), (1, 1, 3, 4)];
    let mut seqs: Vec<Seq> = plan
        .iter()
        .enumerate()
        .map(|(i, &(prompt, _, _, decoded))| Seq::new(token_ids(i as u64, prompt + decoded, vocab)))
        .collect();
    let blocks = seqs
        .iter()
        .map(|s| s.tokens.len().div_ceil(BLOCK_SIZE))
        .sum::<usize>()
        + 3;
    let mut pool = Pool::new(model, blocks, BLOCK_SIZE);
    for step_index in 0..12 {
        let mut parts: Vec<(&mut Seq, usize)> = Vec::new();
        for (seq, &(prompt, chunk, first_step, _)) in seqs.iter_mut().zip(&plan) {
            let remaining = seq.tokens.len() - seq.cached;
            if step_index < first_step || remaining == 0 {
                continue;
            }
            let n = if seq.cached < prompt {
                chunk.min(prompt - seq.cached)
            } else {
                1
            };
            parts.push((seq, n));
        }
        if parts.is_empty() {
            break;
        }
        let rows = step(model, &mut pool, &mut parts);
        for ((seq, _), row) in parts.iter().zip(&rows) {
            let expected = recompute(model, &seq.tokens[..seq.cached], BLOCK_SIZE);
            let error = relative_error(row, &expected);
            assert!(
                error <= tolerance,
                "step {step_index}, sequence at {} tokens: relative error {error:e}",
                seq.cached
            );
        }
    }
    assert!(
        seqs.iter().all(|s| s.cached == s.tokens.len()),
        "plan ran to the end"
    );
}

#[test]
fn mixed_prefill_chunks_and_decodes_match_full_recompute() {
    let folder = tiny();
    assert!(folder.config().num_key_value_heads < folder.config().num_attention_heads);
    mixed_steps_match_recompute(load(&folder, None).as_mut(), 1e-5);
}

#[test]
fn multi_query_attention_matches_full_recompute() {
    let (_dir, folder) = tiny_variant(|c| c["num_key_value_heads"] = 1.into());
    mixed_steps_match_recompute(load(&folder, None).as_mut(), 1e-5);
}

#[test]
fn half_precision_caches_match_their_own_recompute() {
    let folder = tiny();
    for dtype in [DType::BF16, DType::F16] {
        let mut model = load(&folder, Some(dtype));
        // Batched and single-sequence steps round differently in 16 bits.
        mixed_steps_match_recompute(model.as_mut(), 0.05);
    }
}

#[test]
fn seeded_weights_are_deterministic_and_follow_the_seed() {
    let folder = tiny();
    let tokens = token_ids(9, 12, folder.config().vocab_size);
    let first = recompute(load(&folder, None).as_mut(), &tokens, BLOCK_SIZE);
    let again = recompute(load(&folder, None).as_mut(), &tokens, BLOCK_SIZE);
    assert_eq!(first, again, "same seed, same logits, bit for bit");
    let (_dir, other) = tiny_variant(|c| c["isobench_seed"] = 8.into());
    let different = recompute(load(&other, None).as_mut(), &tokens, BLOCK_SIZE);
    assert!(relative_error(&different, &first) > 0.1);
}

#[test]
fn shipped_folders_have_the_documented_sizes() {
    let tiny = tiny();
    assert_eq!(tiny.config().num_parameters(), 1_141_056);
    assert!(
        tiny.weight_files().is_empty(),
        "tiny-llama ships a seed, not weights"
    );
    let small = ModelFolder::open(repo_path("models/small-llama")).unwrap();
    assert_eq!(small.config().num_parameters(), 31_597_056);
    assert_eq!(small.tokenizer().vocab_size(), small.config().vocab_size);
}

#[test]
fn inconsistent_steps_and_foreign_caches_are_errors() {
    let folder = tiny();
    let mut model = load(&folder, None);
    let mut cache =
        KvCache::new(folder.config(), 8, BLOCK_SIZE, model.device(), DType::F32).unwrap();
    let good = StepBatch {
        token_ids: vec![5, 6],
        positions: vec![0, 1],
        slot_mapping: vec![8, 9],
        seqs: vec![SeqStep {
            num_new_tokens: 2,
            context_len: 2,
            block_table: vec![2],
        }],
    };
    model.forward(&good, &mut cache).unwrap();

    let mut wrong_slot = good.clone();
    wrong_slot.slot_mapping[1] = 30;
    let err = model.forward(&wrong_slot, &mut cache).unwrap_err();
    assert_eq!(err.kind(), "invalid_batch", "{err}");

    let mut too_long = good.clone();
    too_long.seqs[0].context_len = 9; // needs 3 blocks, has 1
    assert_eq!(
        model.forward(&too_long, &mut cache).unwrap_err().kind(),
        "invalid_batch"
    );

    let mut half =
        KvCache::new(folder.config(), 8, BLOCK_SIZE, model.device(), DType::BF16).unwrap();
    let err = model.forward(&good, &mut half).unwrap_err();
    assert_eq!(err.kind(), "cache_mismatch", "{err}");

    let (_dir, other) = tiny_variant(|c| c["num_hidden_layers"] = 3.into());
    let mut deeper =
        KvCache::new(other.config(), 8, BLOCK_SIZE, model.device(), DType::F32).unwrap();
    assert_eq!(
        model.forward(&good, &mut deeper).unwrap_err().kind(),
        "cache_mismatch"
    );
}

#[test]
fn cache_sizes() {
    let folder = tiny();
    let config = folder.config();
    // 2 (K and V) x 2 layers x 16 tokens x 2 kv heads x 16 dims x 4 bytes
    assert_eq!(KvCache::bytes_per_block(config, 16, DType::F32), 8_192);
    assert_eq!(KvCache::bytes_per_block(config, 16, DType::BF16), 4_096);
    let cache = KvCache::new(config, 10, 16, &isobench_model::Device::Cpu, DType::F32).unwrap();
    assert_eq!((cache.num_blocks(), cache.block_size()), (10, 16));
    assert_eq!(cache.max_blocks_per_seq(), 10, "capped by the pool");
    let cache = KvCache::new(config, 1000, 16, &isobench_model::Device::Cpu, DType::F32).unwrap();
    assert_eq!(cache.max_blocks_per_seq(), 2048 / 16);
    let cache = cache.with_context_limit(40);
    assert_eq!(
        cache.max_blocks_per_seq(),
        3,
        "40 tokens take 3 blocks of 16"
    );
    let cache = cache.with_context_limit(4096);
    assert_eq!(cache.max_blocks_per_seq(), 3, "a limit never widens");
    assert_eq!(
        KvCache::new(config, 0, 16, &isobench_model::Device::Cpu, DType::F32)
            .unwrap_err()
            .kind(),
        "cache_mismatch"
    );
}

/// The CPU step's kernels against candle's plain ops: the same mixed
/// prefill/decode steps give the same logits in every dtype (f32 within
/// accumulation-order rounding; f16/bf16 within the rounding of the plain
/// path's half-precision activations, which the CPU step keeps in f32).
#[test]
fn cpu_kernels_match_the_plain_candle_path_on_mixed_steps() {
    use isobench_model::{Device, ModelOptions, load_model_with};
    let folder = tiny();
    for (dtype, tolerance) in [(DType::F32, 1e-5), (DType::F16, 2e-2), (DType::BF16, 5e-2)] {
        let load = |own_kernels| {
            let options = ModelOptions {
                dtype: Some(dtype),
                own_kernels,
                ..ModelOptions::default()
            };
            load_model_with(&folder, &Device::Cpu, &options).unwrap()
        };
        let (mut ours, mut plain) = (load(true), load(false));
        let vocab = folder.config().vocab_size;
        let mut seqs: Vec<Seq> = (0..3)
            .map(|i| Seq::new(token_ids(40 + i, 30, vocab)))
            .collect();
        let mut pools = (
            Pool::new(ours.as_ref(), 40, BLOCK_SIZE),
            Pool::new(plain.as_ref(), 40, BLOCK_SIZE),
        );
        // Step 0 prefills 9, 1 and 17 tokens; later steps decode one each.
        for index in 0..6 {
            let news: Vec<usize> = if index == 0 {
                vec![9, 1, 17]
            } else {
                vec![1, 1, 1]
            };
            let mut twins = seqs.clone();
            let mut parts: Vec<(&mut Seq, usize)> = seqs.iter_mut().zip(news.clone()).collect();
            let a = step(ours.as_mut(), &mut pools.0, &mut parts);
            let mut parts: Vec<(&mut Seq, usize)> = twins.iter_mut().zip(news).collect();
            let b = step(plain.as_mut(), &mut pools.1, &mut parts);
            for (x, y) in a.iter().zip(&b) {
                let error = relative_error(x, y);
                assert!(error <= tolerance, "{dtype:?} step {index}: {error:e}");
            }
        }
    }
}
