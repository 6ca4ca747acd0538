//! Rotary position embeddings (RoPE; Su et al., "RoFormer", arXiv:2104.09864)
//! in the half-split layout of Hugging Face's Llama (`rotate_half`), with
//! linear and Llama 3.1 frequency scaling.
//!
//! cos and sin are tabulated once for every position up to
//! `max_position_embeddings`; a step gathers the rows of its tokens'
//! positions (a tensor), so positions never enter as host values. The
//! table follows transformers' arithmetic: inverse frequencies rounded to
//! f32, angles `inv_freq * position` and their cos/sin in f32.

use candle_core::{DType, Device, Result, Tensor};

use crate::{ModelConfig, RopeScaling};

pub(crate) struct RotaryEmbedding {
    /// [max_position_embeddings, head_dim / 2]
    cos: Tensor,
    sin: Tensor,
}

impl RotaryEmbedding {
    pub(crate) fn new(config: &ModelConfig, dtype: DType, device: &Device) -> Result<Self> {
        let (cos, sin) = tables(config);
        let (positions, half) = (config.max_position_embeddings, config.head_dim / 2);
        let table = |values| -> Result<Tensor> {
            Tensor::from_vec(values, (positions, half), device)?.to_dtype(dtype)
        };
        Ok(Self {
            cos: table(cos)?,
            sin: table(sin)?,
        })
    }

    /// The whole (cos, sin) tables, [max_position_embeddings, head_dim / 2].
    #[cfg(feature = "cuda")]
    pub(crate) fn tables(&self) -> (Tensor, Tensor) {
        (self.cos.clone(), self.sin.clone())
    }

    /// The (cos, sin) rows [T, head_dim / 2] of `positions` [T], gathered
    /// once per step and shared by every layer.
    pub(crate) fn angles(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok((
            self.cos.index_select(positions, 0)?,
            self.sin.index_select(positions, 0)?,
        ))
    }
}

/// cos and sin of every position's angles, [max_position_embeddings,
/// head_dim / 2] each, row-major.
pub(crate) fn tables(config: &ModelConfig) -> (Vec<f32>, Vec<f32>) {
    let inv_freq = inverse_frequencies(config);
    let positions = config.max_position_embeddings;
    let mut cos = Vec::with_capacity(positions * inv_freq.len());
    let mut sin = Vec::with_capacity(positions * inv_freq.len());
    for position in 0..positions {
        for &freq in &inv_freq {
            let angle = freq * position as f32;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}

/// Rotates `q` [1, T, heads, head_dim] and `k` [1, T, kv_heads, head_dim]
/// (both contiguous) by the step's angles from [`RotaryEmbedding::angles`].
pub(crate) fn rotate(
    q: &Tensor,
    k: &Tensor,
    (cos, sin): &(Tensor, Tensor),
) -> Result<(Tensor, Tensor)> {
    Ok((
        candle_nn::rotary_emb::rope_thd(q, cos, sin)?,
        candle_nn::rotary_emb::rope_thd(k, cos, sin)?,
    ))
}

/// `theta^(-2i/d)` for i in 0..d/2, rescaled as config.json asks.
pub(crate) fn inverse_frequencies(config: &ModelConfig) -> Vec<f32> {
    let dim = config.head_dim;
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / config.rope_theta.powf((2 * i) as f64 / dim as f64);
            scale_frequency(freq, &config.rope_scaling) as f32
        })
        .collect()
}

fn scale_frequency(freq: f64, scaling: &RopeScaling) -> f64 {
    match *scaling {
        RopeScaling::None => freq,
        RopeScaling::Linear { factor } => freq / factor,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let original = original_max_position_embeddings as f64;
            let low_freq_wavelen = original / low_freq_factor;
            let high_freq_wavelen = original / high_freq_factor;
            let wavelen = std::f64::consts::TAU / freq;
            if wavelen < high_freq_wavelen {
                freq
            } else if wavelen > low_freq_wavelen {
                freq / factor
            } else {
                let smooth =
                    (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * freq / factor + smooth * freq
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_high_divides_low_and_ramps_between() {
        let scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 32,
        };
        // Wavelengths 2*pi/freq: ~6.3 (< 8: kept), ~63 (> 32: divided), 16 (ramp).
        assert_eq!(scale_frequency(1.0, &scaling), 1.0);
        assert_eq!(scale_frequency(0.1, &scaling), 0.1 / 8.0);
        let ramp_freq = std::f64::consts::TAU / 16.0;
        let smooth = (32.0 / 16.0 - 1.0) / 3.0;
        let expected = (1.0 - smooth) * ramp_freq / 8.0 + smooth * ramp_freq;
        assert!((scale_frequency(ramp_freq, &scaling) - expected).abs() < 1e-12);
    }
}
