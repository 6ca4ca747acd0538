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
use rayon::prelude::*;

use crate::WeightSeed;

/// How a generated tensor is filled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Init {
    Normal,
    Ones,
    Zeros,
}

/// Values per parallel chunk (even, so each chunk starts on a pair).
const CHUNK: usize = 1 << 16;

/// The values of tensor `name` with `len` elements.
#[cfg(test)]
pub(crate) fn generate(seed: WeightSeed, name: &str, len: usize, init: Init) -> Vec<f32> {
    generate_as(seed, name, len, init, |value| value)
}

/// The values of tensor `name` with `len` elements, each rounded to f32
/// and then converted by `convert` (to the model's dtype). Generated in
/// parallel chunks of [`CHUNK`] values: each chunk positions its own
/// ChaCha8 stream at the chunk's first pair, so the values are exactly
/// those of one serial stream.
pub(crate) fn generate_as<T, F>(
    seed: WeightSeed,
    name: &str,
    len: usize,
    init: Init,
    convert: F,
) -> Vec<T>
where
    T: Copy + Default + Send,
    F: Fn(f32) -> T + Sync,
{
    let mut values = vec![T::default(); len];
    match init {
        Init::Ones => values.fill(convert(1.0)),
        Init::Zeros => values.fill(convert(0.0)),
        Init::Normal => {
            let stream = fnv1a(name.as_bytes());
            values
                .par_chunks_mut(CHUNK)
                .enumerate()
                .for_each(|(index, chunk)| {
                    fill_normal(seed, stream, index * CHUNK, chunk, &convert);
                });
        }
    }
    values
}

/// Fills `out` with the normals from position `first` (even) of the stream.
fn fill_normal<T>(
    seed: WeightSeed,
    stream: u64,
    first: usize,
    out: &mut [T],
    convert: &impl Fn(f32) -> T,
) {
    debug_assert!(first.is_multiple_of(2));
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.seed.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    rng.set_stream(stream);
    // A pair of values takes two u64 draws, four 32-bit words.
    rng.set_word_pos(first as u128 * 2);
    for pair in out.chunks_mut(2) {
        let u1 = unit_interval(rng.next_u64());
        let u2 = unit_interval(rng.next_u64());
        let radius = (-2.0 * (1.0 - u1).ln()).sqrt() * seed.init_std;
        let angle = std::f64::consts::TAU * u2;
        pair[0] = convert((radius * angle.cos()) as f32);
        if let Some(second) = pair.get_mut(1) {
            *second = convert((radius * angle.sin()) as f32);
        }
    }
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

    /// The serial generator of the seed convention, one stream start to
    /// end: what the chunked generation must reproduce exactly.
    fn serial(seed: WeightSeed, name: &str, len: usize) -> Vec<f32> {
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

    #[test]
    fn chunked_generation_equals_one_serial_stream() {
        // Several chunks, the last one partial and odd-length.
        let len = 3 * CHUNK + 12_345;
        let chunked = generate(SEED, "model.layers.3.mlp.up_proj.weight", len, Init::Normal);
        assert_eq!(
            chunked,
            serial(SEED, "model.layers.3.mlp.up_proj.weight", len)
        );
        let halves = generate_as(SEED, "x.weight", 1001, Init::Normal, half::bf16::from_f32);
        let reference: Vec<half::bf16> = serial(SEED, "x.weight", 1001)
            .into_iter()
            .map(half::bf16::from_f32)
            .collect();
        assert_eq!(halves, reference);
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
