//! GPU check of the paged-attention kernels, the fused elementwise
//! kernels, the greedy-token argmax and the sampler (`--features cuda`,
//! run on the GPU machine; docs/gpu.md).
//!
//! 1. Correctness: on fresh random inputs, the CUDA `write_kv` must leave
//!    the cache bit-identical to the CPU kernel's (a padding slot writing
//!    nowhere), and CUDA attention must match the CPU kernel run in f32 on
//!    the same rounded inputs: relative error under 1e-4 for f32 and 1e-2
//!    for f16 and bf16. Block sizes 8/16/32, GQA ratios 1/4/8 (plus 7 and
//!    16), head dims 64 and 128 (plus 16, 32 and 256), contexts 1 to 4097
//!    in one decode batch and in one mixed prefill + decode batch, block
//!    tables scrambled and filled past each context with other rows'
//!    blocks (a graph's stale columns), and steps with prompts of 300 to
//!    1,000 new tokens (bf16 and f16: the tensor-core kernel's tiles).
//!    Outputs are poisoned with NaN first.
//! 2. A decode step (write_kv + attention) captured in a CUDA graph and
//!    replayed with new inputs must equal the eager step.
//! 3. The fused kernels of steps of several tokens (src/fused.rs) against
//!    candle's ops in f32 on the same rounded inputs, bf16/f16/f32, rows
//!    of 64 to 14,336 values: `silu_mul` and the RMSNorm of `add_rms_norm`
//!    within 1e-6 (f32) and 1e-2 relative error, its sum equal to
//!    candle's add; `silu_mul` as the model calls it (gate and up the two
//!    halves of each row), which must count a fallback to candle's ops for
//!    a view of some columns and for unaligned tensors and none for
//!    contiguous ones; and `rope_write_kv` (RoPE on the q/k/v product, k
//!    and v into scrambled cache slots, padding rows writing nowhere)
//!    against candle's rope and `write_kv`; `to_f32`, the logits' cast,
//!    identical to candle's cast, one fallback counted for a tensor that is
//!    not whole 16-byte vectors and none otherwise.
//! 4. Timing: bf16 decode attention of a Llama-3-8B layer (32 heads, 8 KV
//!    heads, head_dim 128, block size 16, table width for 4096 tokens) at
//!    context 1024, batch 1/8/32/64/128, and with the table width a served
//!    8B model has (131,072 tokens) at context 512, batch 1/8/64; mean of
//!    100 launches after
//!    warm-up (synchronize + host clock), eager and replayed from a CUDA
//!    graph, with the KV bytes read per second of the replayed launch.
//!    Then the attention of one whole prompt of 512, 2,048 and 8,192
//!    tokens on the 8B and 1B layer shapes (bf16), mean of 20 launches,
//!    and its rate in TFLOP/s.
//! 5. `greedy_tokens` on the GPU must choose what it chooses on the host
//!    for the same logits: 1 to 128 rows of 7, 4,097 and 128,256 columns,
//!    random, with the maximum planted again at a later index (a tie), NaNs
//!    and -0/+0; then its time against candle's argmax (both bringing the
//!    tokens to the host), mean of 100 calls.
//! 6. `sample_tokens` on the GPU must draw what its host path draws for
//!    the same logits and draws: 1 to 100 rows of 7, 4,097, 12,288, 50,001
//!    and 128,256 columns (so 1, 2, 4 and 8 blocks a row), logits spread
//!    wide, narrow, in few distinct values (ties) and with NaNs,
//!    temperatures 0.3 to 2.5, top_p 0.1 to 1, top_k none to past the
//!    vocabulary; then its time with the tokens brought to the host, 1 to
//!    128 rows, beside copying the rows' logits to the host (what a
//!    server that samples on the host does first), mean of 100 calls.
//!
//! One PASS/FAIL line per case, `GPU KERNELS OK` at the end; the exit code
//! is non-zero if anything failed.

use std::process::ExitCode;
use std::time::Instant;

use candle_core::cuda_backend::WrapErr;
use candle_core::cuda_backend::cudarc::driver::CudaGraph;
use candle_core::cuda_backend::cudarc::driver::sys::{
    CUgraphInstantiate_flags, CUstreamCaptureMode,
};
use candle_core::{DType, Device, Result, Tensor};
use isobench_model::kernels_for_checks::{
    add_rms_norm, paged_attention, rope_write_kv, silu_mul, silu_mul_counted, to_f32_counted,
    write_kv,
};
use isobench_model::{Draw, greedy_tokens, sample_tokens};

const PADDING_SLOT: u32 = u32::MAX;

/// Deterministic values in [-1, 1) (xorshift), fresh per call.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn values(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }

    /// 0, 1, ..., n - 1 in a random order.
    fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut items: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            items.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
        items
    }
}

