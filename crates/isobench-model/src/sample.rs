//! A token drawn at random from each row of a step's logits, with the
//! row's temperature, top_k, top_p and a uniform number its sequence drew.
//!
//! The draw, per row: weights `e^((logit - max) / T)` in [0, 1] (NaN
//! weighs 0), with isobench-common's `exp`; the tokens ranked heaviest
//! first, equal weights by the lower id; the ranking cut after the `top_k`
//! tokens and after the shortest prefix whose weight reaches `top_p` of
//! what `top_k` kept (the earlier cut wins); then the first kept token, in
//! id order, at which the kept weights' running sum reaches `uniform`
//! times their total (and is above 0: a token of weight 0 is never drawn;
//! in a row without any weight, token 0 is). Sums are of weights in fixed
//! point (units of 2^-40), so they are exact whatever the order of
//! summing: the GPU's threads and [`sample_tokens`]' host path draw the
//! same tokens. The server's host sampler (isobench-server's sampler.rs)
//! follows the same rules with f64 sums, so it draws the same tokens too,
//! except where two sums of the weights differ by less than their rounding
//! (and where it meets a token or a row without weight).
//!
//! On a GPU, [`sample_tokens`] is one kernel of this crate
//! (kernels/sample.cu, which says how; each row drawn by a cluster of up
//! to 8 blocks, as many as `blocks_per_row` says) and a copy of 4 bytes a
//! row to the host, instead of the row's logits (512 KB for a 128k
//! vocabulary) and about a millisecond of the host's time a row. Elsewhere the rows are
//! drawn on the host, by the reference the kernel is checked against
//! (examples/gpu_kernels.rs), which sorts each row.

use candle_core::{DType, Tensor};
use isobench_common::math::exp;

use crate::ModelError;

/// How one row draws its token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// Above 0 (a greedy row takes [`crate::greedy_tokens`]).
    pub temperature: f32,
    /// In (0, 1]; 1 keeps every token.
    pub top_p: f32,
    /// `None` keeps every token; at least 1.
    pub top_k: Option<usize>,
    /// The sequence's draw, in [0, 1).
    pub uniform: f32,
}

impl Draw {
    /// 1 / T, at most the largest f32: at a temperature so small that its
    /// inverse overflows, the heaviest token weighs 1 and the others 0 (an
    /// infinite inverse would make it 0 * inf, NaN, and weigh nothing).
    pub fn inverse_temperature(&self) -> f32 {
        (1.0 / self.temperature).min(f32::MAX)
    }
}

/// The largest vocabulary: the fixed-point sums of a row stay below 2^63.
const MAX_VOCAB: usize = 1 << 23;
/// One weight of 1 in the fixed point of the sums.
const FIXED_ONE: f64 = (1u64 << 40) as f64;

/// One token per row of `logits` [rows, vocab], row `i` drawn as
/// `draws[i]` says.
pub fn sample_tokens(logits: &Tensor, draws: &[Draw]) -> Result<Vec<u32>, ModelError> {
    let (rows, vocab) = logits.dims2()?;
    check(rows, vocab, draws)?;
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(device) = logits.device() {
        return Ok(cuda::sample_tokens(device, logits, draws)?);
    }
    let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    Ok(rows
        .iter()
        .zip(draws)
        .map(|(row, draw)| draw_row(row, draw))
        .collect())
}

/// Why these rows cannot be drawn, if they cannot.
fn check(rows: usize, vocab: usize, draws: &[Draw]) -> Result<(), ModelError> {
    let error = |message: String| Err(candle_core::Error::Msg(message).into());
    if draws.len() != rows {
        return error(format!("{} draws for {rows} rows of logits", draws.len()));
    }
    if vocab == 0 || vocab > MAX_VOCAB {
        return error(format!(
            "sampling from logits with {vocab} columns; accepted: 1 to {MAX_VOCAB}"
        ));
    }
    for draw in draws {
        // Written so that NaN is never accepted.
        let valid = draw.temperature.is_finite()
            && draw.temperature > 0.0
            && draw.top_p > 0.0
            && draw.top_p <= 1.0
            && draw.top_k != Some(0)
            && (0.0..1.0).contains(&draw.uniform);
        if !valid {
            return error(format!(
                "cannot sample with {draw:?}; accepted: a finite temperature above 0, top_p in \
                 (0, 1], top_k of at least 1, uniform in [0, 1)"
            ));
        }
    }
    Ok(())
}

