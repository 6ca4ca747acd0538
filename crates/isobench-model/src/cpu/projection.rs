//! A CPU projection `y = x W^T + b`: dense weights (f32, f16, bf16) through
//! [`super::matmul`], or a GGUF file's quantized weights through candle's
//! `QMatMul` (its x86 kernels run on the same thread pool). Fused
//! projections (q, k and v; gate and up) stack their weights into one
//! matrix when they share an element type, so one pass over the team reads
//! them all; otherwise each part fills its own band of the output columns.

use candle_core::quantized::QMatMul;
use candle_core::{Device, Module, Storage, Tensor};

use super::Isa;
use super::matmul::{Matrix, Packed, matmul};

/// One weight matrix [n, k].
pub(crate) enum Weight {
    Dense(Matrix),
    /// Quantized blocks (Q8_0, Q4_K, ...), `n` output features of `k`.
    Quantized {
        matmul: QMatMul,
        n: usize,
        k: usize,
    },
}

impl Weight {
    pub(crate) fn n(&self) -> usize {
        match self {
            Weight::Dense(m) => m.n,
            Weight::Quantized { n, .. } => *n,
        }
    }

    pub(crate) fn k(&self) -> usize {
        match self {
            Weight::Dense(m) => m.k,
            Weight::Quantized { k, .. } => *k,
        }
    }
}

/// A part of a projection as the kernels read it.
enum Part {
    Packed(Packed),
    Quantized { matmul: QMatMul, n: usize },
}

pub(crate) struct Projection {
    /// Output column bands, in order.
    parts: Vec<Part>,
    n: usize,
    k: usize,
    bias: Option<Vec<f32>>,
}

impl Projection {
    /// The parts' outputs side by side (they must share `k`), dense parts of
    /// one element type stacked into one matrix. `bias` covers all columns.
    pub(crate) fn new(parts: Vec<Weight>, bias: Option<Vec<f32>>) -> Self {
        let n = parts.iter().map(Weight::n).sum();
        let k = parts.first().map_or(0, Weight::k);
        debug_assert!(parts.iter().all(|p| p.k() == k));
        debug_assert!(bias.as_ref().is_none_or(|b| b.len() == n));
        let dense: Vec<Matrix> = parts
            .iter()
            .filter_map(|p| match p {
                Weight::Dense(m) => Some(m.clone()),
                Weight::Quantized { .. } => None,
            })
            .collect();
        let parts = match (dense.len() == parts.len() && parts.len() > 1)
            .then(|| Matrix::stack(&dense))
            .flatten()
        {
            Some(stacked) => vec![Part::Packed(Packed::new(&stacked))],
            None => parts
                .into_iter()
                .map(|p| match p {
                    Weight::Dense(m) => Part::Packed(Packed::new(&m)),
                    Weight::Quantized { matmul, n, .. } => Part::Quantized { matmul, n },
                })
                .collect(),
        };
        Self { parts, n, k, bias }
    }

    #[cfg(test)]
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// `out [rows, n] = x [rows, k] W^T + b`.
    pub(crate) fn apply(
        &self,
        isa: Isa,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
    ) -> candle_core::Result<()> {
        let mut column = 0;
        for part in &self.parts {
            match part {
                Part::Packed(m) => {
                    matmul(isa, x, rows, m, &mut out[column..], self.n);
                    column += m.n;
                }
                Part::Quantized { matmul, n } => {
                    let shape = (rows, self.k);
                    quantized(matmul, &x[..rows * self.k], shape, *n, out, column, self.n)?;
                    column += n;
                }
            }
        }
        if let Some(bias) = &self.bias {
            super::ops::add_bias(&mut out[..rows * self.n], bias);
        }
        Ok(())
    }
}

/// One quantized part: candle's kernels on a tensor of `x`, the result
/// copied into columns `column..column + n` of `out` (row stride `stride`).
fn quantized(
    matmul: &QMatMul,
    x: &[f32],
    shape: (usize, usize),
    n: usize,
    out: &mut [f32],
    column: usize,
    stride: usize,
) -> candle_core::Result<()> {
    let input = Tensor::from_slice(x, shape, &Device::Cpu)?;
    let result = matmul.forward(&input)?;
    let (storage, layout) = result.storage_and_layout();
    let Storage::Cpu(storage) = &*storage else {
        candle_core::bail!("quantized projection: result is not on the CPU")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("quantized projection: result is not contiguous")
    };
    let values = &storage.as_slice::<f32>()?[start..end];
    for (row, band) in values.chunks_exact(n).enumerate() {
        out[row * stride + column..row * stride + column + n].copy_from_slice(band);
    }
    Ok(())
}