/// The model shape of one check.
#[derive(Clone, Copy)]
struct Shape {
    dtype: DType,
    block_size: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

/// One step: per sequence (context length, new tokens), its table filled
/// past the context with random valid blocks; `padded` adds a padding row
/// (context 1, zero block table, PADDING_SLOT).
struct Step {
    seqs: Vec<(usize, usize)>,
    padded: bool,
}

/// The step's inputs on the CPU (in the check's dtype) and the GPU.
struct Inputs {
    q: Tensor,
    new_k: Tensor,
    new_v: Tensor,
    key_cache: Tensor,
    value_cache: Tensor,
    slots: Tensor,
    tables: Tensor,
    lens: Tensor,
    starts: Tensor,
}

impl Inputs {
    fn new(shape: Shape, step: &Step, random: &mut Random) -> Result<Self> {
        let Shape {
            dtype,
            block_size,
            num_heads,
            num_kv_heads,
            head_dim,
        } = shape;
        let blocks_of = |context: usize| context.div_ceil(block_size);
        let used: usize = step
            .seqs
            .iter()
            .map(|&(context, _)| blocks_of(context))
            .sum();
        let num_blocks = used + 3;
        let width = step
            .seqs
            .iter()
            .map(|&(c, _)| blocks_of(c))
            .max()
            .unwrap_or(1)
            + 2;
        // Blocks handed out in a random order; block 0 may be anyone's.
        let mut order = random.permutation(num_blocks).into_iter();
        let (mut tables, mut lens, mut starts, mut slots) = (vec![], vec![], vec![0u32], vec![]);
        for &(context, new) in &step.seqs {
            let row: Vec<u32> = order.by_ref().take(blocks_of(context)).collect();
            for position in context - new..context {
                slots.push(
                    row[position / block_size] * block_size as u32 + (position % block_size) as u32,
                );
            }
            // Past the context, valid blocks of other rows, as the
            // stale columns of a graph's static tables hold: no kernel
            // may read them.
            let stale = (row.len()..width).map(|_| (random.next() % num_blocks as u64) as u32);
            tables.extend(row.into_iter().chain(stale));
            lens.push(context as u32);
            starts.push(starts.last().unwrap() + new as u32);
        }
        if step.padded {
            tables.extend(std::iter::repeat_n(0, width));
            lens.push(1);
            starts.push(starts.last().unwrap() + 1);
            slots.push(PADDING_SLOT);
        }
        let seqs = lens.len();
        let tokens = slots.len();
        let cpu = &Device::Cpu;
        let kv_row = num_kv_heads * head_dim;
        let tensor = |values: Vec<f32>, dims: &[usize]| -> Result<Tensor> {
            Tensor::from_vec(values, dims, cpu)?.to_dtype(dtype)
        };
        let cache_dims = [num_blocks, block_size, num_kv_heads, head_dim];
        Ok(Self {
            q: tensor(
                random.values(tokens * num_heads * head_dim),
                &[1, tokens, num_heads, head_dim],
            )?,
            new_k: tensor(
                random.values(tokens * kv_row),
                &[tokens, num_kv_heads, head_dim],
            )?,
            new_v: tensor(random.values(tokens * kv_row), &[tokens, kv_row])?,
            key_cache: tensor(random.values(num_blocks * block_size * kv_row), &cache_dims)?,
            value_cache: tensor(random.values(num_blocks * block_size * kv_row), &cache_dims)?,
            slots: Tensor::from_vec(slots, tokens, cpu)?,
            tables: Tensor::from_vec(tables, (seqs, width), cpu)?,
            lens: Tensor::from_vec(lens, seqs, cpu)?,
            starts: Tensor::from_vec(starts, seqs + 1, cpu)?,
        })
    }

    fn to_device(&self, device: &Device) -> Result<Self> {
        Ok(Self {
            q: self.q.to_device(device)?,
            new_k: self.new_k.to_device(device)?,
            new_v: self.new_v.to_device(device)?,
            key_cache: self.key_cache.to_device(device)?,
            value_cache: self.value_cache.to_device(device)?,
            slots: self.slots.to_device(device)?,
            tables: self.tables.to_device(device)?,
            lens: self.lens.to_device(device)?,
            starts: self.starts.to_device(device)?,
        })
    }

    fn write(&self) -> Result<()> {
        write_kv(&self.key_cache, &self.new_k, &self.slots)?;
        write_kv(&self.value_cache, &self.new_v, &self.slots)
    }

    fn attend(&self, num_heads: usize) -> Result<Tensor> {
        paged_attention(
            &self.q,
            (&self.key_cache, &self.value_cache),
            (&self.tables, &self.lens, &self.starts),
            num_heads,
        )
    }
}

fn to_f32(t: &Tensor) -> Result<Vec<f32>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1()
}

/// ||got - want|| / ||want||; NaN if anything is NaN.
fn relative_error(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    if got.len() != want.len() {
        return f64::NAN;
    }
    (num / den).sqrt()
}

/// Fills freed device memory with all-ones bits (NaN in every float
/// dtype), so an output element the kernel forgets to write shows up: the
/// stream-ordered allocator hands these bytes to the next allocation.
fn poison(device: &Device, elems: usize) -> Result<()> {
    drop(Tensor::full(u32::MAX, elems, device)?);
    Ok(())
}