/// A weight in the sums' fixed point (truncated, as the kernel does).
fn fixed(weight: f32) -> u64 {
    (f64::from(weight) * FIXED_ONE) as u64
}

/// The draw of one row on the host, by sorting the row.
fn draw_row(logits: &[f32], draw: &Draw) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let inv_t = draw.inverse_temperature();
    let weights: Vec<f32> = logits
        .iter()
        .map(|&logit| {
            let w = exp((logit - max) * inv_t);
            if w >= 0.0 { w.min(1.0) } else { 0.0 }
        })
        .collect();
    let mut ranked: Vec<u32> = (0..weights.len() as u32).collect();
    ranked.sort_by(|&a, &b| {
        weights[b as usize]
            .total_cmp(&weights[a as usize])
            .then(a.cmp(&b))
    });
    // How many tokens of the ranking are kept, and their fixed-point mass.
    let mut kept = draw.top_k.map_or(ranked.len(), |k| k.min(ranked.len()));
    let mass_of = |count: usize| -> u64 {
        ranked[..count]
            .iter()
            .map(|&id| fixed(weights[id as usize]))
            .sum()
    };
    if draw.top_p < 1.0 {
        let target = (f64::from(draw.top_p) * mass_of(kept) as f64).ceil() as u64;
        let mut reached = 0u64;
        if let Some(last) = ranked[..kept].iter().position(|&id| {
            reached += fixed(weights[id as usize]);
            reached >= target
        }) {
            kept = last + 1;
        }
    }
    let mut in_set = vec![false; weights.len()];
    for &id in &ranked[..kept] {
        in_set[id as usize] = true;
    }
    let target = draw_target(draw.uniform, mass_of(kept));
    let mut sum = 0u64;
    for (id, &weight) in weights.iter().enumerate() {
        if in_set[id] {
            sum += fixed(weight);
            if sum >= target {
                return id as u32;
            }
        }
    }
    // No weight kept at all (a row of NaN or infinities): every token
    // weighs the same, and the first is kept.
    0
}

/// What the running sum of the kept weights must reach: `uniform` of
/// their mass, and more than nothing (a token that weighs nothing is
/// never drawn).
fn draw_target(uniform: f32, mass: u64) -> u64 {
    ((f64::from(uniform) * mass as f64).ceil() as u64).max(1)
}

/// The cluster sizes the sampler can draw a row with, largest first:
/// 8 blocks is the largest cluster every Hopper runs.
#[cfg(any(feature = "cuda", test))]
const CLUSTER_SIZES: [usize; 3] = [8, 4, 2];
/// The fewest tokens of a row per block: with fewer, the cluster's
/// barriers and reads of each other's sums cost more than the split saves.
#[cfg(any(feature = "cuda", test))]
const MIN_TOKENS_PER_BLOCK: usize = 8192;

