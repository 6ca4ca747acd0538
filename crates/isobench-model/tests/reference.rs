//! isobench-model against Hugging Face transformers.
//!
//! The fixtures (made by scripts/make-reference-fixture.py) are a tiny
//! random Llama (GQA, Llama 3 rope scaling, f32 weights) and a tiny random
//! Qwen2 (GQA, q/k/v bias, tied embeddings, bf16 weights), each with the
//! reference's f32 logits at every position of prompt + greedy continuation
//! and the greedy tokens. Each fixture is checked through the normal loader
//! as one full prefill, as prefill + paged decode and as chunked prefill,
//! with 4-token blocks handed out in scrambled order.
//!
//! Logits must match within a relative error of 1e-4, measured per row as
//! `max |ours - reference| / max |reference|`, and greedy tokens exactly.

mod common;

use std::collections::HashMap;

use common::{Pool, Seq, fixture_path, load, relative_error, step};
use isobench_model::{CausalLm, DType, Device, ModelFolder, Tensor, argmax};
use serde::Deserialize;

const TOLERANCE: f32 = 1e-4;
const BLOCK_SIZE: usize = 4;

#[derive(Deserialize)]
struct Reference {
    prompts: Vec<PromptReference>,
}

#[derive(Deserialize)]
struct PromptReference {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
}

struct Case {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    /// [prompt + greedy, vocab]: row i predicts token i + 1.
    logits: Vec<Vec<f32>>,
}

impl Case {
    fn sequence(&self) -> Vec<u32> {
        [self.prompt.as_slice(), self.greedy.as_slice()].concat()
    }
}

fn fixture(name: &str) -> (ModelFolder, Vec<Case>) {
    let dir = fixture_path(name);
    let folder = ModelFolder::open(&dir).expect("fixture folder opens");
    let reference: Reference = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
    )
    .expect("reference.json parses");
    let mut logits: HashMap<String, Tensor> =
        candle_core::safetensors::load(dir.join("reference.safetensors"), &Device::Cpu)
            .expect("reference.safetensors");
    let cases = reference
        .prompts
        .into_iter()
        .enumerate()
        .map(|(i, p)| Case {
            logits: logits
                .remove(&format!("logits.{i}"))
                .expect("logits for every prompt")
                .to_vec2()
                .expect("f32 logits"),
            prompt: p.prompt,
            greedy: p.greedy,
        })
        .collect();
    (folder, cases)
}

fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    let error = relative_error(actual, expected);
    assert!(error <= TOLERANCE, "{what}: relative error {error:e}");
}

/// Every prefix of every prompt + continuation as its own sequence, all in
/// one prefill step: full-prefill logits at every position.
fn every_prefix_in_one_prefill(name: &str) {
    let (folder, cases) = fixture(name);
    let mut model = load(&folder, None);
    for (c, case) in cases.iter().enumerate() {
        let sequence = case.sequence();
        let mut seqs: Vec<Seq> = (1..=sequence.len())
            .map(|len| Seq::new(sequence[..len].to_vec()))
            .collect();
        let blocks = seqs
            .iter()
            .map(|s| s.tokens.len().div_ceil(BLOCK_SIZE))
            .sum();
        let mut pool = Pool::new(model.as_ref(), blocks, BLOCK_SIZE);
        let mut parts: Vec<(&mut Seq, usize)> = seqs
            .iter_mut()
            .map(|s| {
                let len = s.tokens.len();
                (s, len)
            })
            .collect();
        let rows = step(model.as_mut(), &mut pool, &mut parts);
        for (position, row) in rows.iter().enumerate() {
            assert_close(
                row,
                &case.logits[position],
                &format!("{name} prompt {c} position {position}"),
            );
        }
    }
}