/// Runs one check; returns whether it passed.
fn check(
    device: &Device,
    shape: Shape,
    step: &Step,
    name: &str,
    random: &mut Random,
) -> Result<bool> {
    let cpu = Inputs::new(shape, step, random)?;
    let gpu = cpu.to_device(device)?;
    cpu.write()?;
    gpu.write()?;
    let caches_equal = to_f32(&cpu.key_cache)? == to_f32(&gpu.key_cache)?
        && to_f32(&cpu.value_cache)? == to_f32(&gpu.value_cache)?;
    // The reference: the CPU kernel in f32 on the same rounded inputs.
    let reference = Inputs {
        q: cpu.q.to_dtype(DType::F32)?,
        key_cache: cpu.key_cache.to_dtype(DType::F32)?,
        value_cache: cpu.value_cache.to_dtype(DType::F32)?,
        ..cpu
    };
    let want = to_f32(&reference.attend(shape.num_heads)?)?;
    poison(device, want.len() * 4)?;
    let got = to_f32(&gpu.attend(shape.num_heads)?)?;
    let error = relative_error(&got, &want);
    let tolerance = if shape.dtype == DType::F32 {
        1e-4
    } else {
        1e-2
    };
    let pass = caches_equal && error < tolerance;
    println!(
        "{} {name}: write_kv {}, attention rel. error {error:.2e} (limit {tolerance:.0e})",
        if pass { "PASS" } else { "FAIL" },
        if caches_equal { "identical" } else { "DIFFERS" },
    );
    Ok(pass)
}

fn correctness(device: &Device, random: &mut Random) -> Result<bool> {
    let contexts = [1, 7, 16, 100, 1000, 4097];
    let decode = Step {
        seqs: contexts.iter().map(|&c| (c, 1)).collect(),
        padded: true,
    };
    // Whole prompts, a chunk after a cached prefix, and decodes in one step.
    let mixed = Step {
        seqs: vec![(100, 100), (1000, 37), (7, 1), (4097, 1), (16, 16), (1, 1)],
        padded: false,
    };
    // Long ones: dozens of tiles of the tensor-core kernel, each walking
    // up to a hundred key chunks.
    let long = Step {
        seqs: vec![(1000, 1000), (1500, 300), (50, 1)],
        padded: true,
    };
    let mut all = true;
    let mut run = |shape: Shape, all: &mut bool| -> Result<()> {
        let Shape {
            dtype,
            block_size,
            num_heads,
            num_kv_heads,
            head_dim,
        } = shape;
        let what = format!("{dtype:?} bs{block_size} heads {num_heads}/{num_kv_heads} d{head_dim}");
        *all &= check(
            device,
            shape,
            &decode,
            &format!("decode {what} ctx {contexts:?}+pad"),
            random,
        )?;
        *all &= check(device, shape, &mixed, &format!("mixed  {what}"), random)?;
        if block_size == 16 && dtype != DType::F32 {
            *all &= check(device, shape, &long, &format!("long   {what}"), random)?;
        }
        Ok(())
    };
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for head_dim in [64, 128] {
            for (num_heads, num_kv_heads) in [(4, 4), (16, 4), (16, 2)] {
                for block_size in [8, 16, 32] {
                    let shape = Shape {
                        dtype,
                        block_size,
                        num_heads,
                        num_kv_heads,
                        head_dim,
                    };
                    run(shape, &mut all)?;
                }
            }
        }
    }
    // Group sizes that need masking or two blocks per KV head, and the
    // other compiled head dims (tiny-llama's is 16).
    let extra = [
        (DType::BF16, 16, 28, 4, 128),
        (DType::BF16, 16, 32, 2, 128),
        (DType::F32, 4, 4, 2, 16),
        (DType::F16, 16, 8, 8, 32),
        (DType::BF16, 16, 8, 2, 256),
        (DType::F32, 16, 8, 2, 256),
    ];
    for (dtype, block_size, num_heads, num_kv_heads, head_dim) in extra {
        let shape = Shape {
            dtype,
            block_size,
            num_heads,
            num_kv_heads,
            head_dim,
        };
        run(shape, &mut all)?;
    }
    Ok(all)
}

/// A decode step captured in a CUDA graph, replayed after its inputs
/// changed in place, against the same step run eagerly.
fn graph_replay(device: &Device, random: &mut Random) -> Result<bool> {
    let shape = Shape {
        dtype: DType::BF16,
        block_size: 16,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
    };
    let step = Step {
        seqs: vec![
            (300, 1),
            (1000, 1),
            (5, 1),
            (2000, 1),
            (64, 1),
            (1, 1),
            (777, 1),
        ],
        padded: true,
    };
    let gpu = Inputs::new(shape, &step, random)?.to_device(device)?;
    let out = Tensor::zeros((step.seqs.len() + 1, 32 * 128), DType::BF16, device)?;
    let run_step = || -> Result<()> {
        gpu.write()?;
        out.slice_set(&gpu.attend(shape.num_heads)?, 0, 0)
    };
    run_step()?; // loads the kernels outside the capture
    let graph = capture(device, run_step)?;
    // New queries and new K/V, written in place; the graph reads them.
    let fresh = Inputs::new(shape, &step, random)?;
    for (target, source) in [
        (&gpu.q, &fresh.q),
        (&gpu.new_k, &fresh.new_k),
        (&gpu.new_v, &fresh.new_v),
    ] {
        target.slice_set(&source.to_device(device)?, 0, 0)?;
    }
    graph.launch().w()?;
    device.synchronize()?;
    let replayed = to_f32(&out)?;
    run_step()?;
    let eager = to_f32(&out)?;
    let pass = replayed == eager && replayed.iter().all(|v| v.is_finite());
    println!(
        "{} graph: write_kv + decode attention (batch 8, one padding row) replayed with new inputs {} the eager step",
        if pass { "PASS" } else { "FAIL" },
        if pass { "equals" } else { "DIFFERS FROM" }
    );
    Ok(pass)
}

