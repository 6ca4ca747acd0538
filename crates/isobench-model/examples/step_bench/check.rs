//! `--check`: the GPU runtime against the CPU, for the model of `--model`
//! (models/small-llama by default) with its seeded weights.
//!
//! Three prompts (5, 17 and 33 tokens: with graphs, their prefill replays
//! the graph of 64 tokens over 4 rows, and a decode batch of 3 the
//! bucket-4 graph, each with one padded row) are prefilled in one step and
//! decoded greedily for 24 steps, feeding back each step's argmax:
//!
//! 1. CUDA f32, graphs off: the same tokens as the CPU's f32 path;
//! 2. CUDA f32, graphs on: the same tokens, and every step (the prefill and
//!    each decode step) replayed a graph;
//! 3. CUDA bf16, graphs on and off, fed the f32 reference's tokens: logits
//!    within [`BF16_TOLERANCE`] of the f32 reference, per row
//!    `max |bf16 - f32| / max |f32|` (the bound the transformers fixtures
//!    hold f16 and bf16 to), and graphs on within [`GRAPH_TOLERANCE`] of
//!    graphs off.
//! 4. The first prompt alone, so that its decode steps are single-token
//!    steps, which run on this crate's kernels (src/decode.rs): CUDA f32
//!    with graphs, the same tokens as the CPU's run of that prompt, every
//!    step replayed; CUDA bf16 within [`BF16_TOLERANCE`] of it, and
//!    of the same run on candle's plain ops (`own_kernels` off).
//! 5. candle's plain ops for the three prompts: f32 tokens equal the
//!    CPU's, bf16 within [`BF16_TOLERANCE`] of the f32 reference.
//! 6. The runs of this crate's kernels over the three prompts (f32 and
//!    bf16, eager and graphs) took the fused elementwise ops (src/fused.rs)
//!    at every call: no step fell back to candle's ops.
//!
//! Prints PASS or FAIL per check; the exit code is 1 if any failed.

use isobench_model::{
    CausalLm, DType, KvCache, ModelFolder, ModelOptions, SeqStep, StepBatch, WeightCache, argmax,
    load_model_cached, parse_device,
};

use crate::{Args, Result};

const PROMPT_LENS: [usize; 3] = [5, 17, 33];
const DECODE_STEPS: usize = 24;
/// The prefill step and the decode steps.
const STEPS: usize = DECODE_STEPS + 1;
const BLOCK_SIZE: usize = 16;
/// bf16 logits against the f32 reference, relative to the row's largest.
const BF16_TOLERANCE: f64 = 0.05;
/// f32 logits, GPU against CPU; bf16 logits, graphs on against off.
const F32_TOLERANCE: f64 = 1e-3;
const GRAPH_TOLERANCE: f64 = 1e-2;

/// What a greedy run produced: tokens per sequence, logits per decision
/// (one row per sequence per step), how many steps replayed a graph, and
/// how many fused-op calls fell back to candle's ops.
struct Run {
    tokens: Vec<Vec<u32>>,
    logits: Vec<Vec<f32>>,
    replayed_steps: usize,
    fused_fallbacks: usize,
}

