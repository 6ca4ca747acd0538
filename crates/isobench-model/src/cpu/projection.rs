//! A CPU projection `y = x W^T + b`: dense weights (f32, f16, bf16) through
//! [`super::matmul`], or a GGUF file's quantized weights through
//! [`super::quantized`], both on the team. Fused
//! projections (q, k and v; gate and up) stack their weights into one
//! matrix when they share an element type, so one pass over the team reads
//! them all; otherwise each part fills its own band of the output columns.

use candle_core::quantized::QTensor;

use super::Isa;
use super::matmul::{Matrix, Packed, matmul};
use super::quantized::QuantMatrix;

/// One weight matrix [n, k].
pub(crate) enum Weight {
    Dense(Matrix),
    /// Quantized blocks (Q8_0, Q4_K, ...), [n, k].
    Quantized(QTensor),
}

impl Weight {
    pub(crate) fn n(&self) -> usize {
        match self {
            Weight::Dense(m) => m.n,
            Weight::Quantized(t) => t.shape().dims()[0],
        }
    }

    pub(crate) fn k(&self) -> usize {
        match self {
            Weight::Dense(m) => m.k,
            Weight::Quantized(t) => t.shape().dims()[1],
        }
    }
}

/// A part of a projection as the kernels read it.
enum Part {
    Packed(Packed),
    Quantized(QuantMatrix),
}

pub(crate) struct Projection {
    /// Output column bands, in order.
    parts: Vec<Part>,
    n: usize,
    bias: Option<Vec<f32>>,
}

impl Projection {
    /// The parts' outputs side by side (they must share `k`), dense parts of
    /// one element type stacked into one matrix. `bias` covers all columns.
    pub(crate) fn new(parts: Vec<Weight>, bias: Option<Vec<f32>>) -> candle_core::Result<Self> {
        let n = parts.iter().map(Weight::n).sum();
        let k = parts.first().map_or(0, Weight::k);
        debug_assert!(parts.iter().all(|p| p.k() == k));
        debug_assert!(bias.as_ref().is_none_or(|b| b.len() == n));
        let dense: Vec<Matrix> = parts
            .iter()
            .filter_map(|p| match p {
                Weight::Dense(m) => Some(m.clone()),
                Weight::Quantized(_) => None,
            })
            .collect();
        let parts = match (dense.len() == parts.len() && parts.len() > 1)
            .then(|| Matrix::stack(&dense))
            .flatten()
        {
            Some(stacked) => vec![Part::Packed(Packed::new(&stacked))],
            None => parts
                .into_iter()
                .map(|p| {
                    Ok(match p {
                        Weight::Dense(m) => Part::Packed(Packed::new(&m)),
                        Weight::Quantized(t) => Part::Quantized(QuantMatrix::new(&t)?),
                    })
                })
                .collect::<candle_core::Result<_>>()?,
        };
        Ok(Self { parts, n, bias })
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
                Part::Quantized(q) => {
                    q.apply(x, rows, &mut out[column..], self.n);
                    column += q.n;
                }
            }
        }
        if let Some(bias) = &self.bias {
            super::ops::add_bias(&mut out[..rows * self.n], bias);
        }
        Ok(())
    }
}