/// Decode attention of one Llama-3-8B layer at `CONTEXT` tokens per
/// sequence, block tables `width` blocks wide.
fn timing<const CONTEXT: usize>(
    device: &Device,
    random: &mut Random,
    width: usize,
    batches: &[usize],
) -> Result<()> {
    const ITERATIONS: u32 = 100;
    let (num_heads, num_kv_heads, head_dim, block_size) = (32, 8, 128, 16);
    println!(
        "decode attention, bf16, {num_heads} heads / {num_kv_heads} KV heads / head_dim {head_dim}, block size {block_size}, table width {width} blocks, context {CONTEXT}:"
    );
    for &batch in batches {
        let blocks = batch * CONTEXT / block_size;
        let cache_dims = (blocks, block_size, num_kv_heads, head_dim);
        let cache = || Tensor::rand(-1f32, 1f32, cache_dims, device)?.to_dtype(DType::BF16);
        let (key_cache, value_cache) = (cache()?, cache()?);
        let order = random.permutation(blocks);
        let mut tables = vec![0u32; batch * width];
        for (seq, row) in tables.chunks_exact_mut(width).enumerate() {
            let per_seq = CONTEXT / block_size;
            row[..per_seq].copy_from_slice(&order[seq * per_seq..(seq + 1) * per_seq]);
        }
        let tables = Tensor::from_vec(tables, (batch, width), device)?;
        let lens = Tensor::from_vec(vec![CONTEXT as u32; batch], batch, device)?;
        let starts = Tensor::from_vec((0..=batch as u32).collect::<Vec<_>>(), batch + 1, device)?;
        let q = Tensor::rand(-1f32, 1f32, (1, batch, num_heads, head_dim), device)?
            .to_dtype(DType::BF16)?;
        let attend = || {
            paged_attention(
                &q,
                (&key_cache, &value_cache),
                (&tables, &lens, &starts),
                num_heads,
            )
        };
        let eager = mean_seconds(device, ITERATIONS, || attend().map(drop))?;
        // The same launches replayed from a CUDA graph (into a static
        // output), as the model runs decode steps: no host overhead.
        let out = attend()?;
        let step = || out.slice_set(&attend()?, 0, 0);
        let graph = capture(device, step)?;
        let replayed = mean_seconds(device, ITERATIONS, || graph.launch().w())?;
        let kv_bytes = (batch * CONTEXT * num_kv_heads * head_dim * 2 * 2) as f64;
        println!(
            "  batch {batch:>3} ({:>5.1} MiB of K/V): {:>6.1} us eager, {:>6.1} us replayed = {:>6.1} GB/s",
            kv_bytes / (1 << 20) as f64,
            eager * 1e6,
            replayed * 1e6,
            kv_bytes / replayed / 1e9,
        );
    }
    Ok(())
}

/// The attention of one whole prompt of each of `prompts` tokens (a
/// prefill step: the tensor-core kernel), bf16, one layer of the 8B
/// shape (head_dim 128) and of the 1B shape (head_dim 64): mean of 20
/// eager launches, and the rate of the causal product's multiply-adds
/// (two per query, key and head dim, for Q K^T and for P V).
fn prefill_timing(device: &Device, random: &mut Random, prompts: &[usize]) -> Result<()> {
    const ITERATIONS: u32 = 20;
    let (num_heads, num_kv_heads, block_size) = (32, 8, 16);
    for head_dim in [128, 64] {
        println!(
            "prefill attention, bf16, {num_heads} heads / {num_kv_heads} KV heads / head_dim {head_dim}, block size {block_size}, one prompt:"
        );
        for &tokens in prompts {
            let blocks = tokens.div_ceil(block_size);
            let cache_dims = (blocks, block_size, num_kv_heads, head_dim);
            let cache = || Tensor::rand(-1f32, 1f32, cache_dims, device)?.to_dtype(DType::BF16);
            let (key_cache, value_cache) = (cache()?, cache()?);
            let table = random.permutation(blocks);
            let tables = Tensor::from_vec(table, (1, blocks), device)?;
            let lens = Tensor::from_vec(vec![tokens as u32], 1, device)?;
            let starts = Tensor::from_vec(vec![0u32, tokens as u32], 2, device)?;
            let q = Tensor::rand(-1f32, 1f32, (1, tokens, num_heads, head_dim), device)?
                .to_dtype(DType::BF16)?;
            let seconds = mean_seconds(device, ITERATIONS, || {
                paged_attention(
                    &q,
                    (&key_cache, &value_cache),
                    (&tables, &lens, &starts),
                    num_heads,
                )
                .map(drop)
            })?;
            let pairs = (tokens * (tokens + 1) / 2) as f64;
            let flops = pairs * (num_heads * head_dim) as f64 * 4.0;
            println!(
                "  {tokens:>5} tokens: {:>8.1} us = {:>6.1} TFLOP/s",
                seconds * 1e6,
                flops / seconds / 1e12
            );
        }
    }
    Ok(())
}