/// All prompts prefilled together, then decoded together, feeding back our
/// own argmax: greedy tokens and every step's logits match.
fn prefill_then_paged_decode(model: &mut dyn CausalLm, name: &str, cases: &[Case]) {
    let blocks = cases
        .iter()
        .map(|c| c.sequence().len().div_ceil(BLOCK_SIZE))
        .sum();
    let mut pool = Pool::new(model, blocks, BLOCK_SIZE);
    let mut seqs: Vec<Seq> = cases.iter().map(|c| Seq::new(c.prompt.clone())).collect();
    let mut new_tokens: Vec<usize> = cases.iter().map(|c| c.prompt.len()).collect();
    let steps = cases[0].greedy.len();
    for decode_step in 0..steps {
        let mut parts: Vec<(&mut Seq, usize)> =
            seqs.iter_mut().zip(new_tokens.iter().copied()).collect();
        let rows = step(model, &mut pool, &mut parts);
        for ((seq, case), row) in seqs.iter_mut().zip(cases).zip(&rows) {
            let position = seq.cached - 1;
            assert_close(
                row,
                &case.logits[position],
                &format!("{name} step {decode_step} position {position}"),
            );
            let token = argmax(row);
            assert_eq!(
                token, case.greedy[decode_step],
                "{name}: greedy token {decode_step}"
            );
            seq.tokens.push(token);
        }
        new_tokens.fill(1);
    }
}

/// The whole sequence fed in chunks of 3 tokens; logits at each chunk end.
fn chunked_prefill(name: &str) {
    let (folder, cases) = fixture(name);
    let mut model = load(&folder, None);
    for (c, case) in cases.iter().enumerate() {
        let sequence = case.sequence();
        let mut pool = Pool::new(
            model.as_ref(),
            sequence.len().div_ceil(BLOCK_SIZE),
            BLOCK_SIZE,
        );
        let mut seq = Seq::new(sequence.clone());
        while seq.cached < sequence.len() {
            let chunk = 3.min(sequence.len() - seq.cached);
            let row = step(model.as_mut(), &mut pool, &mut [(&mut seq, chunk)]).remove(0);
            let position = seq.cached - 1;
            assert_close(
                &row,
                &case.logits[position],
                &format!("{name} prompt {c} chunk ending at {position}"),
            );
        }
    }
}

#[test]
fn llama_full_prefill_matches_transformers_at_every_position() {
    every_prefix_in_one_prefill("llama");
}

#[test]
fn qwen2_full_prefill_matches_transformers_at_every_position() {
    every_prefix_in_one_prefill("qwen2");
}

#[test]
fn llama_paged_decode_reproduces_greedy_tokens_and_logits() {
    let (folder, cases) = fixture("llama");
    prefill_then_paged_decode(load(&folder, None).as_mut(), "llama", &cases);
}

#[test]
fn qwen2_paged_decode_reproduces_greedy_tokens_and_logits() {
    let (folder, cases) = fixture("qwen2");
    prefill_then_paged_decode(load(&folder, None).as_mut(), "qwen2", &cases);
}

#[test]
fn llama_chunked_prefill_matches_transformers() {
    chunked_prefill("llama");
}

#[test]
fn qwen2_chunked_prefill_matches_transformers() {
    chunked_prefill("qwen2");
}

#[test]
fn fixtures_cover_gqa_rope_scaling_bias_and_tied_embeddings() {
    let (llama, _) = fixture("llama");
    let config = llama.config();
    assert!(config.num_key_value_heads < config.num_attention_heads);
    assert!(matches!(
        config.rope_scaling,
        isobench_model::RopeScaling::Llama3 { .. }
    ));
    let (qwen2, _) = fixture("qwen2");
    let config = qwen2.config();
    assert!(config.qkv_bias && config.tie_word_embeddings);
    assert!(config.num_key_value_heads < config.num_attention_heads);
    assert_eq!(config.torch_dtype, Some(DType::BF16));
}

#[test]
fn half_precision_compute_stays_near_the_reference() {
    let (folder, cases) = fixture("llama");
    for dtype in [DType::F16, DType::BF16] {
        let mut model = load(&folder, Some(dtype));
        assert_eq!(model.dtype(), dtype);
        let case = &cases[2];
        let mut pool = Pool::new(
            model.as_ref(),
            case.prompt.len().div_ceil(BLOCK_SIZE),
            BLOCK_SIZE,
        );
        let mut seq = Seq::new(case.prompt.clone());
        let len = case.prompt.len();
        let row = step(model.as_mut(), &mut pool, &mut [(&mut seq, len)]).remove(0);
        let error = relative_error(&row, &case.logits[len - 1]);
        println!("{dtype:?}: relative error {error:e}");
        assert!(error < 0.05, "{dtype:?}: relative error {error:e}");
    }
}