/// Runs `prompts` (lengths) and `DECODE_STEPS` decode steps; with
/// `forced`, feeds its tokens instead of the argmax.
fn greedy(model: &mut dyn CausalLm, prompts: &[usize], forced: Option<&[Vec<u32>]>) -> Result<Run> {
    let vocab = model.config().vocab_size as u32;
    let longest = prompts.iter().copied().max().unwrap_or(0);
    let blocks_per_seq = (longest + DECODE_STEPS).div_ceil(BLOCK_SIZE);
    let mut cache = KvCache::new(
        model.config(),
        prompts.len() * blocks_per_seq,
        BLOCK_SIZE,
        model.device(),
        model.dtype(),
    )?;
    // Sequence i owns blocks i, i + 3, i + 6...: interleaved, not contiguous.
    let seqs = prompts.len();
    let slot = |seq: usize, position: usize| {
        ((position / BLOCK_SIZE * seqs + seq) * BLOCK_SIZE + position % BLOCK_SIZE) as u32
    };
    let table = |seq: usize, len: usize| -> Vec<u32> {
        (0..len.div_ceil(BLOCK_SIZE))
            .map(|b| (b * seqs + seq) as u32)
            .collect()
    };
    let mut run = Run {
        tokens: vec![Vec::new(); seqs],
        logits: Vec::new(),
        replayed_steps: 0,
        fused_fallbacks: 0,
    };
    let mut contexts = vec![0usize; seqs];
    let mut step = StepBatch::default();
    for (seq, &len) in prompts.iter().enumerate() {
        for position in 0..len {
            step.token_ids
                .push((seq as u32 * 7919 + position as u32 * 104_729) % (vocab - 5) + 5);
            step.positions.push(position as u32);
            step.slot_mapping.push(slot(seq, position));
        }
        step.seqs.push(SeqStep {
            num_new_tokens: len as u32,
            context_len: len as u32,
            block_table: table(seq, len),
        });
        contexts[seq] = len;
    }
    for decode in 0..=DECODE_STEPS {
        let logits = model.forward(&step, &mut cache)?.to_vec2::<f32>()?;
        let stats = model.last_step();
        run.replayed_steps += usize::from(stats.graph_replayed);
        run.fused_fallbacks += stats.fused_fallbacks;
        step = StepBatch::default();
        for (seq, row) in logits.into_iter().enumerate() {
            let next = match forced {
                Some(tokens) => tokens[seq][decode],
                None => argmax(&row),
            };
            run.tokens[seq].push(next);
            run.logits.push(row);
            if decode == DECODE_STEPS {
                continue;
            }
            let position = contexts[seq];
            contexts[seq] += 1;
            step.token_ids.push(next);
            step.positions.push(position as u32);
            step.slot_mapping.push(slot(seq, position));
            step.seqs.push(SeqStep {
                num_new_tokens: 1,
                context_len: contexts[seq] as u32,
                block_table: table(seq, contexts[seq]),
            });
        }
    }
    Ok(run)
}

/// The largest per-row `max |got - want| / max |want|`.
fn max_relative_diff(got: &[Vec<f32>], want: &[Vec<f32>]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let scale = w.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
            let diff = g
                .iter()
                .zip(w)
                .fold(0f64, |m, (a, b)| m.max(f64::from((a - b).abs())));
            diff / scale.max(f64::MIN_POSITIVE)
        })
        .fold(0.0, f64::max)
}

fn report(passed: &mut bool, ok: bool, what: String) {
    println!("{} {what}", if ok { "PASS" } else { "FAIL" });
    *passed &= ok;
}