/// `rows` x `vocab` random logits with, in every row, the maximum planted
/// again at a later index, a NaN, and a -0 beside a +0.
fn planted_logits(random: &mut Random, rows: usize, vocab: usize) -> Vec<f32> {
    let mut values = random.values(rows * vocab);
    for row in values.chunks_exact_mut(vocab) {
        let at = |random: &mut Random| (random.next() % vocab as u64) as usize;
        let (first, second) = (at(random), at(random));
        let (first, second) = (first.min(second), first.max(second));
        row[first] = 1.5;
        row[second] = 1.5;
        row[at(random)] = f32::NAN;
        if vocab > 2 {
            let zero = at(random) % (vocab - 1);
            row[zero] = -0.0;
            row[zero + 1] = 0.0;
        }
    }
    values
}

/// `greedy_tokens` on the GPU against the host on the same logits (part 4).
fn greedy_tokens_check(device: &Device, random: &mut Random) -> Result<bool> {
    let mut pass = true;
    for vocab in [7, 4097, 128_256] {
        for rows in [1, 3, 64, 128] {
            let host = Tensor::from_vec(
                planted_logits(random, rows, vocab),
                (rows, vocab),
                &Device::Cpu,
            )?;
            let want = greedy_tokens(&host).map_err(candle_core::Error::wrap)?;
            let got = greedy_tokens(&host.to_device(device)?).map_err(candle_core::Error::wrap)?;
            let same = got == want;
            pass &= same;
            println!(
                "{} greedy tokens, {rows} rows of {vocab}: {}",
                if same { "PASS" } else { "FAIL" },
                if same {
                    "as on the host".to_string()
                } else {
                    format!("{got:?} against {want:?}")
                }
            );
        }
    }
    Ok(pass)
}

/// A random [rows, cols] tensor of `dtype` on `device`, values in
/// [-scale, scale) plus `offset`.
fn random_tensor(
    device: &Device,
    random: &mut Random,
    (rows, cols): (usize, usize),
    dtype: DType,
    (scale, offset): (f32, f32),
) -> Result<Tensor> {
    let values = random.values(rows * cols);
    let values: Vec<f32> = values.iter().map(|v| v * scale + offset).collect();
    Tensor::from_vec(values, (rows, cols), device)?.to_dtype(dtype)
}

/// The fused kernels against candle's ops in f32 on the same rounded
/// inputs: `silu_mul` within one rounding of the product, `add_rms_norm`'s
/// sum equal to candle's add in the dtype and its norm within one rounding
/// of candle's rmsnorm of that sum in f32.
fn fused_check(device: &Device, random: &mut Random) -> Result<bool> {
    const EPS: f32 = 1e-5;
    let mut pass = true;
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let tolerance = if dtype == DType::F32 { 1e-6 } else { 1e-2 };
        for shape in [(1, 2048), (7, 4096), (128, 4096), (3, 14336), (5, 64)] {
            let gate = random_tensor(device, random, shape, dtype, (6.0, 0.0))?;
            let up = random_tensor(device, random, shape, dtype, (2.0, 0.0))?;
            let want = (gate.to_dtype(DType::F32)?.silu()? * up.to_dtype(DType::F32)?)?;
            let gate_up = Tensor::cat(&[&gate, &up], 1)?;
            poison(device, shape.0 * shape.1 * 4)?;
            let got = silu_mul(&gate_up)?;
            let silu_error = relative_error(&to_f32(&got)?, &to_f32(&want)?);

            let x = random_tensor(device, random, shape, dtype, (1.0, 0.0))?;
            let residual = random_tensor(device, random, shape, dtype, (4.0, 0.0))?;
            let weight =
                random_tensor(device, random, (1, shape.1), dtype, (0.5, 1.0))?.flatten_all()?;
            let want_sum = (&x + &residual)?;
            let want_normed = candle_nn::ops::rms_norm(
                &want_sum.to_dtype(DType::F32)?,
                &weight.to_dtype(DType::F32)?,
                EPS,
            )?;
            poison(device, shape.0 * shape.1 * 8)?;
            let (sum, normed) = add_rms_norm(&x, &residual, &weight, EPS)?;
            let sum_equal = to_f32(&sum)? == to_f32(&want_sum)?;
            let norm_error = relative_error(&to_f32(&normed)?, &to_f32(&want_normed)?);
            let ok = silu_error < tolerance && sum_equal && norm_error < tolerance;
            pass &= ok;
            println!(
                "{} fused {dtype:?} {}x{}: silu_mul rel. error {silu_error:.2e}, add_rms_norm sum {}, norm rel. error {norm_error:.2e} (limit {tolerance:.0e})",
                if ok { "PASS" } else { "FAIL" },
                shape.0,
                shape.1,
                if sum_equal { "identical" } else { "DIFFERS" },
            );
        }
    }
    pass &= fused_fallback_check(device, random)?;
    pass &= rope_write_kv_check(device, random)?;
    pass &= to_f32_check(device, random)?;
    Ok(pass)
}