/// How many blocks of kernels/sample.cu draw each row, in one cluster:
/// the largest of [`CLUSTER_SIZES`] whose clusters, one a row, all run at
/// once (`resident[i]` of size `CLUSTER_SIZES[i]` do), with at least
/// [`MIN_TOKENS_PER_BLOCK`] tokens a block; 2 when none fit (two waves of
/// pairs beat one of single blocks: 0.21 against 0.25 ms for 128 rows on
/// an H200) and pairs run at all; 1 for short rows. On an H200 and a 128k
/// vocabulary: 8 up to 15 rows, 4 up to 30, then 2 (docs/performance.md,
/// "A sampled row drawn by a cluster of blocks").
#[cfg(any(feature = "cuda", test))]
fn blocks_per_row(rows: usize, vocab: usize, resident: [usize; 3]) -> usize {
    let long_enough = |blocks: usize| vocab >= blocks * MIN_TOKENS_PER_BLOCK;
    let pairs = long_enough(2) && resident[2] > 0;
    CLUSTER_SIZES
        .into_iter()
        .zip(resident)
        .find(|&(blocks, fit)| long_enough(blocks) && rows <= fit)
        .map(|(blocks, _)| blocks)
        .unwrap_or(if pairs { 2 } else { 1 })
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::{Mutex, PoisonError};

    use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DeviceRepr, LaunchConfig};
    use candle_core::cuda_backend::{CudaDevice, WrapErr};
    use candle_core::{DType, Result, Storage, Tensor, bail};

    use super::{CLUSTER_SIZES, Draw, blocks_per_row};
    use crate::kernels::{Kernel, Launch, Source, kernel};
    use crate::paged_attention::cuda::grid;

    /// Threads per block (`THREADS` in kernels/sample.cu).
    const THREADS: u32 = 1024;

    /// A row's draw as the kernel reads it (`Draw` in kernels/sample.cu).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct RowDraw {
        inv_temperature: f32,
        top_p: f32,
        top_k: u32,
        uniform: f32,
    }

    // SAFETY: four 4-byte fields, no padding, any bits valid.
    unsafe impl DeviceRepr for RowDraw {}

    /// How many clusters of each of [`CLUSTER_SIZES`] the sampler runs at
    /// once, by device, asked of the driver once.
    static RESIDENT: Mutex<Vec<(usize, [usize; 3])>> = Mutex::new(Vec::new());

    fn resident_clusters(device: &CudaDevice, sample: &Kernel) -> Result<[usize; 3]> {
        let ordinal = device.cuda_stream().context().ordinal();
        let mut known = RESIDENT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, resident)) = known.iter().find(|(id, _)| *id == ordinal) {
            return Ok(*resident);
        }
        let mut resident = [0; 3];
        for (fit, blocks) in resident.iter_mut().zip(CLUSTER_SIZES) {
            *fit = sample.resident_clusters(blocks as u32, THREADS)?;
        }
        known.push((ordinal, resident));
        Ok(resident)
    }

    pub(super) fn sample_tokens(
        device: &CudaDevice,
        logits: &Tensor,
        draws: &[Draw],
    ) -> Result<Vec<u32>> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (rows, vocab) = logits.dims2()?;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let vocab_arg = i32::try_from(vocab).map_err(candle_core::Error::wrap)?;
        let row_draws: Vec<RowDraw> = draws
            .iter()
            .map(|draw| RowDraw {
                inv_temperature: draw.inverse_temperature(),
                top_p: draw.top_p,
                // Keeping every token or more is no cut (0).
                top_k: draw.top_k.filter(|&k| k < vocab).map_or(0, |k| k as u32),
                uniform: draw.uniform,
            })
            .collect();
        let (storage, layout) = logits.storage_and_layout();
        let Storage::Cuda(storage) = &*storage else {
            bail!("sampling: the logits are not on the GPU")
        };
        let values = storage
            .as_cuda_slice::<f32>()?
            .slice(layout.start_offset()..);
        let sample = kernel(device, Source::Sample, "sample_f32")?;
        let stream = &sample.stream;
        let row_draws = stream.clone_htod(&row_draws).w()?;
        // SAFETY: the kernel writes every weight of every row before it
        // reads it, and one token per row.
        let weights = unsafe { stream.alloc::<f32>(rows * vocab) }.w()?;
        let tokens = unsafe { stream.alloc::<u32>(rows) }.w()?;
        let blocks = if sample.takes_clusters() {
            blocks_per_row(rows, vocab, resident_clusters(device, &sample)?)
        } else {
            1
        };
        let config = LaunchConfig {
            grid_dim: (grid(rows * blocks, "blocks of sampled rows")?, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = Launch::new(&sample)
            .arg(&values.device_ptr(stream).0)
            .arg(&weights.device_ptr(stream).0)
            .arg(&row_draws.device_ptr(stream).0)
            .arg(&tokens.device_ptr(stream).0)
            .arg(&vocab_arg);
        if sample.takes_clusters() {
            launch = launch.clusters(blocks as u32);
        }
        // SAFETY: `values` holds rows x vocab f32 (contiguous, from its
        // offset), `weights` as many, `row_draws` and `tokens` one per row;
        // the kernel reads and writes nothing else, and waits for the
        // kernel before it before reading the logits. `blocks` divides the
        // grid and is at most 8.
        unsafe { launch.run(config) }?;
        stream.clone_dtoh(&tokens).w()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn draw(temperature: f32, top_p: f32, top_k: Option<usize>, uniform: f32) -> Draw {
        Draw {
            temperature,
            top_p,
            top_k,
            uniform,
        }
    }

    fn one(row: &[f32], d: Draw) -> u32 {
        let logits = Tensor::from_slice(row, (1, row.len()), &Device::Cpu).unwrap();
        sample_tokens(&logits, &[d]).unwrap()[0]
    }

    #[test]
    fn the_uniform_walks_the_kept_tokens_in_id_order() {
        // Weights 1, e^-1, e^-2 (0.665, 0.245, 0.090 of their sum) and a
        // negligible rest, at T = 1 with every token kept.
        let row = [-1.0, 0.0, -40.0, -2.0];
        assert_eq!(one(&row, draw(1.0, 1.0, None, 0.0)), 0);
        assert_eq!(one(&row, draw(1.0, 1.0, None, 0.20)), 0);
        // Token 2 weighs (next to) nothing: never drawn.
        assert_eq!(one(&[-40.0, 0.0], draw(1.0, 1.0, None, 0.0)), 1);
        assert_eq!(one(&row, draw(1.0, 1.0, None, 0.30)), 1);
        assert_eq!(one(&row, draw(1.0, 1.0, None, 0.90)), 1);
        assert_eq!(one(&row, draw(1.0, 1.0, None, 0.95)), 3);
        assert_eq!(one(&row, draw(1.0, 1.0, None, 0.999_999)), 3);
    }

    #[test]
    fn top_k_and_top_p_cut_the_ranking() {
        let row = [-1.0, 0.0, -40.0, -2.0];
        // top_k 1 keeps the heaviest whatever the uniform.
        for uniform in [0.0, 0.5, 0.99] {
            assert_eq!(one(&row, draw(1.0, 1.0, Some(1), uniform)), 1);
        }
        // top_k 2 keeps tokens 1 and 0 (0.731 and 0.269 of their sum).
        assert_eq!(one(&row, draw(1.0, 1.0, Some(2), 0.25)), 0);
        assert_eq!(one(&row, draw(1.0, 1.0, Some(2), 0.30)), 1);
        assert_eq!(one(&row, draw(1.0, 1.0, Some(2), 0.99)), 1);
        // top_p 0.5 keeps token 1 alone (0.665 of the mass), 0.9 tokens 1
        // and 0 (0.910), 0.95 tokens 1, 0 and 3.
        assert_eq!(one(&row, draw(1.0, 0.5, None, 0.99)), 1);
        assert_eq!(one(&row, draw(1.0, 0.9, None, 0.99)), 1);
        assert_eq!(one(&row, draw(1.0, 0.9, None, 0.2)), 0);
        assert_eq!(one(&row, draw(1.0, 0.95, None, 0.99)), 3);
        // With both, the earlier cut: top_k 3 and top_p 0.5 keep one.
        assert_eq!(one(&row, draw(1.0, 0.5, Some(3), 0.99)), 1);
    }

    #[test]
    fn equal_weights_rank_by_id_and_nan_weighs_nothing() {
        let row = [f32::NAN, 2.0, 2.0, 2.0, f32::NAN];
        // Three equal tokens: top_k 2 keeps ids 1 and 2.
        assert_eq!(one(&row, draw(0.7, 1.0, Some(2), 0.99)), 2);
        assert_eq!(one(&row, draw(0.7, 1.0, Some(2), 0.1)), 1);
        for uniform in [0.0, 0.4, 0.7, 0.999] {
            let token = one(&row, draw(0.7, 1.0, None, uniform));
            assert!((1..=3).contains(&token), "{token}");
        }
        // A row of NaN only: every weight is 0, the first token.
        assert_eq!(one(&[f32::NAN; 3], draw(1.0, 0.9, None, 0.5)), 0);
    }

    #[test]
    fn a_vanishing_temperature_takes_the_heaviest_token() {
        let row = [0.5, 2.0, 1.0, 1.9];
        for temperature in [1e-45, 1e-30, 1e-3] {
            for uniform in [0.0, 0.5, 0.99] {
                assert_eq!(one(&row, draw(temperature, 1.0, None, uniform)), 1);
                assert_eq!(one(&row, draw(temperature, 0.9, Some(3), uniform)), 1);
            }
        }
    }

    #[test]
    fn each_row_draws_with_its_own_parameters() {
        let logits = Tensor::new(&[[0.0f32, 5.0, 0.0], [5.0, 0.0, 0.0]], &Device::Cpu).unwrap();
        let tokens = sample_tokens(
            &logits,
            &[draw(0.5, 1.0, Some(1), 0.3), draw(0.5, 0.5, None, 0.9)],
        )
        .unwrap();
        assert_eq!(tokens, vec![1, 0]);
    }

    #[test]
    fn few_rows_are_split_over_blocks_that_all_run_at_once() {
        // An H200's resident clusters of 8, 4 and 2 blocks.
        const H200: [usize; 3] = [15, 30, 66];
        const LLAMA_3: usize = 128_256;
        let blocks: Vec<usize> = [1, 15, 16, 30, 31, 66, 67, 128]
            .iter()
            .map(|&rows| blocks_per_row(rows, LLAMA_3, H200))
            .collect();
        assert_eq!(blocks, [8, 8, 4, 4, 2, 2, 2, 2]);
        // Short rows keep at least 8,192 tokens a block.
        assert_eq!(blocks_per_row(1, 7, H200), 1);
        assert_eq!(blocks_per_row(100, 12_288, H200), 1);
        assert_eq!(blocks_per_row(1, 16_384, H200), 2);
        assert_eq!(blocks_per_row(1, 50_001, H200), 4);
        // A GPU that runs no cluster of 8 at once, and one that runs none.
        assert_eq!(blocks_per_row(1, LLAMA_3, [0, 4, 8]), 4);
        assert_eq!(blocks_per_row(1, LLAMA_3, [0, 0, 0]), 1);
    }

    #[test]
    fn bad_draws_are_errors_that_say_what_is_accepted() {
        let logits = Tensor::zeros((1, 4), DType::F32, &Device::Cpu).unwrap();
        for bad in [
            draw(0.0, 1.0, None, 0.5),
            draw(f32::NAN, 1.0, None, 0.5),
            draw(1.0, 0.0, None, 0.5),
            draw(1.0, 1.5, None, 0.5),
            draw(1.0, 1.0, Some(0), 0.5),
            draw(1.0, 1.0, None, 1.0),
        ] {
            let err = sample_tokens(&logits, &[bad]).unwrap_err().to_string();
            assert!(err.contains("accepted"), "{bad:?}: {err}");
        }
        let err = sample_tokens(&logits, &[]).unwrap_err().to_string();
        assert!(err.contains("0 draws for 1 rows"), "{err}");
    }
}
