//! Deterministic random weights for model folders that declare
//! `isobench_seed` instead of shipping safetensors.
//!
//! Every tensor gets its own ChaCha8 stream, so a tensor's values depend on
//! the seed and its checkpoint name only, never on the order in which the
//! model asks for its tensors:
//!
//! - key: the 32-byte ChaCha key is the seed as 8 little-endian bytes
//!   followed by 24 zero bytes; the stream number is the 64-bit FNV-1a hash
//!   of the tensor name's UTF-8 bytes (`rand_chacha::ChaCha8Rng`, whose
//!   output is specified by the ChaCha algorithm and stable across releases);
//! - draws: each pair of `next_u64` outputs becomes two uniforms
//!   `u = (x >> 11) * 2^-53` and two standard normals by Box-Muller,
//!   `sqrt(-2 ln(1 - u1)) * (cos, sin)(2 pi u2)`, computed in f64, multiplied
//!   by the standard deviation and rounded to f32 (the last odd element uses
//!   the cosine half of a final pair);
//! - what gets drawn: norm weights are 1 and biases 0 (as Hugging Face
//!   initialises them); every other weight is normal with mean 0 and
//!   standard deviation `isobench_init_std`.
//!
//! The only operations that could differ between platforms are `ln`, `cos`
//! and `sin` from the platform's math library; a unit test pins the first
//! draws of a known tensor so a difference would be caught.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::WeightSeed;

/// How a generated tensor is filled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Init {
    Normal,
    Ones,
    Zeros,
}

/// The values of tensor `name` with `len` elements.
pub(crate) fn generate(seed: WeightSeed, name: &str, len: usize, init: Init) -> Vec<f32> {
    match init {
        Init::Ones => vec![1.0; len],
        Init::Zeros => vec![0.0; len],
        Init::Normal => normal(seed, name, len),
    }
}

fn normal(seed: WeightSeed, name: &str, len: usize) -> Vec<f32> {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.seed.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    rng.set_stream(fnv1a(name.as_bytes()));
    let mut values = Vec::with_capacity(len);
    while values.len() < len {
        let u1 = unit_interval(rng.next_u64());
        let u2 = unit_interval(rng.next_u64());
        let radius = (-2.0 * (1.0 - u1).ln()).sqrt() * seed.init_std;
        let angle = std::f64::consts::TAU * u2;
        values.push((radius * angle.cos()) as f32);
        if values.len() < len {
            values.push((radius * angle.sin()) as f32);
        }
    }
    values
}

/// The top 53 bits of `x` as a uniform in [0, 1).
fn unit_interval(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: WeightSeed = WeightSeed {
        seed: 7,
        init_std: 1.0,
    };

    #[test]
    fn draws_are_pinned() {
        // Pinned on x86_64 Linux: a change here changes every seeded model.
        let values = generate(SEED, "model.embed_tokens.weight", 4, Init::Normal);
        assert_eq!(
            values,
            [0.888_969_66, -0.548_278_2, 0.089_758_35, 0.635_907_9]
        );
    }

    #[test]
    fn each_tensor_has_its_own_stream_and_a_normal_spread() {
        let a = generate(SEED, "a.weight", 20_001, Init::Normal);
        let b = generate(SEED, "b.weight", 20_001, Init::Normal);
        assert_eq!(a.len(), 20_001);
        assert_ne!(a[..8], b[..8]);
        assert_eq!(a, generate(SEED, "a.weight", 20_001, Init::Normal));
        let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / a.len() as f64;
        let var = a
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / a.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }
}