/// The logits' cast to f32 as the model calls it: identical to candle's
/// cast (widening is exact); the kernel for the 1B and 8B shapes' logits
/// (a 128,256 vocabulary) and a small shape, candle's cast (one fallback
/// counted) for 13 values a row, not whole 16-byte vectors; an f32 tensor
/// as it is.
fn to_f32_check(device: &Device, random: &mut Random) -> Result<bool> {
    let mut pass = true;
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        for shape in [(1, 128_256), (128, 128_256), (3, 8), (2, 13)] {
            let x = random_tensor(device, random, shape, dtype, (20.0, 0.0))?;
            let want_fallbacks = usize::from(dtype != DType::F32 && shape.1 == 13);
            poison(device, shape.0 * shape.1 * 4)?;
            let (got, fallbacks) = to_f32_counted(&x)?;
            let identical = got.dtype() == DType::F32
                && got.dims() == x.dims()
                && to_f32(&got)? == to_f32(&x.to_dtype(DType::F32)?)?;
            let ok = identical && fallbacks == want_fallbacks;
            pass &= ok;
            println!(
                "{} to_f32 {dtype:?} {}x{}: {}, {fallbacks} fallback(s) counted (want {want_fallbacks})",
                if ok { "PASS" } else { "FAIL" },
                shape.0,
                shape.1,
                if identical {
                    "identical to candle's cast"
                } else {
                    "DIFFERS"
                },
            );
        }
    }
    Ok(pass)
}

/// `silu_mul` as the model calls it: the kernel where it can take the
/// tensors (no fallback counted, the result within one rounding of
/// candle's ops in the dtype), candle's ops where they are a view of
/// other columns or start off a 16-byte boundary (one fallback counted,
/// the result candle's).
fn fused_fallback_check(device: &Device, random: &mut Random) -> Result<bool> {
    let mut pass = true;
    for dtype in [DType::BF16, DType::F32] {
        let tolerance = if dtype == DType::F32 { 1e-6 } else { 1e-2 };
        let (rows, cols) = (64, 4096);
        let per_vector = 16 / dtype.size_in_bytes();
        let gate = random_tensor(device, random, (rows, cols), dtype, (6.0, 0.0))?;
        let up = random_tensor(device, random, (rows, cols), dtype, (2.0, 0.0))?;
        let extra = random_tensor(device, random, (rows, per_vector), dtype, (1.0, 0.0))?;
        let gate_up = Tensor::cat(&[&gate, &up], 1)?;
        let wider = Tensor::cat(&[&gate, &up, &extra], 1)?;
        // One value in, the same shape, contiguous.
        let offset = wider
            .flatten_all()?
            .narrow(0, 1, rows * 2 * cols)?
            .reshape((rows, 2 * cols))?;
        let cases = [
            ("contiguous", gate_up, 0),
            ("a view of some columns", wider.narrow(1, 0, 2 * cols)?, 1),
            ("one value off alignment", offset, 1),
        ];
        for (what, gate_up, want_fallbacks) in cases {
            let want = (gate_up.narrow(1, 0, cols)?.silu()? * gate_up.narrow(1, cols, cols)?)?;
            let (got, fallbacks) = silu_mul_counted(&gate_up)?;
            let error = relative_error(&to_f32(&got)?, &to_f32(&want)?);
            let ok = fallbacks == want_fallbacks && error < tolerance;
            pass &= ok;
            println!(
                "{} fused fallback count {dtype:?} {what}: {fallbacks} counted (want {want_fallbacks}), rel. error to candle's ops {error:.2e} (limit {tolerance:.0e})",
                if ok { "PASS" } else { "FAIL" },
            );
        }
    }
    Ok(pass)
}

