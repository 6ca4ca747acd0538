//! The small per-token operations of a CPU step, on f32 rows in place:
//! RMSNorm, rotary embeddings, SwiGLU, residual adds. Each reads a few KiB
//! per token, far less than the projections, so they run on the calling
//! thread, written so the compiler vectorises them.

/// Eight independent partial sums, so the loop vectorises.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut a_chunks = a.chunks_exact(8);
    let mut b_chunks = b.chunks_exact(8);
    for (a, b) in (&mut a_chunks).zip(&mut b_chunks) {
        for lane in 0..8 {
            lanes[lane] += a[lane] * b[lane];
        }
    }
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(a, b)| a * b)
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// `out = x / sqrt(mean(x^2) + eps) * weight`, row by row (rows of
/// `weight.len()`), as candle's `rms_norm` computes it.
pub(crate) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (x, out) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let mean_square = dot(x, x) / dim as f32;
        let scale = 1.0 / (mean_square + eps).sqrt();
        for ((out, &x), &w) in out.iter_mut().zip(x).zip(weight) {
            *out = x * scale * w;
        }
    }
}

/// Rotates every head of one token in place (Hugging Face's half-split
/// layout): pairs `(i, i + d/2)` by the angles whose cos and sin are `cos`
/// and `sin` (`d/2` each).
pub(crate) fn rotate_heads(heads: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in heads.chunks_exact_mut(head_dim) {
        let (first, second) = head.split_at_mut(half);
        for i in 0..half {
            let (a, b) = (first[i], second[i]);
            first[i] = a * cos[i] - b * sin[i];
            second[i] = a * sin[i] + b * cos[i];
        }
    }
}

/// `out[i] = silu(gate[i]) * up[i]` for one token, where `gate_up` is the
/// token's gate row followed by its up row ([`exp`], so the loop
/// vectorises: a batch-32 step takes 360,000 of them on the small models).
pub(crate) fn swiglu(gate_up: &[f32], out: &mut [f32]) {
    let (gate, up) = gate_up.split_at(out.len());
    for ((out, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *out = g / (1.0 + isobench_common::math::exp(-g)) * u;
    }
}

/// `x += y`.
pub(crate) fn add(x: &mut [f32], y: &[f32]) {
    for (x, &y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

/// `x[row] += bias` for every row of `bias.len()`.
pub(crate) fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add(row, bias);
    }
}

/// Deterministic values in [-1, 1) for kernel tests.
#[cfg(test)]
pub(crate) fn random_values(len: usize, seed: u32) -> Vec<f32> {
    // A small LCG: deterministic, no dependency.
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    fn close(a: &[f32], b: &[f32], tolerance: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tolerance * (1.0 + y.abs()),
                "{i}: {x} vs {y}"
            );
        }
    }

    #[test]
    fn rms_norm_matches_candle() {
        for (rows, dim) in [(1, 64), (3, 17), (5, 512)] {
            let x = random_values(rows * dim, 1);
            let w = random_values(dim, 2);
            let mut ours = vec![0.0; rows * dim];
            rms_norm(&x, &w, 1e-5, &mut ours);
            let xs = Tensor::from_vec(x, (rows, dim), &Device::Cpu).unwrap();
            let ws = Tensor::from_vec(w, dim, &Device::Cpu).unwrap();
            let theirs = candle_nn::ops::rms_norm(&xs, &ws, 1e-5).unwrap();
            close(
                &ours,
                &theirs.flatten_all().unwrap().to_vec1().unwrap(),
                1e-5,
            );
        }
    }

    #[test]
    fn rotation_matches_candle_rope() {
        let (tokens, heads, d) = (3, 5, 18);
        let x = random_values(tokens * heads * d, 3);
        let angles: Vec<f32> = random_values(tokens * d / 2, 4)
            .iter()
            .map(|a| a * 3.0)
            .collect();
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let mut ours = x.clone();
        for t in 0..tokens {
            let half = d / 2;
            rotate_heads(
                &mut ours[t * heads * d..(t + 1) * heads * d],
                d,
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
        }
        let dev = &Device::Cpu;
        let xs = Tensor::from_vec(x, (1, tokens, heads, d), dev).unwrap();
        let c = Tensor::from_vec(cos, (tokens, d / 2), dev).unwrap();
        let s = Tensor::from_vec(sin, (tokens, d / 2), dev).unwrap();
        let theirs = candle_nn::rotary_emb::rope_thd(&xs, &c, &s).unwrap();
        close(
            &ours,
            &theirs.flatten_all().unwrap().to_vec1().unwrap(),
            1e-5,
        );
    }

    #[test]
    fn swiglu_matches_candle_silu_times_up() {
        let n = 37;
        // Gates up to +-100: silu's far tails (exp clamped at 88) included.
        let gate_up: Vec<f32> = random_values(2 * n, 5)
            .iter()
            .enumerate()
            .map(|(i, &v)| if i < n { v * 100.0 } else { v })
            .collect();
        let mut ours = vec![0.0; n];
        swiglu(&gate_up, &mut ours);
        let dev = &Device::Cpu;
        let gate = Tensor::new(&gate_up[..n], dev).unwrap();
        let up = Tensor::new(&gate_up[n..], dev).unwrap();
        let theirs = (gate.silu().unwrap() * up).unwrap();
        close(&ours, &theirs.to_vec1().unwrap(), 1e-6);
    }
}