pub(crate) fn run(args: &Args) -> Result<bool> {
    let gpu = parse_device(&args.device)?;
    if gpu.is_cpu() {
        return Err("--check compares a GPU with the CPU: give --device cuda or cuda:N".into());
    }
    let folder = ModelFolder::open(&args.model)?;
    let options = |dtype, cuda_graphs, own_kernels| ModelOptions {
        dtype: Some(dtype),
        cuda_graphs,
        own_kernels,
        ..ModelOptions::default()
    };
    // Eleven models of three (dtype, device) pairs: each pair's tensors are
    // generated once and shared.
    let cache = WeightCache::new();
    let load = |device, dtype, graphs| {
        load_model_cached(&folder, device, &options(dtype, graphs, true), &cache)
    };
    let load_plain =
        |dtype| load_model_cached(&folder, &gpu, &options(dtype, false, false), &cache);
    println!(
        "check: {} ({:.1} M parameters), prompts of {PROMPT_LENS:?} tokens, {DECODE_STEPS} greedy decode steps",
        folder.name(),
        folder.config().num_parameters() as f64 / 1e6
    );
    let cpu = || load(&isobench_model::Device::Cpu, DType::F32, false);
    let all = &PROMPT_LENS[..];
    let reference = greedy(cpu()?.as_mut(), all, None)?;
    let eager = greedy(load(&gpu, DType::F32, false)?.as_mut(), all, None)?;
    let graphs = greedy(load(&gpu, DType::F32, true)?.as_mut(), all, None)?;
    let forced = Some(reference.tokens.as_slice());
    let bf16_eager = greedy(load(&gpu, DType::BF16, false)?.as_mut(), all, forced)?;
    let bf16_graphs = greedy(load(&gpu, DType::BF16, true)?.as_mut(), all, forced)?;
    let plain = greedy(load_plain(DType::F32)?.as_mut(), all, None)?;
    let bf16_plain = greedy(load_plain(DType::BF16)?.as_mut(), all, forced)?;
    let one = &PROMPT_LENS[..1];
    let alone_reference = greedy(cpu()?.as_mut(), one, None)?;
    let alone = greedy(load(&gpu, DType::F32, true)?.as_mut(), one, None)?;
    let forced_alone = Some(alone_reference.tokens.as_slice());
    let bf16_alone = greedy(load(&gpu, DType::BF16, true)?.as_mut(), one, forced_alone)?;
    let bf16_alone_plain = greedy(load_plain(DType::BF16)?.as_mut(), one, forced_alone)?;

    let mut passed = true;
    let diff = max_relative_diff(&eager.logits, &reference.logits);
    report(
        &mut passed,
        eager.tokens == reference.tokens && diff <= F32_TOLERANCE,
        format!(
            "f32 GPU eager = CPU: same greedy tokens, logits max rel diff {diff:.2e} (<= {F32_TOLERANCE:.0e})"
        ),
    );
    let diff = max_relative_diff(&graphs.logits, &eager.logits);
    report(
        &mut passed,
        graphs.tokens == eager.tokens && graphs.replayed_steps == STEPS && diff <= F32_TOLERANCE,
        format!(
            "f32 GPU graphs = eager: same greedy tokens, {}/{STEPS} steps replayed (prefill and decode), logits max rel diff {diff:.2e}",
            graphs.replayed_steps
        ),
    );
    for (name, run) in [("eager", &bf16_eager), ("graphs", &bf16_graphs)] {
        let diff = max_relative_diff(&run.logits, &reference.logits);
        report(
            &mut passed,
            diff <= BF16_TOLERANCE,
            format!(
                "bf16 GPU {name} vs f32 CPU (teacher-forced): logits max rel diff {diff:.3} (<= {BF16_TOLERANCE})"
            ),
        );
    }
    let diff = max_relative_diff(&bf16_graphs.logits, &bf16_eager.logits);
    report(
        &mut passed,
        diff <= GRAPH_TOLERANCE && bf16_graphs.replayed_steps == STEPS,
        format!(
            "bf16 GPU graphs vs eager: logits max rel diff {diff:.2e} (<= {GRAPH_TOLERANCE:.0e}), {}/{STEPS} replayed",
            bf16_graphs.replayed_steps
        ),
    );
    let diff = max_relative_diff(&plain.logits, &reference.logits);
    report(
        &mut passed,
        plain.tokens == reference.tokens && diff <= F32_TOLERANCE,
        format!(
            "f32 GPU plain ops = CPU: same greedy tokens, logits max rel diff {diff:.2e} (<= {F32_TOLERANCE:.0e})"
        ),
    );
    let diff = max_relative_diff(&alone.logits, &alone_reference.logits);
    report(
        &mut passed,
        alone.tokens == alone_reference.tokens
            && alone.replayed_steps == STEPS
            && diff <= F32_TOLERANCE,
        format!(
            "f32 GPU one sequence (single-token kernels, graphs) = CPU: same greedy tokens, {}/{STEPS} replayed, logits max rel diff {diff:.2e}",
            alone.replayed_steps
        ),
    );
    let pairs = [
        (
            "plain ops vs f32 CPU",
            &bf16_plain.logits,
            &reference.logits,
        ),
        (
            "one sequence (single-token kernels) vs f32 CPU",
            &bf16_alone.logits,
            &alone_reference.logits,
        ),
        (
            "one sequence, single-token kernels vs plain ops (both bf16)",
            &bf16_alone.logits,
            &bf16_alone_plain.logits,
        ),
    ];
    for (name, got, want) in pairs {
        let diff = max_relative_diff(got, want);
        report(
            &mut passed,
            diff <= BF16_TOLERANCE,
            format!("bf16 GPU {name}: logits max rel diff {diff:.3} (<= {BF16_TOLERANCE})"),
        );
    }
    let fallbacks = [&eager, &graphs, &bf16_eager, &bf16_graphs].map(|run| run.fused_fallbacks);
    report(
        &mut passed,
        fallbacks.iter().all(|&count| count == 0),
        format!(
            "fused ops taken at every call of the three-prompt runs: fallbacks to candle's ops {fallbacks:?} (f32 eager, f32 graphs, bf16 eager, bf16 graphs; all 0)"
        ),
    );
    println!("{}", if passed { "CHECK PASS" } else { "CHECK FAIL" });
    Ok(passed)
}