/// `rope_write_kv`'s kernel against candle's ops and `write_kv` on the
/// same inputs and caches: q and both caches within 1e-6 (f32) or 1e-2
/// relative error, v's slots identical, padding slots writing nowhere, and
/// no fallback counted. Shapes of the 1B and 8B layers and a small odd
/// one, 1 to 200 tokens in scrambled slots, every fifth a padding row.
fn rope_write_kv_check(device: &Device, random: &mut Random) -> Result<bool> {
    const BLOCKS: usize = 32;
    const BLOCK_SIZE: usize = 16;
    let mut pass = true;
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let tolerance = if dtype == DType::F32 { 1e-6 } else { 1e-2 };
        for (tokens, heads, kv_heads, dim) in [(1, 32, 8, 64), (200, 32, 8, 128), (7, 6, 2, 16)] {
            let width = (heads + 2 * kv_heads) * dim;
            let qkv = random_tensor(device, random, (tokens, width), dtype, (2.0, 0.0))?;
            let angles: Vec<f32> = random.values(tokens * dim / 2);
            let table = |f: fn(f32) -> f32| -> Result<Tensor> {
                let values: Vec<f32> = angles.iter().map(|a| f(a * 100.0)).collect();
                Tensor::from_vec(values, (tokens, dim / 2), device)?.to_dtype(dtype)
            };
            let (cos, sin) = (table(f32::cos)?, table(f32::sin)?);
            let order = random.permutation(BLOCKS * BLOCK_SIZE);
            let slots: Vec<u32> = (0..tokens)
                .map(|t| if t % 5 == 4 { PADDING_SLOT } else { order[t] })
                .collect();
            let slot_mapping = Tensor::new(slots.as_slice(), device)?;
            let cache_shape = (BLOCKS, BLOCK_SIZE, kv_heads, dim);
            // candle's ops and write_kv (fused false), or the kernel.
            let run = |fused: bool| -> Result<(Tensor, Tensor, Tensor, usize)> {
                let k = Tensor::zeros(cache_shape, dtype, device)?;
                let v = Tensor::zeros(cache_shape, dtype, device)?;
                poison(device, tokens * heads * dim * 4)?;
                let (q, fallbacks) = rope_write_kv(
                    &qkv,
                    (&cos, &sin),
                    (&k, &v),
                    &slot_mapping,
                    (heads, kv_heads, dim),
                    fused,
                )?;
                Ok((q, k, v, fallbacks))
            };
            let (want_q, want_k, want_v, _) = run(false)?;
            let (got_q, got_k, got_v, fallbacks) = run(true)?;
            let q_error = relative_error(&to_f32(&got_q)?, &to_f32(&want_q)?);
            let k_error = relative_error(&to_f32(&got_k)?, &to_f32(&want_k)?);
            let v_equal = to_f32(&got_v)? == to_f32(&want_v)?;
            let ok = fallbacks == 0
                && got_q.dims() == want_q.dims()
                && q_error < tolerance
                && k_error < tolerance
                && v_equal;
            pass &= ok;
            println!(
                "{} rope_write_kv {dtype:?} {tokens} tokens, {heads}/{kv_heads} heads of {dim}: q rel. error {q_error:.2e}, k cache {k_error:.2e} (limit {tolerance:.0e}), v cache {}, {fallbacks} fallbacks",
                if ok { "PASS" } else { "FAIL" },
                if v_equal { "identical" } else { "DIFFERS" },
            );
        }
    }
    Ok(pass)
}

/// `greedy_tokens` against candle's argmax, each with its copy to the host.
fn greedy_tokens_timing(device: &Device) -> Result<()> {
    const ITERATIONS: u32 = 100;
    println!("greedy tokens of f32 logits, 128,256 columns, to the host (mean of {ITERATIONS}):");
    for rows in [1, 8, 64, 128] {
        let logits = Tensor::rand(-1f32, 1f32, (rows, 128_256), device)?;
        let candle = mean_seconds(device, ITERATIONS, || {
            logits.argmax(1)?.to_vec1::<u32>().map(drop)
        })?;
        let own = mean_seconds(device, ITERATIONS, || {
            greedy_tokens(&logits)
                .map(drop)
                .map_err(candle_core::Error::wrap)
        })?;
        println!(
            "  {rows:>3} rows: candle argmax {:.1} us, greedy_tokens {:.1} us ({:.1}x)",
            candle * 1e6,
            own * 1e6,
            candle / own
        );
    }
    Ok(())
}

/// Logits of one of four kinds: spread over [-30, 30), narrow ([-2, 2)),
/// in five distinct values (many equal weights), or narrow with NaNs.
fn sampling_logits(random: &mut Random, len: usize, kind: usize) -> Vec<f32> {
    let mut values = random.values(len);
    for value in &mut values {
        *value = match kind {
            0 => *value * 30.0,
            1 => *value * 2.0,
            2 => ((*value + 1.0) * 2.5).floor(),
            _ if random.next().is_multiple_of(50) => f32::NAN,
            _ => *value * 2.0,
        };
    }
    values
}

/// `sample_tokens` on the GPU against its host path (part 5).
fn sample_tokens_check(device: &Device, random: &mut Random) -> Result<bool> {
    let mut pass = true;
    let mut case = 0usize;
    // On an H200 these draw a row with 1 block (7, 4,097 and 12,288
    // columns), 2 (64 and 100 rows), 4 (20 rows, and 50,001 columns) and 8
    // (src/sample.rs, `blocks_per_row`); 7, 4,097 and 50,001 columns take
    // the kernel's 4-byte loads.
    for vocab in [7, 4097, 12_288, 50_001, 128_256] {
        for rows in [1, 5, 20, 64, 100] {
            for kind in 0..4 {
                case += 1;
                let logits = sampling_logits(random, rows * vocab, kind);
                let host = Tensor::from_vec(logits, (rows, vocab), &Device::Cpu)?;
                let draws: Vec<Draw> = (0..rows)
                    .map(|row| Draw {
                        temperature: [0.3, 0.7, 1.0, 2.5][(case + row) % 4],
                        top_p: [1.0, 0.95, 0.5, 0.1, 0.999][(case + row) % 5],
                        top_k: [None, Some(1), Some(3), Some(50), Some(vocab + 1)]
                            [(case / 2 + row) % 5],
                        uniform: (random.next() >> 40) as f32 / (1u64 << 24) as f32,
                    })
                    .collect();
                let want = sample_tokens(&host, &draws).map_err(candle_core::Error::wrap)?;
                let got = sample_tokens(&host.to_device(device)?, &draws)
                    .map_err(candle_core::Error::wrap)?;
                let same = got == want;
                pass &= same;
                println!(
                    "{} sampled tokens, {rows} rows of {vocab}, logits kind {kind}: {}",
                    if same { "PASS" } else { "FAIL" },
                    if same {
                        "as on the host".to_string()
                    } else {
                        let wrong: Vec<String> = (0..rows)
                            .filter(|&row| got[row] != want[row])
                            .map(|row| {
                                format!(
                                    "row {row} {:?}: {} not {}",
                                    draws[row], got[row], want[row]
                                )
                            })
                            .collect();
                        wrong.join("; ")
                    }
                );
            }
        }
    }
    Ok(pass)
}

/// `sample_tokens` on the GPU, beside bringing the rows' logits to the host.
fn sample_tokens_timing(device: &Device) -> Result<()> {
    const ITERATIONS: u32 = 100;
    println!(
        "sampled tokens of f32 logits, 128,256 columns, T 0.7, top_p 0.95 (mean of {ITERATIONS}):"
    );
    for rows in [1, 8, 32, 64, 128] {
        let logits = (Tensor::randn(0f32, 1f32, (rows, 128_256), device)? * 3.0)?;
        let draws = vec![
            Draw {
                temperature: 0.7,
                top_p: 0.95,
                top_k: None,
                uniform: 0.5,
            };
            rows
        ];
        let copy = mean_seconds(device, ITERATIONS, || logits.to_vec2::<f32>().map(drop))?;
        let own = mean_seconds(device, ITERATIONS, || {
            sample_tokens(&logits, &draws)
                .map(drop)
                .map_err(candle_core::Error::wrap)
        })?;
        println!(
            "  {rows:>3} rows: logits to the host {:.1} us, sample_tokens {:.1} us",
            copy * 1e6,
            own * 1e6,
        );
    }
    Ok(())
}

/// Mean seconds per call of `run` over `iterations`, after 10 warm-up
/// calls: host clock between two synchronisations.
fn mean_seconds(device: &Device, iterations: u32, run: impl Fn() -> Result<()>) -> Result<f64> {
    for _ in 0..10 {
        run()?;
    }
    device.synchronize()?;
    let start = Instant::now();
    for _ in 0..iterations {
        run()?;
    }
    device.synchronize()?;
    Ok(start.elapsed().as_secs_f64() / f64::from(iterations))
}

/// Captures `step` (already run once eagerly) into a CUDA graph.
fn capture(device: &Device, step: impl Fn() -> Result<()>) -> Result<CudaGraph> {
    let stream = device.as_cuda_device()?.cuda_stream();
    device.synchronize()?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .w()?;
    let captured = step();
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    captured?;
    match graph.w()? {
        Some(graph) => Ok(graph),
        None => candle_core::bail!("the capture produced no graph"),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => {
            println!("GPU KERNELS OK");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("GPU KERNELS FAILED");
            ExitCode::FAILURE
        }
        Err(err) => {
            println!("GPU KERNELS FAILED: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<bool> {
    let device = Device::new_cuda_with_stream(0)?;
    // Before any tensor exists, as the model runtime does: no per-buffer
    // events (they are illegal inside a graph capture).
    unsafe { device.as_cuda_device()?.disable_event_tracking() };
    let seed = 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    println!("random seed {seed:#x}");
    let mut random = Random(seed);
    let correct = correctness(&device, &mut random)?;
    let graph = graph_replay(&device, &mut random)?;
    let fused = fused_check(&device, &mut random)?;
    timing::<1024>(&device, &mut random, 4096 / 16, &[1, 8, 32, 64, 128])?;
    // The table width of a Llama 3.1 8B served on an H200: 131,072
    // positions (the pool holds more blocks than that).
    timing::<512>(&device, &mut random, 131_072 / 16, &[1, 8, 64])?;
    prefill_timing(&device, &mut random, &[512, 2048, 8192])?;
    let greedy = greedy_tokens_check(&device, &mut random)?;
    greedy_tokens_timing(&device)?;
    let sampled = sample_tokens_check(&device, &mut random)?;
    sample_tokens_timing(&device)?;
    Ok(correct && graph && fused && greedy && sampled)
}
